// DeviceDecoder against the CPU model (GPU machine only; tag gpu).
//
// For the tiny and small models, fp32 and bf16: 12 sequences with prompts of
// 1 to 70 tokens are prefilled on the CPU model (CpuOps, row-stable logits)
// and imported; then 64 decode steps run on the CPU (ForwardBatch) and on
// two decoders, one replaying CUDA graphs and one launching eagerly. Batches
// change size along the way (every sequence, then half of them: two padded
// sizes, two graphs), one sequence is released and its slot reused by a new
// sequence imported mid-run. Checked at every step and row:
//   * graph and eager decoders give the same bits;
//   * the decoders' logits equal the CPU's bit for bit (every op uses the
//     CPU's arithmetic order), so the greedy tokens are identical too; the
//     maximum relative difference is printed either way.
// A third decoder runs the expert-parallel path in a world of 1: an NCCL
// communicator of one rank, a placement with replica slots in shuffled order,
// every MoE layer exchanging its blocks over NCCL inside the graph; its bits
// must equal the plain graph decoder's.
// TwoRanksOverNccl (needs 2 GPUs, skipped otherwise): two ranks on two
// devices, a random redundant placement, each rank stepping its own sequences
// (some steps with none), every row bit-identical to the CPU.
// PagedPoolsThroughBlockTables: the decoder's own block tables (a pool
// smaller than its slots could hold), the caller's (SetBlockTable) and wide
// blocks give the same bits; running out of blocks refuses a step and
// changes nothing.
// A last test checks the refusals (bad slots, tokens, batch sizes, a full
// slot) and that a refused call changes nothing.
#include "worker/model/device_decoder.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/nccl_communicator.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/device_decoder_chunk_check.h"
#include "worker/model/device_decoder_synthetic.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

constexpr int kSteps = 64;

int64_t Argmax(const float* row, int64_t n) { return ArgmaxRow(row, n); }

double RowRel(const float* a, const float* b, int64_t n) { return RowRelativeDifference(a, b, n); }

// A placement of `world` ranks with `extra` replica slots per rank: every
// expert once, extra slots replicating random experts, shuffled per layer.
ExpertPlacement RedundantPlacement(const ModelConfig& c, int world, int extra, uint32_t seed) {
  const int n = static_cast<int>(c.n_routed_experts);
  ExpertPlacement pl{.num_layers = c.n_layers, .num_logical = n,
                     .slots_per_rank = (n + world - 1) / world + extra, .world_size = world};
  std::mt19937 rng(seed);
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<int32_t> layer(pl.num_physical());
    for (int p = 0; p < pl.num_physical(); ++p) {
      layer[p] = p < n ? p : static_cast<int32_t>(rng() % n);
    }
    std::shuffle(layer.begin(), layer.end(), rng);
    pl.physical_to_logical.insert(pl.physical_to_logical.end(), layer.begin(), layer.end());
  }
  EXPECT_TRUE(ValidatePlacement(pl).ok());
  return pl;
}

// Communicators of `world` ranks, rank r on device r (created together: the
// set-up is collective).
std::vector<std::unique_ptr<parallel::NcclCommunicator>> MakeNccl(int world) {
  auto id = parallel::NcclCommunicator::MakeUniqueId();
  EXPECT_TRUE(id.ok()) << id.status();
  std::vector<std::unique_ptr<parallel::NcclCommunicator>> comms(world);
  if (!id.ok()) return comms;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto comm = parallel::NcclCommunicator::Create(Rank(r), world, *id,
                                                     {.device = DeviceOrdinal(r)});
      EXPECT_TRUE(comm.ok()) << comm.status();
      if (comm.ok()) comms[r] = std::move(*comm);
    });
  }
  for (std::thread& t : threads) t.join();
  return comms;
}

struct Seq {
  std::unique_ptr<SequenceState> state;
  int slot = -1;
  int64_t next = 0;  // the token to feed next (greedy from the last logits)
  bool active = false;
};

