// StepExecutor with a DeviceDecoder against the same executor without one
// (GPU machine only; tag gpu). The model runs CpuOps with row-stable logits,
// so the decoder's logits are the model's bit for bit and every outcome
// (token, logprob, top-k logits) must be identical, through:
//   * prefills on the model, then decode rows (remapped and explicit) moving
//     each slot into the decoder;
//   * more decode rows in one plan than the decoder's max_batch (two
//     replays);
//   * a row of several tokens on a device-resident slot (Export back to the
//     model), then decoding on the device again (a second Import);
//   * a release and a new sequence in the freed slot, and a stochastic row
//     (seeded: the draw depends only on the logits, the seed and the position).
// The device executor keeps its compressed KV in a paged pool (blocks handed
// out here as a coordinator would), so Import / Export go through the block
// tables; the host executor keeps it in per-sequence vectors.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kv_cache/block_pool.h"
#include "worker/kv_cache/kv_cache_layout.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/device_decoder.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/step_executor.h"

namespace weir::worker {
namespace {

RowPlan Row(int32_t slot, int64_t start, std::vector<int64_t> tokens, int32_t remap = -1) {
  RowPlan row{.slot = slot, .start_pos = start, .tokens = std::move(tokens), .remap = remap,
              .sample = true, .return_top_k = 4};
  row.sampling.temperature = 0.0f;
  row.logprobs = 0;  // the sampler's logprob too (compared below)
  return row;
}

// The small model (weights of seed 5, generated under TEST_TMPDIR/`dir`) on
// CpuOps with row-stable logits, whose sequences roll back `max_rollback`
// positions (-1: ModelOptions' default).
struct RowStableSmall {
  RowStableSmall(const std::string& dir, int64_t max_rollback = -1) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    absl::StatusOr<std::unique_ptr<model::Checkpoint>> made = model::GenerateAndOpenCheckpoint(
        "models/small/config.json", std::string(tmp ? tmp : "/tmp") + "/" + dir, /*seed=*/5);
    EXPECT_TRUE(made.ok()) << made.status();
    if (!made.ok()) return;
    checkpoint = std::move(*made);
    model::ModelOptions options;
    options.max_rollback = max_rollback;
    options.make_ops =
        [](model::ActivationPrecision p) -> absl::StatusOr<std::unique_ptr<model::Ops>> {
      return std::unique_ptr<model::Ops>(new model::CpuOps(p, {.row_stable_logits = true}));
    };
    absl::StatusOr<std::unique_ptr<model::Model>> m =
        model::Model::Create(checkpoint->config(), *checkpoint, std::move(options));
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) model = std::move(*m);
  }
  std::unique_ptr<model::Checkpoint> checkpoint;
  std::unique_ptr<model::Model> model;  // null after a failure (a test failure)
};

