#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/attention/compressor_pool.cuh"
#include "kernels/cuda/attention/compressor_pool.h"

namespace weir::kernels::cuda {

int64_t CompressedPoolCount(int64_t start_pos, int64_t tokens, int ratio) {
  return (start_pos + tokens) / ratio - start_pos / ratio;
}

bool SupportsCompressorPool(const CompressorPoolParams& p) {
  if (p.ratio < 1 || p.dim <= 0 || p.start_pos < 0 || p.tokens < 0) return false;
  if (p.kv_state == nullptr || p.score_state == nullptr) return false;
  if (p.tokens > 0 && (p.kv == nullptr || p.score == nullptr)) return false;
  return CompressedPoolCount(p.start_pos, p.tokens, p.ratio) == 0 || p.out != nullptr;
}

absl::Status CompressorPool(const CompressorPoolParams& p, cudaStream_t stream) {
  if (!SupportsCompressorPool(p)) {
    return absl::InvalidArgumentError(
        "CompressorPool: needs ratio >= 1, dim > 0, start_pos >= 0, tokens >= 0, both states, "
        "kv and score when tokens > 0, out when a group completes; got tokens " +
        std::to_string(p.tokens) + " dim " + std::to_string(p.dim) + " ratio " +
        std::to_string(p.ratio) + " start_pos " + std::to_string(p.start_pos));
  }
  if (p.tokens == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t count = CompressedPoolCount(p.start_pos, p.tokens, p.ratio);
  if (count > 0) {
    const int64_t blocks = (count * p.dim + kThreads - 1) / kThreads;
    CompressorPoolKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        p.kv, p.score, p.kv_state, p.score_state, p.out, p.start_pos, p.dim, p.ratio, count);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
      return absl::InternalError(std::string("CompressorPool launch: ") + cudaGetErrorString(err));
    }
  }
  const int64_t blocks = (p.ratio * p.dim + kThreads - 1) / kThreads;
  CompressorStateKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      p.kv, p.score, p.kv_state, p.score_state, p.start_pos, p.tokens, p.dim, p.ratio);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("CompressorPool state launch: ") +
                               cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda
