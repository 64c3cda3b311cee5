#include "kernels/cuda/decode/compressor_decode.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/compressor.h"
#include "kernels/cuda/decode/test_util.h"

namespace weir::kernels::cuda::decode {
namespace {

using testing::DeviceBuffer;
using testing::SameBits;

std::vector<float> Normal(int64_t n, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// One sequence: a prefill of `prefill` tokens (run on the CPU; its state is
// where decoding starts), then `decode` tokens fed one decode step each.
struct Sequence {
  int slot;
  int64_t prefill, decode;
  std::vector<float> kv, score;  // [prefill + decode, dim]
  std::vector<float> kv_state, score_state;  // [ratio, dim] after the prefill
  std::vector<float> latents;  // [groups completed by the decode tokens, dim], CPU
};

struct Config {
  int ratio;
  int64_t dim;
  bool graph;  // capture one launch as a CUDA graph and replay it every step
  bool round_bf16 = false;  // the latents through RoundToBf16, in the same launch
};

// Random sequences in random slots of a pool, decoded as batches of rows at
// mixed positions (plus padding rows), against cpu::CompressorPool per
// sequence: every latent, every zero row and the final pool bit-identical.
void RunDecode(const Config& cfg) {
  const int r = cfg.ratio;
  const int64_t d = cfg.dim;
  constexpr int kSlots = 7, kSequences = 5;
  const int64_t rows = kSequences + 1;  // the last row is always padding
  std::mt19937 rng(r * 1000 + d + cfg.graph);
  // The pool starts with arbitrary contents (a slot's old sequence).
  const std::vector<float> pool_kv0 = Normal(int64_t{kSlots} * r * d, 1.0f, rng);
  const std::vector<float> pool_score0 = Normal(int64_t{kSlots} * r * d, 2.0f, rng);
  std::vector<float> pool_kv(pool_kv0), pool_score(pool_score0);  // expected, filled below

  std::vector<int> slots(kSlots);
  for (int i = 0; i < kSlots; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), rng);
  std::uniform_int_distribution<int64_t> prefill_len(0, 3 * r), decode_len(1, 3 * r + 2);
  std::vector<Sequence> seqs(kSequences);
  for (int q = 0; q < kSequences; ++q) {
    Sequence& s = seqs[q];
    s.slot = slots[q];
    s.prefill = prefill_len(rng);
    s.decode = q == 0 ? 1 : decode_len(rng);  // one sequence finishes at once
    s.kv = Normal((s.prefill + s.decode) * d, 1.0f, rng);
    s.score = Normal((s.prefill + s.decode) * d, 2.0f, rng);
    // Start from the slot's old contents, as the device does.
    s.kv_state.assign(pool_kv0.begin() + s.slot * r * d, pool_kv0.begin() + (s.slot + 1) * r * d);
    s.score_state.assign(pool_score0.begin() + s.slot * r * d,
                         pool_score0.begin() + (s.slot + 1) * r * d);
    std::vector<float> prefill_out(cpu::CompressedCount(0, s.prefill, r) * d);
    ASSERT_TRUE(cpu::CompressorPool({.kv = {s.kv.data(), size_t(s.prefill * d)},
                                     .score = {s.score.data(), size_t(s.prefill * d)},
                                     .kv_state = s.kv_state,
                                     .score_state = s.score_state,
                                     .out = prefill_out,
                                     .start_pos = 0,
                                     .tokens = s.prefill,
                                     .dim = d,
                                     .ratio = r})
                    .ok());
    std::copy(s.kv_state.begin(), s.kv_state.end(), pool_kv.begin() + s.slot * r * d);
    std::copy(s.score_state.begin(), s.score_state.end(), pool_score.begin() + s.slot * r * d);
  }
  // The device pool holds the states after the prefills.
  DeviceBuffer<float> d_kv_state(pool_kv), d_score_state(pool_score);
  // The CPU reference of the decode part, per sequence in one call (the CPU
  // kernel equals token-by-token feeding by its contract).
  for (Sequence& s : seqs) {
    s.latents.resize(cpu::CompressedCount(s.prefill, s.decode, r) * d);
    ASSERT_TRUE(cpu::CompressorPool({.kv = {s.kv.data() + s.prefill * d, size_t(s.decode * d)},
                                     .score = {s.score.data() + s.prefill * d,
                                               size_t(s.decode * d)},
                                     .kv_state = s.kv_state,
                                     .score_state = s.score_state,
                                     .out = s.latents,
                                     .start_pos = s.prefill,
                                     .tokens = s.decode,
                                     .dim = d,
                                     .ratio = r})
                    .ok());
    std::copy(s.kv_state.begin(), s.kv_state.end(), pool_kv.begin() + s.slot * r * d);
    std::copy(s.score_state.begin(), s.score_state.end(), pool_score.begin() + s.slot * r * d);
  }

  // Fixed device buffers for a step, refilled before each launch / replay.
  DeviceBuffer<float> d_kv(rows * d), d_score(rows * d), d_out(rows * d);
  DeviceBuffer<int32_t> d_slot(rows);
  DeviceBuffer<int64_t> d_pos(rows);
  const CompressorDecodeParams params{.kv = d_kv.get(),
                                      .score = d_score.get(),
                                      .kv_state = d_kv_state.get(),
                                      .score_state = d_score_state.get(),
                                      .state_slot = d_slot.get(),
                                      .positions = d_pos.get(),
                                      .out = d_out.get(),
                                      .rows = rows,
                                      .dim = d,
                                      .ratio = r,
                                      .slots = cfg.graph ? kSlots : 0,
                                      .round_bf16 = cfg.round_bf16};
  cudaStream_t stream = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  if (cfg.graph) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    const absl::Status captured = CompressorDecode(params, stream);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_TRUE(captured.ok()) << captured;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  }

