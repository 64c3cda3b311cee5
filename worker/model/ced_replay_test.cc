// CED bounded replay (spec §4.4, Model::StartCedReplay) on the random-weight
// tiny (models/random/tiny: 12 layers, decoder_start 6 = the ratio-1 kv source
// and candidate source, Reindex layers 8 and 10 in the decoder, window 8,
// ratio-2 encoder sources, Engram at 1 and 4, DSpark targets 9-11):
//   * the global KV (compressed KV, index keys, compressor state) and every
//     encoder layer's SWA ring after a replay prefill equal the exact
//     prefill's, bit for bit;
//   * the decoder layers ran only over the last window positions (expert
//     load counts per layer);
//   * replay outputs are deterministic and do not depend on how the prompt
//     is chunked (one call, chunks across the replay start, one at a time,
//     batched with other rows);
//   * prompts no longer than the window, and states without replay, give the
//     exact forward's bits; rollback of drafts after a replay prefill is exact.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

const Checkpoint& Tiny() { return *DerivedCheckpoint("random/tiny", "random_tiny_seed17", {}, 17); }

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Compressed KV and index keys of every kv-source layer, and the partial
// groups of the ratio > 1 compressors, bit for bit.
void ExpectSameGlobalKv(const Model& m, const SequenceState& a, const SequenceState& b) {
  const ModelConfig& c = m.config();
  for (int layer : c.kv_source_layers) {
    SCOPED_TRACE(::testing::Message() << "kv source " << layer);
    const int64_t n = a.compressed().entries(layer);
    ASSERT_EQ(n, b.compressed().entries(layer));
    ASSERT_GT(n, 0);
    std::vector<float> ka(n * c.head_dim), kb(n * c.head_dim);
    std::vector<float> ia(n * c.index_head_dim), ib(n * c.index_head_dim);
    a.compressed().ReadKv(layer, 0, ka);
    b.compressed().ReadKv(layer, 0, kb);
    a.compressed().ReadIndexK(layer, 0, ia);
    b.compressed().ReadIndexK(layer, 0, ib);
    EXPECT_TRUE(SameBits(ka, kb));
    EXPECT_TRUE(SameBits(ia, ib));
    // The compressor's inputs of the partial group's tokens (what a later
    // forward reads; older rows may hold rolled-back positions).
    const int ratio = a.kv_source(layer).ratio;
    if (ratio <= 1) continue;
    const PositionRing& pa = a.kv_source(layer).pending;
    const PositionRing& pb = b.kv_source(layer).pending;
    for (int64_t pos = a.length() - a.length() % ratio; pos < a.length(); ++pos) {
      EXPECT_TRUE(SameBits(pa.Row(pos), pb.Row(pos))) << "pos " << pos;
    }
  }
}

// SWA rows of `layer` at positions [from, length) within the last window
// (what a later forward reads; older rows may hold rolled-back positions).
void ExpectSameWindow(const SequenceState& a, const SequenceState& b, int layer, int64_t from) {
  const PositionRing& ra = a.window(layer);
  const PositionRing& rb = b.window(layer);
  const int64_t window = ra.capacity() - a.max_rollback();
  for (int64_t pos = std::max(from, a.length() - window); pos < a.length(); ++pos) {
    EXPECT_TRUE(SameBits(ra.Row(pos), rb.Row(pos))) << "layer " << layer << " pos " << pos;
  }
}

// Every per-sequence state of a and b, bit for bit.
void ExpectSameState(const Model& m, const SequenceState& a, const SequenceState& b) {
  ASSERT_EQ(a.length(), b.length());
  ASSERT_EQ(a.replay_start(), b.replay_start());
  ExpectSameGlobalKv(m, a, b);
  for (int layer = 0; layer < m.roles().size(); ++layer) ExpectSameWindow(a, b, layer, 0);
  EXPECT_EQ(a.engram_history(), b.engram_history());
}

// Forwards the first tokens of `tokens` from position 0 in chunks of the
// given sizes; returns the logits of the last position.
std::vector<float> Prefill(Model& m, SequenceState& seq, const std::vector<int64_t>& tokens,
                           const std::vector<int>& chunks) {
  const int64_t v = m.config().vocab_size;
  std::vector<float> last;
  int64_t pos = 0;
  for (int n : chunks) {
    auto logits = m.Forward(seq, std::span(tokens).subspan(pos, n), pos);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return {};
    last.assign(logits->end() - v, logits->end());
    pos += n;
  }
  return last;
}

