// Speculative rows of the step executor (DSpark draft and verify) on the
// tiny model with random weights, over a paged KV pool: two sequences decode
// side by side with zero-overhead remaps; whatever the drafts (the model's
// own, mostly rejected, or injected: the plain continuation with k of them
// right), the tokens emitted equal plain decoding's, greedy and seeded
// sampling alike, and with the verify length chosen per row from the
// drafts' confidences (SetVerifyCostCurve) as with the fixed one; on a
// drafting backend, and on the collective drafting backends of an
// expert-parallel group. On the trained tiny, rows drafted together draft as
// they would alone.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/kv_cache/block_pool.h"
#include "worker/kv_cache/kv_cache_layout.h"
#include "worker/model/host_decode_backend.h"
#include "worker/step_executor.h"
#include "worker/step_executor_test_util.h"

namespace weir::worker {
namespace {

constexpr int32_t kBlockTokens = 8;
constexpr int32_t kDrafts = 4;
constexpr size_t kOutput = 28;

// The random-weight tiny (models/random/tiny), whatever models/tiny holds.
const model::Checkpoint* RandomTiny() {
  return model::DerivedCheckpoint("random/tiny", "random_tiny_seed5", {}, 5);
}

// The same without DSpark stages (a model prompt lookup alone serves).
const model::Checkpoint* RandomTinyWithoutStages() {
  return model::DerivedCheckpoint(
      "random/tiny", "random_tiny_no_stages_seed5",
      {{"\"num_nextn_predict_layers\": 3", "\"num_nextn_predict_layers\": 0"},
       {"[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0]", "[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1]"}},
      5);
}

struct Fixture {
  const model::Checkpoint* checkpoint;
  std::unique_ptr<model::Model> model;

  // `max_rollback`: ModelOptions' (-1: its default).
  explicit Fixture(const model::Checkpoint* from = RandomTiny(), int64_t max_rollback = -1)
      : checkpoint(from) {
    if (checkpoint == nullptr) return;
    model::ModelOptions options;
    options.max_rollback = max_rollback;
    model = model::NewModelOrFail(*checkpoint, std::move(options));
    if (model == nullptr) return;
    auto made = kv_cache::MakeKvCacheLayout(model->config(), model->roles(), kBlockTokens);
    EXPECT_TRUE(made.ok()) << made.status();
    auto p = kv_cache::BlockPool::Create(*made, 64);
    EXPECT_TRUE(p.ok()) << p.status();
    pool = std::move(*p);
  }
  std::unique_ptr<kv_cache::BlockPool> pool;
};

const std::vector<int64_t> kPrompts[] = {{5, 9, 300, 14, 2, 77, 1000, 31, 8},
                                         {3000, 12, 12, 400, 5, 6, 71}};

// Every row of slot s holds 24 blocks: positions 0..191, enough for any row.
std::vector<BlockId> BlocksOf(int32_t slot) {
  std::vector<BlockId> blocks;
  for (int b = 0; b < 24; ++b) blocks.push_back(BlockId(slot * 24 + b));
  return blocks;
}

// Plain decoding of both prompts, one token a step, zero-overhead remaps.
std::vector<std::vector<int64_t>> Plain(model::Model& model, kv_cache::BlockPool& pool,
                                        const sampling::SamplingParams& params) {
  StepExecutor ex(model, 4);
  ex.SetKvCache(&pool);
  std::vector<RowPlan> rows;
  for (int32_t s = 0; s < 2; ++s) {
    rows.push_back({.slot = s, .start_pos = 0, .tokens = kPrompts[s], .sample = true,
                    .sampling = params, .new_blocks = BlocksOf(s)});
  }
  std::vector<std::vector<int64_t>> out(2);
  while (out[0].size() < kOutput) {
    absl::StatusOr<std::vector<RowOutcome>> r = ex.Execute(rows, {});
    EXPECT_TRUE(FirstError(r).ok()) << FirstError(r);
    if (!r.ok()) return out;
    for (int32_t s = 0; s < 2; ++s) {
      if ((*r)[s].token.has_value()) out[s].push_back(*(*r)[s].token);
      rows[s] = {.slot = s, .start_pos = rows[s].start_pos + (rows[s].start_pos == 0
                                                                  ? static_cast<int64_t>(
                                                                        kPrompts[s].size())
                                                                  : 1),
                 .remap = s, .sample = true, .sampling = params};
    }
  }
  return out;
}

enum class Drafts { kModel, kInjected };

// Speculative decoding of the same prompts; with kInjected, slot s's drafts
// before each step are `reference`'s continuation with a varying number of
// them right (then one wrong). With `curve`, rows verify as many drafts as
// ChooseVerifyLength picks; injected drafts then carry confidences that make
// it pick 0..kDrafts of them in turn (checked), and `lengths` gets every
// row's verified drafts. `max_batch`: SetSpeculationMaxBatch (the steps here
// hold 2 speculative rows). `ngram`, `lookup_tokens`: SetNgramLookup (the
// rows' draft_tokens then max_draft_tokens()); `lookups` gets the blocks
// from lookup, `longest` the most drafts a row verified. `dspark_drafts`:
// SetSpeculation's (0: lookup alone); `lookup_max`: SetNgramLookup's
// longest match. Returns the tokens and the accepted drafts.
std::vector<std::vector<int64_t>> Speculative(
    model::Model& model, kv_cache::BlockPool& pool, const sampling::SamplingParams& params,
    Drafts drafts, const std::vector<std::vector<int64_t>>& reference, int64_t& accepted,
    const VerifyCostCurve* curve = nullptr, std::vector<int64_t>* lengths = nullptr,
    model::HostDecodeBackend* backend = nullptr, int64_t* paused = nullptr, int64_t max_batch = 0,
    int32_t ngram = 0, int64_t* lookups = nullptr, int32_t lookup_tokens = 0,
    int64_t* longest = nullptr, int32_t dspark_drafts = kDrafts, int32_t lookup_max = 0) {
  StepExecutor ex(model, 4);
  ex.SetKvCache(&pool);
  if (backend != nullptr) ex.SetDecodeBackend(backend);
  EXPECT_TRUE(ex.SetSpeculation(dspark_drafts).ok());
  ex.SetSpeculationMaxBatch(max_batch);
  EXPECT_TRUE(ex.SetNgramLookup(ngram, lookup_tokens, lookup_max).ok());
  // The plans' draft_tokens: what a row may verify.
  const int32_t row_drafts = ex.max_draft_tokens();
  if (longest != nullptr) *longest = 0;
  if (curve != nullptr) ex.SetVerifyCostCurve(*curve);
  // Per slot: the verify length its next row must choose (-1: any).
  std::vector<int64_t> expected_length = {-1, -1};
  std::vector<RowPlan> rows;
  for (int32_t s = 0; s < 2; ++s) {
    rows.push_back({.slot = s,
                    .start_pos = 0,
                    .tokens = kPrompts[s],
                    .sample = true,
                    .sampling = params,
                    .new_blocks = BlocksOf(s),
                    .draft_tokens = row_drafts});
  }
  std::vector<std::vector<int64_t>> out(2);
  accepted = 0;
  int64_t paused_rows = 0;  // rows that said their slot had paused drafting
  int64_t lookup_rows = 0;  // rows that verified prompt lookup drafts
  for (int step = 0; out[0].size() < kOutput || out[1].size() < kOutput; ++step) {
    absl::StatusOr<std::vector<RowOutcome>> r = ex.Execute(rows, {});
    EXPECT_TRUE(FirstError(r).ok()) << FirstError(r);
    if (!r.ok() || step > 100) return out;
    for (int32_t s = 0; s < 2; ++s) {
      const RowOutcome& o = (*r)[s];
      if (step > 0 && lengths != nullptr) lengths->push_back(o.verified_drafts);
      if (o.drafts_paused) {
        EXPECT_EQ(o.verified_drafts, 0);
        ++paused_rows;
      }
      if (o.lookup_drafts) {
        EXPECT_GT(o.verified_drafts, 0);
        ++lookup_rows;
      }
      if (expected_length[s] >= 0) {
        EXPECT_EQ(o.verified_drafts, expected_length[s]) << step;
      }
      EXPECT_LE(o.accepted.size(), static_cast<size_t>(o.verified_drafts));
      expected_length[s] = -1;
      EXPECT_EQ(o.accepted.size(), o.accepted_logprobs.size());
      EXPECT_LE(o.accepted.size(), static_cast<size_t>(row_drafts));
      if (longest != nullptr) *longest = std::max(*longest, o.verified_drafts);
      out[s].insert(out[s].end(), o.accepted.begin(), o.accepted.end());
      accepted += static_cast<int64_t>(o.accepted.size());
      if (o.token.has_value()) out[s].push_back(*o.token);
      // start_pos: only a lower bound (the prompt's end) is known ahead.
      rows[s] = {.slot = s,
                 .start_pos = static_cast<int64_t>(kPrompts[s].size()),
                 .remap = s,
                 .sample = true,
                 .sampling = params,
                 .draft_tokens = row_drafts};
      if (drafts == Drafts::kInjected && out[s].size() + kDrafts < reference[s].size()) {
        const int right = (step + s) % (kDrafts + 1);
        std::vector<int64_t> d(reference[s].begin() + out[s].size(),
                               reference[s].begin() + out[s].size() + kDrafts);
        if (right < kDrafts) d[right] = (d[right] + 1) % model.config().vocab_size;
        if (curve == nullptr) {
          ex.SetDraftsForTest(s, std::move(d));
        } else {
          // The first `sure` drafts near certain, the rest hopeless.
          const int sure = (step + 2 * s) % (kDrafts + 1);
          std::vector<float> confidence(kDrafts, -30.0f);
          std::fill(confidence.begin(), confidence.begin() + sure, 30.0f);
          ex.SetDraftsForTest(s, std::move(d), std::move(confidence));
          expected_length[s] = sure;
        }
      }
    }
  }
  if (max_batch == 0 || max_batch >= 2) {
    EXPECT_GT(ex.drafts_verified(), 0);
  }
  EXPECT_EQ(ex.drafts_accepted(), accepted);
  if (paused != nullptr) *paused = ex.drafts_paused();
  if (lookups != nullptr) *lookups = ex.lookup_drafts();
  // Without lookup no block came from it; with it, each block shows in the
  // slot's next row (the last ones may have no next row here).
  if (ngram == 0) {
    EXPECT_EQ(ex.lookup_drafts(), 0);
    EXPECT_EQ(lookup_rows, 0);
  } else {
    EXPECT_LE(lookup_rows, ex.lookup_drafts());
    // With a curve a weak match's drafts may all be left unverified.
    if (curve == nullptr) EXPECT_GE(lookup_rows, ex.lookup_drafts() - 2);
  }
  // Each skipped draft pass shows in the slot's next row (the last ones may
  // have no next row here).
  EXPECT_LE(paused_rows, ex.drafts_paused());
  EXPECT_GE(paused_rows, ex.drafts_paused() - 2);
  return out;
}

void ExpectPrefixEqual(const std::vector<std::vector<int64_t>>& spec,
                       const std::vector<std::vector<int64_t>>& plain) {
  for (int s = 0; s < 2; ++s) {
    ASSERT_GE(spec[s].size(), kOutput);
    ASSERT_GE(plain[s].size(), kOutput);
    EXPECT_EQ(std::vector<int64_t>(spec[s].begin(), spec[s].begin() + kOutput),
              std::vector<int64_t>(plain[s].begin(), plain[s].begin() + kOutput))
        << "sequence " << s;
  }
}

TEST(StepExecutorSpeculativeTest, GreedyRowsEmitThePlainTokens) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  const auto plain = Plain(*f.model, *f.pool, GreedySampling());
  int64_t accepted = 0;
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, GreedySampling(), Drafts::kModel, plain, accepted),
                    plain);
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, GreedySampling(), Drafts::kInjected, plain, accepted),
                    plain);
  EXPECT_GT(accepted, 20);  // the injected right drafts were taken
}

