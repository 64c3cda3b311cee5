// The step executor over a paged KV pool: sequences whose compressed KV lives
// only in the blocks the plans assign give the outcomes of the executor
// without a pool (the engine before paging) token for token and logit for
// logit, through chunked prefill, decode with remap, finishes, preemption
// and restart, blocks moving between slots inside one plan, and a decode
// backend that imports and exports through the blocks. Plans with bad blocks
// are refused whole.

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <optional>
#include <random>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "worker/kv_cache/block_pool.h"
#include "worker/kv_cache/kv_cache_layout.h"
#include "worker/model/host_decode_backend.h"
#include "worker/step_executor_test_util.h"
#include "worker/step_executor.h"

namespace weir::worker {
namespace {

constexpr int32_t kBlockTokens = 8;

struct Fixture : TinyModelFixture {
  kv_cache::KvCacheLayout layout;

  Fixture() : TinyModelFixture(/*seed=*/3) {
    auto made = kv_cache::MakeKvCacheLayout(model->config(), model->roles(), kBlockTokens);
    EXPECT_TRUE(made.ok()) << made.status();
    layout = *made;
  }

  std::unique_ptr<kv_cache::BlockPool> Pool(int64_t blocks) const {
    auto pool = kv_cache::BlockPool::Create(layout, blocks);
    EXPECT_TRUE(pool.ok()) << pool.status();
    return std::move(*pool);
  }
};

RowPlan Row(int32_t slot, int64_t start, std::vector<int64_t> tokens,
            std::vector<int32_t> blocks = {}, int32_t remap = -1) {
  RowPlan row{.slot = slot, .start_pos = start, .tokens = std::move(tokens), .remap = remap,
              .sample = true, .return_top_k = 3};
  row.sampling.temperature = 0.0f;
  for (int32_t b : blocks) row.new_blocks.push_back(BlockId(b));
  return row;
}

void ExpectSame(const std::vector<RowOutcome>& a, const std::vector<RowOutcome>& b, int step) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].status.ok()) << a[i].status;
    ASSERT_TRUE(b[i].status.ok()) << b[i].status;
    ASSERT_EQ(a[i].token, b[i].token) << "step " << step << " row " << i;
    ASSERT_EQ(a[i].top_ids, b[i].top_ids) << "step " << step << " row " << i;
    ASSERT_EQ(a[i].top_logits.size(), b[i].top_logits.size());
    ASSERT_EQ(std::memcmp(a[i].top_logits.data(), b[i].top_logits.data(),
                          a[i].top_logits.size() * sizeof(float)),
              0)
        << "step " << step << " row " << i;
  }
}

TEST(StepExecutorKvTest, PagedSequencesMatchTheEngineTokenForToken) {
  Fixture f;
  constexpr int32_t kSlots = 6;
  constexpr int32_t kBlocks = 24;
  auto pool = f.Pool(kBlocks);
  StepExecutor engine(*f.model, kSlots), paged(*f.model, kSlots);
  paged.SetKvCache(pool.get());
  // A third executor as a GPU worker runs: prompt chunks and decode on a
  // backend of several rows a slot (device-resident prefill; HostDecodeBackend
  // stands in for the DeviceDecoder), over a pool of its own.
  auto device_pool = f.Pool(kBlocks);
  model::HostDecodeBackend backend(*f.model, kSlots, /*max_batch=*/8, /*max_positions=*/4096,
                                   /*collective=*/false, /*max_rows_per_slot=*/5);
  // It takes the worker's block tables, as a DeviceDecoder with external
  // tables does, and checks them: each slot's table covers every row it
  // steps, no block is in two tables.
  backend.ExpectBlockTables(kBlockTokens, kBlocks);
  StepExecutor on_device(*f.model, kSlots);
  on_device.SetKvCache(device_pool.get());
  on_device.SetDecodeBackend(&backend);

  std::mt19937_64 rng(17);
  std::vector<int32_t> free_blocks(kBlocks);
  for (int32_t b = 0; b < kBlocks; ++b) free_blocks[b] = b;
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);  // tables are not contiguous
  struct Seq {
    std::vector<int64_t> tokens;  // prompt, then every sampled token
    int64_t prompt_len = 0;
    int64_t scheduled = 0;        // positions sent to the executors
    std::vector<BlockId> blocks;  // the table the plans built
    int32_t sampled_row = -1;     // its sampling row of the previous step
  };
  std::vector<std::optional<Seq>> slots(kSlots);
  std::deque<std::vector<int64_t>> waiting;
  auto random_prompt = [&] {
    std::vector<int64_t> p(1 + rng() % 30);
    for (int64_t& t : p) t = static_cast<int64_t>(3 + rng() % 4000);
    return p;
  };
  for (int i = 0; i < 4; ++i) waiting.push_back(random_prompt());
  int64_t sampled = 0, finishes = 0, restarts = 0, moved_in_plan = 0, waits = 0;
  for (int step = 0; step < 70; ++step) {
    std::vector<int32_t> release;
    absl::flat_hash_set<int32_t> freed_now;
    auto drop = [&](int32_t s) {
      release.push_back(s);
      for (BlockId b : slots[s]->blocks) {
        free_blocks.push_back(b.value());  // reused first (LIFO), maybe in this plan
        freed_now.insert(b.value());
      }
      slots[s].reset();
    };
    for (int32_t s = 0; s < kSlots; ++s) {
      if (!slots[s].has_value() || slots[s]->scheduled < slots[s]->prompt_len) continue;
      const uint64_t r = rng() % 12;
      if (r == 0) {  // finished
        drop(s);
        ++finishes;
      } else if (r == 1) {  // preempted: recomputed later from its whole history
        waiting.push_front(slots[s]->tokens);
        drop(s);
        ++restarts;
      }
    }
    if (rng() % 3 == 0) waiting.push_back(random_prompt());
    for (int32_t s = 0; s < kSlots && !waiting.empty(); ++s) {
      if (slots[s].has_value()) continue;
      slots[s] = Seq{.tokens = waiting.front(),
                     .prompt_len = static_cast<int64_t>(waiting.front().size())};
      waiting.pop_front();
    }
    std::vector<RowPlan> rows;
    std::vector<int32_t> row_slot;
    for (int32_t s = 0; s < kSlots; ++s) {
      if (!slots[s].has_value()) continue;
      Seq& seq = *slots[s];
      const bool prefill = seq.scheduled < seq.prompt_len;
      const int64_t n =
          prefill ? std::min<int64_t>(seq.prompt_len - seq.scheduled, 1 + rng() % 12) : 1;
      const int64_t end = seq.scheduled + n;
      const int64_t need = kv_cache::BlocksForPositions(f.layout, end) -
                           static_cast<int64_t>(seq.blocks.size());
      if (need > static_cast<int64_t>(free_blocks.size())) {
        seq.sampled_row = -1;
        ++waits;  // no blocks this step: the sequence waits
        continue;
      }
      RowPlan row = Row(s, seq.scheduled, {});
      row.sample = end >= seq.prompt_len;
      for (int64_t k = 0; k < need; ++k) {
        const int32_t b = free_blocks.back();
        free_blocks.pop_back();
        moved_in_plan += freed_now.contains(b);
        row.new_blocks.push_back(BlockId(b));
        seq.blocks.push_back(BlockId(b));
      }
      if (!prefill && seq.sampled_row >= 0 && rng() % 2 == 0) {
        row.remap = seq.sampled_row;  // zero-overhead: the worker fills it in
      } else {
        row.tokens.assign(seq.tokens.begin() + seq.scheduled, seq.tokens.begin() + end);
      }
      seq.scheduled = end;
      rows.push_back(std::move(row));
      row_slot.push_back(s);
    }
    auto a = engine.Execute(rows, release);
    auto b = paged.Execute(rows, release);
    auto c = on_device.Execute(rows, release);
    ASSERT_TRUE(a.ok()) << "step " << step << ": " << a.status();
    ASSERT_TRUE(b.ok()) << "step " << step << ": " << b.status();
    ASSERT_TRUE(c.ok()) << "step " << step << ": " << c.status();
    ExpectSame(*a, *b, step);
    ExpectSame(*a, *c, step);
    for (auto& seq : slots) {
      if (seq.has_value()) seq->sampled_row = -1;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      Seq& seq = *slots[row_slot[i]];
      if (!rows[i].sample) continue;
      seq.tokens.push_back(*(*b)[i].token);
      seq.sampled_row = static_cast<int32_t>(i);
      ++sampled;
    }
    // The worker's tables are the plans' tables; the pool holds exactly them.
    int64_t held = 0;
    for (int32_t s = 0; s < kSlots; ++s) {
      const std::vector<BlockId> want =
          slots[s].has_value() ? slots[s]->blocks : std::vector<BlockId>{};
      ASSERT_EQ(paged.block_table(s), want) << "step " << step << " slot " << s;
      ASSERT_EQ(on_device.block_table(s), want) << "step " << step << " slot " << s;
      if (backend.holds(s)) {  // the backend's table is the plans' table
        std::vector<BlockId> got;
        for (int32_t b : backend.table(s)) got.push_back(BlockId(b));
        ASSERT_EQ(got, want) << "step " << step << " slot " << s;
      }
      held += static_cast<int64_t>(want.size());
    }
    ASSERT_EQ(pool->num_used(), held) << "step " << step;
    ASSERT_TRUE(pool->VerifyAccounting().ok());
    ASSERT_EQ(device_pool->num_used(), held) << "step " << step;
  }
  std::vector<int32_t> all;
  for (int32_t s = 0; s < kSlots; ++s) all.push_back(s);
  ASSERT_TRUE(paged.Execute({}, all).ok());
  EXPECT_EQ(pool->num_used(), 0);
  std::cout << sampled << " tokens, " << finishes << " finished, " << restarts
            << " restarted, " << moved_in_plan << " blocks moved inside a plan, " << waits
            << " waits\n";
  EXPECT_GT(sampled, 150);
  EXPECT_GT(finishes, 3);
  EXPECT_GT(restarts, 3);
  EXPECT_GT(moved_in_plan, 0);
  EXPECT_GT(waits, 0);
  // Prompts (and their restarts) began on the backend and stayed there.
  std::cout << on_device.device_rows() << " positions on the backend, "
            << on_device.device_prefill_rows() << " of them prompt chunks, "
            << backend.stats().starts << " sequences started there, " << backend.stats().table_sets
            << " block tables set\n";
  EXPECT_GT(on_device.device_prefill_rows(), 100);
  EXPECT_GT(backend.stats().starts, 8);
  EXPECT_GT(backend.stats().table_sets, backend.stats().starts);
}