// Greedy continuation of `steps` tokens from `last` (the prefill's last logits).
std::vector<int64_t> Greedy(Model& m, SequenceState& seq, std::vector<float> last, int steps) {
  const int64_t v = m.config().vocab_size;
  std::vector<int64_t> out;
  for (int i = 0; i < steps; ++i) {
    const int64_t next[1] = {ArgmaxRow(last.data(), v)};
    out.push_back(next[0]);
    auto logits = m.Forward(seq, next, seq.length());
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return out;
    last = *logits;
  }
  return out;
}

constexpr int kPrompt = 40;  // window 8: the replay starts at 32

TEST(CedReplayTest, TinyHasDecoderLayersThatCanReplay) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->config().decoder_start(), 6);
  EXPECT_TRUE(m->roles()[6].is_decoder);
  EXPECT_EQ(m->roles()[6].attention, AttentionRole::kFull);
  EXPECT_FALSE(m->roles()[5].is_decoder);
  EXPECT_TRUE(m->SupportsCedReplay());
}

TEST(CedReplayTest, GlobalKvAndEncoderEqualTheExactPrefill) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  const int64_t v = m->config().vocab_size, win = m->config().window_size;
  const std::vector<int64_t> prompt = RandomTokens(kPrompt, 3);
  auto exact = m->NewSequence();
  auto replay = m->NewSequence();
  ASSERT_TRUE(m->StartCedReplay(*replay, kPrompt).ok());
  EXPECT_EQ(replay->replay_start(), kPrompt - win);
  auto exact_logits = m->Forward(*exact, prompt, 0);
  auto replay_logits = m->Forward(*replay, prompt, 0);
  ASSERT_TRUE(exact_logits.ok() && replay_logits.ok());
  ASSERT_EQ(replay_logits->size(), exact_logits->size());
  // Rows before the replay start are not computed; the replayed ones are.
  for (int64_t r = 0; r < kPrompt; ++r) {
    const bool computed = r >= kPrompt - win;
    for (int64_t t = 0; t < v; t += 97) {
      ASSERT_EQ(std::isfinite((*replay_logits)[r * v + t]), computed) << "row " << r;
    }
  }
  ExpectSameGlobalKv(*m, *exact, *replay);
  for (int layer = 0; layer < m->config().decoder_start(); ++layer) {
    ExpectSameWindow(*exact, *replay, layer, 0);
  }
  EXPECT_EQ(exact->engram_history(), replay->engram_history());
  // The decoder's own SWA rows are the approximation. Layer 6's are exact
  // (its input is the encoder's output); layer 7's row at the replay start
  // comes from layer 6's attention there, which saw one SWA row instead of 8.
  const int64_t s = kPrompt - win;
  EXPECT_TRUE(
      SameBits(std::as_const(*exact).window(6).Row(s), std::as_const(*replay).window(6).Row(s)));
  EXPECT_FALSE(
      SameBits(std::as_const(*exact).window(7).Row(s), std::as_const(*replay).window(7).Row(s)));
  // The decoder rings hold only the replayed positions: the window positions
  // before s (ring slots no replayed position uses) were never written.
  const std::vector<float> zeros(m->config().head_dim, 0.0f);
  for (int layer = m->config().decoder_start(); layer < m->config().n_layers; ++layer) {
    for (int64_t pos = s - win + 2; pos < s; ++pos) {
      EXPECT_TRUE(SameBits(std::as_const(*replay).window(layer).Row(pos), zeros))
          << "layer " << layer << " pos " << pos;
      EXPECT_FALSE(SameBits(std::as_const(*exact).window(layer).Row(pos), zeros));
    }
  }
  // The global KV stays equal through decode steps (which are exact forwards).
  const std::vector<int64_t> more = RandomTokens(6, 4);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(m->Forward(*exact, std::span(more).subspan(i, 1), kPrompt + i).ok());
    ASSERT_TRUE(m->Forward(*replay, std::span(more).subspan(i, 1), kPrompt + i).ok());
  }
  ExpectSameGlobalKv(*m, *exact, *replay);
}