TEST(StepExecutorSpeculativeTest, SeededSampledRowsEmitThePlainTokens) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  const auto plain = Plain(*f.model, *f.pool, SeededSampling());
  int64_t accepted = 0;
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, SeededSampling(), Drafts::kModel, plain, accepted),
                    plain);
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, SeededSampling(), Drafts::kInjected, plain, accepted),
                    plain);
  EXPECT_GT(accepted, 20);
}

// A step costs 10 + (positions a row) ms at any batch size: a near-certain
// draft pays for itself, a hopeless one does not.
VerifyCostCurve CheapPositions() {
  VerifyCostCurve curve{.measured_on = "test", .backend = "cpu"};
  VerifyCostCurve::Point p{.batch = 2, .draft_ms = 1};
  for (int length = 1; length <= kDrafts + 1; ++length) p.step_ms.push_back(10 + length);
  curve.points.push_back(p);
  return curve;
}

TEST(StepExecutorSpeculativeTest, ConfidenceVerifyLengthEmitsThePlainTokens) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  const VerifyCostCurve curve = CheapPositions();
  for (const sampling::SamplingParams& params : {GreedySampling(), SeededSampling()}) {
    const auto plain = Plain(*f.model, *f.pool, params);
    int64_t accepted = 0;
    std::vector<int64_t> lengths;
    ExpectPrefixEqual(
        Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted, &curve, &lengths),
        plain);
    lengths.clear();
    ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kInjected, plain, accepted,
                                  &curve, &lengths),
                      plain);
    EXPECT_GT(accepted, 10);
    // Every length from none to all was chosen.
    for (int64_t k = 0; k <= kDrafts; ++k) {
      EXPECT_NE(std::find(lengths.begin(), lengths.end(), k), lengths.end()) << k;
    }
  }
}

// A draft pass that costs as much as 20 positions: the random model's drafts
// (almost all rejected) never pay for it, so after DraftPacer::kProbe
// verifications each row stops drafting (its next rows verify nothing) and
// retries after the pause; the tokens stay the plain ones. Injected drafts
// that are mostly right pay even for that pass, and no row pauses.
TEST(StepExecutorSpeculativeTest, RowsWhoseDraftsDoNotPayStopDrafting) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  VerifyCostCurve curve = CheapPositions();
  curve.points[0].draft_ms = 10;  // a step of 2 rows: 20 ms of drafting
  for (const sampling::SamplingParams& params : {GreedySampling(), SeededSampling()}) {
    const auto plain = Plain(*f.model, *f.pool, params);
    int64_t accepted = 0, paused = 0;
    std::vector<int64_t> lengths;
    ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted,
                                  &curve, &lengths, nullptr, &paused),
                      plain);
    // Each row drafted kProbe times, then paused for kFirstPause steps,
    // probed again (its means afresh) and paused for twice as long.
    EXPECT_GE(paused, 2 * DraftPacer::kFirstPause) << "paused draft passes";
    const int64_t verifying =
        std::count_if(lengths.begin(), lengths.end(), [](int64_t k) { return k > 0; });
    EXPECT_LE(verifying, 4 * DraftPacer::kProbe) << "rows that verified drafts";
  }
  // Injected drafts with the confidences that pick 0 .. 4 of them in turn
  // (about 2 verified, 1 + 1.2 tokens a verification for 13 + 6 ms of a
  // 2-row step against 11 plain) pay for a 3 ms pass.
  VerifyCostCurve cheaper = CheapPositions();
  cheaper.points[0].draft_ms = 3;
  const auto plain = Plain(*f.model, *f.pool, GreedySampling());
  int64_t accepted = 0, paused = -1;
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, GreedySampling(), Drafts::kInjected, plain,
                                accepted, nullptr, nullptr, nullptr, &paused),
                    plain);
  EXPECT_EQ(paused, 0);  // without a curve nothing pauses
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, GreedySampling(), Drafts::kInjected, plain,
                                accepted, &cheaper, nullptr, nullptr, &paused),
                    plain);
  EXPECT_GT(accepted, 20);
  // While drafts are injected every row verifies the length its confidences
  // pick (Speculative checks it), so none paused then; the model's own
  // drafts of the last steps (nothing injected past the reference) may.
  EXPECT_LT(paused, DraftPacer::kFirstPause);
}

