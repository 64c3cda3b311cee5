// DSpark drafting on the device (DeviceDecoderOptions::drafting) against
// Model::DraftBatch on the CPU (GPU machine only; tag gpu).
//
// Sequences are prefilled on both sides (two imported from the CPU, two
// started empty and prefilled on the device in chunks, one of a single
// token), then run a speculative loop: each step the device and the CPU
// draft after the greedy token, a random number of the drafts is verified
// in one run (the token and those drafts, every position's logits), a
// random prefix of them is kept and the rest rolled back on both sides.
// Checked every step: kReference drafts (tokens, confidences, every draft
// logit) equal the CPU's bit for bit, as do the verification logits (the
// stage rings follow prefill chunks, verification runs and rollbacks); a
// one-position sequence gets an error on both sides. kFast drafts are
// batch-invariant (a sequence drafted alone or among others: the same
// bits). Bad calls are refused per slot and change nothing. A decoder that
// is a rank of an expert-parallel group (NCCL; two ranks need two GPUs)
// drafts its own sequences as the single decoder does. The fused Markov head
// (one launch a block) gives the per-position loop's bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "parallel/nccl_communicator.h"
#include "worker/model/device_decoder.h"
#include "worker/model/expert_placement.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

constexpr int kSeqs = 5;
constexpr int kDrafts = 4;

DeviceDecoderOptions DraftingOptions(DeviceDecoderOptions o, const ModelConfig& c) {
  o.max_sequences = kSeqs;
  o.max_positions = 512;
  o.max_batch = static_cast<int>(std::max<int64_t>(kSeqs * c.dspark_block_size, 16));
  o.max_rows_per_slot = 16;
  o.max_rollback = kDrafts;
  o.drafting = true;
  return o;
}