TEST(StepExecutorKvTest, RowsWithBadBlocksFailAlone) {
  Fixture f;
  auto pool = f.Pool(6);
  StepExecutor executor(*f.model, 3);
  executor.SetKvCache(pool.get());
  // Slot 0 holds blocks 0 and 1 (9 positions at 8 a block).
  ASSERT_TRUE(executor.Execute({Row(0, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 1})}, {}).ok());
  const std::vector<std::vector<RowPlan>> bad = {
      {Row(1, 0, {1}, {6})},                         // foreign: outside the pool
      {Row(1, 0, {1}, {-1})},                        // foreign: negative
      {Row(1, 0, {1}, {1})},                         // still held by slot 0
      {Row(0, 9, {1}, {0})},                         // slot 0 given its own block again
      {Row(1, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {2})},  // 9 positions need 2 blocks
      {Row(1, 0, {1})},                              // no block at all
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto result = executor.Execute(bad[i], {});
    ASSERT_TRUE(result.ok()) << i << ": " << result.status();
    EXPECT_EQ(FirstError(result).code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_EQ(pool->num_used(), 2) << i;
  }
  EXPECT_EQ(executor.used_slots(), 1);
  // A block given twice in one plan: the second row fails alone, the first
  // runs and holds it (released again at once).
  auto twice = executor.Execute({Row(1, 0, {1}, {2}), Row(2, 0, {1}, {2})}, {});
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_TRUE((*twice)[0].status.ok()) << (*twice)[0].status;
  EXPECT_EQ((*twice)[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->num_used(), 3);
  ASSERT_TRUE(executor.Execute({}, {1}).ok());
  EXPECT_EQ(pool->num_used(), 2);
  // Slot 0 goes on where it was, growing into block 2 at position 16.
  std::vector<int64_t> seven(7, 11);
  auto next = executor.Execute({Row(0, 9, seven)}, {});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(FirstError(executor.Execute({Row(0, 16, {12})}, {})).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(executor.Execute({Row(0, 16, {12}, {2})}, {}).ok());
  EXPECT_EQ(executor.block_table(0), (std::vector<BlockId>{BlockId(0), BlockId(1), BlockId(2)}));
}

TEST(StepExecutorKvTest, ReleasedAndRestartedSlotsHandTheirBlocksOnInTheSamePlan) {
  Fixture f;
  auto pool = f.Pool(4);
  StepExecutor executor(*f.model, 3);
  executor.SetKvCache(pool.get());
  ASSERT_TRUE(executor.Execute({Row(0, 0, {5, 6, 7}, {3}), Row(1, 0, {8, 9}, {2})}, {}).ok());
  // Slot 0 is released and its block goes to slot 2; slot 1 restarts
  // (position 0 again) and takes its own old block back.
  auto moved = executor.Execute({Row(2, 0, {5, 6, 7}, {3}), Row(1, 0, {8, 9}, {2})}, {0});
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(pool->owner(BlockId(3)), SeqSlot(2));
  EXPECT_EQ(pool->owner(BlockId(2)), SeqSlot(1));
  EXPECT_EQ(pool->num_used(), 2);
  EXPECT_TRUE(executor.block_table(0).empty());
  // Without the release the block would be double-owned.
  EXPECT_EQ(FirstError(executor.Execute({Row(0, 0, {1}, {3})}, {})).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StepExecutorKvTest, DecodeBackendImportsAndExportsThroughTheBlocks) {
  Fixture f;
  auto pool = f.Pool(16);
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/2,
                                   /*max_positions=*/64);
  StepExecutor engine(*f.model, 4), dev(*f.model, 4);
  dev.SetKvCache(pool.get());
  dev.SetDecodeBackend(&backend);
  int steps = 0;
  auto both = [&](const std::vector<RowPlan>& rows, const std::vector<int32_t>& release) {
    auto a = engine.Execute(rows, release);
    auto b = dev.Execute(rows, release);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ExpectSame(*a, *b, steps++);
  };
  both({Row(0, 0, {5, 6, 7, 8, 9, 10}, {4}), Row(1, 0, {11, 12, 13}, {9})}, {});
  int64_t len[2] = {6, 3};
  int32_t next_block = 10;
  // A row of `n` tokens on `slot`, with the block it needs when it crosses
  // into a new one (tiny's ratio-1 layer needs one block per 8 positions).
  auto row = [&](int32_t slot, std::vector<int64_t> tokens, int32_t remap = -1) {
    const int64_t n = static_cast<int64_t>(tokens.size()) + (remap >= 0 ? 1 : 0);
    RowPlan r = Row(slot, len[slot], std::move(tokens), {}, remap);
    if ((len[slot] + n + kBlockTokens - 1) / kBlockTokens >
        static_cast<int64_t>(dev.block_table(slot).size())) {
      r.new_blocks.push_back(BlockId(next_block++));
    }
    len[slot] += n;
    return r;
  };
  for (int s = 0; s < 12; ++s) {  // decode on the backend; the tables keep growing
    std::vector<RowPlan> rows = {row(0, {}, 0), row(1, {}, 1)};
    both(rows, {});
  }
  EXPECT_GT(dev.device_rows(), 0);
  EXPECT_EQ(backend.stats().imports, 2);
  EXPECT_GT(next_block, 12);
  // Four tokens on slot 0: its sequence comes back through its blocks.
  {
    std::vector<RowPlan> rows = {row(0, {21, 22, 23, 24}), row(1, {}, 1)};
    both(rows, {});
  }
  EXPECT_EQ(backend.stats().exports, 1);
  {
    std::vector<RowPlan> rows = {row(0, {}, 0), row(1, {}, 1)};
    both(rows, {});
  }
  both({}, {0, 1});
  EXPECT_EQ(pool->num_used(), 0);
}

}  // namespace
}  // namespace weir::worker
