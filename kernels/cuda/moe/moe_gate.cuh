// kernels/cuda/moe/moe_gate.cuh — device code of MoeGate and ExpertSlots.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_MOE_GATE_CUH_
#define WEIR_KERNELS_CUDA_MOE_MOE_GATE_CUH_

#include <climits>
#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/numerics.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kGateMaxExperts = 1024;
inline constexpr int kGateMaxTopk = 64;

enum GateScoreCode : int { kScoreSqrtSoftplus = 0, kScoreSigmoid = 1, kScoreSoftmax = 2 };

// The CPU's partial_sort order: higher value first, then lower index.
__device__ __forceinline__ bool Precedes(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

struct GateKernelArgs {
  const float* x;
  const float* weight;
  const float* logits;  // [tokens, num_experts] x W^T given, or null
  const float* bias;
  const float* bias_vl;
  const uint8_t* image_mask;
  int32_t* indices;
  float* weights;
  int64_t dim;
  int num_experts;
  int topk;
  float gate_temp;
  float route_scale;
  bool norm_topk_prob;
  int score;
};

// The gate rows the warps of a block of the first token read, for
// GridDependencyPrologue to ask L2 for before the wait (weights: no kernel of
// a step writes them); thread t asks for the row of warp t.
template <int kWarps>
__device__ __forceinline__ L2Rows GateWeightRows(const float* weight, int64_t dim, int num_e) {
  const int64_t e0 = static_cast<int64_t>(blockIdx.x) * kWarps;
  if (e0 >= num_e) return {};
  return {.base = weight + e0 * dim,
          .stride = dim * static_cast<long long>(sizeof(float)),
          .bytes = static_cast<unsigned>(dim * sizeof(float)),
          .rows = static_cast<int>(min(int64_t{kWarps}, num_e - e0))};
}

// MoeGateLogits: one warp per (token, expert) pair, the same WarpLaneSum
// (and so the same bits) as MoeGateKernel's logits, without the division by
// gate_temp (MoeGateKernel applies it to given logits).
template <int kWarps>
__global__ void MoeGateLogitsKernel(const float* x, const float* weight, float* logits,
                                    int64_t dim, int num_e, int64_t pairs) {
  GridDependencyPrologue(GateWeightRows<kWarps>(weight, dim, num_e));
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (pair >= pairs) return;  // whole warps leave together
  const int64_t token = pair / num_e;
  const int64_t e = pair % num_e;
  const float* xr = x + token * dim;
  const float* wr = weight + e * dim;
  const float acc = ::weir::kernels::fmath::WarpLaneSum<float>(
      dim, [&](int64_t c) { return __fmul_rn(xr[c], wr[c]); });
  if (threadIdx.x % 32 == 0) logits[pair] = acc;
}

// One block per token. Warps take experts round robin for the logits; the
// top-k is k rounds of a warp-wide argmax under Precedes on warp 0.
// (No __launch_bounds__: the kernel takes 40 registers a thread either way,
// and the 256-thread form keeps the SASS it had before the 1,024 one.)
template <int kThreads>
__global__ void MoeGateKernel(GateKernelArgs a) {
  GridDependencyPrologue();
  constexpr int kWarps = kThreads / 32;
  __shared__ float s_score[kGateMaxExperts];
  __shared__ float s_biased[kGateMaxExperts];
  __shared__ uint8_t s_taken[kGateMaxExperts];
  __shared__ int s_order[kGateMaxTopk];
  const int64_t token = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int num_e = a.num_experts;
  const float* xr = a.x + token * a.dim;
  for (int e = a.logits != nullptr ? num_e : warp; e < num_e; e += kWarps) {
    const float* wr = a.weight + static_cast<int64_t>(e) * a.dim;
    // The CPU's fmath::LaneDot order: bit-identical logits.
    const float acc = ::weir::kernels::fmath::WarpLaneSum<float>(
        a.dim, [&](int64_t c) { return __fmul_rn(xr[c], wr[c]); });
    if (lane == 0) s_score[e] = __fdiv_rn(acc, a.gate_temp);
  }
  if (a.logits != nullptr) {
    for (int e = threadIdx.x; e < num_e; e += kThreads) {
      s_score[e] = __fdiv_rn(a.logits[token * num_e + e], a.gate_temp);
    }
  }
  __syncthreads();
  if (a.score == kScoreSoftmax) {
    if (threadIdx.x == 0) {  // sequential, as the CPU sums
      float m = s_score[0];
      for (int e = 1; e < num_e; ++e) m = s_score[e] > m ? s_score[e] : m;
      float sum = 0.0f;
      for (int e = 0; e < num_e; ++e) {
        s_score[e] = ExpF(__fsub_rn(s_score[e], m));
        sum = __fadd_rn(sum, s_score[e]);
      }
      for (int e = 0; e < num_e; ++e) s_score[e] = __fdiv_rn(s_score[e], sum);
    }
  } else {
    for (int e = threadIdx.x; e < num_e; e += kThreads) {
      const float l = s_score[e];
      if (a.score == kScoreSigmoid) {
        s_score[e] = SigmoidF(l);
      } else {
        const float sp = l > 20.0f ? l : ::weir::kernels::fmath::Log1pF(ExpF(l));
        s_score[e] = __fsqrt_rn(sp);
      }
    }
  }
  __syncthreads();
  const bool image = a.image_mask != nullptr && a.image_mask[token] != 0;
  const float* bias = (image && a.bias_vl != nullptr) ? a.bias_vl : a.bias;
  for (int e = threadIdx.x; e < num_e; e += kThreads) {
    s_biased[e] = __fadd_rn(s_score[e], bias == nullptr ? 0.0f : bias[e]);
    s_taken[e] = 0;
  }
  __syncthreads();
  // The top-k on warp 0 alone: k rounds of a warp argmax under Precedes (a
  // strict order on the scores that are not NaN, so the best of a round is
  // the same whichever threads compare it; NaN never wins), with no block
  // barrier inside a round.
  if (warp == 0) {
    for (int j = 0; j < a.topk; ++j) {
      float best_v = -INFINITY;
      int best_i = INT_MAX;
      for (int e = lane; e < num_e; e += 32) {
        if (!s_taken[e] && Precedes(s_biased[e], e, best_v, best_i)) {
          best_v = s_biased[e];
          best_i = e;
        }
      }
      for (int offset = 16; offset > 0; offset /= 2) {
        const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
        const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
        if (Precedes(v, i, best_v, best_i)) {
          best_v = v;
          best_i = i;
        }
      }
      if (best_i >= num_e) {  // only NaN scores left: take the lowest free id
        best_i = 0;
        while (s_taken[best_i]) ++best_i;
      }
      __syncwarp();  // every lane has read s_taken before lane 0 marks the pick
      if (lane == 0) {
        s_order[j] = best_i;
        s_taken[best_i] = 1;
      }
      __syncwarp();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* idx = a.indices + token * a.topk;
    float* wt = a.weights + token * a.topk;
    float sum = 0.0f;
    for (int j = 0; j < a.topk; ++j) {
      idx[j] = s_order[j];
      wt[j] = s_score[s_order[j]];
      sum = __fadd_rn(sum, wt[j]);
    }
    const bool normalize = a.norm_topk_prob && a.topk > 1;
    for (int j = 0; j < a.topk; ++j) {
      float w = wt[j];
      if (normalize) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
      wt[j] = __fmul_rn(w, a.route_scale);
    }
  }
}

// One thread per (token, k) pair.
__global__ void ExpertSlotsKernel(const int32_t* __restrict__ indices,
                                  const int32_t* __restrict__ offsets,
                                  const int32_t* __restrict__ replica_slots,
                                  int32_t* __restrict__ slots, int32_t* bad_count, int64_t pairs,
                                  int topk, int num_logical, int rank) {
  GridDependencyPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int32_t e = indices[i];
  int32_t slot = -1;
  if (e >= 0 && e < num_logical) {
    const int32_t begin = offsets[e], count = offsets[e + 1] - begin;
    if (count > 0) slot = replica_slots[begin + (i / topk + rank) % count];
  }
  slots[i] = slot;
  if (slot < 0 && bad_count != nullptr) atomicAdd(bad_count, 1);
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_GATE_CUH_