TEST(CedReplayTest, DecoderLayersRunOnlyOverTheLastWindowPositions) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  const std::vector<int64_t> prompt = RandomTokens(kPrompt, 5);
  auto routed = [&](int layer) {
    int64_t sum = 0;
    for (int64_t n : m->expert_load().layer_counts(layer)) sum += n;
    return sum;
  };
  for (const bool replay : {false, true}) {
    SCOPED_TRACE(replay ? "replay" : "exact");
    auto seq = m->NewSequence();
    if (replay) {
      ASSERT_TRUE(m->StartCedReplay(*seq, kPrompt).ok());
    }
    m->expert_load().Reset();
    // In chunks across the replay start (32): 20 + 16 + 4.
    Prefill(*m, *seq, prompt, {20, 16, 4});
    for (int layer = 0; layer < c.n_layers; ++layer) {
      const int64_t tokens =
          replay && layer >= c.decoder_start() ? c.window_size : int64_t{kPrompt};
      EXPECT_EQ(routed(layer), tokens * c.n_activated_experts) << "layer " << layer;
    }
  }
}

TEST(CedReplayTest, DeterministicAndChunkingInvariant) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  const int64_t v = m->config().vocab_size;
  const std::vector<int64_t> prompt = RandomTokens(kPrompt, 7);
  std::vector<int> one_at_a_time(kPrompt, 1);
  const std::vector<std::vector<int>> chunkings = {
      {40}, {40}, {32, 8}, {5, 20, 3, 12}, {31, 2, 7}, {33, 7}, one_at_a_time};
  auto ref = m->NewSequence();
  ASSERT_TRUE(m->StartCedReplay(*ref, kPrompt).ok());
  const std::vector<float> ref_last = Prefill(*m, *ref, prompt, chunkings[0]);
  ASSERT_EQ(ref_last.size(), static_cast<size_t>(v));
  auto ref_after = std::make_unique<SequenceState>(*ref);
  const std::vector<int64_t> ref_tokens = Greedy(*m, *ref_after, ref_last, 12);
  for (size_t k = 1; k < chunkings.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "chunking " << k);
    auto seq = m->NewSequence();
    ASSERT_TRUE(m->StartCedReplay(*seq, kPrompt).ok());
    const std::vector<float> last = Prefill(*m, *seq, prompt, chunkings[k]);
    ExpectSameState(*m, *ref, *seq);
    // Hidden states are bit-identical; the head's sgemm may round differently
    // between chunk sizes (model.h), within 1e-4 relative.
    ASSERT_EQ(last.size(), ref_last.size());
    if (k == 1) {
      EXPECT_TRUE(SameBits(last, ref_last));  // the same chunking: the same bits
    }
    EXPECT_LT(RowRelativeDifference(last.data(), ref_last.data(), v), 1e-4);
    EXPECT_EQ(Greedy(*m, *seq, last, 12), ref_tokens);
    ExpectSameState(*m, *ref_after, *seq);
  }
}

TEST(CedReplayTest, DecoderSwaStartsAtTheReplayStart) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  const int64_t v = c.vocab_size, s = kPrompt - c.window_size;
  const std::vector<int64_t> prompt = RandomTokens(kPrompt, 8);
  auto ref = m->NewSequence(), seq = m->NewSequence();
  ASSERT_TRUE(m->StartCedReplay(*ref, kPrompt).ok());
  ASSERT_TRUE(m->StartCedReplay(*seq, kPrompt).ok());
  const std::vector<float> ref_last = Prefill(*m, *ref, prompt, {kPrompt});
  // After the first 34 positions the decoder rings hold 32 and 33 only.
  Prefill(*m, *seq, prompt, {34});
  // Poison the decoder's ring rows of the window positions before the replay
  // start: a query that read them would turn NaN.
  for (int layer = c.decoder_start(); layer < c.n_layers; ++layer) {
    for (int64_t pos = s - c.window_size + 1; pos < s; ++pos) {
      std::span<float> row = seq->window(layer).Row(pos);
      std::fill(row.begin(), row.end(), std::numeric_limits<float>::quiet_NaN());
    }
  }
  auto logits = m->Forward(*seq, std::span(prompt).subspan(34), 34);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_LT(RowRelativeDifference(logits->data() + (kPrompt - 35) * v, ref_last.data(), v), 1e-4);
}