// --speculative_max_batch: steps of more speculative rows than the limit draft
// nothing (their rows verify nothing and say so), the others as without one;
// the tokens are the plain ones either way.
TEST(StepExecutorSpeculativeTest, StepsOverTheBatchLimitDraftNothing) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  for (const sampling::SamplingParams& params : {GreedySampling(), SeededSampling()}) {
    const auto plain = Plain(*f.model, *f.pool, params);
    int64_t accepted = -1, paused = 0;
    std::vector<int64_t> lengths;
    ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted,
                                  nullptr, &lengths, nullptr, &paused, /*max_batch=*/1),
                      plain);
    EXPECT_EQ(accepted, 0);
    EXPECT_EQ(std::count(lengths.begin(), lengths.end(), 0), static_cast<int64_t>(lengths.size()));
    // Every row of every step after the first skipped its draft pass.
    EXPECT_GE(paused, static_cast<int64_t>(lengths.size()));
    lengths.clear();
    ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted,
                                  nullptr, &lengths, nullptr, &paused, /*max_batch=*/2),
                      plain);
    EXPECT_EQ(paused, 0);
    EXPECT_EQ(std::count(lengths.begin(), lengths.end(), kDrafts),
              static_cast<int64_t>(lengths.size()));
  }
}

// Prompt lookup (SetNgramLookup): a row whose last tokens occurred before
// takes what followed them as its drafts instead of a DSpark pass. The
// random tiny's text does not repeat itself, so the rows here ask for
// repetition (a negative presence penalty, a repetition penalty below 1:
// tokens seen before are favoured), and loop: lookups are taken, and
// accepted; the tokens are the plain ones, greedy and seeded alike.
TEST(StepExecutorSpeculativeTest, PromptLookupDraftsEmitThePlainTokens) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  for (sampling::SamplingParams params : {GreedySampling(), SeededSampling()}) {
    params.presence_penalty = -2.0f;
    params.repetition_penalty = 0.5f;
    params.temperature = std::min(params.temperature, 0.3f);
    const auto plain = Plain(*f.model, *f.pool, params);
    for (int32_t ngram : {1, 2}) {
      int64_t accepted = -1, lookups = -1;
      ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted,
                                    nullptr, nullptr, nullptr, nullptr, 0, ngram, &lookups),
                        plain);
      std::printf("ngram %d: %lld lookups, %lld drafts accepted\n", ngram,
                  static_cast<long long>(lookups), static_cast<long long>(accepted));
      EXPECT_GT(lookups, 0) << "ngram " << ngram;
      EXPECT_GT(accepted, 0) << "ngram " << ngram;
      // On a drafting backend (a CUDA worker's decoder): the same tokens and
      // acceptance, and a lookup row asks it for no draft pass.
      model::HostDecodeBackend backend(*f.model, 4, /*max_batch=*/8, /*max_positions=*/4096,
                                       /*collective=*/false, /*max_rows_per_slot=*/kDrafts + 1);
      backend.ExpectBlockTables(kBlockTokens, 64);
      backend.EnableDrafting(kDrafts);
      int64_t on_backend = -1, backend_lookups = -1;
      ExpectPrefixEqual(
          Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, on_backend, nullptr,
                      nullptr, &backend, nullptr, 0, ngram, &backend_lookups),
          plain);
      EXPECT_EQ(on_backend, accepted);
      EXPECT_EQ(backend_lookups, lookups);
      int64_t plain_drafts = -1;
      model::HostDecodeBackend without(*f.model, 4, /*max_batch=*/8, /*max_positions=*/4096,
                                       /*collective=*/false, /*max_rows_per_slot=*/kDrafts + 1);
      without.ExpectBlockTables(kBlockTokens, 64);
      without.EnableDrafting(kDrafts);
      Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, plain_drafts, nullptr, nullptr,
                  &without);
      EXPECT_LT(backend.stats().drafts, without.stats().drafts) << "ngram " << ngram;
    }
  }
}

