#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/decode/launch_util.h"
#include "kernels/cuda/decode/swiglu.cuh"
#include "kernels/cuda/decode/swiglu.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::decode {

bool SupportsSwiglu(const SwigluParams& p) {
  int64_t n = 0;
  if (p.rows < 0 || p.inter < 0 || !internal::CheckedProduct({p.rows, p.inter}, &n)) return false;
  if ((p.codes == nullptr) != (p.scales == nullptr)) return false;
  if (p.codes != nullptr && (p.inter % 32 != 0 || reinterpret_cast<uintptr_t>(p.codes) % 8 != 0)) {
    return false;
  }
  if (p.gate_bf16 != nullptr || p.up_bf16 != nullptr) {
    // bf16 inputs: both, instead of gate and up, into the FP8 form only,
    // with the bf16 rounding (SwigluParams::gate_bf16).
    const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    return p.gate_bf16 != nullptr && p.up_bf16 != nullptr && p.gate == nullptr && p.up == nullptr &&
           p.out == nullptr && p.codes != nullptr && p.round_bf16 && aligned(p.gate_bf16) &&
           aligned(p.up_bf16);
  }
  return n == 0 ||
         (p.gate != nullptr && p.up != nullptr && (p.out != nullptr || p.codes != nullptr));
}

absl::Status Swiglu(const SwigluParams& p, cudaStream_t stream) {
  if (!SupportsSwiglu(p)) {
    return absl::InvalidArgumentError(
        "Swiglu: needs rows, inter >= 0 and gate, up, out when there is output; got rows " +
        std::to_string(p.rows) + " inter " + std::to_string(p.inter));
  }
  const int64_t n = p.rows * p.inter;
  if (n == 0) return absl::OkStatus();
  if (p.codes != nullptr) {  // a thread per 8 elements
    const int64_t threads = n / 8;
    const unsigned grid =
        static_cast<unsigned>((threads + internal::kThreads - 1) / internal::kThreads);
    if (p.gate_bf16 != nullptr) {
      SwigluFp8Kernel<true, true><<<grid, internal::kThreads, 0, stream>>>(
          p.gate_bf16, p.up_bf16, p.route_weight, nullptr, p.codes, p.scales, threads, p.inter,
          p.limit, p.row_count);
    } else if (p.round_bf16) {
      SwigluFp8Kernel<true><<<grid, internal::kThreads, 0, stream>>>(
          p.gate, p.up, p.route_weight, p.out, p.codes, p.scales, threads, p.inter, p.limit,
          p.row_count);
    } else {
      SwigluFp8Kernel<false><<<grid, internal::kThreads, 0, stream>>>(
          p.gate, p.up, p.route_weight, p.out, p.codes, p.scales, threads, p.inter, p.limit,
          p.row_count);
    }
    return LaunchStatus("Swiglu");
  }
  const unsigned blocks = internal::BlocksFor(n);
  if (p.round_bf16) {
    SwigluKernel<true><<<blocks, internal::kThreads, 0, stream>>>(
        p.gate, p.up, p.route_weight, p.out, p.rows, p.inter, p.limit, p.row_count);
  } else {
    SwigluKernel<false><<<blocks, internal::kThreads, 0, stream>>>(
        p.gate, p.up, p.route_weight, p.out, p.rows, p.inter, p.limit, p.row_count);
  }
  return LaunchStatus("Swiglu");
}

}  // namespace weir::kernels::cuda::decode
