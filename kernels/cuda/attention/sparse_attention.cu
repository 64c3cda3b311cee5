#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/cuda/attention/sparse_attention.cuh"
#include "kernels/cuda/attention/sparse_attention.h"

namespace weir::kernels::cuda {

bool SupportsSparseAttention(const SparseAttentionParams& p) {
  if (p.queries < 0 || p.heads <= 0 || p.head_dim <= 0 || p.kv_len < 0 || p.topk < 0 ||
      p.topk > kSparseAttentionMaxTopk || p.queries > 0x7fffffff / p.heads) {
    return false;
  }
  if (p.queries > 0 && (p.q == nullptr || p.sink == nullptr || p.out == nullptr)) return false;
  if (p.queries > 0 && p.topk > 0 && p.index == nullptr) return false;
  return p.kv_len == 0 || p.kv != nullptr;
}

absl::Status SparseAttention(const SparseAttentionParams& p, cudaStream_t stream) {
  if (!SupportsSparseAttention(p)) {
    return absl::InvalidArgumentError(
        "SparseAttention: needs queries >= 0, heads > 0, head_dim > 0, kv_len >= 0, "
        "0 <= topk <= " + std::to_string(kSparseAttentionMaxTopk) +
        ", queries * heads < 2^31 and the pointers the sizes use");
  }
  if (p.queries == 0) return absl::OkStatus();
  constexpr int kThreads = 128;
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  const size_t shared = static_cast<size_t>(p.topk) * (sizeof(float) + sizeof(int32_t));
  SparseAttentionKernel<kThreads>
      <<<static_cast<unsigned>(p.queries * p.heads), kThreads, shared, stream>>>(
          p.q, p.kv, p.sink, p.index, p.out, p.heads, p.head_dim, p.kv_len, p.topk, scale,
          p.round_bf16);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("SparseAttention launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda
