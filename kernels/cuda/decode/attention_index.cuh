// kernels/cuda/decode/attention_index.cuh — device code of attention_index.h.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DECODE_ATTENTION_INDEX_CUH_
#define WEIR_KERNELS_CUDA_DECODE_ATTENTION_INDEX_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::decode {

// Two's-complement 32-bit sum (defined wrap-around, unlike signed overflow).
__device__ __forceinline__ int32_t WrapAdd(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

// Grid-stride over out [rows, window_width + k_width].
__global__ void AssembleIndexKernel(const int32_t* __restrict__ window,
                                    const int32_t* __restrict__ topk,
                                    const int32_t* __restrict__ topk_row_base,
                                    const int32_t* __restrict__ block_table,
                                    const int32_t* __restrict__ table_slot, int table_width,
                                    int entries_per_block, int32_t* __restrict__ out, int64_t rows,
                                    int window_width, int k_width, int32_t window_base,
                                    int32_t topk_base) {
  GridDependencyPrologue();
  const int64_t width = static_cast<int64_t>(window_width) + k_width;
  const int64_t n = rows * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t t = e / width, j = e % width;
    int32_t v;
    if (j < window_width) {
      const int32_t w = window[t * window_width + j];
      v = w < 0 ? -1 : WrapAdd(w, window_base);
    } else {
      const int32_t k = topk[t * k_width + (j - window_width)];
      if (k < 0) {
        v = -1;
      } else if (block_table == nullptr) {
        v = WrapAdd(WrapAdd(topk_row_base[t], topk_base), k);
      } else {  // entry k: row k % e of the slot's block k / e
        const int32_t slot = table_slot[t], kb = k / entries_per_block;
        const int32_t b = slot < 0 || kb >= table_width
                              ? -1
                              : block_table[static_cast<int64_t>(slot) * table_width + kb];
        v = b < 0 ? -1 : WrapAdd(WrapAdd(b * entries_per_block, topk_base), k % entries_per_block);
      }
    }
    out[e] = v;
  }
}

__global__ void MaskScoresKernel(float* scores, const uint8_t* __restrict__ keep, int64_t n) {
  GridDependencyPrologue();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    if (keep[i] == 0) scores[i] = __uint_as_float(0xFF800000u);  // -inf
  }
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_ATTENTION_INDEX_CUH_
