#include "coordinator/kv_capacity.h"

#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

WorkerKvCapacity Worker(int64_t blocks, int32_t slots) {
  return {.block_tokens = 64, .compress_ratios = {2, 2, 1}, .num_blocks = blocks,
          .num_seq_slots = slots, .block_bytes = 98304, .slot_bytes = 1000};
}

TEST(KvCapacityTest, TheLayoutIsTheSmallestRanksPool) {
  absl::StatusOr<scheduler::KvLayout> layout =
      ClusterKvLayout({Worker(500, 64), Worker(420, 256), Worker(800, 32)}, 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->block_tokens, 64);
  EXPECT_EQ(layout->compress_ratios, (std::vector<int32_t>{2, 2, 1}));
  EXPECT_EQ(layout->num_blocks, 420);
  EXPECT_EQ(layout->num_seq_slots, 32);
}

TEST(KvCapacityTest, CapsOnlyLower) {
  const std::vector<WorkerKvCapacity> workers = {Worker(500, 64)};
  EXPECT_EQ(ClusterKvLayout(workers, 64, {.max_blocks = 8})->num_blocks, 8);
  EXPECT_EQ(ClusterKvLayout(workers, 64, {.max_blocks = 9000})->num_blocks, 500);
  EXPECT_EQ(ClusterKvLayout(workers, 64, {.max_seq_slots = 16})->num_seq_slots, 16);
  EXPECT_EQ(ClusterKvLayout(workers, 64, {.max_seq_slots = 1000})->num_seq_slots, 64);
  // Huge pools are clamped to what a block id can name.
  EXPECT_EQ(ClusterKvLayout({Worker(int64_t{1} << 40, 4)}, 0)->num_blocks, (int64_t{1} << 31) - 1);
}

TEST(KvCapacityTest, DisagreeingOrSilentWorkersAreRefused) {
  EXPECT_EQ(ClusterKvLayout({}, 64).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ClusterKvLayout({Worker(10, 4), WorkerKvCapacity{}}, 64).status().code(),
            absl::StatusCode::kFailedPrecondition);
  WorkerKvCapacity other = Worker(10, 4);
  other.block_tokens = 32;
  absl::Status size = ClusterKvLayout({Worker(10, 4), other}, 0).status();
  EXPECT_EQ(size.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(size.message().find("worker rank 1"), std::string::npos) << size;
  EXPECT_EQ(ClusterKvLayout({Worker(10, 4)}, 16).status().code(),
            absl::StatusCode::kFailedPrecondition);
  other = Worker(10, 4);
  other.compress_ratios = {4};
  EXPECT_EQ(ClusterKvLayout({Worker(10, 4), other}, 64).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A model without compressed KV: no blocks needed, none reported.
  WorkerKvCapacity swa{.block_tokens = 64, .num_seq_slots = 8};
  absl::StatusOr<scheduler::KvLayout> layout = ClusterKvLayout({swa}, 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->num_blocks, 0);
  EXPECT_TRUE(layout->compress_ratios.empty());
}

}  // namespace
}  // namespace weir::coordinator
