// kernels/cuda/attention/sparse_attention.cuh — device code of SparseAttention.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_CUH_

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rope_pair.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

// One block per (query, head), row = query * heads + head. Dynamic shared
// memory: topk floats (logits, then probabilities) + topk ints (the index row
// with invalid entries replaced by -1). Bit-identical to the CPU kernel: the
// dots in fmath::LaneSum order (one warp per slot), fmath::ExpF, the
// denominator summed by one thread in list order, each output channel summed
// in list order, every operation rounded on its own (no FMA).
template <int kThreads>
__global__ void SparseAttentionKernel(const float* __restrict__ q, const float* __restrict__ kv,
                                      const float* __restrict__ sink,
                                      const int32_t* __restrict__ index, float* __restrict__ out,
                                      int heads, int head_dim, int64_t kv_len, int topk,
                                      float scale, bool round_bf16) {
  GridDependencyPrologue();
  constexpr int kWarps = kThreads / 32;
  extern __shared__ float shared[];
  float* z = shared;
  int32_t* slots = reinterpret_cast<int32_t*>(shared + topk);
  __shared__ float partial[kWarps];
  __shared__ float row_max;
  __shared__ float row_denom;

  namespace fm = ::weir::kernels::fmath;
  const int64_t row = blockIdx.x;
  const int64_t query = row / heads;
  const int head = static_cast<int>(row % heads);
  const float* qv = q + row * head_dim;
  float* o = out + row * head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int j = threadIdx.x; j < topk; j += kThreads) {
    const int32_t t = index[query * topk + j];
    slots[j] = (t >= 0 && t < kv_len) ? t : -1;
  }
  __syncthreads();

  // Logits: one warp per slot.
  float local_max = -INFINITY;
  for (int j = warp; j < topk; j += kWarps) {
    const int32_t t = slots[j];
    if (t < 0) {
      if (lane == 0) z[j] = -INFINITY;
      continue;
    }
    const float* kr = kv + static_cast<int64_t>(t) * head_dim;
    const float dot =
        fm::WarpLaneSum<float>(head_dim, [&](int64_t c) { return fm::FMul(qv[c], kr[c]); });
    const float zj = fm::FMul(scale, dot);
    if (lane == 0) z[j] = zj;
    // As the CPU's std::max(m, z): a NaN logit never becomes the maximum.
    local_max = local_max < zj ? zj : local_max;
  }
  if (lane == 0) partial[warp] = local_max;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m = m < partial[w] ? partial[w] : m;
    row_max = m;
  }
  __syncthreads();
  const float m = row_max;
  if (m == -INFINITY) {  // no valid slot (block-uniform)
    for (int c = threadIdx.x; c < head_dim; c += kThreads) o[c] = 0.0f;
    return;
  }

  // Probabilities, then their sum in list order (one thread, as the CPU).
  for (int j = threadIdx.x; j < topk; j += kThreads) {
    if (slots[j] < 0) continue;
    z[j] = fm::ExpF(fm::FSub(z[j], m));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float denom = 0.0f;
    for (int j = 0; j < topk; ++j) {
      if (slots[j] >= 0) denom = fm::FAdd(denom, z[j]);
    }
    row_denom = fm::FAdd(denom, fm::ExpF(fm::FSub(sink[head], m)));
  }
  __syncthreads();
  const float denom = row_denom;

  // Output: channel c sums over the index row in list order, as the CPU does.
  for (int c = threadIdx.x; c < head_dim; c += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < topk; ++j) {
      const int32_t t = slots[j];
      if (t < 0) continue;
      acc = __fadd_rn(acc, __fmul_rn(z[j], kv[static_cast<int64_t>(t) * head_dim + c]));
    }
    const float v = __fdiv_rn(acc, denom);
    o[c] = round_bf16 ? RoundToBf16(v) : v;
  }
}

// SparseAttentionParams::GroupedOut on the device (group_width 0: off).
struct StagedGroupedOut {
  float* out;
  uint16_t* out_bf16;  // instead of out: ToBf16's bits of each value
  int64_t group_width;
  const int64_t* positions;
  const float* cos_sin;
  int64_t cos_sin_rows;
  int rope_dim;
  int64_t queries;
};

// Shared memory of SparseAttentionStagedKernel before its row chunk, in
// floats, rounded up to 16 bytes: the block's `heads_per_block` q rows, their
// logits (one topk row a head) and the list.
__host__ __device__ inline int64_t SparseAttentionStagedHead(int head_dim, int topk,
                                                             int heads_per_block) {
  return (int64_t{heads_per_block} * (int64_t{head_dim} + topk) + topk + 3) / 4 * 4;
}

// SparseAttentionKernel's arithmetic, operation for operation (the same
// bits), with the listed rows staged in shared memory `chunk_rows` at a time
// (16-byte cp.async copies, all of a chunk in flight) and q's rows staged
// once. One block per (query, group of kHeads consecutive heads): the heads
// share the query's list and the one K = V table, so a block stages each
// listed row once for all of them. Phase 1 stages each chunk and takes its
// logits (a warp a slot, each head's dot in fmath::WarpLaneSum order, the
// heads' sums interleaved); phase 2 stages the chunks again (or keeps the one
// chunk when the list fits) and each thread adds its channels' terms in list
// order, for every head. The maximum is taken over the same logits (only its
// sign of zero may differ, which no exp(z - m) sees). Needs head_dim % 4 == 0,
// head_dim <= kThreads * kMaxChannels, heads % kHeads == 0 and kv 16-byte
// aligned.
template <int kThreads, int kMaxChannels, int kHeads>
__global__ void __launch_bounds__(kThreads)
    SparseAttentionStagedKernel(const float* __restrict__ q, const float* __restrict__ kv,
                                const float* __restrict__ sink, const int32_t* __restrict__ index,
                                float* __restrict__ out, int heads, int head_dim, int64_t kv_len,
                                int topk, float scale, bool round_bf16, int chunk_rows,
                                StagedGroupedOut grouped) {
  GridDependencyPrologue();
  constexpr int kWarps = kThreads / 32;
  extern __shared__ __align__(16) float staged[];
  float* qs = staged;                 // [kHeads][head_dim]
  float* z = qs + kHeads * head_dim;  // [kHeads][topk]
  int32_t* slots = reinterpret_cast<int32_t*>(z + kHeads * topk);
  float* rows = staged + SparseAttentionStagedHead(head_dim, topk, kHeads);
  __shared__ float partial[kWarps * kHeads];
  __shared__ float row_max[kHeads];
  __shared__ float row_denom[kHeads];

  namespace fm = ::weir::kernels::fmath;
  const int groups_per_query = heads / kHeads;
  const int64_t query = blockIdx.x / groups_per_query;
  const int head0 = static_cast<int>(blockIdx.x % groups_per_query) * kHeads;
  const int64_t row0 = query * heads + head0;  // the block's first (query, head) row
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  for (int c = tid; c < kHeads * head_dim; c += kThreads) qs[c] = q[row0 * head_dim + c];
  for (int j = tid; j < topk; j += kThreads) {
    const int32_t t = index[query * topk + j];
    slots[j] = (t >= 0 && t < kv_len) ? t : -1;
  }
  __syncthreads();
  const int vec = head_dim / 4;
  // Rows j0 .. j0 + n - 1 of the list into `rows` (listed slots only), by
  // cp.async: every copy of the chunk is issued before the first lands (a
  // load and a shared store a float4 waited on each load in turn; small's
  // launch at batch 1 went 18.4 -> 14.5 us), then each thread waits for its
  // own; the __syncthreads after a stage makes them everyone's.
  const int step_rows = kThreads / vec, step_c4 = kThreads % vec;  // e += kThreads in (r, c4)
  auto stage = [&](int j0, int n) {
    int r = tid / vec, c4 = tid % vec;
    for (; r < n; r += step_rows, c4 += step_c4) {
      if (c4 >= vec) {
        c4 -= vec;
        if (++r >= n) break;
      }
      const int32_t t = slots[j0 + r];
      if (t >= 0) {
        CpAsync16(rows + (static_cast<int64_t>(r) * vec + c4) * 4,
                  kv + static_cast<int64_t>(t) * head_dim + c4 * 4, true);
      }
    }
    CpAsyncCommit();
    CpAsyncWait<0>();
  };

  // Phase 1: logits. Each head's dot is WarpLaneSum's: lane l adds the
  // products of channels l, l + 32, ... in ascending order from +0, then the
  // xor butterfly.
  float local_max[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) local_max[h] = -INFINITY;
  for (int j0 = 0; j0 < topk; j0 += chunk_rows) {
    const int n = min(chunk_rows, topk - j0);
    stage(j0, n);
    __syncthreads();
    for (int r = warp; r < n; r += kWarps) {
      const int j = j0 + r;
      if (slots[j] < 0) {
        if (lane < kHeads) z[lane * topk + j] = -INFINITY;
        continue;
      }
      const float* kr = rows + static_cast<int64_t>(r) * head_dim;
      float dot[kHeads];
#pragma unroll
      for (int h = 0; h < kHeads; ++h) dot[h] = 0.0f;
#pragma unroll 4
      for (int c = lane; c < head_dim; c += 32) {
        const float k = kr[c];
#pragma unroll
        for (int h = 0; h < kHeads; ++h)
          dot[h] = fm::FAdd(dot[h], fm::FMul(qs[h * head_dim + c], k));
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          dot[h] = fm::FAdd(dot[h], __shfl_xor_sync(0xffffffffu, dot[h], off));
        }
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float zj = fm::FMul(scale, dot[h]);
        if (lane == h) z[h * topk + j] = zj;
        local_max[h] = local_max[h] < zj ? zj : local_max[h];  // a NaN never becomes the maximum
      }
    }
    __syncthreads();  // the chunk read before the next one overwrites it
  }
  if (lane == 0) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) partial[warp * kHeads + h] = local_max[h];
  }
  __syncthreads();
  if (tid < kHeads) {
    float m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) {
      const float v = partial[w * kHeads + tid];
      m = m < v ? v : m;
    }
    row_max[tid] = m;
  }
  __syncthreads();
  // The output values of head h of the block, into `out` or (grouped)
  // transposed with the inverse RoPE as SwapAxes does it: the pair (c, c + 1)
  // of a rotated channel lives in lanes (l, l ^ 1) of one warp (channels c =
  // tid + k kThreads, kThreads even), so every lane takes part in the shuffle.
  auto write = [&](int h, const float(&v)[kMaxChannels], bool rounded) {
    const int head = head0 + h;
    float* o = out + (row0 + h) * head_dim;
#pragma unroll
    for (int k = 0; k < kMaxChannels; ++k) {
      const int c = tid + k * kThreads;
      float x = v[k];
      if (rounded && round_bf16) x = RoundToBf16(x);
      if (grouped.group_width == 0) {
        if (c < head_dim) o[c] = x;
        continue;
      }
      const float partner = __shfl_xor_sync(0xffffffffu, x, 1);
      if (c >= head_dim) continue;
      const int kr = c - (head_dim - grouped.rope_dim);
      if (kr >= 0) {
        const float2 cs = RopeCosSinAt(grouped.cos_sin, grouped.cos_sin_rows,
                                       grouped.positions[query], grouped.rope_dim / 2, kr >> 1);
        const float2 r = (kr & 1) ? RopeRotatePair(partner, x, cs.x, cs.y, /*inverse=*/true)
                                  : RopeRotatePair(x, partner, cs.x, cs.y, /*inverse=*/true);
        x = (kr & 1) ? r.y : r.x;
        if (round_bf16) x = RoundToBf16(x);
      }
      const int64_t flat = static_cast<int64_t>(head) * head_dim + c;
      const int64_t g = flat / grouped.group_width, w = flat % grouped.group_width;
      const int64_t at = (g * grouped.queries + query) * grouped.group_width + w;
      if (grouped.out_bf16 != nullptr) {
        grouped.out_bf16[at] = Bf16BitsOf(x);
      } else {
        grouped.out[at] = x;
      }
    }
  };
  // A head whose maximum is -inf has no valid slot (or only NaN / -inf
  // logits): zeros, as the plain kernel. Block-uniform for each head.
  bool any_head = false;
#pragma unroll
  for (int h = 0; h < kHeads; ++h) any_head |= row_max[h] != -INFINITY;
  if (!any_head) {
    float zeros[kMaxChannels];
#pragma unroll
    for (int k = 0; k < kMaxChannels; ++k) zeros[k] = 0.0f;
#pragma unroll 1
    for (int h = 0; h < kHeads; ++h) write(h, zeros, /*rounded=*/false);
    return;
  }
  for (int e = tid; e < kHeads * topk; e += kThreads) {
    const int h = e / topk, j = e - h * topk;
    const float m = row_max[h];
    if (slots[j] < 0 || m == -INFINITY) continue;
    z[e] = fm::ExpF(fm::FSub(z[e], m));
  }
  __syncthreads();
  if (tid < kHeads && row_max[tid] != -INFINITY) {  // the denominator in list order, as the CPU
    const float* zh = z + tid * topk;
    float denom = 0.0f;
#pragma unroll 8
    for (int j = 0; j < topk; ++j) {
      const float p = zh[j];
      if (slots[j] >= 0) denom = fm::FAdd(denom, p);
    }
    row_denom[tid] = fm::FAdd(denom, fm::ExpF(fm::FSub(sink[head0 + tid], row_max[tid])));
  }

  // Phase 2: each channel's terms in list order, for every head.
  float acc[kHeads][kMaxChannels];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
#pragma unroll
    for (int k = 0; k < kMaxChannels; ++k) acc[h][k] = 0.0f;
  }
  const bool kept = chunk_rows >= topk;  // the one chunk is still staged
  for (int j0 = 0; j0 < topk; j0 += chunk_rows) {
    const int n = min(chunk_rows, topk - j0);
    if (!kept) {
      __syncthreads();  // the previous chunk's reads are done
      stage(j0, n);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kMaxChannels; ++k) {
      const int c = tid + k * kThreads;
      if (c >= head_dim) continue;
#pragma unroll 4
      for (int r = 0; r < n; ++r) {
        if (slots[j0 + r] < 0) continue;
        const float v = rows[static_cast<int64_t>(r) * head_dim + c];
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          acc[h][k] = __fadd_rn(acc[h][k], __fmul_rn(z[h * topk + j0 + r], v));
        }
      }
    }
  }
  __syncthreads();  // row_denom
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    float v[kMaxChannels];
    if (row_max[h] == -INFINITY) {
#pragma unroll
      for (int k = 0; k < kMaxChannels; ++k) v[k] = 0.0f;
      write(h, v, /*rounded=*/false);
      continue;
    }
    const float denom = row_denom[h];
#pragma unroll
    for (int k = 0; k < kMaxChannels; ++k) v[k] = __fdiv_rn(acc[h][k], denom);
    write(h, v, /*rounded=*/true);
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_CUH_