// A lookup may propose more tokens than DSpark's block (SetNgramLookup's
// tokens, up to the sequences' rollback): rows then verify up to that many
// (the plans' draft_tokens are max_draft_tokens()), accept at least as many,
// and still emit the plain tokens; more than the rollback is refused.
TEST(StepExecutorSpeculativeTest, LongerLookupsVerifyMoreDrafts) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  const int32_t rollback = static_cast<int32_t>(f.model->NewSequence()->max_rollback());
  ASSERT_GT(rollback, kDrafts);
  sampling::SamplingParams params = GreedySampling();
  params.presence_penalty = -2.0f;
  params.repetition_penalty = 0.5f;
  const auto plain = Plain(*f.model, *f.pool, params);
  int64_t accepted = -1, lookups = -1, longest = -1;
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted, nullptr,
                                nullptr, nullptr, nullptr, 0, /*ngram=*/1, &lookups,
                                /*lookup_tokens=*/rollback, &longest),
                    plain);
  EXPECT_GT(lookups, 0);
  EXPECT_EQ(longest, rollback);  // some row verified a whole lookup
  int64_t short_accepted = -1, short_lookups = -1;
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, short_accepted,
                                nullptr, nullptr, nullptr, nullptr, 0, /*ngram=*/1, &short_lookups),
                    plain);
  EXPECT_GE(accepted, short_accepted);
  StepExecutor ex(*f.model, 2);
  EXPECT_EQ(ex.SetNgramLookup(1, rollback + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ex.SetNgramLookup(1, -1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ex.SetSpeculation(kDrafts).ok());
  EXPECT_EQ(ex.max_draft_tokens(), kDrafts);
  ASSERT_TRUE(ex.SetNgramLookup(1, rollback).ok());
  EXPECT_EQ(ex.max_draft_tokens(), rollback);
  ASSERT_TRUE(ex.SetNgramLookup(0, rollback).ok());  // lookup off: DSpark's alone
  EXPECT_EQ(ex.max_draft_tokens(), kDrafts);
}

// Prompt lookup alone (SetNgramLookup without SetSpeculation, the workers of
// `--speculative=ngram`) on a model without DSpark stages: rows that match
// verify the lookup's tokens, the others nothing, and the tokens are the
// plain ones, greedy and seeded. A backend that rolls back without drafting
// (a CUDA worker's decoder of this mode) takes the speculative rows and rolls
// back their rejected drafts; one that cannot roll back as many leaves them
// on the model, with the same tokens.
TEST(StepExecutorSpeculativeTest, PromptLookupAloneEmitsThePlainTokens) {
  constexpr int32_t kLookupTokens = 6;
  Fixture f(RandomTinyWithoutStages(), /*max_rollback=*/kLookupTokens);
  ASSERT_NE(f.model, nullptr);
  ASSERT_EQ(f.model->config().n_mtp_layers, 0);
  {
    StepExecutor ex(*f.model, 2);
    EXPECT_EQ(ex.SetSpeculation(kDrafts).code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(ex.SetNgramLookup(2, kLookupTokens).ok());
    EXPECT_EQ(ex.max_draft_tokens(), kLookupTokens);
    EXPECT_EQ(ex.SetNgramLookup(2, kLookupTokens + 1).code(), absl::StatusCode::kInvalidArgument);
    // The longest match: 0 (the match length alone) or in [match, 16].
    EXPECT_EQ(ex.SetNgramLookup(2, kLookupTokens, 1).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ex.SetNgramLookup(2, kLookupTokens, kMaxNgramMatch + 1).code(),
              absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(ex.SetNgramLookup(1, kLookupTokens, 4).ok());
    EXPECT_EQ(ex.ngram_lookup_max(), 4);
  }
  for (sampling::SamplingParams params : {GreedySampling(), SeededSampling()}) {
    params.presence_penalty = -2.0f;
    params.repetition_penalty = 0.5f;
    params.temperature = std::min(params.temperature, 0.3f);
    const auto plain = Plain(*f.model, *f.pool, params);
    int64_t accepted = -1, lookups = -1, longest = -1;
    ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted,
                                  nullptr, nullptr, nullptr, nullptr, 0, /*ngram=*/2, &lookups,
                                  kLookupTokens, &longest, /*dspark_drafts=*/0),
                      plain);
    EXPECT_GT(lookups, 0);
    EXPECT_GT(accepted, 0);
    EXPECT_EQ(longest, kLookupTokens);
    // Matches of 3 .. 1 tokens, the longest first: the plain tokens too.
    int64_t ranged_accepted = -1, ranged_lookups = -1;
    ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, ranged_accepted,
                                  nullptr, nullptr, nullptr, nullptr, 0,
                                  /*ngram=*/1, &ranged_lookups, kLookupTokens, nullptr,
                                  /*dspark_drafts=*/0, /*lookup_max=*/3),
                      plain);
    EXPECT_GT(ranged_lookups, 0);
    EXPECT_GT(ranged_accepted, 0);
    model::HostDecodeBackend backend(*f.model, 4, /*max_batch=*/16, /*max_positions=*/4096,
                                     /*collective=*/false,
                                     /*max_rows_per_slot=*/kLookupTokens + 1);
    backend.ExpectBlockTables(kBlockTokens, 64);
    backend.EnableRollback(kLookupTokens);
    ASSERT_FALSE(backend.drafts());
    int64_t on_backend = -1, backend_lookups = -1;
    ExpectPrefixEqual(
        Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, on_backend, nullptr, nullptr,
                    &backend, nullptr, 0, 2, &backend_lookups, kLookupTokens, nullptr, 0),
        plain);
    EXPECT_EQ(on_backend, accepted);
    EXPECT_EQ(backend_lookups, lookups);
    EXPECT_EQ(backend.stats().starts, 2);
    EXPECT_GT(backend.stats().rows, 2 * static_cast<int64_t>(kOutput));
    EXPECT_GT(backend.stats().rollbacks, 0);
    EXPECT_EQ(backend.stats().drafts, 0);
    // Rolling back fewer positions than a lookup verifies: rows stay on the
    // model, tokens unchanged.
    model::HostDecodeBackend shallow(*f.model, 4, 16, 4096, false, kLookupTokens + 1);
    shallow.ExpectBlockTables(kBlockTokens, 64);
    shallow.EnableRollback(kLookupTokens - 1);
    int64_t on_model = -1;
    ExpectPrefixEqual(
        Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, on_model, nullptr, nullptr,
                    &shallow, nullptr, 0, 2, nullptr, kLookupTokens, nullptr, 0),
        plain);
    EXPECT_EQ(on_model, accepted);
    EXPECT_EQ(shallow.stats().rows, 0);
  }
}

