#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/rope.h"

namespace weir::kernels::cuda {

bool SupportsRope(const RopeParams& p) {
  return p.x != nullptr && p.positions != nullptr &&
         (p.freqs != nullptr || p.cos_sin != nullptr) && p.num_tokens > 0 &&
         p.num_heads > 0 && p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim &&
         (!p.cos_sin_by_position || (p.cos_sin != nullptr && p.cos_sin_rows > 0));
}

absl::Status ApplyRope(const RopeParams& p, cudaStream_t stream) {
  if (!SupportsRope(p)) {
    return absl::InvalidArgumentError(
        "ApplyRope: needs device pointers, positive sizes, an even rope_dim <= head_dim, and "
        "with cos_sin_by_position a cos_sin table of cos_sin_rows > 0 rows");
  }
  const int64_t pairs = p.num_tokens * p.num_heads * (p.rope_dim / 2);
  constexpr int kThreads = 256;
  const int64_t grid = (pairs + kThreads - 1) / kThreads;
  RopeKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      p.x, p.positions, p.freqs, p.cos_sin, p.cos_sin_by_position ? p.cos_sin_rows : 0, pairs,
      p.num_heads, p.head_dim, p.rope_dim, p.inverse, p.round_bf16);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("ApplyRope launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda
