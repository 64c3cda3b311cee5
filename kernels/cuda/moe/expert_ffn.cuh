// kernels/cuda/moe/expert_ffn.cuh — device code of GroupedExpertFfn: one
// grouped fp32 GEMM kernel, with the SwiGLU epilogue (w1/w3) or the plain one
// (w2). No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_EXPERT_FFN_CUH_
#define WEIR_KERNELS_CUDA_MOE_EXPERT_FFN_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/numerics.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kFfnTileM = 64;
inline constexpr int kFfnTileN = 64;
inline constexpr int kFfnTileK = 32;  // = the FP8 activation block
inline constexpr int kFfnThreads = 256;

struct GroupedGemmArgs {
  const float* a;              // [rows, k]
  const int64_t* offsets;      // [num_groups + 1]
  const float* const* b1;      // [num_groups] -> [n, k]
  const float* const* b3;      // [num_groups] -> [n, k] (SwiGLU only)
  const float* route_weight;   // [rows] or null (SwiGLU only)
  float* out;                  // [rows, n]
  int64_t rows;
  int64_t n;
  int64_t k;
  int num_groups;
  bool fp8_activation;
  bool round_bf16;
  float swiglu_limit;
};

// h = silu(min(g, L)) * clamp(u, -L, L), weighted and rounded as the CPU does.
__device__ __forceinline__ float SwigluOut(float g, float u, float rw, bool has_rw, float limit,
                                           bool round_bf16) {
  if (round_bf16) {
    g = RoundToBf16(g);
    u = RoundToBf16(u);
  }
  if (limit > 0.0f) {
    u = u < -limit ? -limit : (limit < u ? limit : u);  // std::clamp
    g = limit < g ? limit : g;                          // std::min
  }
  float h = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, ExpF(-g))), u);
  if (has_rw) h = __fmul_rn(rw, h);
  return round_bf16 ? RoundToBf16(h) : h;
}

// blockIdx.x: column tile; blockIdx.y: row tile, counted over the groups in
// order (a group of m rows has ceil(m / 64) tiles; extra blocks exit).
// Thread (ty, tx) = (tid / 16, tid % 16) owns rows ty + 16i and columns
// tx + 16j (i, j < 4) of the tile.
template <bool kSwiglu>
__global__ void __launch_bounds__(kFfnThreads) GroupedGemmKernel(GroupedGemmArgs p) {
  GridDependencyPrologue();
  __shared__ float s_a[kFfnTileK][kFfnTileM + 1];
  __shared__ float s_b1[kFfnTileK][kFfnTileN + 1];
  __shared__ float s_b3[kSwiglu ? kFfnTileK : 1][kFfnTileN + 1];
  __shared__ int s_group;
  __shared__ int64_t s_row0, s_row1;
  if (threadIdx.x == 0) {
    int64_t tile = blockIdx.y;
    int group = -1;
    int64_t r0 = 0, r1 = 0;
    for (int g = 0; g < p.num_groups; ++g) {
      const int64_t begin = max(p.offsets[g], int64_t{0});
      const int64_t end = min(p.offsets[g + 1], p.rows);
      if (end <= begin) continue;
      const int64_t tiles = (end - begin + kFfnTileM - 1) / kFfnTileM;
      if (tile < tiles) {
        group = g;
        r0 = begin + tile * kFfnTileM;
        r1 = min(end, r0 + kFfnTileM);
        break;
      }
      tile -= tiles;
    }
    s_group = group;
    s_row0 = r0;
    s_row1 = r1;
  }
  __syncthreads();
  const int group = s_group;
  if (group < 0) return;  // uniform over the block
  const int64_t row0 = s_row0, row1 = s_row1;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kFfnTileN;
  const float* b1 = p.b1[group];
  const float* b3 = kSwiglu ? p.b3[group] : nullptr;
  const bool missing = b1 == nullptr || (kSwiglu && b3 == nullptr);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc1[4][4] = {}, acc3[4][4] = {};
  for (int64_t k0 = 0; !missing && k0 < p.k; k0 += kFfnTileK) {
    const int64_t kk = k0 + lane;
    const bool k_in = kk < p.k;
    for (int r = warp; r < kFfnTileM; r += kFfnThreads / 32) {
      const int64_t row = row0 + r;  // the same for the whole warp
      float v = (row < row1 && k_in) ? p.a[row * p.k + kk] : 0.0f;
      if (p.fp8_activation) v = Fp8FakeQuantWarp(v);
      s_a[lane][r] = v;
    }
    for (int c = warp; c < kFfnTileN; c += kFfnThreads / 32) {
      const int64_t col = col0 + c;
      const bool in = col < p.n && k_in;
      s_b1[lane][c] = in ? b1[col * p.k + kk] : 0.0f;
      if constexpr (kSwiglu) s_b3[lane][c] = in ? b3[col * p.k + kk] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int q = 0; q < kFfnTileK; ++q) {
      float av[4], bv1[4], bv3[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = s_a[q][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        bv1[j] = s_b1[q][tx + 16 * j];
        if constexpr (kSwiglu) bv3[j] = s_b3[q][tx + 16 * j];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc1[i][j] = fmaf(av[i], bv1[j], acc1[i][j]);
          if constexpr (kSwiglu) acc3[i][j] = fmaf(av[i], bv3[j], acc3[i][j]);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = row0 + ty + 16 * i;
    if (row >= row1) continue;
    const bool has_rw = kSwiglu && p.route_weight != nullptr;
    const float rw = has_rw ? p.route_weight[row] : 1.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = col0 + tx + 16 * j;
      if (col >= p.n) continue;
      float v;
      if (missing) {
        v = __uint_as_float(0x7FC00000u);
      } else if constexpr (kSwiglu) {
        v = SwigluOut(acc1[i][j], acc3[i][j], rw, has_rw, p.swiglu_limit, p.round_bf16);
      } else {
        v = p.round_bf16 ? RoundToBf16(acc1[i][j]) : acc1[i][j];
      }
      p.out[row * p.n + col] = v;
    }
  }
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_EXPERT_FFN_CUH_