// Lookup alone with a cost curve (`--speculative=ngram
// --verify_length=confidence`): how many of a lookup's drafts a row verifies
// follows how far its match reaches (LookupDraftConfidence). Where a position
// costs half a plain step, a 1-token match's drafts are not worth verifying
// and a long match's all are: some lookups are verified, some not at all,
// and the tokens are the plain ones.
TEST(StepExecutorSpeculativeTest, LookupConfidenceFollowsTheMatch) {
  constexpr int32_t kLookupTokens = 6;
  Fixture f(RandomTinyWithoutStages(), /*max_rollback=*/kLookupTokens);
  ASSERT_NE(f.model, nullptr);
  VerifyCostCurve curve{.measured_on = "test", .backend = "cpu"};
  VerifyCostCurve::Point point{.batch = 2, .draft_ms = 0};
  for (int length = 1; length <= kLookupTokens + 1; ++length) {
    point.step_ms.push_back(1 + 0.5 * (length - 1));
  }
  curve.points.push_back(point);
  // Under it: verify every draft of a match of 6 or more, none of a 1-token one.
  std::vector<float> long_match, short_match;
  for (int j = 0; j < kLookupTokens; ++j) {
    long_match.push_back(LookupDraftConfidence(8, j));
    short_match.push_back(LookupDraftConfidence(1, j));
  }
  ASSERT_EQ(ChooseVerifyLength(long_match, kLookupTokens, curve, 2), kLookupTokens);
  ASSERT_EQ(ChooseVerifyLength(short_match, kLookupTokens, curve, 2), 0);
  sampling::SamplingParams params = GreedySampling();
  params.presence_penalty = -2.0f;
  params.repetition_penalty = 0.5f;
  const auto plain = Plain(*f.model, *f.pool, params);
  int64_t accepted = -1, lookups = -1;
  std::vector<int64_t> lengths;
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted, &curve,
                                &lengths, nullptr, nullptr, 0, /*ngram=*/1, &lookups, kLookupTokens,
                                nullptr, /*dspark_drafts=*/0, /*lookup_max=*/4),
                    plain);
  const int64_t verifying =
      std::count_if(lengths.begin(), lengths.end(), [](int64_t k) { return k > 0; });
  const int64_t whole = std::count(lengths.begin(), lengths.end(), kLookupTokens);
  std::printf("lookup confidence: %lld lookups, %lld verified (%lld whole), %lld accepted\n",
              static_cast<long long>(lookups), static_cast<long long>(verifying),
              static_cast<long long>(whole), static_cast<long long>(accepted));
  EXPECT_GT(verifying, 0);
  EXPECT_LT(verifying, lookups);
  EXPECT_GT(accepted, 0);
}

// Lookup drafts cost no draft pass: a pacer that has paused DSpark (its
// pass too dear under the curve) neither stops them nor learns from them;
// the cost curve still picks how many of them a row verifies.
TEST(StepExecutorSpeculativeTest, PausedDraftingStillTakesLookups) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  VerifyCostCurve curve = CheapPositions();
  curve.points[0].draft_ms = 10;  // DSpark's drafts never pay (RowsWhoseDraftsDoNotPay...)
  sampling::SamplingParams params = GreedySampling();
  params.presence_penalty = -2.0f;
  params.repetition_penalty = 0.5f;
  const auto plain = Plain(*f.model, *f.pool, params);
  int64_t accepted = -1, paused = -1, lookups = -1, alone_paused = -1;
  std::vector<int64_t> lengths, alone_lengths;
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, accepted, &curve,
                                &lengths, nullptr, &paused, 0, /*ngram=*/1, &lookups),
                    plain);
  int64_t alone_accepted = -1;
  ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, Drafts::kModel, plain, alone_accepted,
                                &curve, &alone_lengths, nullptr, &alone_paused),
                    plain);
  EXPECT_GE(alone_paused, 2 * DraftPacer::kFirstPause);
  EXPECT_GT(paused, 0);  // DSpark still paused
  EXPECT_GT(lookups, DraftPacer::kFirstPause);
  // Rows verified lookups through the pauses: more verifications than
  // DSpark's probes alone allow.
  const auto verifying = [](const std::vector<int64_t>& l) {
    return std::count_if(l.begin(), l.end(), [](int64_t k) { return k > 0; });
  };
  EXPECT_LE(verifying(alone_lengths), 4 * DraftPacer::kProbe);
  EXPECT_GT(verifying(lengths), 4 * DraftPacer::kProbe);
  EXPECT_GT(accepted, alone_accepted);
}

// A GPU worker's sequences live on its DeviceDecoder, which keeps their
// DSpark rings and drafts there. HostDecodeBackend stands in for it (with
// EnableDrafting, over the worker's block tables): prompts go to it in
// chunks, each verification is one run of StepRows with every position's
// logits, rejected drafts are rolled back there and the next drafts come
// from its DraftBatch. The tokens, and with the model's own drafts the
// accepted counts, equal those of the executor drafting on the model.
TEST(StepExecutorSpeculativeTest, DraftingBackendEmitsThePlainTokens) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  for (const sampling::SamplingParams& params : {GreedySampling(), SeededSampling()}) {
    const auto plain = Plain(*f.model, *f.pool, params);
    for (Drafts drafts : {Drafts::kModel, Drafts::kInjected}) {
      int64_t on_model = 0, on_backend = 0;
      const auto spec = Speculative(*f.model, *f.pool, params, drafts, plain, on_model);
      model::HostDecodeBackend backend(*f.model, 4, /*max_batch=*/8, /*max_positions=*/4096,
                                       /*collective=*/false, /*max_rows_per_slot=*/kDrafts + 1);
      backend.ExpectBlockTables(kBlockTokens, 64);
      backend.EnableDrafting(kDrafts);
      ExpectPrefixEqual(Speculative(*f.model, *f.pool, params, drafts, plain, on_backend, nullptr,
                                    nullptr, &backend),
                        plain);
      ExpectPrefixEqual(spec, plain);
      if (drafts == Drafts::kModel) {
        EXPECT_EQ(on_backend, on_model);
      } else {
        EXPECT_GT(on_backend, 20);
      }
      // Every sequence ran on the backend, drafted and was rolled back there.
      EXPECT_EQ(backend.stats().starts, 2);
      EXPECT_GT(backend.stats().rows, 2 * static_cast<int64_t>(kOutput));
      EXPECT_GE(backend.stats().drafts, 20);
      EXPECT_GT(backend.stats().rollbacks, 10);
      EXPECT_EQ(backend.stats().table_sets, 2);  // each row's 24 blocks came with its prompt
      EXPECT_EQ(backend.stats().draft_logits, 0);  // no grammar: no draft logits copied back
      // Greedy verifications come back as the backend's picks (StepRowsGreedy:
      // no logits), sampled ones as logits.
      if (params.temperature == 0.0f) {
        EXPECT_GT(backend.stats().greedy_steps, 10);
      } else {
        EXPECT_EQ(backend.stats().greedy_steps, 0);
      }
    }
  }
}