void CheckModel(const Checkpoint& ckpt, const char* name, ActivationPrecision precision) {
  const int64_t v = ckpt.config().vocab_size;
  auto cpu = RowStableCpuModel(ckpt, precision);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions options{.max_sequences = 16, .max_positions = 256, .max_batch = 16};
  auto graph = DeviceDecoder::Create(*cpu, precision, options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  options.use_graphs = false;
  options.mxfp4_experts = false;  // the eager decoder also checks the fp32 expert path
  options.kv_block_tokens = 6;    // and small KV blocks: 3 or 6 entries a block, tables scattered
  auto eager = DeviceDecoder::Create(*cpu, precision, options);
  ASSERT_TRUE(eager.ok()) << eager.status();
  std::vector<std::unique_ptr<parallel::NcclCommunicator>> nccl = MakeNccl(1);
  ASSERT_NE(nccl[0], nullptr);
  DeviceDecoderOptions ep_options{
      .max_sequences = 16, .max_positions = 256, .kv_block_tokens = 2, .max_batch = 16};
  ep_options.communicator = nccl[0].get();
  ep_options.placement = RedundantPlacement(ckpt.config(), 1, 3, 5);
  auto ep = DeviceDecoder::Create(*cpu, precision, ep_options);
  ASSERT_TRUE(ep.ok()) << ep.status();
  // The device-initiated exchange needs peers (NCCL gives a world of one no
  // symmetric memory): refused, and the communicator still serves `ep`.
  ep_options.ep_lsa_exchange = true;
  EXPECT_EQ(DeviceDecoder::Create(*cpu, precision, ep_options).status().code(),
            absl::StatusCode::kFailedPrecondition);

  const std::vector<int> lengths = {1, 2, 3, 7, 16, 31, 33, 40, 5, 64, 9, 70};
  std::vector<Seq> seqs(lengths.size() + 1);
  auto start = [&](size_t i, int len, int slot) {
    Seq& s = seqs[i];
    s.state = cpu->NewSequence();
    const std::vector<int64_t> prompt = RandomTokens(len, 100 + static_cast<uint32_t>(i));
    auto logits = cpu->Forward(*s.state, prompt, 0);
    ASSERT_TRUE(logits.ok()) << logits.status();
    s.next = Argmax(logits->data() + (len - 1) * v, v);
    s.slot = slot;
    s.active = true;
    ASSERT_TRUE((*graph)->Import(slot, *s.state).ok());
    ASSERT_TRUE((*eager)->Import(slot, *s.state).ok());
    ASSERT_TRUE((*ep)->Import(slot, *s.state).ok());
    cpu->expert_load().Reset();  // only decode rows are compared
  };
  // The CPU model's expert load over the decode rows, [layer, expert].
  const int64_t experts = ckpt.config().n_routed_experts;
  const int layers = ckpt.config().n_layers;
  std::vector<int64_t> cpu_load(layers * experts, 0);
  for (size_t i = 0; i < lengths.size(); ++i) start(i, lengths[i], static_cast<int>(i));

  int rows_checked = 0, rows_differing = 0, token_mismatches = 0, graph_eager_differing = 0,
      graph_ep_differing = 0;
  double max_rel = 0;
  for (int step = 0; step < kSteps; ++step) {
    if (step == 20) {  // sequence 3 ends; a new one takes its slot
      seqs[3].active = false;
      ASSERT_TRUE((*graph)->Release(3).ok());
      ASSERT_TRUE((*eager)->Release(3).ok());
      ASSERT_TRUE((*ep)->Release(3).ok());
      start(lengths.size(), 12, 3);
    }
    std::vector<SequenceState*> states;
    std::vector<std::vector<int64_t>> toks;
    std::vector<int64_t> starts;
    std::vector<int> slots;
    std::vector<int64_t> tokens;
    std::vector<Seq*> in_step;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      if (!s.active || (step % 3 == 2 && i % 2 == 1)) continue;  // every third step: half
      states.push_back(s.state.get());
      toks.push_back({s.next});
      starts.push_back(s.state->length());
      slots.push_back(s.slot);
      tokens.push_back(s.next);
      in_step.push_back(&s);
    }
    std::vector<std::span<const int64_t>> spans(toks.begin(), toks.end());
    auto want = cpu->ForwardBatch(states, spans, starts);
    ASSERT_TRUE(want.ok()) << want.status();
    for (int l = 0; l < layers; ++l) {
      for (int64_t e = 0; e < experts; ++e) cpu_load[l * experts + e] += cpu->expert_load().count(l, e);
    }
    cpu->expert_load().Reset();
    auto got = (*graph)->Step(slots, tokens);
    ASSERT_TRUE(got.ok()) << got.status();
    auto got_eager = (*eager)->Step(slots, tokens);
    ASSERT_TRUE(got_eager.ok()) << got_eager.status();
    ASSERT_EQ(got->size(), slots.size() * v);
    if (std::memcmp(got->data(), got_eager->data(), got->size() * sizeof(float)) != 0) {
      ++graph_eager_differing;
    }
    if (step == 32) {  // an expert-map commit: other slots, other replicas
      ASSERT_TRUE((*ep)->SetPlacement(RedundantPlacement(ckpt.config(), 1, 3, 77)).ok());
    }
    auto got_ep = (*ep)->Step(slots, tokens);
    ASSERT_TRUE(got_ep.ok()) << got_ep.status();
    if (std::memcmp(got->data(), got_ep->data(), got->size() * sizeof(float)) != 0) {
      ++graph_ep_differing;
    }
    for (size_t r = 0; r < slots.size(); ++r) {
      const float* d = got->data() + r * v;
      const std::vector<float>& c = (*want)[r];
      ++rows_checked;
      const double rel = RowRel(d, c.data(), v);
      max_rel = std::max(max_rel, rel);
      rows_differing += std::memcmp(d, c.data(), v * sizeof(float)) != 0;
      const int64_t cpu_next = Argmax(c.data(), v);
      token_mismatches += Argmax(d, v) != cpu_next;
      in_step[r]->next = cpu_next;
      EXPECT_EQ((*graph)->length(in_step[r]->slot), in_step[r]->state->length());
    }
  }
  const DeviceDecoderStats& st = (*graph)->stats();
  std::printf(
      "%s %s: %d decode rows over %d steps: %d not bit-identical to the CPU, max rel "
      "%.3g, %d greedy tokens differ; graph vs eager: %d steps differ; graph vs NCCL "
      "world of 1 (replica slots, re-placed at step 32): %d steps differ; %lld graphs "
      "captured, %lld launches; arena %.1f MiB (weights %.1f, pools %.1f); experts "
      "MXFP4 in %d layers (graph decoder), fp32 (eager)\n",
      name, precision == ActivationPrecision::kFp32 ? "fp32" : "bf16", rows_checked, kSteps,
      rows_differing, max_rel, token_mismatches, graph_eager_differing, graph_ep_differing,
      static_cast<long long>(st.graph_captures), static_cast<long long>(st.graph_launches),
      st.arena_bytes / 1048576.0, st.weight_bytes / 1048576.0, st.pool_bytes / 1048576.0,
      st.mxfp4_layers);
  EXPECT_EQ(graph_eager_differing, 0);
  EXPECT_EQ(graph_ep_differing, 0);
  // The decoders' device-side expert load equals the CPU model's: routed
  // pairs per (layer, expert), every pair served locally (padding rows not
  // counted); taking it starts the counters afresh.
  std::vector<int64_t> cpu_served(layers, 0);
  for (int l = 0; l < layers; ++l) {
    for (int64_t e = 0; e < experts; ++e) cpu_served[l] += cpu_load[l * experts + e];
  }
  for (DeviceDecoder* d : {graph->get(), ep->get()}) {
    std::vector<int64_t> routed(layers * experts, 0), served(layers, 0);
    ASSERT_TRUE(d->TakeExpertLoad(routed, served).ok());
    EXPECT_EQ(routed, cpu_load);
    EXPECT_EQ(served, cpu_served);
    std::vector<int64_t> again(layers * experts, 0), again_served(layers, 0);
    ASSERT_TRUE(d->TakeExpertLoad(again, again_served).ok());
    EXPECT_EQ(again, std::vector<int64_t>(layers * experts, 0));
    std::vector<int64_t> wrong(3);
    EXPECT_EQ(d->TakeExpertLoad(wrong, served).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*ep)->stats().graph_captures, 2);  // the re-placement kept the graphs
  EXPECT_EQ((*ep)->SetPlacement(RedundantPlacement(ckpt.config(), 1, 4, 1)).code(),
            absl::StatusCode::kInvalidArgument);  // another slot count
  EXPECT_EQ((*graph)->SetPlacement(RedundantPlacement(ckpt.config(), 1, 3, 1)).code(),
            absl::StatusCode::kInvalidArgument);  // no communicator
  EXPECT_EQ((*ep)->stats().exchange_bytes, 0);  // a world of 1 sends nothing to peers
  EXPECT_EQ(rows_differing, 0);
  EXPECT_EQ(token_mismatches, 0);
  EXPECT_EQ(st.graph_captures, 2);  // padded sizes 16 and 8
  EXPECT_EQ(st.graph_launches, kSteps);
  // The checkpoints store the experts as MXFP4, so they re-encode exactly.
  EXPECT_EQ(st.mxfp4_layers, ckpt.config().n_layers);
  EXPECT_EQ((*eager)->stats().mxfp4_layers, 0);
  EXPECT_LT(st.expert_bytes * 6, (*eager)->stats().expert_bytes);
}

