// DeviceArena, and the CUDA ops and the device decoder taking their memory
// from one (GPU machine only; tag gpu).
#include "worker/model/device_arena.h"

#include <cstdint>

#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "worker/model/cuda_ops.h"
#include "worker/model/device_decoder.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

TEST(DeviceArenaTest, HandsOutAlignedBlocksUntilFull) {
  EXPECT_EQ(DeviceArena::Create(0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  auto arena = DeviceArena::Create(0, size_t{1} << 20);
  ASSERT_TRUE(arena.ok()) << arena.status();
  DeviceArena& a = **arena;
  EXPECT_EQ(a.capacity(), size_t{1} << 20);
  auto first = a.Take(100, "first");
  auto second = a.Take(1000, "second");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*first) % 256, 0u);
  EXPECT_EQ(*second - *first, 256);
  EXPECT_EQ(a.used(), 1256u);
  EXPECT_EQ(a.available(), (size_t{1} << 20) - 1280);
  auto big = a.Take(size_t{1} << 20, "too big");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("too big"), std::string::npos) << big.status();
  EXPECT_EQ(a.used(), 1256u);  // a refused Take changes nothing
  auto rest = a.Take(a.available(), "the rest");
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(a.available(), 0u);
  EXPECT_EQ(a.Take(1, "one more").status().code(), absl::StatusCode::kResourceExhausted);
}

// The worker's layout: the CUDA ops take their two blocks, the decoder fits
// its positions into what is left; nothing else is allocated from it.
TEST(DeviceArenaTest, CudaOpsAndDecoderShareOneArena) {
  auto arena = DeviceArena::Create(0, size_t{256} << 20);
  ASSERT_TRUE(arena.ok()) << arena.status();
  const Checkpoint& ckpt = TinyCheckpoint(11);
  ModelOptions options;
  CudaOpsOptions ops_options{.arena_bytes = size_t{32} << 20, .weight_bytes = size_t{64} << 20};
  ops_options.memory = *arena;
  options.make_ops = [&](ActivationPrecision p) -> absl::StatusOr<std::unique_ptr<Ops>> {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaOps> ops, CudaOps::Create(p, ops_options));
    return std::unique_ptr<Ops>(std::move(ops));
  };
  auto model = Model::Create(ckpt.config(), ckpt, std::move(options));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_GE((*arena)->used(), size_t{96} << 20);
  const size_t left = (*arena)->available();
  DeviceDecoderOptions dd_options{.max_sequences = 64, .max_positions = 1 << 20};
  dd_options.memory = *arena;
  auto dd = DeviceDecoder::Create(**model, ActivationPrecision::kBf16, dd_options);
  ASSERT_TRUE(dd.ok()) << dd.status();
  EXPECT_LE((*dd)->stats().arena_bytes, left);
  EXPECT_LT((*dd)->options().max_positions, 1 << 20);  // lowered to fit
  EXPECT_GT((*dd)->options().max_positions, 64);
  // Prefill on the CUDA ops, decode on the decoder, same arena.
  auto state = (*model)->NewSequence();
  ASSERT_TRUE((*model)->Forward(*state, RandomTokens(9, 4), 0).ok());
  ASSERT_TRUE((*dd)->Import(0, *state).ok());
  const int slot[] = {0};
  const int64_t token[] = {5};
  auto got = (*dd)->Step(slot, token);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = (*model)->Forward(*state, token, 9);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(*got, *want);
  // Another user sized past what is left is refused.
  DeviceDecoderOptions more{.max_sequences = 64, .max_positions = 1 << 20,
                            .arena_budget_bytes = size_t{1} << 40};
  more.memory = *arena;
  EXPECT_EQ(DeviceDecoder::Create(**model, ActivationPrecision::kBf16, more).status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace weir::model