TEST(StepExecutorGpuTest, DeviceDecodeGivesTheModelsOutcomes) {
  RowStableSmall small("small_exec");
  ASSERT_NE(small.model, nullptr);
  model::Model& net = *small.model;
  // The decoder pages its compressed KV by the executor's blocks (as a CUDA
  // worker's does): 64 blocks of 16 positions, the pool's.
  auto device = model::DeviceDecoder::Create(net, model::ActivationPrecision::kBf16,
                                             {.max_sequences = 4,
                                              .max_positions = 128,
                                              .kv_block_tokens = 16,
                                              .kv_blocks = 64,
                                              .external_block_tables = true,
                                              .max_batch = 2});
  ASSERT_TRUE(device.ok()) << device.status();
  // The pool outlives the executor whose block tables hold its blocks.
  auto layout = kv_cache::MakeKvCacheLayout(net.config(), net.roles(), /*block_tokens=*/16);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto pool = kv_cache::BlockPool::Create(*layout, 64);
  ASSERT_TRUE(pool.ok()) << pool.status();
  StepExecutor host(net, 4), dev(net, 4);
  dev.SetDecodeBackend(device->get());
  dev.SetKvCache(pool->get());
  std::vector<int32_t> free_blocks;
  for (int32_t b = 63; b >= 0; --b) free_blocks.push_back(b);
  std::vector<std::vector<int32_t>> tables(4);
  // The blocks each row needs, as a block manager would give them.
  auto assign = [&](std::vector<RowPlan> rows, const std::vector<int32_t>& release) {
    auto drop = [&](int32_t slot) {
      for (int32_t b : tables[slot]) free_blocks.push_back(b);
      tables[slot].clear();
    };
    for (int32_t slot : release) drop(slot);
    for (RowPlan& row : rows) {
      if (row.start_pos == 0) drop(row.slot);
      const int64_t end = row.start_pos + static_cast<int64_t>(row.tokens.size()) +
                          (row.remap >= 0 ? 1 : 0);
      while (static_cast<int64_t>(tables[row.slot].size()) <
             kv_cache::BlocksForPositions(*layout, end)) {
        tables[row.slot].push_back(free_blocks.back());
        row.new_blocks.push_back(BlockId(free_blocks.back()));
        free_blocks.pop_back();
      }
    }
    return rows;
  };

  int steps = 0, compared = 0;
  auto both = [&](const std::vector<RowPlan>& unassigned, const std::vector<int32_t>& release) {
    const std::vector<RowPlan> rows = assign(unassigned, release);
    auto a = host.Execute(rows, release);
    auto b = dev.Execute(rows, release);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      const RowOutcome &x = (*a)[i], &y = (*b)[i];
      ASSERT_TRUE(x.status.ok()) << x.status;
      ASSERT_TRUE(y.status.ok()) << y.status;
      EXPECT_EQ(x.token, y.token) << "step " << steps << " row " << i;
      EXPECT_EQ(std::memcmp(&x.logprob, &y.logprob, sizeof(float)), 0);
      EXPECT_EQ(x.top_ids, y.top_ids);
      ASSERT_EQ(x.top_logits.size(), y.top_logits.size());
      EXPECT_EQ(std::memcmp(x.top_logits.data(), y.top_logits.data(),
                            x.top_logits.size() * sizeof(float)),
                0)
          << "step " << steps << " row " << i;
      ++compared;
    }
    ++steps;
  };
  // Prefills (on the model in both).
  both({Row(0, 0, {5, 6, 7, 8, 9, 10}), Row(1, 0, {11, 12, 13}), Row(2, 0, {14})}, {});
  int64_t len[3] = {6, 3, 1};
  // Decode: three rows, max_batch 2 (two replays per step).
  for (int s = 0; s < 8; ++s) {
    std::vector<RowPlan> rows;
    for (int r = 0; r < 3; ++r) rows.push_back(Row(r, len[r], {}, /*remap=*/r));
    both(rows, {});
    for (int64_t& l : len) ++l;
  }
  EXPECT_GT(dev.device_rows(), 0);
  const int64_t before_export = dev.device_rows();
  // Slot 2: three tokens (its sequence comes back to the model), the others decode.
  both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {}, 2)}, {});
  for (int64_t& l : len) ++l;
  {
    RowPlan multi = Row(2, len[2], {21, 22, 23});
    both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), multi}, {});
    len[0]++;
    len[1]++;
    len[2] += 3;
  }
  EXPECT_EQ(dev.device_rows(), before_export + 3 + 2);
  // Slot 2 decodes on the device again (remap to its sample: row 2 of the last step).
  for (int s = 0; s < 6; ++s) {
    std::vector<RowPlan> rows;
    for (int r = 0; r < 3; ++r) rows.push_back(Row(r, len[r], {}, r));
    both(rows, {});
    for (int64_t& l : len) ++l;
  }
  // Release slot 1 and start a new sequence there; a seeded stochastic row on slot 0.
  both({Row(1, 0, {30, 31, 32, 33})}, {1});
  len[1] = 4;
  for (int s = 0; s < 6; ++s) {
    RowPlan r0 = Row(0, len[0], {}, s == 0 ? -1 : 0);
    if (s == 0) r0.tokens = {40};
    r0.sampling.temperature = 0.8f;
    r0.sampling.seed = 1234;
    RowPlan r1 = Row(1, len[1], {}, s == 0 ? 0 : 1);
    both({r0, r1}, {});
    ++len[0];
    ++len[1];
  }
  std::printf("%d steps, %d rows compared, %lld rows decoded on the device\n", steps, compared,
              static_cast<long long>(dev.device_rows()));
  EXPECT_GT(dev.device_rows(), 50);
  int64_t held = 0;
  for (const std::vector<int32_t>& table : tables) held += static_cast<int64_t>(table.size());
  EXPECT_EQ((*pool)->num_used(), held);
}

