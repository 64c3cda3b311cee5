// kernels/cuda/decode/dot_rows.cuh — the DotRows kernel (dot_rows.h).

#ifndef WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_CUH_
#define WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_CUH_

#include <cstdint>

#include "kernels/common/dot_rows_order.h"
#include "kernels/common/row_stable.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode/row_stable_chain.cuh"
#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::decode {

inline constexpr int kDotRowsWarps = dot_rows_order::kWarps;
inline constexpr int kDotRowsChunk =
    dot_rows_order::kChunk;  // elements of K per warp step (4 per lane)

// One CTA: output column blockIdx.x for rows [blockIdx.y * R, +R).
template <int R>
__global__ void __launch_bounds__(kDotRowsWarps * 32)
    DotRowsKernel(const float* __restrict__ x, const float* __restrict__ w, float* y, int64_t rows,
                  int64_t out, int64_t k) {
  GridDependencyPrologue();
  __shared__ float partial[kDotRowsWarps][R];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = blockIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * R;
  const int live = static_cast<int>(rows - r0 < R ? rows - r0 : R);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const float* wr = w + j * k;
  for (int64_t c = static_cast<int64_t>(warp) * kDotRowsChunk + 4 * lane; c < k;
       c += kDotRowsWarps * kDotRowsChunk) {
    const float4 wv = *reinterpret_cast<const float4*>(wr + c);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < live) {
        const float4 xv = *reinterpret_cast<const float4*>(x + (r0 + r) * k + c);
        float a = acc[r];
        a = fmaf(xv.x, wv.x, a);
        a = fmaf(xv.y, wv.y, a);
        a = fmaf(xv.z, wv.z, a);
        a = fmaf(xv.w, wv.w, a);
        acc[r] = a;
      }
    }
  }
  // k % 4 == 0 but not necessarily % 128: the loop above covers every
  // element (a lane's 4 elements are all in range or all out).
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    if (lane == 0) partial[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < live) {
    const int r = threadIdx.x;
    float s = partial[0][r];
#pragma unroll
    for (int q = 1; q < kDotRowsWarps; ++q) s += partial[q][r];
    y[(r0 + r) * out + j] = s;
  }
}

// RowStableDot: thread 4e + l of the grid sums lane l of output element e
// (row e / out, column e % out) in the row-stable order
// (kernels/common/row_stable.h); the quad then combines its lanes.
__global__ void RowStableDotKernel(const float* __restrict__ x, const float* __restrict__ w,
                                   float* y, int64_t rows, int64_t out, int64_t k) {
  GridDependencyPrologue();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t e = t / 4;
  const int l = static_cast<int>(t % 4);
  const bool valid = e < rows * out;
  float acc = 0.0f;
  if (valid) {
    const float* xr = x + (e / out) * k;
    const float* wr = w + (e % out) * k;
    for (int64_t c = l; c < k; c += 4) acc = RowStableStep(acc, xr[c], wr[c]);
  }
  // Every thread of the warp takes part in the shuffles (blocks are whole warps).
  const float sum = RowStableQuadCombine(acc);
  if (valid && l == 0) y[e] = sum;
}

// RowStableDot, staged: the same per-element arithmetic as
// RowStableDotKernel, for 16-byte aligned x, w and k % 4 == 0. A CTA of
// kStagedThreads takes a tile of up to kRows rows and kOuts output columns;
// all its threads copy kChunk-element pieces of the tile's x rows and w rows
// into a ring of kStages shared buffers (cp.async, many copies in flight), and
// the quad 4 (r kOuts + o) + l runs lane l of element (r, o) over each chunk
// from shared memory. The dependent additions (k / 4 per lane) stay serial, as
// the reference's order requires; the staging hides the memory latency that
// stalled each of them. The tile (rows x columns sharing one x or w row
// load) and the ring depth (bytes in flight per CTA) move work and memory
// traffic between CTAs, never bits.
inline constexpr int kStagedThreads = 128;

template <int kRows, int kOuts, int kChunk, int kStages>
struct StagedShape {
  static constexpr int kPitch = kChunk + 4;  // padded rows: no bank conflicts
  static constexpr int kStageFloats = (kRows + kOuts) * kPitch;
  static constexpr int kSmemBytes = kStages * kStageFloats * 4;
  static_assert(kRows * kOuts * 4 <= kStagedThreads, "one quad per output element");
  static_assert(kStages >= 2 && kChunk % 4 == 0, "ring of whole 16-byte pieces");
};

template <int kRows, int kOuts, int kChunk, int kStages>
__global__ void __launch_bounds__(kStagedThreads)
    RowStableDotStagedKernel(const float* __restrict__ x, const float* __restrict__ w, float* y,
                             int64_t rows, int64_t out, int64_t k) {
  GridDependencyPrologue();
  using Shape = StagedShape<kRows, kOuts, kChunk, kStages>;
  extern __shared__ __align__(16) float ring[];  // [stages][x rows, w rows] x pitch
  const int t = threadIdx.x;
  const int e = t / 4, l = t % 4;
  const int er = e / kOuts, eo = e % kOuts;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kOuts;
  const int live_rows = static_cast<int>(rows - row0 < kRows ? rows - row0 : kRows);
  const int outs = static_cast<int>(out - col0 < kOuts ? out - col0 : kOuts);
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  constexpr int kPieces = kChunk / 4;  // 16-byte pieces of one row's chunk
  // Copies chunk c into stage s: the x rows' pieces, then the w rows'; rows
  // past the tile and pieces past k are zero-filled (never read).
  auto load = [&](int64_t c, int s) {
    float* base = ring + s * Shape::kStageFloats;
    const int64_t k0 = c * kChunk;
    for (int p = t; p < kPieces * (kRows + kOuts); p += kStagedThreads) {
      const int r = p / kPieces, piece = p % kPieces;
      const int64_t kk = k0 + piece * 4;
      const bool is_x = r < kRows;
      const bool live = is_x ? r < live_rows : r - kRows < outs;
      const bool valid = live && kk < k;
      const float* src = is_x ? x + (row0 + r) * k : w + (col0 + r - kRows) * k;
      CpAsync16(base + r * Shape::kPitch + piece * 4, valid ? src + kk : x, valid);
    }
  };
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    CpAsyncCommit();
  }
  const bool computes = e < kRows * kOuts && er < live_rows && eo < outs;
  float acc = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    const int64_t next = c + kStages - 1;
    if (next < chunks) load(next, static_cast<int>(next % kStages));
    CpAsyncCommit();
    if (computes) {
      const float* stage = ring + static_cast<int>(c % kStages) * Shape::kStageFloats;
      const float* xs = stage + er * Shape::kPitch;
      const float* ws = stage + (kRows + eo) * Shape::kPitch;
      const int len = static_cast<int>(k - c * kChunk < kChunk ? k - c * kChunk : kChunk);
      if (len == kChunk) {
        acc = RowStableChainPipelined<kChunk / 4, 16>(acc, xs, ws, l);
      } else {
        for (int j = l; j < len; j += 4) acc = RowStableStep(acc, xs[j], ws[j]);
      }
    }
  }
  const float sum = RowStableQuadCombine(acc);
  if (computes && l == 0) y[(row0 + er) * out + col0 + eo] = sum;
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_CUH_