// An expert-parallel group speculating on its backends: two ranks (threads
// over a FakeCommunicator world), each an executor with a collective drafting
// HostDecodeBackend over its rank's model, as two GPUs' DeviceDecoders with an
// NCCL communicator. Every backend step is a collective of the group, while
// drafts and rollbacks are each rank's own. The ranks' plans differ: rank 0
// decodes both prompts with injected drafts (0 .. all of them right, so its
// rows verify and accept different lengths step by step), rank 1 one prompt
// started two plans late with the model's own drafts, and each rank's plans
// turn empty when its sequences have their tokens. No collective may be left
// unpaired (a missing one times out); the tokens equal single-process plain
// decoding's, greedy and seeded; every verification ran on the backends.
TEST(StepExecutorSpeculativeTest, ExpertParallelRanksSpeculateOnCollectiveBackends) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  constexpr int kWorld = 2;
  constexpr int kSteps = 36;
  const model::ModelConfig& config = f.checkpoint->config();
  for (const sampling::SamplingParams& params : {GreedySampling(), SeededSampling()}) {
    const auto plain = Plain(*f.model, *f.pool, params);
    // Per rank: its prompts (indices into kPrompts) and the plan they start at.
    const std::vector<int> prompts_of[kWorld] = {{0, 1}, {1}};
    const int first_step[kWorld] = {0, 2};
    std::vector<std::vector<std::vector<int64_t>>> out(kWorld);
    std::vector<model::HostDecodeBackendStats> stats(kWorld);
    std::vector<int64_t> verified(kWorld), accepted(kWorld), device_rows(kWorld);
    std::vector<absl::Status> st =
        OnExpertParallelRanks(*f.checkpoint, kWorld, [&](int r, model::Model& m) -> absl::Status {
          model::HostDecodeBackend backend(m, /*max_sequences=*/4, /*max_batch=*/12,
                                           /*max_positions=*/4096, /*collective=*/true,
                                           /*max_rows_per_slot=*/kDrafts + 1);
          backend.EnableDrafting(kDrafts);
          StepExecutor ex(m, 4);
          ex.SetDecodeBackend(&backend);
          if (absl::Status s = ex.SetSpeculation(kDrafts); !s.ok()) return s;
          const std::vector<int>& mine = prompts_of[r];
          out[r].assign(mine.size(), {});
          std::vector<int> row_of(mine.size(), -1);  // index in the last plan, or -1
          for (int step = 0; step < kSteps; ++step) {
            std::vector<RowPlan> rows;
            std::vector<int> in_plan;  // the slot of each row
            for (size_t s = 0; s < mine.size(); ++s) {
              if (step < first_step[r] || out[r][s].size() >= kOutput) continue;
              const auto& prompt = kPrompts[mine[s]];
              const int32_t slot = static_cast<int32_t>(s);
              if (row_of[s] < 0) {
                rows.push_back({.slot = slot,
                                .start_pos = 0,
                                .tokens = prompt,
                                .sample = true,
                                .sampling = params,
                                .draft_tokens = kDrafts});
              } else {
                rows.push_back({.slot = slot,
                                .start_pos = static_cast<int64_t>(prompt.size()),
                                .remap = row_of[s],
                                .sample = true,
                                .sampling = params,
                                .draft_tokens = kDrafts});
              }
              in_plan.push_back(slot);
            }
            absl::StatusOr<std::vector<RowOutcome>> got = ex.Execute(rows, {});
            if (absl::Status e = FirstError(got); !e.ok()) {
              return absl::Status(e.code(), absl::StrCat("step ", step, ": ", e.message()));
            }
            std::fill(row_of.begin(), row_of.end(), -1);
            for (size_t i = 0; i < in_plan.size(); ++i) {
              const int s = in_plan[i];
              const RowOutcome& o = (*got)[i];
              std::vector<int64_t>& toks = out[r][s];
              toks.insert(toks.end(), o.accepted.begin(), o.accepted.end());
              if (o.token.has_value()) toks.push_back(*o.token);
              row_of[s] = static_cast<int>(i);
              const std::vector<int64_t>& want = plain[mine[s]];
              if (r == 0 && toks.size() + kDrafts < want.size()) {
                const int right = (step + s) % (kDrafts + 1);
                std::vector<int64_t> d(want.begin() + toks.size(),
                                       want.begin() + toks.size() + kDrafts);
                if (right < kDrafts) d[right] = (d[right] + 1) % config.vocab_size;
                ex.SetDraftsForTest(s, std::move(d));
              }
            }
          }
          stats[r] = backend.stats();
          verified[r] = ex.drafts_verified();
          accepted[r] = ex.drafts_accepted();
          device_rows[r] = ex.device_rows();
          return absl::OkStatus();
        });
    for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    for (int r = 0; r < kWorld; ++r) {
      for (size_t s = 0; s < prompts_of[r].size(); ++s) {
        const std::vector<int64_t>& want = plain[prompts_of[r][s]];
        ASSERT_GE(out[r][s].size(), kOutput) << "rank " << r << " sequence " << s;
        EXPECT_EQ(std::vector<int64_t>(out[r][s].begin(), out[r][s].begin() + kOutput),
                  std::vector<int64_t>(want.begin(), want.begin() + kOutput))
            << "rank " << r << " sequence " << s;
      }
      // One collective step per plan, whatever the rank's rows.
      EXPECT_EQ(stats[r].steps, kSteps) << "rank " << r;
      // Verifications, drafts and rollbacks on the backend; nothing came
      // back to the host model once there.
      EXPECT_GT(verified[r], 10) << "rank " << r;
      EXPECT_GE(stats[r].drafts, 10) << "rank " << r;
      EXPECT_GT(stats[r].rollbacks, 0) << "rank " << r;
      EXPECT_EQ(stats[r].exports, 0) << "rank " << r;
      EXPECT_GT(device_rows[r], static_cast<int64_t>(kOutput)) << "rank " << r;
    }
    EXPECT_GT(accepted[0], 20);  // the injected right drafts were taken
  }
}

