#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/decode/dot_rows.cuh"
#include "kernels/cuda/decode/dot_rows.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::decode {

bool SupportsDotRows(const DotRowsParams& p) {
  if (p.rows < 0 || p.out < 0 || p.rows > int64_t{65535} * 32 || p.out > INT_MAX || p.k <= 0 ||
      p.k % 4 != 0) {
    return false;
  }
  if (p.rows == 0 || p.out == 0) return true;
  return p.x != nullptr && p.w != nullptr && p.y != nullptr &&
         reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
}

absl::Status DotRows(const DotRowsParams& p, cudaStream_t stream) {
  if (!SupportsDotRows(p)) {
    return absl::InvalidArgumentError(
        "DotRows: needs rows, out in [0, 2^31), k > 0 a multiple of 4, and x, w (16-byte "
        "aligned), y when there is output; got rows " + std::to_string(p.rows) + " out " +
        std::to_string(p.out) + " k " + std::to_string(p.k));
  }
  if (p.rows == 0 || p.out == 0) return absl::OkStatus();
  // The tile height moves work, never bits (every element's order is fixed).
  if (p.rows <= 8) {
    const dim3 grid(static_cast<unsigned>(p.out), 1);
    DotRowsKernel<8><<<grid, kDotRowsWarps * 32, 0, stream>>>(p.x, p.w, p.y, p.rows, p.out, p.k);
  } else {
    const dim3 grid(static_cast<unsigned>(p.out), static_cast<unsigned>((p.rows + 31) / 32));
    DotRowsKernel<32><<<grid, kDotRowsWarps * 32, 0, stream>>>(p.x, p.w, p.y, p.rows, p.out,
                                                                p.k);
  }
  return LaunchStatus("DotRows");
}

namespace {

template <int kOuts, int kChunk>
absl::Status LaunchStaged(const DotRowsParams& p, cudaStream_t stream) {
  constexpr int kSmem = StagedShape<kOuts, kChunk>::kSmemBytes;
  auto kernel = RowStableDotStagedKernel<kOuts, kChunk>;
  if (cudaError_t err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      err != cudaSuccess) {
    return absl::InternalError(std::string("RowStableDot: shared memory attribute: ") +
                               cudaGetErrorString(err));
  }
  const dim3 grid(static_cast<unsigned>(p.rows),
                  static_cast<unsigned>((p.out + kOuts - 1) / kOuts));
  kernel<<<grid, kStagedThreads, kSmem, stream>>>(p.x, p.w, p.y, p.out, p.k);
  return LaunchStatus("RowStableDot");
}

}  // namespace

bool SupportsRowStableDot(const DotRowsParams& p) {
  if (p.rows < 0 || p.out < 0 || p.k <= 0) return false;
  if (p.rows == 0 || p.out == 0) return true;
  if (p.rows > (int64_t{1} << 40) / p.out || p.rows * p.out > (int64_t{1} << 31) * 64) {
    return false;
  }
  return p.x != nullptr && p.w != nullptr && p.y != nullptr;
}

absl::Status RowStableDot(const DotRowsParams& p, cudaStream_t stream) {
  if (!SupportsRowStableDot(p)) {
    return absl::InvalidArgumentError(
        "RowStableDot: needs rows, out >= 0 (rows * out < 2^37), k > 0, and x, w, y when "
        "there is output; got rows " + std::to_string(p.rows) + " out " +
        std::to_string(p.out) + " k " + std::to_string(p.k));
  }
  if (p.rows == 0 || p.out == 0) return absl::OkStatus();
  if (p.k % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && p.rows <= INT_MAX && p.out <= 65535 * 2) {
    // Staged through shared memory (same bits, latency hidden). The shape
    // moves work between CTAs, never bits.
    if (p.rows <= 256) return LaunchStaged<2, 512>(p, stream);
    return LaunchStaged<32, 128>(p, stream);
  }
  constexpr int kThreads = 128;
  const int64_t threads = p.rows * p.out * 4;
  RowStableDotKernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0,
                       stream>>>(p.x, p.w, p.y, p.rows, p.out, p.k);
  return LaunchStatus("RowStableDot");
}

}  // namespace weir::kernels::cuda::decode
