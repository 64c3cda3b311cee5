#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/decode/compressor_decode.cuh"
#include "kernels/cuda/decode/compressor_decode.h"
#include "kernels/cuda/decode/launch_util.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::decode {

bool SupportsCompressorDecode(const CompressorDecodeParams& p) {
  int64_t n = 0;
  if (p.rows < 0 || p.rows > INT_MAX || p.dim < 0 || p.ratio < 2 || p.slots < 0) return false;
  if (p.state_rows != 0 && p.state_rows < p.ratio) return false;
  const int64_t state_rows = p.state_rows > 0 ? p.state_rows : p.ratio;
  if (!internal::CheckedProduct({p.rows, p.dim}, &n)) return false;
  if (p.slots > 0 && !internal::CheckedProduct({p.slots, state_rows, p.dim}, &n)) return false;
  if (p.rows == 0 || p.dim == 0) return true;
  return p.kv != nullptr && p.score != nullptr && p.kv_state != nullptr &&
         p.score_state != nullptr && p.state_slot != nullptr && p.positions != nullptr &&
         p.out != nullptr;
}

absl::Status CompressorDecode(const CompressorDecodeParams& p, cudaStream_t stream) {
  if (!SupportsCompressorDecode(p)) {
    return absl::InvalidArgumentError(
        "CompressorDecode: needs rows (< 2^31), dim, slots >= 0, ratio >= 2, state_rows 0 or "
        ">= ratio and every pointer when there is output; got rows " +
        std::to_string(p.rows) + " dim " + std::to_string(p.dim) + " ratio " +
        std::to_string(p.ratio) + " state_rows " + std::to_string(p.state_rows) + " slots " +
        std::to_string(p.slots));
  }
  const int64_t n = p.rows * p.dim;
  if (n == 0) return absl::OkStatus();
  const int64_t state_rows = p.state_rows > 0 ? p.state_rows : p.ratio;
  if (p.parallel_rows) {  // the latents, then the ring
    CompressorPoolRowsKernel<<<internal::BlocksFor(n), internal::kThreads, 0, stream>>>(
        p.kv, p.score, p.kv_state, p.score_state, p.state_slot, p.positions, p.out, p.rows, p.dim,
        p.ratio, state_rows, p.slots, p.round_bf16);
    CompressorStateRowsKernel<<<internal::BlocksFor(n), internal::kThreads, 0, stream>>>(
        p.kv, p.score, p.kv_state, p.score_state, p.state_slot, p.positions, p.rows, p.dim,
        state_rows, p.slots);
    return LaunchStatus("CompressorDecode");
  }
  CompressorDecodeKernel<<<internal::BlocksFor(n), internal::kThreads, 0, stream>>>(
      p.kv, p.score, p.kv_state, p.score_state, p.state_slot, p.positions, p.run_length, p.out,
      p.rows, p.dim, p.ratio, p.state_rows > 0 ? p.state_rows : p.ratio, p.slots, p.round_bf16);
  return LaunchStatus("CompressorDecode");
}

}  // namespace weir::kernels::cuda::decode
