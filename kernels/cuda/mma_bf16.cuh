// kernels/cuda/mma_bf16.cuh — mma.sync m16n8k16 over bf16 operands with fp32
// accumulators, and the packing of its operand pairs: the one copy of that
// PTX for the kernels that build their fragments in registers (the sparse
// attention's staged form, the indexer's tensor-core form, dense's bf16 mma
// tiles). No host dependencies.
//
// Fragments (g = lane / 4, t = lane % 4): A (16 x 16, row) a[0] rows g,
// columns 2 t and 2 t + 1; a[1] row g + 8; a[2] row g, columns + 8; a[3]
// row g + 8, columns + 8. B (16 x 8, col) b0 rows 2 t, 2 t + 1 of column g;
// b1 rows + 8. D (16 x 8) d[0], d[1] row g, columns 2 t, 2 t + 1; d[2],
// d[3] row g + 8.
#ifndef WEIR_KERNELS_CUDA_MMA_BF16_CUH_
#define WEIR_KERNELS_CUDA_MMA_BF16_CUH_

#include <cuda_bf16.h>

#include <cstdint>

namespace weir::kernels::cuda {

// d += A * B, fp32 accumulation.
__device__ __forceinline__ void MmaBf16M16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // built for sm_90a only
#endif
}

// (lo, hi) rounded to bf16 (nearest even) as one operand register, lo in
// the low half (the lower column or row index of a fragment pair).
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  __builtin_memcpy(&r, &b, sizeof(r));
  return r;
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MMA_BF16_CUH_
