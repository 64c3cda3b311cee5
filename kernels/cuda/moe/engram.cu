#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/moe/engram.cuh"
#include "kernels/cuda/moe/engram.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {
bool SupportsEngramLookup(const EngramLookupParams& p) {
  return p.table_rows > 0 && p.num_ids > 0 && p.dim > 0 && p.dim % 32 == 0 &&
         p.num_ids * p.dim < (int64_t{1} << 38) && p.table != nullptr && p.scales != nullptr &&
         p.ids != nullptr && p.out != nullptr;
}

absl::Status EngramLookup(const EngramLookupParams& p, cudaStream_t stream) {
  if (!SupportsEngramLookup(p)) {
    return absl::InvalidArgumentError(absl::StrCat("EngramLookup: unsupported (rows ",
                                                   p.table_rows, ", dim ", p.dim, ", ids ",
                                                   p.num_ids, "; dim must be a multiple of 32)"));
  }
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((p.num_ids * p.dim + kThreads - 1) / kThreads);
  moe::EngramLookupKernel<<<blocks, kThreads, 0, stream>>>(
      p.table, p.scales, p.ids, p.out, p.bad_count, p.table_rows, p.dim, p.num_ids, p.round_bf16);
  return LaunchStatus("EngramLookup");
}

bool SupportsEngramGate(const EngramGateParams& p) {
  return p.tokens > 0 && p.hc_mult > 0 && p.dim > 0 && p.tokens * p.hc_mult <= 0x7fffffff &&
         p.x != nullptr && p.key != nullptr && p.value != nullptr && p.weight != nullptr &&
         p.key_token_stride >= 0 && p.value_token_stride >= 0;
}

absl::Status EngramGate(const EngramGateParams& p, cudaStream_t stream) {
  if (!SupportsEngramGate(p)) {
    return absl::InvalidArgumentError(absl::StrCat("EngramGate: unsupported (tokens ", p.tokens,
                                                   ", hc ", p.hc_mult, ", dim ", p.dim, ")"));
  }
  // The CPU's constant: 1/sqrt(d) in double, rounded to fp32.
  const float inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.dim)));
  constexpr int kThreads = 256;
  moe::EngramGateKernel<kThreads>
      <<<static_cast<unsigned>(p.tokens * p.hc_mult), kThreads, 0, stream>>>(
          p.x, p.key, p.value, p.weight, p.token_mask, p.hc_mult, p.dim, p.eps, inv_sqrt_dim,
          p.round_bf16, p.key_token_stride != 0 ? p.key_token_stride : p.hc_mult * p.dim,
          p.value_token_stride != 0 ? p.value_token_stride : p.dim);
  return LaunchStatus("EngramGate");
}

}  // namespace weir::kernels::cuda
