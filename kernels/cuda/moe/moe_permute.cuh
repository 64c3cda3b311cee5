// kernels/cuda/moe/moe_permute.cuh — device code of MoeGroupRows and
// MoeCombine. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_CUH_
#define WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_CUH_

#include <cstdint>

#include "kernels/cuda/dense/fp8_bf16.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/numerics.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kGroupThreads = 1024;  // one thread per group
inline constexpr int kCombineMaxTopk = 64;
// Pairs past which MoeGroupRows (with `wide`) numbers them by GroupRowsWideKernel (each
// warp its own span, in parallel) instead of GroupRowsKernel (warp after
// warp of each 1,024 pairs, a barrier between: 216 us a launch at the EP8
// prefill chunk's 196,608 pairs, H200).
inline constexpr int64_t kGroupRowsWidePairs = 4096;

// The exclusive scan of one count a thread (kGroupThreads threads, every
// one calling; `s_warp` kGroupThreads / 32 entries): the sum of the counts
// of the threads below this one.
__device__ __forceinline__ int32_t BlockExclusiveScan(int32_t count, int32_t* s_warp) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  int32_t inclusive = count;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t v = __shfl_up_sync(0xFFFFFFFFu, inclusive, o);
    if (lane >= o) inclusive += v;
  }
  if (lane == 31) s_warp[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int32_t total = s_warp[lane];
    int32_t before = total;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t v = __shfl_up_sync(0xFFFFFFFFu, before, o);
      if (lane >= o) before += v;
    }
    s_warp[lane] = before - total;
  }
  __syncthreads();
  return s_warp[warp] + inclusive - count;
}

// The pairs of the step's real tokens (those before *valid_tokens, all
// without it): the grouping kernels leave the rest out of every group.
__device__ __forceinline__ int64_t LivePairs(const int64_t* valid_tokens, int topk, int64_t pairs) {
  return valid_tokens == nullptr ? pairs : min(max(*valid_tokens, int64_t{0}) * topk, pairs);
}

// The group of pair i for the grouping kernels: -1 for a pair at or past
// `live` (padding) or of a group not handled here; with token_role,
// role-major (MoeGroupRowsParams::token_role).
__device__ __forceinline__ int32_t GroupOfPair(const int32_t* __restrict__ groups, int64_t i,
                                               int64_t live, int num_groups, int topk,
                                               const int32_t* __restrict__ token_role,
                                               int role_stride) {
  if (i >= live) return -1;
  const int32_t g = groups[i];
  if (token_role != nullptr) {
    if (g < 0 || g >= role_stride) return -1;
    return token_role[i / topk] != 0 ? g + role_stride : g;
  }
  return g >= 0 && g < num_groups ? g : -1;
}

// One block of kGroupThreads (one thread per group for the scan). The pairs
// of each group are counted by shared-memory atomics (a count has no order),
// the counts scanned into offsets, then the pairs numbered in ascending pair
// order: chunk by chunk of kGroupThreads pairs, warp by warp of a chunk (a
// barrier between warps), a lane's row being its group's next row plus the
// lanes below it in its warp with the same group (match.any). So rows
// within a group ascend with the pair index, as the CPU executor numbers
// them. With valid_tokens, the pairs of tokens at or past *valid_tokens
// (padding rows) belong to no group; with token_role the groups are
// role-major (MoeGroupRowsParams).
__global__ void __launch_bounds__(kGroupThreads)
    GroupRowsKernel(const int32_t* __restrict__ groups, int64_t pairs, int num_groups,
                    const int64_t* __restrict__ valid_tokens, int topk,
                    int64_t* __restrict__ offsets, int32_t* __restrict__ pair_row,
                    const int32_t* __restrict__ token_role, int role_stride) {
  GridDependencyPrologue();
  const int64_t live = LivePairs(valid_tokens, topk, pairs);
  __shared__ int32_t s_next[kGroupThreads];  // counts, then each group's next row
  __shared__ int32_t s_warp[kGroupThreads / 32];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  auto group_of = [&](int64_t i) {
    return GroupOfPair(groups, i, live, num_groups, topk, token_role, role_stride);
  };
  s_next[tid] = 0;
  __syncthreads();
  for (int64_t i = tid; i < live; i += kGroupThreads) {
    const int32_t g = group_of(i);
    if (g >= 0) atomicAdd(&s_next[g], 1);
  }
  __syncthreads();
  // Exclusive scan of the counts: within each warp by shuffles, then over
  // the warps' totals in warp 0.
  const int32_t count = tid < num_groups ? s_next[tid] : 0;
  const int32_t start = BlockExclusiveScan(count, s_warp);
  if (tid < num_groups) {
    offsets[tid] = start;
    s_next[tid] = start;  // only this thread read entry tid above
  }
  if (tid == num_groups - 1) offsets[num_groups] = start + count;
  __syncthreads();
  for (int64_t base = 0; base < pairs; base += kGroupThreads) {
    const int64_t i = base + tid;
    const int32_t g = group_of(i);
    const int64_t left = pairs - base;
    const int warps = static_cast<int>(((left < kGroupThreads ? left : kGroupThreads) + 31) / 32);
    for (int w = 0; w < warps; ++w) {  // uniform over the block
      if (warp == w) {                 // uniform over the warp
        const unsigned same = __match_any_sync(0xFFFFFFFFu, g);
        const int rank = __popc(same & ((1u << lane) - 1u));
        const int32_t row = g >= 0 ? s_next[g] + rank : -1;
        __syncwarp();
        if (g >= 0 && rank == 0) s_next[g] += __popc(same);
        if (i < pairs) pair_row[i] = row;
      }
      __syncthreads();
    }
  }
}