  int64_t steps = 0, latents_checked = 0;
  std::vector<int64_t> done(kSequences, 0);  // decode tokens fed so far
  for (;; ++steps) {
    // Rows of this step: the unfinished sequences in random rows; the other
    // rows are padding of the three kinds.
    std::vector<int> row_seq(rows, -1);
    std::vector<int> order(rows - 1);
    for (int i = 0; i < rows - 1; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    int live = 0;
    for (int q = 0; q < kSequences; ++q) {
      if (done[q] < seqs[q].decode) row_seq[order[live++]] = q;
    }
    if (live == 0) break;
    std::vector<float> kv(rows * d, 0.0f), score(rows * d, 0.0f);
    std::vector<int32_t> slot(rows);
    std::vector<int64_t> pos(rows);
    std::vector<float> want(rows * d, 0.0f);
    for (int64_t t = 0; t < rows; ++t) {
      const int q = row_seq[t];
      if (q < 0) {
        switch ((t + steps) % 3) {
          case 0:  // no slot
            slot[t] = -1, pos[t] = 5;
            break;
          case 1:  // a live slot, but no position: must not touch it
            slot[t] = seqs[kSequences - 1].slot, pos[t] = -1;
            break;
          default:  // past the pool when it is bounded, else no slot
            slot[t] = cfg.graph ? kSlots : -1, pos[t] = r - 1;
        }
        for (int64_t c = 0; c < d; ++c) kv[t * d + c] = score[t * d + c] = 1e30f;
        continue;
      }
      const Sequence& s = seqs[q];
      const int64_t p = s.prefill + done[q];
      slot[t] = s.slot;
      pos[t] = p;
      std::copy_n(s.kv.begin() + p * d, d, kv.begin() + t * d);
      std::copy_n(s.score.begin() + p * d, d, score.begin() + t * d);
      if ((p + 1) % r == 0) {
        const int64_t e = p / r - s.prefill / r;  // index in the CPU's latents
        std::copy_n(s.latents.begin() + e * d, d, want.begin() + t * d);
        if (cfg.round_bf16) {
          for (int64_t c = 0; c < d; ++c) {
            want[t * d + c] = kernels::RoundToBf16(want[t * d + c]);
          }
        }
        ++latents_checked;
      }
      ++done[q];
    }
    d_kv.Upload(kv);
    d_score.Upload(score);
    d_slot.Upload(slot);
    d_pos.Upload(pos);
    d_out.Poison();
    if (cfg.graph) {
      // The uploads and the poison ran on the legacy default stream, which a
      // non-blocking stream does not wait for.
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    } else {
      ASSERT_TRUE(CompressorDecode(params, nullptr).ok());
    }
    const auto got = d_out.Download();
    ASSERT_TRUE(SameBits(got, want, /*nan_matches_nan=*/true))
        << "ratio " << r << " dim " << d << " graph " << cfg.graph << " step " << steps;
  }
  // Every decode token ran; some groups completed; the pool ends as the CPU's
  // states (untouched slots keep their contents).
  int64_t expected_latents = 0;
  for (const Sequence& s : seqs) expected_latents += static_cast<int64_t>(s.latents.size()) / d;
  EXPECT_EQ(latents_checked, expected_latents);
  EXPECT_GT(latents_checked, 0);
  EXPECT_TRUE(SameBits(d_kv_state.Download(), pool_kv)) << "kv pool, ratio " << r;
  EXPECT_TRUE(SameBits(d_score_state.Download(), pool_score)) << "score pool, ratio " << r;
  std::printf("ratio %d dim %lld graph %d: %lld steps, %lld latents bit-identical\n", r,
              static_cast<long long>(d), cfg.graph, static_cast<long long>(steps),
              static_cast<long long>(latents_checked));
  if (cfg.graph) {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

TEST(CompressorDecodeTest, DecodeStepsMatchTheCpuCompressorPerSequence) {
  for (const Config& cfg :
       {Config{2, 512, false}, Config{2, 512, true}, Config{4, 7, false}, Config{4, 130, true},
        Config{128, 33, false}, Config{128, 64, true}, Config{3, 1, false},
        Config{4, 130, true, true}, Config{2, 512, false, true}}) {
    SCOPED_TRACE(::testing::Message() << "ratio " << cfg.ratio << " dim " << cfg.dim << " graph "
                                      << cfg.graph);
    RunDecode(cfg);
    if (HasFatalFailure()) return;
  }
}

// Runs: each step gives every unfinished sequence a run of 1 .. 2 * ratio + 3
// consecutive rows (one launch applies them in order), in random order, plus
// a padding row; against cpu::CompressorPool per sequence from the same
// prefilled states: every row's latent or zeros and the final pool
// bit-identical. A run that crosses groups pools a group whose first tokens
// came from an earlier step's state and whose last ones from this run.
void RunRuns(int r, int64_t d, bool parallel) {
  constexpr int kSlots = 6, kSequences = 4;
  std::mt19937 rng(r * 7919 + d);
  std::vector<float> pool_kv = Normal(int64_t{kSlots} * r * d, 1.0f, rng);
  std::vector<float> pool_score = Normal(int64_t{kSlots} * r * d, 2.0f, rng);
  DeviceBuffer<float> d_kv_state(pool_kv), d_score_state(pool_score);  // before any step
  struct Seq {
    int slot;
    int64_t start, total;
    std::vector<float> kv, score, latents;  // latents: [groups completed, dim] from start
  };
  std::vector<Seq> seqs(kSequences);
  std::uniform_int_distribution<int64_t> start_of(0, 2 * r), total_of(1, 4 * r + 5);
  for (int q = 0; q < kSequences; ++q) {
    Seq& s = seqs[q];
    s.slot = q + 1;  // slot 0 keeps its old contents throughout
    // The slot's state as an earlier prefill of `start` tokens left it: the
    // residues below start % r of its group are live, the rest stale.
    s.start = start_of(rng);
    s.total = total_of(rng);
    s.kv = Normal(s.total * d, 1.0f, rng);
    s.score = Normal(s.total * d, 2.0f, rng);
    std::span<float> kvs(pool_kv.data() + s.slot * r * d, r * d);
    std::span<float> scs(pool_score.data() + s.slot * r * d, r * d);
    s.latents.resize(cpu::CompressedCount(s.start, s.total, r) * d);
    ASSERT_TRUE(cpu::CompressorPool({.kv = s.kv,
                                     .score = s.score,
                                     .kv_state = kvs,
                                     .score_state = scs,
                                     .out = s.latents,
                                     .start_pos = s.start,
                                     .tokens = s.total,
                                     .dim = d,
                                     .ratio = r})
                    .ok());
  }
  const int64_t cap = kSequences * (2 * r + 3) + 1;
  DeviceBuffer<float> d_kv(cap * d), d_score(cap * d), d_out(cap * d);
  DeviceBuffer<int32_t> d_slot(cap), d_run(cap);
  DeviceBuffer<int64_t> d_pos(cap);
  std::vector<int64_t> done(kSequences, 0);
  int64_t latents_checked = 0, longest = 0;
  for (int step = 0;; ++step) {
    std::vector<int> order;
    for (int q = 0; q < kSequences; ++q) {
      if (done[q] < seqs[q].total) order.push_back(q);
    }
    if (order.empty()) break;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<float> kv, score, want;
    std::vector<int32_t> slot, run;
    std::vector<int64_t> pos;
    for (int q : order) {
      const Seq& s = seqs[q];
      const int64_t n = std::min<int64_t>(
          s.total - done[q], std::uniform_int_distribution<int64_t>(1, 2 * r + 3)(rng));
      longest = std::max(longest, n);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = done[q] + j, p = s.start + i;
        slot.push_back(s.slot);
        pos.push_back(p);
        run.push_back(j == 0 ? static_cast<int32_t>(n) : 0);
        kv.insert(kv.end(), s.kv.begin() + i * d, s.kv.begin() + (i + 1) * d);
        score.insert(score.end(), s.score.begin() + i * d, s.score.begin() + (i + 1) * d);
        if ((p + 1) % r == 0) {
          const int64_t e = p / r - s.start / r;
          want.insert(want.end(), s.latents.begin() + e * d, s.latents.begin() + (e + 1) * d);
          ++latents_checked;
        } else {
          want.insert(want.end(), d, 0.0f);
        }
      }
      done[q] += n;
    }
    slot.push_back(-1);  // padding, its own run
    pos.push_back(0);
    run.push_back(1);
    kv.insert(kv.end(), d, 1e30f);
    score.insert(score.end(), d, 1e30f);
    want.insert(want.end(), d, 0.0f);
    const int64_t rows = static_cast<int64_t>(slot.size());
    kv.resize(cap * d);
    score.resize(cap * d);
    slot.resize(cap, -1);
    pos.resize(cap, 0);
    run.resize(cap, 1);
    d_kv.Upload(kv);
    d_score.Upload(score);
    d_slot.Upload(slot);
    d_pos.Upload(pos);
    d_run.Upload(run);
    d_out.Poison();
    ASSERT_TRUE(CompressorDecode({.kv = d_kv.get(),
                                  .score = d_score.get(),
                                  .kv_state = d_kv_state.get(),
                                  .score_state = d_score_state.get(),
                                  .state_slot = d_slot.get(),
                                  .positions = d_pos.get(),
                                  .run_length = d_run.get(),
                                  .out = d_out.get(),
                                  .rows = rows,
                                  .dim = d,
                                  .ratio = r,
                                  .slots = kSlots,
                                  .parallel_rows = parallel},
                                 nullptr)
                    .ok());
    std::vector<float> got = d_out.Download();
    got.resize(rows * d);
    ASSERT_TRUE(SameBits(got, want, /*nan_matches_nan=*/true)) << "ratio " << r << " step " << step;
  }
  int64_t expected = 0;
  for (const Seq& s : seqs) expected += static_cast<int64_t>(s.latents.size()) / d;
  EXPECT_EQ(latents_checked, expected);
  EXPECT_GT(latents_checked, 0);
  EXPECT_GT(longest, r);  // some run completed a group and went on
  EXPECT_TRUE(SameBits(d_kv_state.Download(), pool_kv)) << "kv pool, ratio " << r;
  EXPECT_TRUE(SameBits(d_score_state.Download(), pool_score)) << "score pool, ratio " << r;
}

TEST(CompressorDecodeTest, RunsOfOneSequenceEqualItsTokensInOrder) {
  // Also with parallel_rows (a thread per row and channel, the runs found by
  // their slots and positions): the same bits.
  for (const bool parallel : {false, true}) {
    for (const auto& [r, d] : std::vector<std::pair<int, int64_t>>{{2, 64}, {4, 130}, {128, 33}}) {
      SCOPED_TRACE(::testing::Message()
                   << "ratio " << r << " dim " << d << " parallel " << parallel);
      RunRuns(r, d, parallel);
      if (HasFatalFailure()) return;
    }
  }
}

// Rollback: slot 0's state is a ring of ratio + k rows (state_rows). Each
// step runs 1 + m rows of it (m <= k): a kept token, then drafts of which a
// prefix is kept and the rest rejected (other values), and the sequence goes
// on after the kept ones, rewriting the rejected positions next step. Every
// kept row's latent, bit for bit, equals that of a plain ratio-row state fed
// the kept tokens alone; so does every group completed later (the rejected
// rows never overwrote a position the partial group still needed).
void RollbackRing(int r, int64_t d, int k, bool parallel) {
  std::mt19937 rng(static_cast<uint32_t>(r * 31 + k));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t ring = r + k, rows_cap = 1 + k;
  DeviceBuffer<float> ring_kv(ring * d), ring_score(ring * d), plain_kv(r * d), plain_score(r * d),
      d_kv(rows_cap * d), d_score(rows_cap * d), d_out(rows_cap * d);
  for (DeviceBuffer<float>* b : {&ring_kv, &ring_score, &plain_kv, &plain_score}) {
    b->Upload(std::vector<float>(b->size(), 0.0f));
  }
  DeviceBuffer<int32_t> d_slot(rows_cap), d_run(rows_cap);
  DeviceBuffer<int64_t> d_pos(rows_cap);
  auto run = [&](float* kv_state, float* score_state, int64_t state_rows, int64_t start,
                 const std::vector<float>& kv, const std::vector<float>& score) {
    const int64_t n = static_cast<int64_t>(kv.size()) / d;
    // The run, then padding rows (no slot) up to the buffers' rows.
    std::vector<int32_t> slot(rows_cap, -1), runs(rows_cap, 1);
    std::vector<int64_t> pos(rows_cap, 0);
    for (int64_t j = 0; j < n; ++j) {
      slot[j] = 0;
      pos[j] = start + j;
      runs[j] = j == 0 ? static_cast<int32_t>(n) : 0;
    }
    std::vector<float> kv_in = kv, score_in = score;
    kv_in.resize(rows_cap * d, 1e30f);
    score_in.resize(rows_cap * d, 1e30f);
    d_kv.Upload(kv_in);
    d_score.Upload(score_in);
    d_slot.Upload(slot);
    d_pos.Upload(pos);
    d_run.Upload(runs);
    d_out.Poison();
    EXPECT_TRUE(CompressorDecode({.kv = d_kv.get(),
                                  .score = d_score.get(),
                                  .kv_state = kv_state,
                                  .score_state = score_state,
                                  .state_slot = d_slot.get(),
                                  .positions = d_pos.get(),
                                  .run_length = d_run.get(),
                                  .out = d_out.get(),
                                  .rows = rows_cap,
                                  .dim = d,
                                  .ratio = r,
                                  .state_rows = state_rows,
                                  .slots = 1,
                                  .parallel_rows = parallel},
                                 nullptr)
                    .ok());
    std::vector<float> out = d_out.Download();
    out.resize(n * d);
    return out;
  };
  int64_t length = 0, latents = 0, rejected = 0;
  for (int step = 0; step < 12 * r + 20; ++step) {
    const int m = std::uniform_int_distribution<int>(0, k)(rng);
    const int kept = std::uniform_int_distribution<int>(0, m)(rng);
    std::vector<float> kv((1 + m) * d), score((1 + m) * d);
    for (float& v : kv) v = normal(rng);
    for (float& v : score) v = normal(rng);
    const std::vector<float> all = run(ring_kv.get(), ring_score.get(), ring, length, kv, score);
    const std::vector<float> kept_kv(kv.begin(), kv.begin() + (1 + kept) * d),
        kept_score(score.begin(), score.begin() + (1 + kept) * d);
    const std::vector<float> want =
        run(plain_kv.get(), plain_score.get(), 0, length, kept_kv, kept_score);
    const std::vector<float> got(all.begin(), all.begin() + (1 + kept) * d);
    ASSERT_TRUE(SameBits(got, want)) << "ratio " << r << " step " << step;
    for (int j = 0; j <= kept; ++j) latents += (length + j + 1) % r == 0;
    rejected += m - kept;
    length += 1 + kept;
  }
  EXPECT_GT(latents, 5);
  EXPECT_GT(rejected, 5);
}

TEST(CompressorDecodeTest, StateRingsKeepPartialGroupsThroughRolledBackRows) {
  for (const bool parallel : {false, true}) {
    for (const auto& [r, d, k] :
         std::vector<std::tuple<int, int64_t, int>>{{2, 64, 3}, {4, 130, 5}, {128, 33, 7}}) {
      SCOPED_TRACE(::testing::Message()
                   << "ratio " << r << " dim " << d << " k " << k << " parallel " << parallel);
      RollbackRing(r, d, k, parallel);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CompressorDecodeTest, RefusesBadParamsAndSkipsEmptyWork) {
  float* f = reinterpret_cast<float*>(256);
  const int32_t* slot = reinterpret_cast<const int32_t*>(256);
  const int64_t* pos = reinterpret_cast<const int64_t*>(256);
  const CompressorDecodeParams ok{.kv = f, .score = f, .kv_state = f, .score_state = f,
                                  .state_slot = slot, .positions = pos, .out = f,
                                  .rows = 2, .dim = 8, .ratio = 2};
  EXPECT_TRUE(SupportsCompressorDecode(ok));
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  CompressorDecodeParams p = ok;
  p.ratio = 1;
  EXPECT_EQ(CompressorDecode(p, nullptr).code(), kInvalid);
  p = ok;
  p.rows = -1;
  EXPECT_EQ(CompressorDecode(p, nullptr).code(), kInvalid);
  p = ok;
  p.dim = -8;
  EXPECT_EQ(CompressorDecode(p, nullptr).code(), kInvalid);
  p = ok;
  p.slots = -1;
  EXPECT_EQ(CompressorDecode(p, nullptr).code(), kInvalid);
  p = ok;
  p.positions = nullptr;
  EXPECT_EQ(CompressorDecode(p, nullptr).code(), kInvalid);
  p = ok;
  p.state_slot = nullptr;
  EXPECT_EQ(CompressorDecode(p, nullptr).code(), kInvalid);
  p = ok;
  p.score_state = nullptr;
  EXPECT_EQ(CompressorDecode(p, nullptr).code(), kInvalid);
  p = ok;
  p.out = nullptr;
  EXPECT_EQ(CompressorDecode(p, nullptr).code(), kInvalid);
  EXPECT_TRUE(CompressorDecode({.rows = 0, .dim = 8, .ratio = 2}, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing above reached the device
}

}  // namespace
}  // namespace weir::kernels::cuda::decode