TEST(DeviceDecoderTest, TinyFp32) { CheckModel(TinyCheckpoint(11), "tiny", ActivationPrecision::kFp32); }
TEST(DeviceDecoderTest, TinyBf16) { CheckModel(TinyCheckpoint(11), "tiny", ActivationPrecision::kBf16); }

const Checkpoint* Small() { return SmallCheckpoint(3); }

TEST(DeviceDecoderTest, SmallFp32) {
  ASSERT_NE(Small(), nullptr);
  CheckModel(*Small(), "small", ActivationPrecision::kFp32);
}
TEST(DeviceDecoderTest, SmallBf16) {
  ASSERT_NE(Small(), nullptr);
  CheckModel(*Small(), "small", ActivationPrecision::kBf16);
}

// Several positions of a slot in one step (device prefill chunks, draft
// verification): bit-identical to one position a step and to the CPU's
// ForwardBatch of the same chunks (device_decoder_chunk_check.h).
TEST(DeviceDecoderTest, ChunkedStepsTinyBf16) {
  auto cpu = RowStableCpuModel(TinyCheckpoint(11), ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  // Blocks of 2 positions: every sequence's entries scattered over the pool.
  testing::CheckChunkedSteps(*cpu, ActivationPrecision::kBf16, {.kv_block_tokens = 2}, cpu.get(),
                             "tiny bf16");
}
TEST(DeviceDecoderTest, ChunkedStepsSmallFp32Eager) {
  ASSERT_NE(Small(), nullptr);
  auto cpu = RowStableCpuModel(*Small(), ActivationPrecision::kFp32);
  ASSERT_NE(cpu, nullptr);
  testing::CheckChunkedSteps(*cpu, ActivationPrecision::kFp32, {.use_graphs = false}, cpu.get(),
                             "small fp32 eager");
}
TEST(DeviceDecoderTest, ChunkedStepsSmallBf16) {
  ASSERT_NE(Small(), nullptr);
  auto cpu = RowStableCpuModel(*Small(), ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  testing::CheckChunkedSteps(*cpu, ActivationPrecision::kBf16, {.kv_block_tokens = 4}, cpu.get(),
                             "small bf16");
}

// Paged compressed pools. Three decoders step the same rows (prompts in
// chunks, then greedy tokens, sequences ending and new ones starting in
// their slots): `own` takes 4-position blocks from a pool of 24 (fewer than
// its 4 slots x 16 could hold), `ext` gets its tables from the test
// (SetBlockTable: blocks of a pool of 64 in a shuffled order, grown before
// each step), `wide` keeps the default 64-position blocks. Every row's
// logits are the same bits on all three. When `own`'s rows need more blocks
// than are free the step is OUT_OF_RANGE and changes nothing (lengths, free
// blocks); releasing a slot returns its blocks and the step then runs.
// SetBlockTable's refusals change nothing either.
TEST(DeviceDecoderTest, PagedPoolsThroughBlockTables) {
  const Checkpoint& ckpt = TinyCheckpoint(11);
  const int64_t v = ckpt.config().vocab_size;
  auto cpu = RowStableCpuModel(ckpt, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  constexpr int kSlots = 4, kRows = 8;
  const DeviceDecoderOptions base{.max_sequences = kSlots,
                                  .max_positions = 64,
                                  .max_batch = kSlots * kRows,
                                  .max_rows_per_slot = kRows};
  DeviceDecoderOptions o = base;
  o.kv_block_tokens = 4;
  o.kv_blocks = 24;
  auto own = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, o);
  ASSERT_TRUE(own.ok()) << own.status();
  o.kv_blocks = 64;
  o.external_block_tables = true;
  auto ext = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, o);
  ASSERT_TRUE(ext.ok()) << ext.status();
  auto wide = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, base);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ((*own)->kv_block_tokens(), 4);
  EXPECT_EQ((*own)->table_width(), 16);
  EXPECT_EQ((*own)->kv_blocks(), 24);
  EXPECT_EQ((*own)->free_kv_blocks(), 24);
  EXPECT_EQ((*wide)->kv_block_tokens(), 64);
  EXPECT_EQ((*own)->BlocksFor(9), 3);  // ratio 1: 9 entries in blocks of 4
  EXPECT_EQ((*own)->SetBlockTable(0, {}).code(), absl::StatusCode::kInvalidArgument);

  // The test's pool for `ext`: 64 blocks in a shuffled order, per slot a table.
  std::mt19937 rng(23);
  std::vector<int32_t> free_ext(64);
  std::iota(free_ext.begin(), free_ext.end(), 0);
  std::shuffle(free_ext.begin(), free_ext.end(), rng);
  std::vector<std::vector<int32_t>> tables(kSlots);
  auto grow_ext = [&](int slot, int64_t positions) {
    const int64_t need = (*ext)->BlocksFor(positions);
    while (static_cast<int64_t>(tables[slot].size()) < need) {
      tables[slot].push_back(free_ext.back());
      free_ext.pop_back();
    }
    ASSERT_TRUE((*ext)->SetBlockTable(slot, tables[slot]).ok());
  };
  auto release = [&](int slot) {
    for (auto* d : {own->get(), ext->get(), wide->get()}) ASSERT_TRUE(d->Release(slot).ok());
    free_ext.insert(free_ext.begin(), tables[slot].begin(), tables[slot].end());
    tables[slot].clear();
  };
  std::vector<int64_t> fed(kSlots, 0), next(kSlots, 0), prompt_len(kSlots, 0);
  std::vector<std::vector<int64_t>> prompt(kSlots);
  int started = 0;
  auto start = [&](int slot) {
    prompt_len[slot] = std::uniform_int_distribution<int>(5, 40)(rng);
    prompt[slot] = RandomTokens(prompt_len[slot], 900 + started++, v - 1);
    fed[slot] = 0;
    for (auto* d : {own->get(), ext->get(), wide->get()}) ASSERT_TRUE(d->Start(slot).ok());
  };
  for (int slot = 0; slot < kSlots; ++slot) start(slot);
  int64_t rows_checked = 0, differ = 0, refusals = 0;
  for (int step = 0; step < 40; ++step) {
    // A sequence past 48 positions ends; a new one takes its slot.
    for (int slot = 0; slot < kSlots; ++slot) {
      if (fed[slot] >= 48) {
        release(slot);
        start(slot);
      }
    }
    std::vector<int> slots, order(kSlots);
    std::vector<int64_t> tokens;
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> rows_of(kSlots, 0);
    for (int slot : order) {
      const int64_t n = fed[slot] < prompt_len[slot]
                            ? std::min<int64_t>(prompt_len[slot] - fed[slot],
                                                std::uniform_int_distribution<int>(1, kRows)(rng))
                            : 1;
      for (int64_t j = 0; j < n; ++j) {
        slots.push_back(slot);
        tokens.push_back(fed[slot] + j < prompt_len[slot] ? prompt[slot][fed[slot] + j]
                                                          : next[slot]);
      }
      rows_of[slot] = n;
    }
    // `own` may run out of blocks: nothing changes, then a slot is freed.
    absl::StatusOr<std::span<const float>> a = (*own)->StepRows(slots, tokens, std::nullopt);
    if (!a.ok()) {
      ASSERT_EQ(a.status().code(), absl::StatusCode::kOutOfRange) << a.status();
      ++refusals;
      const int64_t free_before = (*own)->free_kv_blocks();
      for (int slot = 0; slot < kSlots; ++slot) EXPECT_EQ((*own)->length(slot), fed[slot]);
      EXPECT_LT(free_before, 24);
      int longest = 0;
      for (int slot = 1; slot < kSlots; ++slot) longest = fed[slot] > fed[longest] ? slot : longest;
      release(longest);
      start(longest);
      EXPECT_GT((*own)->free_kv_blocks(), free_before);
      --step;
      continue;
    }
    const std::vector<float> got_own(a->begin(), a->end());
    for (int slot = 0; slot < kSlots; ++slot) grow_ext(slot, fed[slot] + rows_of[slot]);
    auto b = (*ext)->StepRows(slots, tokens, std::nullopt);
    ASSERT_TRUE(b.ok()) << b.status();
    const std::vector<float> got_ext(b->begin(), b->end());
    auto c = (*wide)->StepRows(slots, tokens, std::nullopt);
    ASSERT_TRUE(c.ok()) << c.status();
    for (size_t r = 0; r < slots.size(); ++r) {
      ++rows_checked;
      differ += std::memcmp(got_own.data() + r * v, got_ext.data() + r * v, v * 4) != 0 ||
                std::memcmp(got_own.data() + r * v, c->data() + r * v, v * 4) != 0;
    }
    size_t row = 0;
    for (int slot : order) {
      row += rows_of[slot];
      fed[slot] += rows_of[slot];
      next[slot] = Argmax(got_own.data() + (row - 1) * v, v);
      EXPECT_EQ((*own)->length(slot), fed[slot]);
    }
  }
  std::printf(
      "paged pools: %lld rows, %lld differ between own / external / wide tables; %lld "
      "steps refused for want of blocks\n",
      static_cast<long long>(rows_checked), static_cast<long long>(differ),
      static_cast<long long>(refusals));
  EXPECT_EQ(differ, 0);
  EXPECT_GT(rows_checked, 150);
  EXPECT_GT(refusals, 0);
  // A step needing blocks past the table set: OUT_OF_RANGE, nothing changes.
  const int64_t len0 = (*ext)->length(0);
  ASSERT_TRUE((*ext)->SetBlockTable(0, tables[0]).ok());
  std::vector<int> s0(kRows, 0);
  std::vector<int64_t> t0(kRows, 1);
  if ((*ext)->BlocksFor(len0 + kRows) > static_cast<int64_t>(tables[0].size())) {
    EXPECT_EQ((*ext)->StepRows(s0, t0, std::nullopt).status().code(),
              absl::StatusCode::kOutOfRange);
    EXPECT_EQ((*ext)->length(0), len0);
  }
  // Refusals: another slot's block, a repeated block, one outside the pool,
  // a table shorter than the sequence, a live entry moved.
  ASSERT_FALSE(tables[1].empty());
  std::vector<int32_t> t = tables[0];
  t.push_back(tables[1][0]);
  EXPECT_EQ((*ext)->SetBlockTable(0, t).code(), absl::StatusCode::kInvalidArgument);
  t.back() = t.front();
  EXPECT_EQ((*ext)->SetBlockTable(0, t).code(), absl::StatusCode::kInvalidArgument);
  t.back() = 64;
  EXPECT_EQ((*ext)->SetBlockTable(0, t).code(), absl::StatusCode::kInvalidArgument);
  if (tables[0].size() >= 2 && (*ext)->BlocksFor(len0) >= 2) {
    std::vector<int32_t> swapped = tables[0];
    std::swap(swapped[0], swapped[1]);
    EXPECT_EQ((*ext)->SetBlockTable(0, swapped).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ((*ext)->SetBlockTable(0, std::span<const int32_t>(tables[0]).first(1)).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*ext)->SetBlockTable(kSlots, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*ext)->length(0), len0);
  // Releasing every slot returns every block.
  for (int slot = 0; slot < kSlots; ++slot) release(slot);
  EXPECT_EQ((*own)->free_kv_blocks(), 24);
  EXPECT_EQ((*ext)->free_kv_blocks(), 64);
}

// Verification rollback (device_decoder_chunk_check.h CheckRollback): the
// kept rows of runs whose rejected drafts are rolled back equal the kept rows
// stepped alone, bit for bit (both equal the CPU on kReference).
TEST(DeviceDecoderTest, RollbackUndoesRejectedDraftsTinyBf16) {
  auto cpu = RowStableCpuModel(TinyCheckpoint(11), ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  testing::CheckRollback(*cpu, ActivationPrecision::kBf16, {.kv_block_tokens = 2}, "tiny bf16");
}
TEST(DeviceDecoderTest, RollbackUndoesRejectedDraftsSmallFp32) {
  ASSERT_NE(Small(), nullptr);
  auto cpu = RowStableCpuModel(*Small(), ActivationPrecision::kFp32);
  ASSERT_NE(cpu, nullptr);
  testing::CheckRollback(*cpu, ActivationPrecision::kFp32, {}, "small fp32");
}

// Synthetic weights (the benchmark path for configs too large for the host):
// sequences started empty decode finite logits, identically with graphs and
// eagerly, and the same seed draws the same weights.
TEST(DeviceDecoderTest, SyntheticWeightsDecodeFromEmptySequences) {
  auto config = LoadModelConfig("models/small/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(CreateSyntheticDeviceDecoder(*config, ActivationPrecision::kBf16).status().code(),
            absl::StatusCode::kInvalidArgument);  // Engram tables are not synthesized
  config->engram_layer_ids.clear();
  config->engram_num_embeddings.clear();
  DeviceDecoderOptions options{.max_sequences = 4, .max_positions = 64, .max_batch = 4};
  auto graph = CreateSyntheticDeviceDecoder(*config, ActivationPrecision::kBf16, options, 3);
  ASSERT_TRUE(graph.ok()) << graph.status();
  options.use_graphs = false;
  auto eager = CreateSyntheticDeviceDecoder(*config, ActivationPrecision::kBf16, options, 3);
  ASSERT_TRUE(eager.ok()) << eager.status();
  EXPECT_EQ((*graph)->stats().mxfp4_layers, config->n_layers);
  const int slots[] = {0, 1, 2};
  for (int s : slots) {
    ASSERT_TRUE((*graph)->Start(s).ok());
    ASSERT_TRUE((*eager)->Start(s).ok());
  }
  const int64_t v = config->vocab_size;
  int differing = 0;
  for (int step = 0; step < 40; ++step) {
    const int64_t tokens[] = {(step * 31) % v, (step * 17 + 5) % v, 7};
    auto a = (*graph)->Step(slots, tokens);
    auto b = (*eager)->Step(slots, tokens);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    for (float x : *a) ASSERT_TRUE(std::isfinite(x)) << "step " << step;
    differing += std::memcmp(a->data(), b->data(), a->size() * sizeof(float)) != 0;
    if (step == 39) {  // rows of different sequences differ
      EXPECT_GT(RowRel(a->data(), a->data() + v, v), 1e-3);
    }
  }
  EXPECT_EQ(differing, 0);
  EXPECT_EQ((*graph)->length(0), 40);
}

// Two ranks on two GPUs exchanging MoE blocks over NCCL inside their graphs.
void CheckTwoRanks(const Checkpoint& ckpt, ActivationPrecision precision, bool lsa = false) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    GTEST_SKIP() << devices << " CUDA device(s); two are needed";
  }
  constexpr int kWorld = 2;
  const int64_t v = ckpt.config().vocab_size;
  auto cpu = RowStableCpuModel(ckpt, precision);
  ASSERT_NE(cpu, nullptr);
  std::vector<std::unique_ptr<parallel::NcclCommunicator>> comms = MakeNccl(kWorld);
  const ExpertPlacement placement = RedundantPlacement(ckpt.config(), kWorld, 2, 9);
  std::vector<std::unique_ptr<DeviceDecoder>> dd(kWorld);
  for (int r = 0; r < kWorld; ++r) ASSERT_NE(comms[r], nullptr);
  {  // concurrently: with ep_lsa_exchange, Create registers windows collectively
    std::vector<absl::StatusOr<std::unique_ptr<DeviceDecoder>>> made;
    for (int r = 0; r < kWorld; ++r) made.emplace_back(absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] {
        DeviceDecoderOptions o{
            .device = r, .max_sequences = 8, .max_positions = 256, .max_batch = 8};
        o.communicator = comms[r].get();
        o.placement = placement;
        o.ep_lsa_exchange = lsa;
        made[r] = DeviceDecoder::Create(*cpu, precision, o);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(made[r].ok()) << "rank " << r << ": " << made[r].status();
      dd[r] = std::move(*made[r]);
    }
  }
  // Rank 0 holds 5 sequences, rank 1 holds 3.
  const std::vector<std::vector<int>> lengths = {{3, 17, 40, 9, 64}, {1, 33, 12}};
  std::vector<std::vector<Seq>> seqs(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < lengths[r].size(); ++i) {
      Seq s;
      s.state = cpu->NewSequence();
      const int len = lengths[r][i];
      auto logits = cpu->Forward(*s.state, RandomTokens(len, 300 + 10 * r + i), 0);
      ASSERT_TRUE(logits.ok()) << logits.status();
      s.next = Argmax(logits->data() + (len - 1) * v, v);
      s.slot = static_cast<int>(i);
      s.active = true;
      ASSERT_TRUE(dd[r]->Import(s.slot, *s.state).ok());
      seqs[r].push_back(std::move(s));
    }
  }
  int rows = 0, differing = 0;
  cpu->expert_load().Reset();  // the decode rows' load, summed over both ranks
  for (int step = 0; step < 24; ++step) {
    std::vector<std::vector<int>> slots(kWorld);
    std::vector<std::vector<int64_t>> tokens(kWorld);
    std::vector<std::vector<float>> want(kWorld);
    std::vector<std::vector<Seq*>> in_step(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      if (r == 1 && step % 4 == 3) continue;  // rank 1 joins with no rows
      std::vector<SequenceState*> states;
      std::vector<std::vector<int64_t>> toks;
      std::vector<int64_t> starts;
      for (Seq& s : seqs[r]) {
        if (r == 0 && step % 3 == 1 && s.slot % 2 == 1) continue;
        states.push_back(s.state.get());
        toks.push_back({s.next});
        starts.push_back(s.state->length());
        slots[r].push_back(s.slot);
        tokens[r].push_back(s.next);
        in_step[r].push_back(&s);
      }
      std::vector<std::span<const int64_t>> spans(toks.begin(), toks.end());
      auto w = cpu->ForwardBatch(states, spans, starts);
      ASSERT_TRUE(w.ok()) << w.status();
      for (const std::vector<float>& row : *w) {
        want[r].insert(want[r].end(), row.begin(), row.end());
      }
    }
    if (step == 12) {  // an expert-map commit between two steps, on both ranks
      const ExpertPlacement next = RedundantPlacement(ckpt.config(), kWorld, 2, 21);
      for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(dd[r]->SetPlacement(next).ok());
    }
    std::vector<absl::StatusOr<std::vector<float>>> got(kWorld, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] { got[r] = dd[r]->Step(slots[r], tokens[r]); });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(got[r].ok()) << "rank " << r << " step " << step << ": " << got[r].status();
      ASSERT_EQ(got[r]->size(), want[r].size());
      for (size_t i = 0; i < in_step[r].size(); ++i) {
        ++rows;
        differing += std::memcmp(got[r]->data() + i * v, want[r].data() + i * v,
                                 v * sizeof(float)) != 0;
        in_step[r][i]->next = Argmax(want[r].data() + i * v, v);
      }
    }
  }
  std::printf("two ranks over NCCL (%s): %d decode rows, %d not bit-identical to the CPU; "
              "rank 0 sent %.1f MiB to its peer, %lld graph captures\n",
              precision == ActivationPrecision::kFp32 ? "fp32" : "bf16", rows, differing,
              dd[0]->stats().exchange_bytes / 1048576.0,
              static_cast<long long>(dd[0]->stats().graph_captures));
  EXPECT_EQ(differing, 0);
  EXPECT_GT(rows, 100);
  // Routed pairs summed over the ranks equal the CPU's; every pair was served
  // by exactly one rank.
  const int64_t experts = ckpt.config().n_routed_experts;
  const int layers = ckpt.config().n_layers;
  std::vector<int64_t> routed(layers * experts, 0), served(layers, 0);
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(dd[r]->TakeExpertLoad(routed, served).ok());
  for (int l = 0; l < layers; ++l) {
    int64_t total = 0;
    for (int64_t e = 0; e < experts; ++e) {
      EXPECT_EQ(routed[l * experts + e], cpu->expert_load().count(l, e)) << l << " " << e;
      total += routed[l * experts + e];
    }
    EXPECT_EQ(served[l], total) << "layer " << l;
  }
  EXPECT_EQ(dd[0]->stats().graph_captures, 1);  // every collective step has the full size
  // The device-initiated exchange's bytes depend on the routing; not counted.
  if (!lsa) {
    EXPECT_GT(dd[0]->stats().exchange_bytes, 0);
  }
  // A bad batch on one rank: it joins the step with no rows and refuses; the
  // peer's rows are unaffected.
  const int bad_slot[] = {7};
  const int64_t one[] = {1};
  std::vector<absl::Status> status(kWorld);
  std::vector<std::thread> threads;
  threads.emplace_back([&] { status[0] = dd[0]->Step(bad_slot, one).status(); });
  threads.emplace_back([&] {
    const int slot[] = {0};
    status[1] = dd[1]->Step(slot, one).status();
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(status[0].code(), absl::StatusCode::kInvalidArgument) << status[0];
  EXPECT_TRUE(status[1].ok()) << status[1];
}

TEST(DeviceDecoderTest, TwoRanksOverNcclTinyFp32) {
  CheckTwoRanks(TinyCheckpoint(11), ActivationPrecision::kFp32);
}
TEST(DeviceDecoderTest, TwoRanksOverNcclSmallBf16) {
  ASSERT_NE(Small(), nullptr);
  CheckTwoRanks(*Small(), ActivationPrecision::kBf16);
}
// The device-initiated exchange (ep_lsa_exchange): the same bits as the CPU.
TEST(DeviceDecoderTest, TwoRanksDeviceInitiatedExchangeTinyFp32) {
  CheckTwoRanks(TinyCheckpoint(11), ActivationPrecision::kFp32, /*lsa=*/true);
}
TEST(DeviceDecoderTest, TwoRanksDeviceInitiatedExchangeSmallBf16) {
  ASSERT_NE(Small(), nullptr);
  CheckTwoRanks(*Small(), ActivationPrecision::kBf16, /*lsa=*/true);
}

TEST(DeviceDecoderTest, RefusesBadInput) {
  const Checkpoint& ckpt = TinyCheckpoint(11);
  const int64_t v = ckpt.config().vocab_size;
  auto cpu = RowStableCpuModel(ckpt, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, {.max_sequences = 0})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto dd = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16,
                                  {.max_sequences = 4, .max_positions = 12, .max_batch = 4});
  ASSERT_TRUE(dd.ok()) << dd.status();
  auto a = cpu->NewSequence();
  const std::vector<int64_t> prompt = RandomTokens(10, 5);
  ASSERT_TRUE(cpu->Forward(*a, prompt, 0).ok());
  auto empty = cpu->NewSequence();
  EXPECT_EQ((*dd)->Import(4, *a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*dd)->Import(0, *empty).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*dd)->Import(0, *a).ok());
  const int s0[] = {0}, s01[] = {0, 1}, s00[] = {0, 0}, s5[] = {5}, s_all[] = {0, 1, 2, 3, 0};
  const int64_t t1[] = {7}, t2[] = {7, 8}, bad[] = {v}, t5[] = {1, 2, 3, 4, 5};
  auto code = [&](std::span<const int> s, std::span<const int64_t> t) {
    return (*dd)->Step(s, t).status().code();
  };
  EXPECT_EQ(code({}, {}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(s0, t2), absl::StatusCode::kInvalidArgument);    // sizes differ
  EXPECT_EQ(code(s01, t2), absl::StatusCode::kInvalidArgument);   // slot 1 empty
  EXPECT_EQ(code(s00, t2), absl::StatusCode::kInvalidArgument);   // two rows, max_rows_per_slot 1
  EXPECT_EQ(code(s5, t1), absl::StatusCode::kInvalidArgument);    // out of range
  EXPECT_EQ(code(s0, bad), absl::StatusCode::kInvalidArgument);   // token
  EXPECT_EQ(code(s_all, t5), absl::StatusCode::kInvalidArgument); // batch > max_batch
  EXPECT_EQ((*dd)->length(0), 10);
  // Nothing changed: the next step equals the CPU's.
  auto got = (*dd)->Step(s0, t1);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = cpu->Forward(*a, t1, 10);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(std::memcmp(got->data(), want->data(), v * sizeof(float)), 0);
  // Position 11 is the last the slot holds; then it is full.
  ASSERT_TRUE((*dd)->Step(s0, t1).ok());
  EXPECT_EQ((*dd)->length(0), 12);
  EXPECT_EQ(code(s0, t1), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace weir::model
