#include "kernels/cuda/cute/tile_transpose.h"

#include <cstdint>

#include "gtest/gtest.h"

// Runs in CI (no GPU): the launcher validates before it touches the device,
// so these cases need only the linked CuTe library.
namespace weir::kernels::cuda {
namespace {

TEST(TileTransposeParamsTest, RejectsBadParamsBeforeLaunch) {
  float* fake = reinterpret_cast<float*>(uintptr_t{4096});
  EXPECT_EQ(TileTransposeF32({.in = nullptr, .out = fake, .rows = 2, .cols = 2}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TileTransposeF32({.in = fake, .out = fake + 1, .rows = 2, .cols = 2}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TileTransposeF32({.in = fake, .out = fake + 64, .rows = -1, .cols = 2}, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TileTransposeF32({.in = fake, .out = fake + 64, .rows = 1 << 20, .cols = 1 << 12},
                             nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(TileTransposeF32({.in = nullptr, .out = nullptr, .rows = 0, .cols = 5}, nullptr)
                  .ok());
}

}  // namespace
}  // namespace weir::kernels::cuda