// Runs `prompt` on slot q in chunks of max_rows_per_slot positions.
void Prefill(DeviceDecoder& dev, int q, const std::vector<int64_t>& prompt) {
  const int64_t chunk = dev.max_rows_per_slot();
  for (int64_t at = 0; at < static_cast<int64_t>(prompt.size()); at += chunk) {
    const int64_t n = std::min<int64_t>(chunk, prompt.size() - at);
    std::vector<int> rows(n, q);
    auto out = dev.StepRows(rows, std::span<const int64_t>(prompt).subspan(at, n), std::nullopt);
    ASSERT_TRUE(out.ok()) << out.status();
  }
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `seed` varies the prompts and the verification lengths (ranks of a group
// check different sequences with the same number of steps).
void CheckDrafts(Model& cpu, ActivationPrecision precision, DeviceDecoderOptions options,
                 const char* name, int steps, int seed = 0) {
  const ModelConfig& c = cpu.config();
  const int64_t v = c.vocab_size;
  auto dev = DeviceDecoder::Create(cpu, precision, DraftingOptions(options, c));
  ASSERT_TRUE(dev.ok()) << dev.status();
  std::vector<std::unique_ptr<SequenceState>> states(kSeqs);
  std::vector<int64_t> next(kSeqs);
  const int lengths[kSeqs] = {9, 30, 1, 23, 40};
  for (int q = 0; q < kSeqs; ++q) {
    states[q] = cpu.NewSequence();
    const std::vector<int64_t> prompt = RandomTokens(lengths[q], 70 + q + 100 * seed, v - 1);
    auto logits = cpu.Forward(*states[q], prompt, 0);
    ASSERT_TRUE(logits.ok()) << logits.status();
    next[q] = ArgmaxRow(logits->data() + (lengths[q] - 1) * v, v);
    if (q % 2 == 0) {  // imported from the CPU
      ASSERT_TRUE((*dev)->Import(q, *states[q]).ok());
      continue;
    }
    // Prefilled on the device in chunks of up to 16 positions.
    ASSERT_TRUE((*dev)->Start(q).ok());
    for (int at = 0; at < lengths[q]; at += 16) {
      const int n = std::min(16, lengths[q] - at);
      std::vector<int> slots(n, q);
      auto out =
          (*dev)->StepRows(slots, std::span<const int64_t>(prompt).subspan(at, n), std::nullopt);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(std::memcmp(out->data() + (n - 1) * v, logits->data() + (at + n - 1) * v,
                            v * sizeof(float)),
                0)
          << name << " prefill chunk of sequence " << q;
    }
  }
  std::mt19937 rng(9 + seed);
  int64_t drafted = 0, draft_differ = 0, verify_rows = 0, verify_differ = 0, kept_total = 0,
          rolled = 0, matched = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<int> slots(kSeqs);
    std::vector<const SequenceState*> cpu_states(kSeqs);
    for (int q = 0; q < kSeqs; ++q) {
      slots[q] = q;
      cpu_states[q] = states[q].get();
    }
    std::vector<absl::StatusOr<DraftResult>> want = cpu.DraftBatch(cpu_states, next);
    std::vector<absl::StatusOr<DraftResult>> got = (*dev)->DraftBatch(slots, next);
    ASSERT_EQ(got.size(), static_cast<size_t>(kSeqs));
    std::vector<int> vslots;
    std::vector<int64_t> vtokens;
    std::vector<int> verified(kSeqs, 0);
    for (int q = 0; q < kSeqs; ++q) {
      ASSERT_EQ(got[q].ok(), want[q].ok()) << name << " step " << step << " seq " << q << ": "
                                           << got[q].status() << " / " << want[q].status();
      std::vector<int64_t> drafts;
      if (got[q].ok()) {
        ++drafted;
        const bool same = got[q]->tokens == want[q]->tokens &&
                          SameBits(got[q]->confidence, want[q]->confidence) &&
                          SameBits(got[q]->logits, want[q]->logits);
        draft_differ += !same;
        EXPECT_TRUE(same) << name << " step " << step << " seq " << q;
        drafts = got[q]->tokens;
      }
      const int m = drafts.empty() ? 0 : std::uniform_int_distribution<int>(0, kDrafts)(rng);
      verified[q] = m;
      vslots.push_back(q);
      vtokens.push_back(next[q]);
      for (int j = 0; j < m; ++j) {
        vslots.push_back(q);
        vtokens.push_back(drafts[j]);
      }
    }
    auto out = (*dev)->StepRows(vslots, vtokens, std::nullopt);
    ASSERT_TRUE(out.ok()) << name << " step " << step << ": " << out.status();
    const std::vector<float> dev_logits(out->begin(), out->end());
    size_t row = 0;
    for (int q = 0; q < kSeqs; ++q) {
      const int m = verified[q];
      const int64_t start = states[q]->length();
      std::vector<int64_t> run(vtokens.begin() + row, vtokens.begin() + row + m + 1);
      auto logits = cpu.Forward(*states[q], run, start);
      ASSERT_TRUE(logits.ok()) << logits.status();
      for (int j = 0; j <= m; ++j) {
        ++verify_rows;
        verify_differ += std::memcmp(dev_logits.data() + (row + j) * v, logits->data() + j * v,
                                     v * sizeof(float)) != 0;
      }
      // Greedy acceptance, and at times a random shorter prefix: rollback
      // of every length is exercised.
      int kept = 0;
      while (kept < m && run[kept + 1] == ArgmaxRow(logits->data() + kept * v, v)) ++kept;
      matched += kept;
      if (step % 3 == 2) kept = std::uniform_int_distribution<int>(0, kept)(rng);
      kept_total += kept;
      rolled += m - kept;
      ASSERT_TRUE(states[q]->Rollback(m - kept).ok());
      ASSERT_TRUE((*dev)->Rollback(q, states[q]->length()).ok());
      next[q] = ArgmaxRow(logits->data() + kept * v, v);
      row += m + 1;
    }
  }
  std::printf(
      "%s drafting: %lld drafts (%lld differ from the CPU), %lld verification rows (%lld "
      "differ), %lld drafts accepted greedily, %lld kept, %lld rolled back\n",
      name, static_cast<long long>(drafted), static_cast<long long>(draft_differ),
      static_cast<long long>(verify_rows), static_cast<long long>(verify_differ),
      static_cast<long long>(matched), static_cast<long long>(kept_total),
      static_cast<long long>(rolled));
  EXPECT_EQ(draft_differ, 0);
  EXPECT_EQ(verify_differ, 0);
  EXPECT_GT(drafted, steps * (kSeqs - 1));  // the one-token sequence drafts from its second step
  EXPECT_GT(rolled, 20);
  EXPECT_EQ((*dev)->stats().drafts, drafted);
}

TEST(DeviceDecoderDraftTest, TinyBf16DraftsAreTheCpusBits) {
  auto cpu = RowStableCpuModel(TinyCheckpoint(11), ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  CheckDrafts(*cpu, ActivationPrecision::kBf16, {.kv_block_tokens = 2}, "tiny bf16", 40);
}

// A decoder that is one rank of an expert-parallel group (an NCCL
// communicator): the backbone's MoE goes through the exchange, the stages'
// experts stay local. A world of one here; two ranks below.
TEST(DeviceDecoderDraftTest, TinyBf16DraftsInAnExpertParallelWorldOfOne) {
  auto cpu = RowStableCpuModel(TinyCheckpoint(11), ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  auto id = parallel::NcclCommunicator::MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto comm = parallel::NcclCommunicator::Create(Rank(0), 1, *id, {});
  ASSERT_TRUE(comm.ok()) << comm.status();
  const ModelConfig& c = cpu->config();
  DeviceDecoderOptions o{.kv_block_tokens = 2};
  o.communicator = comm->get();
  o.placement =
      IdentityPlacement(static_cast<int>(c.n_layers), static_cast<int>(c.n_routed_experts), 1);
  CheckDrafts(*cpu, ActivationPrecision::kBf16, o, "tiny bf16, EP world of 1", 30);
}

// Two ranks on two GPUs (skipped with fewer): every StepRows is a collective
// of the pair (the same number on both, each rank's own rows), while each
// drafts and rolls back its own sequences; each rank's drafts and
// verification rows equal its CPU model's, bit for bit.
TEST(DeviceDecoderDraftTest, TwoRanksDraftOverNccl) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    GTEST_SKIP() << devices << " CUDA device(s); two are needed";
  }
  constexpr int kWorld = 2;
  const Checkpoint& ckpt = TinyCheckpoint(11);
  const ModelConfig& c = ckpt.config();
  auto id = parallel::NcclCommunicator::MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<std::unique_ptr<parallel::NcclCommunicator>> comms(kWorld);
  std::vector<std::unique_ptr<Model>> cpus(kWorld);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      cpus[r] = RowStableCpuModel(ckpt, ActivationPrecision::kBf16);
      threads.emplace_back([&, r] {
        auto comm = parallel::NcclCommunicator::Create(
            Rank(r), kWorld, *id, {.timeout = absl::Seconds(60), .device = DeviceOrdinal(r)});
        EXPECT_TRUE(comm.ok()) << comm.status();
        if (comm.ok()) comms[r] = std::move(*comm);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  const ExpertPlacement placement =
      IdentityPlacement(static_cast<int>(c.n_layers), static_cast<int>(c.n_routed_experts), kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_NE(comms[r], nullptr);
    ASSERT_NE(cpus[r], nullptr);
    threads.emplace_back([&, r] {
      DeviceDecoderOptions o{.device = r, .kv_block_tokens = 2};
      o.communicator = comms[r].get();
      o.placement = placement;
      CheckDrafts(*cpus[r], ActivationPrecision::kBf16, o, r == 0 ? "rank 0 of 2" : "rank 1 of 2",
                  30, r);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(DeviceDecoderDraftTest, TinyFp32EagerDraftsAreTheCpusBits) {
  auto cpu = RowStableCpuModel(TinyCheckpoint(12), ActivationPrecision::kFp32);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions o;
  o.use_graphs = false;
  o.mxfp4_experts = false;  // the fp32 expert path too
  CheckDrafts(*cpu, ActivationPrecision::kFp32, o, "tiny fp32 eager", 30);
}

// The trained tiny: drafts that are often right.
TEST(DeviceDecoderDraftTest, TrainedTinyDraftsAreTheCpusBits) {
  const Checkpoint* trained = TrainedTinyCheckpoint();
  ASSERT_NE(trained, nullptr);
  auto cpu = RowStableCpuModel(*trained, ActivationPrecision::kBf16, TrainedTinyEngramMap());
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions o;
  o.engram_token_map = TrainedTinyEngramMap();
  CheckDrafts(*cpu, ActivationPrecision::kBf16, o, "trained tiny bf16", 40);
}

TEST(DeviceDecoderDraftTest, SmallFp32DraftsAreTheCpusBits) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kFp32);
  ASSERT_NE(cpu, nullptr);
  CheckDrafts(*cpu, ActivationPrecision::kFp32, {}, "small fp32", 12);
}

// kFast: a sequence's drafts do not depend on the others drafted with it.
TEST(DeviceDecoderDraftTest, FastDraftsAreBatchInvariant) {
  const Checkpoint* trained = TrainedTinyCheckpoint();
  ASSERT_NE(trained, nullptr);
  auto cpu = RowStableCpuModel(*trained, ActivationPrecision::kBf16, TrainedTinyEngramMap());
  ASSERT_NE(cpu, nullptr);
  const ModelConfig& c = cpu->config();
  DeviceDecoderOptions o{.numerics = DecodeNumerics::kFast};
  o.engram_token_map = TrainedTinyEngramMap();
  auto dev = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, DraftingOptions(o, c));
  ASSERT_TRUE(dev.ok()) << dev.status();
  std::vector<int> slots;
  std::vector<int64_t> next;
  for (int q = 0; q < kSeqs; ++q) {
    const std::vector<int64_t> prompt = RandomTokens(12 + 7 * q, 300 + q, c.vocab_size - 1);
    ASSERT_TRUE((*dev)->Start(q).ok());
    Prefill(**dev, q, prompt);
    slots.push_back(q);
    next.push_back(prompt.back());
  }
  auto together = (*dev)->DraftBatch(slots, next);
  for (int q = 0; q < kSeqs; ++q) {
    ASSERT_TRUE(together[q].ok()) << together[q].status();
    auto alone = (*dev)->DraftBatch(std::span<const int>(slots).subspan(q, 1),
                                    std::span<const int64_t>(next).subspan(q, 1));
    ASSERT_TRUE(alone[0].ok()) << alone[0].status();
    EXPECT_EQ(alone[0]->tokens, together[q]->tokens) << q;
    EXPECT_TRUE(SameBits(alone[0]->confidence, together[q]->confidence)) << q;
    EXPECT_TRUE(SameBits(alone[0]->logits, together[q]->logits)) << q;
    for (float x : together[q]->logits) ASSERT_TRUE(std::isfinite(x));
  }
  // The reference decoder's drafts on the same sequences: how often the
  // fast drafts agree (printed; the drafts are decisions of the fast path).
  DeviceDecoderOptions ro;
  ro.engram_token_map = o.engram_token_map;
  auto ref = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, DraftingOptions(ro, c));
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (int q = 0; q < kSeqs; ++q) {
    const std::vector<int64_t> prompt = RandomTokens(12 + 7 * q, 300 + q, c.vocab_size - 1);
    ASSERT_TRUE((*ref)->Start(q).ok());
    Prefill(**ref, q, prompt);
  }
  auto want = (*ref)->DraftBatch(slots, next);
  int same = 0, total = 0;
  for (int q = 0; q < kSeqs; ++q) {
    ASSERT_TRUE(want[q].ok());
    for (size_t j = 0; j < want[q]->tokens.size(); ++j, ++total) {
      same += want[q]->tokens[j] == together[q]->tokens[j];
    }
  }
  std::printf("trained tiny fast drafts: %d of %d draft tokens equal the reference's\n", same,
              total);
  // Drafts chain (each draft's Markov bias follows the one before), so one
  // near-tie flipped spreads; a broken fast path (rings, indices) would
  // agree about as often as chance over 4,096 tokens.
  EXPECT_GE(same * 2, total);
}

// kFast: the Markov head of a block in one MarkovDraft launch gives the
// per-position loop's drafts, confidences and draft logits bit for bit.
TEST(DeviceDecoderDraftTest, FusedMarkovGivesTheLoopsBits) {
  const Checkpoint* trained = TrainedTinyCheckpoint();
  ASSERT_NE(trained, nullptr);
  auto cpu = RowStableCpuModel(*trained, ActivationPrecision::kBf16, TrainedTinyEngramMap());
  ASSERT_NE(cpu, nullptr);
  const ModelConfig& c = cpu->config();
  std::vector<std::vector<DraftResult>> drafts(2);
  for (bool fused : {false, true}) {
    DeviceDecoderOptions o{.numerics = DecodeNumerics::kFast};
    o.engram_token_map = TrainedTinyEngramMap();
    o.fused_markov = fused;
    auto dev = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, DraftingOptions(o, c));
    ASSERT_TRUE(dev.ok()) << dev.status();
    std::vector<int> slots;
    std::vector<int64_t> next;
    for (int q = 0; q < kSeqs; ++q) {
      const std::vector<int64_t> prompt = RandomTokens(9 + 5 * q, 700 + q, c.vocab_size - 1);
      ASSERT_TRUE((*dev)->Start(q).ok());
      Prefill(**dev, q, prompt);
      slots.push_back(q);
      next.push_back(prompt.back());
    }
    // Every sequence together, then the first alone (a pass of one sequence).
    for (auto& d : (*dev)->DraftBatch(slots, next)) {
      ASSERT_TRUE(d.ok()) << d.status();
      drafts[fused].push_back(*std::move(d));
    }
    auto alone = (*dev)->DraftBatch(std::span<const int>(slots).subspan(0, 1),
                                    std::span<const int64_t>(next).subspan(0, 1));
    ASSERT_TRUE(alone[0].ok()) << alone[0].status();
    drafts[fused].push_back(*std::move(alone[0]));
  }
  ASSERT_EQ(drafts[0].size(), drafts[1].size());
  for (size_t q = 0; q < drafts[0].size(); ++q) {
    EXPECT_EQ(drafts[1][q].tokens, drafts[0][q].tokens) << q;
    EXPECT_TRUE(SameBits(drafts[1][q].confidence, drafts[0][q].confidence)) << q;
    EXPECT_TRUE(SameBits(drafts[1][q].logits, drafts[0][q].logits)) << q;
  }
}

TEST(DeviceDecoderDraftTest, BadCallsAreRefusedPerSlot) {
  auto cpu = RowStableCpuModel(TinyCheckpoint(11), ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  const ModelConfig& c = cpu->config();
  // Without options.drafting: FAILED_PRECONDITION, drafts() false.
  auto plain = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16,
                                     {.max_sequences = 2, .max_positions = 64, .max_batch = 8});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->drafts());
  const int zero[] = {0};
  const int64_t token[] = {5};
  EXPECT_EQ((*plain)->DraftBatch(zero, token)[0].status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto dev = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, DraftingOptions({}, c));
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_TRUE((*dev)->drafts());
  const std::vector<int64_t> prompt = RandomTokens(6, 3, c.vocab_size - 1);
  ASSERT_TRUE((*dev)->Start(0).ok());
  std::vector<int> rows(prompt.size(), 0);
  ASSERT_TRUE((*dev)->StepRows(rows, prompt, std::nullopt).ok());
  ASSERT_TRUE((*dev)->Start(1).ok());  // empty
  const int slots[] = {0, 1, 0, 7, -1, 0};
  const int64_t tokens[] = {5, 5, 5, 5, 5, c.vocab_size};
  auto got = (*dev)->DraftBatch(slots, tokens);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kInvalidArgument);  // empty slot
  EXPECT_EQ(got[2].status().code(), absl::StatusCode::kInvalidArgument);  // repeated
  EXPECT_EQ(got[3].status().code(), absl::StatusCode::kInvalidArgument);  // out of range
  EXPECT_EQ(got[4].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got[5].status().code(), absl::StatusCode::kInvalidArgument);  // token
  EXPECT_EQ((*dev)->length(0), 6);  // drafting changes no sequence
  auto again =
      (*dev)->DraftBatch(std::span<const int>(slots, 1), std::span<const int64_t>(tokens, 1));
  ASSERT_TRUE(again[0].ok());
  EXPECT_EQ(again[0]->tokens, got[0]->tokens);
  EXPECT_TRUE(SameBits(again[0]->logits, got[0]->logits));
  // Without logits: the same drafts and confidences, no logits copied back.
  auto bare = (*dev)->DraftBatch(std::span<const int>(slots, 1),
                                 std::span<const int64_t>(tokens, 1), /*with_logits=*/false);
  ASSERT_TRUE(bare[0].ok());
  EXPECT_EQ(bare[0]->tokens, got[0]->tokens);
  EXPECT_TRUE(SameBits(bare[0]->confidence, got[0]->confidence));
  EXPECT_TRUE(bare[0]->logits.empty());
}

}  // namespace
}  // namespace weir::model