// GroupRowsKernel's numbering (the same offsets and rows) for many pairs:
// warp w of the one block takes its own span of the pairs (consecutive,
// spans in warp order) and, in parallel with the other warps, counts its
// pairs a group (dynamic shared memory: 32 x num_groups counts); thread g
// then scans group g's counts over the warps into each warp's first row
// of the group (after the groups' offsets, scanned as GroupRowsKernel
// scans them); each warp walks its span again numbering its pairs from
// there, 32 at a time in ascending order (match.any ranks the lanes of a
// group). So rows within a group ascend with the pair index, as the CPU
// executor numbers them, without a barrier between warps.
__global__ void __launch_bounds__(kGroupThreads, 1)
    GroupRowsWideKernel(const int32_t* __restrict__ groups, int64_t pairs, int num_groups,
                        const int64_t* __restrict__ valid_tokens, int topk,
                        int64_t* __restrict__ offsets, int32_t* __restrict__ pair_row,
                        const int32_t* __restrict__ token_role, int role_stride) {
  GridDependencyPrologue();
  const int64_t live = LivePairs(valid_tokens, topk, pairs);
  extern __shared__ int32_t s_next[];  // [warp][group]: counts, then next rows
  __shared__ int32_t s_warp[kGroupThreads / 32];
  constexpr int kWarps = kGroupThreads / 32;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  auto group_of = [&](int64_t i) {
    return GroupOfPair(groups, i, live, num_groups, topk, token_role, role_stride);
  };
  // Warp w's span: [w * span, min((w + 1) * span, pairs)), span a multiple of 32.
  const int64_t span = (pairs + kWarps * 32 - 1) / (kWarps * 32) * 32;
  const int64_t lo = warp * span, hi = min(lo + span, pairs);
  for (int i = tid; i < kWarps * num_groups; i += kGroupThreads) s_next[i] = 0;
  __syncthreads();
  int32_t* const mine = s_next + warp * num_groups;
  for (int64_t i0 = lo; i0 < hi; i0 += 32) {
    const int64_t i = i0 + lane;
    const int32_t g = i < hi ? group_of(i) : -1;
    const unsigned same = __match_any_sync(0xFFFFFFFFu, g);
    if (g >= 0 && (same & ((1u << lane) - 1u)) == 0) mine[g] += __popc(same);
    __syncwarp();
  }
  __syncthreads();
  int32_t count = 0;
  if (tid < num_groups) {
    for (int w = 0; w < kWarps; ++w) count += s_next[w * num_groups + tid];
  }
  const int32_t start = BlockExclusiveScan(count, s_warp);
  if (tid < num_groups) {
    offsets[tid] = start;
    int32_t next = start;  // group tid's first row in each warp's span
    for (int w = 0; w < kWarps; ++w) {
      const int32_t c = s_next[w * num_groups + tid];
      s_next[w * num_groups + tid] = next;
      next += c;
    }
  }
  if (tid == num_groups - 1) offsets[num_groups] = start + count;
  __syncthreads();
  for (int64_t i0 = lo; i0 < hi; i0 += 32) {
    const int64_t i = i0 + lane;
    const int32_t g = i < hi ? group_of(i) : -1;
    const unsigned same = __match_any_sync(0xFFFFFFFFu, g);
    const int rank = __popc(same & ((1u << lane) - 1u));
    const int32_t row = g >= 0 ? mine[g] + rank : -1;
    __syncwarp();
    if (g >= 0 && rank == 0) mine[g] += __popc(same);
    __syncwarp();
    if (i < hi) pair_row[i] = row;
  }
}

// Columns one block of the row kernels (gather, combine) covers: a token's
// row is spread over ceil(dim / kRowChunk) blocks (blockIdx.y), so a decode
// step of a few tokens still fills the GPU. Per element nothing changes.
constexpr int64_t kRowChunk = 1024;
// The combine's columns a block: kRowChunk below kCombineWholeRowTokens
// tokens (decode: more blocks for few tokens), else the whole row (prefill:
// two waves of H100 SMs' blocks and more already).
inline constexpr int64_t kCombineWholeRowTokens = 512;
constexpr int64_t CombineChunk(int64_t tokens, int64_t dim) {
  return tokens >= kCombineWholeRowTokens ? (dim + kRowChunk - 1) / kRowChunk * kRowChunk
                                          : kRowChunk;
}

// One block per (pair, column chunk): copies its columns of x[t] to the
// pair's grouped row.
__global__ void GatherRowsKernel(const float* __restrict__ x,
                                 const float* __restrict__ route_weight,
                                 const int32_t* __restrict__ pair_row,
                                 float* __restrict__ x_grouped, float* __restrict__ weight_grouped,
                                 int64_t dim, int topk) {
  GridDependencyPrologue();
  const int64_t pair = blockIdx.x;
  const int32_t row = pair_row[pair];
  if (row < 0) return;
  const float* src = x + (pair / topk) * dim;
  float* dst = x_grouped + static_cast<int64_t>(row) * dim;
  const int64_t end = min(dim, (static_cast<int64_t>(blockIdx.y) + 1) * kRowChunk);
  for (int64_t c = blockIdx.y * kRowChunk + threadIdx.x; c < end; c += blockDim.x) dst[c] = src[c];
  if (blockIdx.y == 0 && threadIdx.x == 0 && route_weight != nullptr) {
    weight_grouped[row] = route_weight[pair];
  }
}

// One block per pair: its token's FP8 codes row (dim bytes) and UE8M0
// scales row (dim / 32 bytes) copied to its grouped row in 16-byte chunks
// (dim % 512 == 0, rows 16-byte aligned: the launcher checks), and its route
// weight; with bf16_grouped also each chunk's 16 codes as bf16 under their
// 32-block's scale (Fp8ToBf16Eight, as Fp8ActBf16's kernel widens a chunk).
// Pairs without a row (-1) copy nothing.
inline constexpr int kGatherCodesThreads = 128;
__global__ void __launch_bounds__(kGatherCodesThreads)
    GatherCodesKernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                      const float* __restrict__ route_weight, const int32_t* __restrict__ pair_row,
                      uint8_t* __restrict__ codes_grouped, uint8_t* __restrict__ scales_grouped,
                      float* __restrict__ weight_grouped, uint16_t* __restrict__ bf16_grouped,
                      int64_t dim, int topk) {
  GridDependencyPrologue();
  const int64_t pair = blockIdx.x;
  const int32_t row = pair_row[pair];
  if (row < 0) return;
  const int64_t token = pair / topk;
  const int64_t code_chunks = dim / 16, scale_chunks = dim / 512;
  const uint4* src = reinterpret_cast<const uint4*>(codes + token * dim);
  uint4* dst = reinterpret_cast<uint4*>(codes_grouped + static_cast<int64_t>(row) * dim);
  const uint8_t* const token_scales = scales + token * (dim / 32);
  for (int64_t c = threadIdx.x; c < code_chunks; c += blockDim.x) {
    const uint4 v = src[c];
    dst[c] = v;
    if (bf16_grouped != nullptr) {
      const uint32_t scale = token_scales[c >> 1];  // chunk c: K 16 c .., block c / 2
      uint32_t lo[4], hi[4];
      dense::fp8_gemm::Fp8ToBf16Eight(v.x, v.y, scale, lo);
      dense::fp8_gemm::Fp8ToBf16Eight(v.z, v.w, scale, hi);
      uint4* const out = reinterpret_cast<uint4*>(bf16_grouped + static_cast<int64_t>(row) * dim);
      out[2 * c] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      out[2 * c + 1] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    }
  }
  const uint4* ssrc = reinterpret_cast<const uint4*>(scales + token * (dim / 32));
  uint4* sdst = reinterpret_cast<uint4*>(scales_grouped + static_cast<int64_t>(row) * (dim / 32));
  for (int64_t c = threadIdx.x; c < scale_chunks; c += blockDim.x) sdst[c] = ssrc[c];
  if (threadIdx.x == 0 && route_weight != nullptr) weight_grouped[row] = route_weight[pair];
}

// One block per (token, column chunk): thread 0 orders the token's rows by
// expert id (insertion sort, stable), then every thread sums its columns in
// that order (each block sorts the same few ids: the order is the token's).
// An expert output as the combine adds it: fp32 as held, or bf16 bits
// widened (exact).
__device__ __forceinline__ float CombineValue(float v) { return v; }
__device__ __forceinline__ float CombineValue(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// Element e (0 - 7 for bf16 bits, 0 - 3 for fp32) of a 16-byte load of
// expert outputs, as the combine adds it (CombineValue's value).
template <typename Y>
__device__ __forceinline__ float CombineValueOf(const uint4& v, int e) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (sizeof(Y) == 2) {
    const uint32_t word = w[e >> 1];
    return __uint_as_float((e & 1) != 0 ? word & 0xFFFF0000u : word << 16);
  } else {
    return __uint_as_float(w[e]);
  }
}

// Y: float (y_grouped) or uint16_t (y_grouped_bf16's bits).
// `chunk`: the columns a block sums (kRowChunk for decode's few tokens, the
// whole row for prefill's many: the token's ids and their sort paid once a
// row instead of once a 1,024 columns; the same sums). kVec16 (prefill's
// whole rows; dim a multiple of a 16-byte load's elements, the arrays
// 16-byte aligned): a thread sums 16 bytes of columns of each row at a time
// (8 bf16 or 4 fp32: one load a row, four rows' loads in flight) instead of
// one column, each column's additions in the same order, so the same sums.
template <typename Y, bool kVec16 = false>
__global__ void CombineKernel(const Y* __restrict__ y_grouped, const int32_t* __restrict__ pair_row,
                              const int32_t* __restrict__ experts, const float* __restrict__ shared,
                              float* __restrict__ out, int64_t dim, int topk, bool round_bf16,
                              int64_t chunk) {
  GridDependencyPrologue();
  __shared__ int32_t s_row[kCombineMaxTopk];
  __shared__ int32_t s_key[kCombineMaxTopk];
  __shared__ int s_n;
  __shared__ int32_t s_pair_row[kCombineMaxTopk];
  __shared__ int32_t s_expert[kCombineMaxTopk];
  const int64_t t = blockIdx.x;
  // The token's ids read by topk threads at once (a chain of dependent
  // global loads on one thread was most of a decode step's combine).
  if (threadIdx.x < topk) {
    s_pair_row[threadIdx.x] = pair_row[t * topk + threadIdx.x];
    s_expert[threadIdx.x] = experts[t * topk + threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    for (int k = 0; k < topk; ++k) {
      const int32_t row = s_pair_row[k], key = s_expert[k];
      if (row < 0) continue;
      int j = n++;
      for (; j > 0 && s_key[j - 1] > key; --j) {
        s_key[j] = s_key[j - 1];
        s_row[j] = s_row[j - 1];
      }
      s_key[j] = key;
      s_row[j] = row;
    }
    s_n = n;
  }
  __syncthreads();
  const int n = s_n;
  const int64_t end = min(dim, (static_cast<int64_t>(blockIdx.y) + 1) * chunk);
  if constexpr (kVec16) {
    constexpr int kV = 16 / static_cast<int>(sizeof(Y));  // columns a load
    for (int64_t c = blockIdx.y * chunk + threadIdx.x * kV; c < end;
         c += static_cast<int64_t>(blockDim.x) * kV) {
      float acc[kV];
#pragma unroll
      for (int e = 0; e < kV; ++e) acc[e] = 0.0f;
      for (int j0 = 0; j0 < n; j0 += 4) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          v[j] = j0 + j < n ? *reinterpret_cast<const uint4*>(
                                  y_grouped + static_cast<int64_t>(s_row[j0 + j]) * dim + c)
                            : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (j0 + j < n) {
#pragma unroll
            for (int e = 0; e < kV; ++e) acc[e] = __fadd_rn(acc[e], CombineValueOf<Y>(v[j], e));
          }
        }
      }
#pragma unroll
      for (int q = 0; q < kV / 4; ++q) {  // 4 fp32 outputs a store
        float4 o = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
        if (shared != nullptr) {
          const float4 sh = *reinterpret_cast<const float4*>(shared + t * dim + c + 4 * q);
          o = make_float4(__fadd_rn(o.x, sh.x), __fadd_rn(o.y, sh.y), __fadd_rn(o.z, sh.z),
                          __fadd_rn(o.w, sh.w));
        }
        if (round_bf16) {
          o = make_float4(RoundToBf16(o.x), RoundToBf16(o.y), RoundToBf16(o.z), RoundToBf16(o.w));
        }
        *reinterpret_cast<float4*>(out + t * dim + c + 4 * q) = o;
      }
    }
    return;
  }
  for (int64_t c = blockIdx.y * chunk + threadIdx.x; c < end; c += blockDim.x) {
    // Up to 8 rows' loads in flight before their additions (in order: the
    // same sum).
    float acc = 0.0f;
    for (int j0 = 0; j0 < n; j0 += 8) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        v[j] = j0 + j < n ? CombineValue(y_grouped[static_cast<int64_t>(s_row[j0 + j]) * dim + c])
                          : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (j0 + j < n) acc = __fadd_rn(acc, v[j]);
      }
    }
    if (shared != nullptr) acc = __fadd_rn(acc, shared[t * dim + c]);
    out[t * dim + c] = round_bf16 ? RoundToBf16(acc) : acc;
  }
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_CUH_