TEST(StepExecutorSpeculativeTest, BadSpeculationIsInvalidArgument) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  StepExecutor ex(*f.model, 2);
  const int32_t block = static_cast<int32_t>(f.model->config().dspark_block_size);
  EXPECT_EQ(ex.SetSpeculation(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ex.SetSpeculation(block + 1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ex.SetSpeculation(2).ok());
  // A row asking for more drafts than the worker makes fails alone.
  std::vector<RowPlan> rows = {
      {.slot = 0, .start_pos = 0, .tokens = {1, 2, 3}, .sample = true, .sampling = GreedySampling(),
       .draft_tokens = 3},
      {.slot = 1, .start_pos = 0, .tokens = {1, 2, 3}, .sample = true, .sampling = GreedySampling(),
       .draft_tokens = 2}};
  absl::StatusOr<std::vector<RowOutcome>> r = ex.Execute(rows, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*r)[1].status.ok());
  // A speculative remap row's start_pos may not pass the slot's length.
  rows = {{.slot = 1, .start_pos = 5, .remap = 1, .sample = true, .sampling = GreedySampling(),
           .draft_tokens = 2}};
  r = ex.Execute(rows, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].status.code(), absl::StatusCode::kInvalidArgument);
}

// Drafting is one Model::DraftBatch for all rows of a step; a row's drafts
// are those it would make alone. On the trained tiny (whose drafts are often
// right), three sequences speculating greedily in one plan verify (lengths
// from the drafts' confidences), accept and emit step for step exactly what
// each does in plans of its own.
TEST(StepExecutorSpeculativeTest, RowsOfAStepDraftAsTheyWouldAlone) {
  const model::Checkpoint* trained = model::TrainedTinyCheckpoint();
  ASSERT_NE(trained, nullptr);
  std::unique_ptr<model::Model> m =
      model::NewModelOrFail(*trained, {.engram_token_map = model::TrainedTinyEngramMap()});
  ASSERT_NE(m, nullptr);
  // Repeated phrases, which the trained model continues (and drafts) well.
  std::vector<std::vector<int64_t>> prompts;
  for (int s = 0; s < 3; ++s) {
    const std::vector<int64_t> phrase = model::RandomTokens(5 + 2 * s, 40 + s, 4000);
    std::vector<int64_t> prompt;
    for (int k = 0; k < 3; ++k) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    prompts.push_back(std::move(prompt));
  }
  const VerifyCostCurve curve = CheapPositions();
  // Per slot, per step: the verified drafts, the accepted ones, the sample.
  auto run = [&](const std::vector<int32_t>& slots) {
    StepExecutor ex(*m, 3);
    EXPECT_TRUE(ex.SetSpeculation(kDrafts).ok());
    ex.SetVerifyCostCurve(curve);
    std::vector<RowPlan> rows;
    for (int32_t s : slots) {
      rows.push_back({.slot = s,
                      .start_pos = 0,
                      .tokens = prompts[s],
                      .sample = true,
                      .sampling = GreedySampling(),
                      .draft_tokens = kDrafts});
    }
    std::vector<std::vector<int64_t>> trace(3);
    for (int step = 0; step < 10; ++step) {
      absl::StatusOr<std::vector<RowOutcome>> r = ex.Execute(rows, {});
      EXPECT_TRUE(FirstError(r).ok()) << FirstError(r);
      if (!r.ok()) break;
      for (size_t i = 0; i < slots.size(); ++i) {
        const RowOutcome& o = (*r)[i];
        std::vector<int64_t>& t = trace[slots[i]];
        t.push_back(o.verified_drafts);
        t.insert(t.end(), o.accepted.begin(), o.accepted.end());
        t.push_back(o.token.value_or(-1));
        rows[i] = {.slot = slots[i],
                   .start_pos = static_cast<int64_t>(prompts[slots[i]].size()),
                   .remap = static_cast<int32_t>(i),
                   .sample = true,
                   .sampling = GreedySampling(),
                   .draft_tokens = kDrafts};
      }
    }
    return std::pair(trace, ex.drafts_accepted());
  };
  const auto [together, accepted] = run({0, 1, 2});
  EXPECT_GT(accepted, 10);  // the drafts mattered
  for (int32_t s = 0; s < 3; ++s) {
    EXPECT_EQ(together[s], run({s}).first[s]) << "slot " << s;
  }
}

}  // namespace
}  // namespace weir::worker