TEST(CedReplayTest, BatchedRowsEqualEachAlone) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  const int64_t v = m->config().vocab_size;
  const std::vector<int64_t> a_prompt = RandomTokens(kPrompt, 9), b_prompt = RandomTokens(30, 10);
  // Alone: a replays in chunks 24 + 16; b is exact; c replays a prompt of 28
  // whose first chunk (16) lies wholly before its replay start (20).
  auto a = m->NewSequence(), b = m->NewSequence(), c = m->NewSequence();
  ASSERT_TRUE(m->StartCedReplay(*a, kPrompt).ok());
  ASSERT_TRUE(m->StartCedReplay(*c, 28).ok());
  Prefill(*m, *a, a_prompt, {24});
  Prefill(*m, *b, b_prompt, {30});
  Prefill(*m, *c, a_prompt, {16});
  auto a2 = m->NewSequence(), b2 = m->NewSequence(), c2 = m->NewSequence();
  ASSERT_TRUE(m->StartCedReplay(*a2, kPrompt).ok());
  ASSERT_TRUE(m->StartCedReplay(*c2, 28).ok());
  // Batched: step 1 = (a2 24 tokens, b2 30 tokens, c2 16 tokens): c2 leaves
  // at the decoder with nothing left; step 2 = (a2 16, c2 12).
  {
    SequenceState* const states[] = {a2.get(), b2.get(), c2.get()};
    const std::span<const int64_t> rows[] = {std::span(a_prompt).first(24), b_prompt,
                                             std::span(a_prompt).first(16)};
    const int64_t starts[] = {0, 0, 0};
    auto out = m->ForwardBatch(states, rows, starts);
    ASSERT_TRUE(out.ok()) << out.status();
    for (float x : (*out)[2]) ASSERT_TRUE(std::isnan(x));  // every c2 row is before 20
  }
  ExpectSameState(*m, *a, *a2);
  ExpectSameState(*m, *b, *b2);
  ExpectSameState(*m, *c, *c2);
  // Every state alone; then both replays finished in one batch.
  auto a_last = m->Forward(*a, std::span(a_prompt).subspan(24, 16), 24);
  auto c_last = m->Forward(*c, std::span(a_prompt).subspan(16, 12), 16);
  ASSERT_TRUE(a_last.ok() && c_last.ok());
  {
    SequenceState* const states[] = {c2.get(), a2.get()};
    const std::span<const int64_t> rows[] = {std::span(a_prompt).subspan(16, 12),
                                             std::span(a_prompt).subspan(24, 16)};
    const int64_t starts[] = {16, 24};
    auto out = m->ForwardBatch(states, rows, starts);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(SameBits((*out)[0], *c_last));
    EXPECT_TRUE(SameBits((*out)[1], *a_last));
    for (int64_t t = 0; t < 4 * v; ++t) ASSERT_TRUE(std::isnan((*out)[0][t]));  // 16..19
  }
  ExpectSameState(*m, *a, *a2);
  ExpectSameState(*m, *c, *c2);
}

// logits_from across the replay start: a chunk whose first 6 tokens lie
// before it (no logits: NaN rows) asked from token 3 (inside the skipped
// part) and from token 8 (past it): the rows returned are those of the
// whole chunk's logits from there, on a row-stable head.
TEST(CedReplayTest, LogitsFromAcrossTheReplayStart) {
  auto m = RowStableCpuModel(Tiny(), ActivationPrecision::kBf16);
  ASSERT_NE(m, nullptr);
  const int64_t v = m->config().vocab_size;
  const std::vector<int64_t> prompt = RandomTokens(kPrompt, 9);
  const std::span<const int64_t> head(prompt.data(), 26), tail(prompt.data() + 26, 14);
  // The chunk [26, 40) starts 6 before the replay start (32).
  auto run = [&](std::span<const int64_t> from) -> std::vector<float> {
    auto seq = m->NewSequence();
    EXPECT_TRUE(m->StartCedReplay(*seq, kPrompt).ok());
    EXPECT_TRUE(m->Forward(*seq, head, 0).ok());
    SequenceState* states[] = {seq.get()};
    const std::span<const int64_t> rows[] = {tail};
    const int64_t starts[] = {26};
    auto out = m->ForwardBatch(states, rows, starts, from);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (*out)[0] : std::vector<float>{};
  };
  const std::vector<float> all = run({});
  ASSERT_EQ(all.size(), static_cast<size_t>(14 * v));
  EXPECT_TRUE(std::isnan(all[5 * v]));   // token 5: before the replay start
  EXPECT_FALSE(std::isnan(all[6 * v]));  // token 6: position 32
  for (int64_t from : {3, 8, 13, 14}) {
    const int64_t f[] = {from};
    const std::vector<float> got = run(f);
    ASSERT_EQ(got.size(), static_cast<size_t>((14 - from) * v)) << "from " << from;
    int64_t differing = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = all[from * v + i];
      differing += !(got[i] == want || (std::isnan(got[i]) && std::isnan(want)));
    }
    EXPECT_EQ(differing, 0) << "from " << from;
  }
}

