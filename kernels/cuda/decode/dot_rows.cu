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

template <int kRows, int kOuts, int kChunk, int kStages>
absl::Status LaunchStaged(const DotRowsParams& p, cudaStream_t stream) {
  constexpr int kSmem = StagedShape<kRows, kOuts, kChunk, kStages>::kSmemBytes;
  auto kernel = RowStableDotStagedKernel<kRows, kOuts, kChunk, kStages>;
  if (absl::Status s = AllowSharedBytes(kernel, kSmem, "RowStableDot"); !s.ok()) return s;
  const dim3 grid(static_cast<unsigned>((p.rows + kRows - 1) / kRows),
                  static_cast<unsigned>((p.out + kOuts - 1) / kOuts));
  kernel<<<grid, kStagedThreads, kSmem, stream>>>(p.x, p.w, p.y, p.rows, p.out, p.k);
  return LaunchStatus("RowStableDot");
}

using StagedLaunch = absl::Status (*)(const DotRowsParams&, cudaStream_t);

// The staged tiles (rows x columns per CTA, K chunk, ring depth), as listed
// in dot_rows.h.
constexpr StagedLaunch kStaged[] = {
    LaunchStaged<1, 2, 512, 4>,  LaunchStaged<1, 2, 512, 8>,  LaunchStaged<1, 1, 1024, 8>,
    LaunchStaged<1, 4, 512, 6>,  LaunchStaged<2, 4, 256, 8>,  LaunchStaged<4, 8, 256, 6>,
    LaunchStaged<1, 32, 128, 4>, LaunchStaged<8, 4, 256, 6>,
};
static_assert(sizeof(kStaged) / sizeof(kStaged[0]) == kRowStableDotTiles);

bool Stageable(const DotRowsParams& p) {
  return p.k % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && p.rows <= int64_t{65535} * 65535 &&
         p.out <= 65535;
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
  if (Stageable(p)) {
    // Staged through shared memory (same bits, latency hidden). The tile
    // moves work between CTAs, never bits; picked from dot_rows_bench on the
    // H200 (mHC shapes: out 24, k 16384 / 20480): at 1-8 rows tile 2 (40.6
    // us at k 20480), at 32-64 tile 0 (45.6 / 59.6 us), at 256 tile 5.
    const int tile = p.rows <= 8    ? kRowStableDotSmallTile
                     : p.rows <= 64 ? kRowStableDotMediumTile
                                    : kRowStableDotLargeTile;
    return kStaged[tile](p, stream);
  }
  constexpr int kThreads = 128;
  const int64_t threads = p.rows * p.out * 4;
  RowStableDotKernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0,
                       stream>>>(p.x, p.w, p.y, p.rows, p.out, p.k);
  return LaunchStatus("RowStableDot");
}

absl::Status RowStableDotWithTile(const DotRowsParams& p, int tile, cudaStream_t stream) {
  if (tile < 0 || tile >= kRowStableDotTiles) {
    return absl::InvalidArgumentError("RowStableDot: tile " + std::to_string(tile) +
                                      " is not in [0, " + std::to_string(kRowStableDotTiles) +
                                      ")");
  }
  if (!SupportsRowStableDot(p) || !Stageable(p)) {
    return absl::InvalidArgumentError(
        "RowStableDot: a staged tile needs k % 4 == 0, 16-byte aligned x and w, out <= 65535");
  }
  if (p.rows == 0 || p.out == 0) return absl::OkStatus();
  return kStaged[tile](p, stream);
}

}  // namespace weir::kernels::cuda::decode
