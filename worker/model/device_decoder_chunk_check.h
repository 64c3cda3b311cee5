// worker/model/device_decoder_chunk_check.h — testonly: several positions of
// a slot in one DeviceDecoder step (StepRows) against the same tokens one
// position a step, and on kReference against the CPU's ForwardBatch of the
// same chunks. Shared by device_decoder_test (reference numerics) and
// device_decoder_fast_test (kFast, stored KV).
//
// Thread safety: test code, one thread.

#ifndef WEIR_WORKER_MODEL_DEVICE_DECODER_CHUNK_CHECK_H_
#define WEIR_WORKER_MODEL_DEVICE_DECODER_CHUNK_CHECK_H_

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/device_decoder.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model::testing {

// Five sequences start empty in three decoders made from `options`:
//   chunked   max_rows_per_slot 12: each step gives every sequence still in
//             its prompt a chunk of 1..12 of its next prompt tokens (its
//             rows adjacent, sequences in a shuffled order), the others one
//             greedy token, and returns every row's logits;
//   last_only the same steps asking only each chunk's last row (the head
//             runs for those rows alone);
//   single    max_rows_per_slot 1: the same tokens, one position a slot a
//             step (a step per row rank of the chunk).
// Every row's logits of `chunked` equal `single`'s bit for bit (a row's
// position, its slot's history and nothing else decide them), `last_only`'s
// rows equal the chunked rows they name, and with `cpu` (kReference) every
// row equals ForwardBatch of the same chunks on the CPU bit for bit. The
// prompts (up to 90 tokens) pass the window several times, so the rings
// wrap inside chunks, and cross compressor groups inside chunks.
// `mark_prompts`: every decoder learns each sequence's prompt end
// (SetPromptEnd), so with options.prompt_range_tiles the prompt positions
// run their own attention shape, steps mixing them with generated ones run
// both, and the chunked decoder must report every prompt position so run.
inline void CheckChunkedSteps(const Model& model, ActivationPrecision precision,
                              DeviceDecoderOptions options, Model* cpu, const char* name,
                              bool mark_prompts = false) {
  const int64_t v = model.config().vocab_size;
  constexpr int kRows = 12, kSeqs = 5;
  options.max_sequences = 2 * kSeqs;
  options.max_positions = 160;
  options.max_batch = kSeqs * kRows;
  options.max_rows_per_slot = kRows;
  auto chunked = DeviceDecoder::Create(model, precision, options);
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  auto last_only = DeviceDecoder::Create(model, precision, options);
  ASSERT_TRUE(last_only.ok()) << last_only.status();
  options.max_rows_per_slot = 1;
  options.max_batch = kSeqs;
  auto single = DeviceDecoder::Create(model, precision, options);
  ASSERT_TRUE(single.ok()) << single.status();

  const std::vector<int> prompt_len = {90, 37, 1, 64, 12};
  std::vector<std::vector<int64_t>> prompt(kSeqs);
  std::vector<std::unique_ptr<SequenceState>> states(kSeqs);
  std::vector<int64_t> fed(kSeqs, 0), next(kSeqs, 0);
  for (int q = 0; q < kSeqs; ++q) {
    prompt[q] = RandomTokens(prompt_len[q], 700 + q, v - 1);
    for (DeviceDecoder* d : {chunked->get(), last_only->get(), single->get()}) {
      ASSERT_TRUE(d->Start(2 * q + 1).ok());  // slots 1, 3, ..., 9 - 1: not in order of use
      if (mark_prompts) {
        ASSERT_TRUE(d->SetPromptEnd(2 * q + 1, prompt_len[q]).ok());
      }
    }
    if (cpu != nullptr) states[q] = cpu->NewSequence();
  }
  std::mt19937 rng(17);
  int64_t rows_checked = 0, multi_row_steps = 0, chunked_vs_single = 0, last_vs_chunked = 0,
          vs_cpu = 0;
  for (int step = 0; step < 24; ++step) {
    std::vector<int> order(kSeqs);
    for (int q = 0; q < kSeqs; ++q) order[q] = q;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int> slots, last_rows;
    std::vector<int64_t> tokens;
    std::vector<std::vector<int64_t>> chunk(kSeqs);
    std::vector<int> seq_of_run;
    for (int q : order) {
      if (step % 4 == 3 && q % 2 == 0) continue;  // sometimes a sequence sits out
      if (fed[q] < prompt_len[q]) {
        const int64_t n = std::min<int64_t>(prompt_len[q] - fed[q],
                                            std::uniform_int_distribution<int>(1, kRows)(rng));
        chunk[q].assign(prompt[q].begin() + fed[q], prompt[q].begin() + fed[q] + n);
      } else {
        chunk[q] = {next[q]};
      }
      for (int64_t t : chunk[q]) {
        slots.push_back(2 * q + 1);
        tokens.push_back(t);
      }
      last_rows.push_back(static_cast<int>(slots.size()) - 1);
      seq_of_run.push_back(q);
    }
    multi_row_steps += static_cast<int64_t>(slots.size()) > static_cast<int64_t>(seq_of_run.size());
    auto got = (*chunked)->StepRows(slots, tokens, std::nullopt);
    ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status();
    const std::vector<float> all(got->begin(), got->end());
    ASSERT_EQ(all.size(), slots.size() * v);
    auto last = (*last_only)->StepRows(slots, tokens, std::span<const int>(last_rows));
    ASSERT_TRUE(last.ok()) << last.status();
    ASSERT_EQ(last->size(), last_rows.size() * v);
    for (size_t k = 0; k < last_rows.size(); ++k) {
      last_vs_chunked +=
          std::memcmp(last->data() + k * v, all.data() + last_rows[k] * v, v * sizeof(float)) != 0;
    }
    // One position a slot a step: rank j of every chunk in step j.
    std::vector<float> one(all.size());
    size_t longest = 0;
    for (int q : seq_of_run) longest = std::max(longest, chunk[q].size());
    for (size_t j = 0; j < longest; ++j) {
      std::vector<int> s1;
      std::vector<int64_t> t1;
      std::vector<size_t> row_of;
      size_t row = 0;
      for (int q : seq_of_run) {
        if (j < chunk[q].size()) {
          s1.push_back(2 * q + 1);
          t1.push_back(chunk[q][j]);
          row_of.push_back(row + j);
        }
        row += chunk[q].size();
      }
      auto g1 = (*single)->Step(s1, t1);
      ASSERT_TRUE(g1.ok()) << g1.status();
      for (size_t i = 0; i < row_of.size(); ++i) {
        std::copy_n(g1->data() + i * v, v, one.begin() + row_of[i] * v);
      }
    }
    for (size_t r = 0; r < slots.size(); ++r) {
      ++rows_checked;
      chunked_vs_single +=
          std::memcmp(all.data() + r * v, one.data() + r * v, v * sizeof(float)) != 0;
    }
    if (cpu != nullptr) {
      std::vector<SequenceState*> sts;
      std::vector<std::span<const int64_t>> spans;
      std::vector<int64_t> starts;
      for (int q : seq_of_run) {
        sts.push_back(states[q].get());
        spans.push_back(chunk[q]);
        starts.push_back(states[q]->length());
      }
      auto want = cpu->ForwardBatch(sts, spans, starts);
      ASSERT_TRUE(want.ok()) << want.status();
      size_t row = 0;
      for (const std::vector<float>& w : *want) {
        ASSERT_EQ(w.size() % v, 0u);
        for (size_t i = 0; i < w.size() / v; ++i, ++row) {
          vs_cpu += std::memcmp(w.data() + i * v, all.data() + row * v, v * sizeof(float)) != 0;
        }
      }
    }
    size_t row = 0;
    for (int q : seq_of_run) {
      row += chunk[q].size();
      fed[q] += static_cast<int64_t>(chunk[q].size());
      next[q] = ArgmaxRow(all.data() + (row - 1) * v, v);
      EXPECT_EQ((*chunked)->length(2 * q + 1), fed[q]);
    }
  }
  std::printf(
      "%s: %lld rows in 24 steps (%lld with chunks): chunked vs one position a step "
      "%lld rows differ; last rows only vs chunked %lld differ; vs the CPU's chunks %s%lld "
      "differ; %lld graphs\n",
      name, static_cast<long long>(rows_checked), static_cast<long long>(multi_row_steps),
      static_cast<long long>(chunked_vs_single), static_cast<long long>(last_vs_chunked),
      cpu != nullptr ? "" : "(not compared) ", static_cast<long long>(vs_cpu),
      static_cast<long long>((*chunked)->stats().graph_captures));
  EXPECT_GT(multi_row_steps, 10);
  EXPECT_EQ(chunked_vs_single, 0);
  EXPECT_EQ(last_vs_chunked, 0);
  EXPECT_EQ(vs_cpu, 0);
  for (int q = 0; q < kSeqs; ++q) EXPECT_GE(fed[q], prompt_len[q]) << "sequence " << q;
  if (mark_prompts) {
    int64_t prompts = 0;
    for (int len : prompt_len) prompts += len;
    std::printf("%s: %lld prompt positions in the prompt's shape\n", name,
                static_cast<long long>((*chunked)->stats().prompt_shape_rows));
    EXPECT_EQ((*chunked)->stats().prompt_shape_rows, options.prompt_range_tiles > 0 ? prompts : 0);
    EXPECT_EQ((*single)->stats().prompt_shape_rows, options.prompt_range_tiles > 0 ? prompts : 0);
  }
}

// Rollback (device verification): `spec` (max_rollback kDrafts) steps each
// of kSeqs sequences a run of 1 + m rows a step (m in 0 .. kDrafts: the
// next token of the sequence's stream, then m drafts of which a random prefix
// is the stream's next tokens and the rest other tokens), then rolls back
// the rejected ones; `plain` (no rollback) steps only the kept rows. Every
// kept row's logits are the same bits on both, through prompts that cross
// the window, compressor groups and KV blocks many times (the rejected rows
// wrote ring rows, compressor state, entries and index keys that the kept
// ones must never read). Rollback's refusals change nothing.
inline void CheckRollback(const Model& model, ActivationPrecision precision,
                          DeviceDecoderOptions options, const char* name) {
  const int64_t v = model.config().vocab_size;
  constexpr int kSeqs = 3, kDrafts = 4, kSteps = 90;
  options.max_sequences = kSeqs;
  options.max_positions = 640;
  options.max_batch = kSeqs * (kDrafts + 1);
  options.max_rows_per_slot = kDrafts + 1;
  options.max_rollback = kDrafts;
  auto spec = DeviceDecoder::Create(model, precision, options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  options.max_rollback = 0;
  auto plain = DeviceDecoder::Create(model, precision, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::vector<std::vector<int64_t>> stream(kSeqs);
  for (int q = 0; q < kSeqs; ++q) {
    stream[q] = RandomTokens(kSteps * (kDrafts + 1), 900 + q, v - 1);
    ASSERT_TRUE((*spec)->Start(q).ok());
    ASSERT_TRUE((*plain)->Start(q).ok());
  }
  std::mt19937 rng(5);
  std::vector<int64_t> length(kSeqs, 0);
  int64_t kept_rows = 0, differ = 0, rejected = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int> s_slots, p_slots, kept_of(kSeqs), first_row(kSeqs);
    std::vector<int64_t> s_tokens, p_tokens;
    for (int q = 0; q < kSeqs; ++q) {
      const int m = std::uniform_int_distribution<int>(0, kDrafts)(rng);
      const int kept = std::uniform_int_distribution<int>(0, m)(rng);
      kept_of[q] = kept;
      first_row[q] = static_cast<int>(s_slots.size());
      for (int j = 0; j <= m; ++j) {
        int64_t t = stream[q][length[q] + j];
        if (j > kept) t = (t + 1 + rng() % (v - 2)) % (v - 1);  // a rejected draft
        s_slots.push_back(q);
        s_tokens.push_back(t);
      }
      for (int j = 0; j <= kept; ++j) {
        p_slots.push_back(q);
        p_tokens.push_back(stream[q][length[q] + j]);
      }
      rejected += m - kept;
    }
    auto a = (*spec)->StepRows(s_slots, s_tokens, std::nullopt);
    ASSERT_TRUE(a.ok()) << "step " << step << ": " << a.status();
    const std::vector<float> got(a->begin(), a->end());
    auto b = (*plain)->StepRows(p_slots, p_tokens, std::nullopt);
    ASSERT_TRUE(b.ok()) << b.status();
    size_t prow = 0;
    for (int q = 0; q < kSeqs; ++q) {
      for (int j = 0; j <= kept_of[q]; ++j, ++prow) {
        ++kept_rows;
        differ += std::memcmp(got.data() + (first_row[q] + j) * v, b->data() + prow * v,
                              v * sizeof(float)) != 0;
      }
      length[q] += 1 + kept_of[q];
      if (step == 7 && q == 0) {  // refusals first: too far back, past the end, no slot
        const int64_t at = (*spec)->length(q);
        EXPECT_EQ((*spec)->Rollback(q, at - kDrafts - 1).code(),
                  absl::StatusCode::kInvalidArgument);
        EXPECT_EQ((*spec)->Rollback(q, at + 1).code(), absl::StatusCode::kInvalidArgument);
        EXPECT_EQ((*spec)->Rollback(kSeqs, 0).code(), absl::StatusCode::kInvalidArgument);
        EXPECT_EQ((*spec)->length(q), at);
      }
      ASSERT_TRUE((*spec)->Rollback(q, length[q]).ok());
      EXPECT_EQ((*spec)->length(q), length[q]);
      EXPECT_EQ((*plain)->length(q), length[q]);
    }
  }
  std::printf(
      "%s rollback: %lld kept rows over %d steps (%lld drafts rejected): %lld differ "
      "from stepping the kept rows alone\n",
      name, static_cast<long long>(kept_rows), kSteps, static_cast<long long>(rejected),
      static_cast<long long>(differ));
  EXPECT_EQ(differ, 0);
  EXPECT_GT(rejected, 50);
  for (int q = 0; q < kSeqs; ++q) EXPECT_GT(length[q], 128);  // past the window
}

}  // namespace weir::model::testing

#endif  // WEIR_WORKER_MODEL_DEVICE_DECODER_CHUNK_CHECK_H_