TEST(CedReplayTest, ShortPromptsAndStatesWithoutReplayAreExact) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  const int64_t win = m->config().window_size;
  const std::vector<int64_t> prompt = RandomTokens(static_cast<int>(win), 11);
  auto exact = m->NewSequence(), replay = m->NewSequence();
  ASSERT_TRUE(m->StartCedReplay(*replay, win).ok());  // the whole prompt is replayed
  EXPECT_EQ(replay->replay_start(), 0);
  auto a = m->Forward(*exact, prompt, 0);
  auto b = m->Forward(*replay, prompt, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(SameBits(*a, *b));
  ExpectSameState(*m, *exact, *replay);
  // A state without StartCedReplay runs every layer at every position.
  auto plain = m->NewSequence();
  EXPECT_EQ(plain->replay_start(), 0);
}

TEST(CedReplayTest, RollbackAfterReplayEqualsNeverDrafted) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  const std::vector<int64_t> prompt = RandomTokens(kPrompt, 13);
  const std::vector<int64_t> block = RandomTokens(6, 14);  // t, d1..d5
  auto verified = m->NewSequence(), stepped = m->NewSequence();
  ASSERT_TRUE(m->StartCedReplay(*verified, kPrompt).ok());
  ASSERT_TRUE(m->StartCedReplay(*stepped, kPrompt).ok());
  Prefill(*m, *verified, prompt, {kPrompt});
  Prefill(*m, *stepped, prompt, {kPrompt});
  // A copy (a fork of parallel samples) keeps the replay start.
  SequenceState copy(*verified);
  EXPECT_EQ(copy.replay_start(), verified->replay_start());
  ASSERT_TRUE(m->Forward(*verified, block, kPrompt).ok());
  ASSERT_TRUE(verified->Rollback(3).ok());  // 2 of 5 drafts accepted
  for (int j = 0; j < 3; ++j) {
    ASSERT_TRUE(m->Forward(*stepped, std::span(block).subspan(j, 1), kPrompt + j).ok());
  }
  ExpectSameState(*m, *verified, *stepped);
  ASSERT_TRUE(copy.CopyFrom(*verified).ok());
  ExpectSameState(*m, copy, *stepped);
  auto d1 = m->Draft(*verified, block[3]);
  auto d2 = m->Draft(*stepped, block[3]);
  ASSERT_TRUE(d1.ok() && d2.ok());
  EXPECT_EQ(d1->tokens, d2->tokens);
}

TEST(CedReplayTest, RefusesStartedStatesAndBadLengths) {
  auto m = NewModelOrFail(Tiny());
  ASSERT_NE(m, nullptr);
  auto seq = m->NewSequence();
  EXPECT_EQ(m->StartCedReplay(*seq, -1).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int64_t> prompt = RandomTokens(4, 15);
  ASSERT_TRUE(m->Forward(*seq, prompt, 0).ok());
  EXPECT_EQ(m->StartCedReplay(*seq, 40).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(seq->replay_start(), 0);
}

TEST(CedReplayTest, ModelsWithAKvSourceInTheDecoderCannotReplay) {
  // Layer 8 as a fourth kv source: its global KV needs the decoder's hidden
  // states of every prompt token.
  const Checkpoint* ckpt = DerivedCheckpoint(
      "random/tiny", "random_tiny_kv8_seed17",
      {{"\"kv_source_layer_ids\": [2, 4, 6]", "\"kv_source_layer_ids\": [2, 4, 6, 8]"},
       {"\"candidate_source_layer_id\": 6", "\"candidate_source_layer_id\": -1"}},
      17);
  ASSERT_NE(ckpt, nullptr);
  auto m = NewModelOrFail(*ckpt);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->SupportsCedReplay());
  auto seq = m->NewSequence();
  EXPECT_EQ(m->StartCedReplay(*seq, 40).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace weir::model