// Prompt lookup alone (`--speculative=ngram`'s workers): a decoder that rolls
// back but does not draft takes the speculative rows, each verification one
// run of the token and its lookup drafts, the rejected ones rolled back on
// the device. Rows asked to repeat themselves (a negative presence penalty, a
// repetition penalty below 1) so that lookups match and are accepted; the
// outcomes equal the executor's without a decoder, bit for bit.
TEST(StepExecutorGpuTest, LookupAloneVerifiesOnADecoderThatDoesNotDraft) {
  constexpr int32_t kLookup = 4;
  RowStableSmall small("small_lookup", /*max_rollback=*/kLookup);
  ASSERT_NE(small.model, nullptr);
  model::Model& net = *small.model;
  auto device = model::DeviceDecoder::Create(net, model::ActivationPrecision::kBf16,
                                             {.max_sequences = 2,
                                              .max_positions = 128,
                                              .kv_block_tokens = 16,
                                              .kv_blocks = 16,
                                              .external_block_tables = true,
                                              .max_rollback = kLookup,
                                              .max_batch = 2 * (kLookup + 1),
                                              .max_rows_per_slot = kLookup + 1});
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_FALSE((*device)->drafts());
  auto layout = kv_cache::MakeKvCacheLayout(net.config(), net.roles(), /*block_tokens=*/16);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto pool = kv_cache::BlockPool::Create(*layout, 16);
  ASSERT_TRUE(pool.ok()) << pool.status();
  StepExecutor host(net, 2), dev(net, 2);
  dev.SetDecodeBackend(device->get());
  dev.SetKvCache(pool->get());
  for (StepExecutor* ex : {&host, &dev}) ASSERT_TRUE(ex->SetNgramLookup(1, kLookup).ok());
  sampling::SamplingParams params;
  params.temperature = 0.0f;
  params.presence_penalty = -2.0f;
  params.repetition_penalty = 0.5f;
  const std::vector<int64_t> prompts[] = {{5, 9, 300, 14, 2, 77, 1000, 31, 8}, {3000, 12, 12, 400}};
  std::vector<RowPlan> rows;
  for (int32_t s = 0; s < 2; ++s) {
    RowPlan row{.slot = s, .start_pos = 0, .tokens = prompts[s], .sample = true,
                .sampling = params, .draft_tokens = kLookup};
    // Each slot gets its 8 blocks (128 positions) with its prompt.
    for (int b = 0; b < 8; ++b) row.new_blocks.push_back(BlockId(s * 8 + b));
    rows.push_back(std::move(row));
  }
  int64_t emitted = 0, accepted = 0;
  for (int step = 0; step < 40; ++step) {
    auto a = host.Execute(rows, {});
    auto b = dev.Execute(rows, {});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    for (int32_t s = 0; s < 2; ++s) {
      const RowOutcome &x = (*a)[s], &y = (*b)[s];
      ASSERT_TRUE(x.status.ok()) << x.status;
      ASSERT_TRUE(y.status.ok()) << y.status;
      EXPECT_EQ(x.accepted, y.accepted) << "step " << step << " slot " << s;
      EXPECT_EQ(x.token, y.token) << "step " << step << " slot " << s;
      EXPECT_EQ(x.verified_drafts, y.verified_drafts);
      emitted += static_cast<int64_t>(y.accepted.size()) + 1;
      accepted += static_cast<int64_t>(y.accepted.size());
      rows[s] = {.slot = s, .start_pos = static_cast<int64_t>(prompts[s].size()), .remap = s,
                 .sample = true, .sampling = params, .draft_tokens = kLookup};
    }
    if (emitted > 2 * 100) break;  // stay inside 128 positions a slot
  }
  std::printf("lookup alone on the decoder: %lld tokens, %lld accepted drafts, %lld lookups, "
              "%lld rows on the device\n",
              static_cast<long long>(emitted), static_cast<long long>(accepted),
              static_cast<long long>(dev.lookup_drafts()),
              static_cast<long long>(dev.device_rows()));
  EXPECT_EQ(dev.drafts_accepted(), host.drafts_accepted());
  EXPECT_GT(dev.lookup_drafts(), 0);
  EXPECT_GT(accepted, 0);
  EXPECT_GT(dev.device_rows(), 20);
}

}  // namespace
}  // namespace weir::worker
