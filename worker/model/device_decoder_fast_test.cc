// DeviceDecoder with DecodeNumerics::kFast against kReference on the same GPU
// (GPU machine only; tag gpu).
//
// Fidelity (teacher-forced top-1 agreement >= 99% over 512 positions, median
// per-row logit relative error <= 1e-2): eight sequences, prefilled on the
// CPU and imported into a reference and a fast decoder, run 64 steps each;
// both are fed the reference's greedy tokens, and after every step the fast
// decoder's sequences are overwritten with the reference's (Export/Import),
// so each position compares one step of the two on the same history. The
// same run with tokens only shared (each decoder its own KV) is reported and
// loosely bounded: with random weights a flipped FP8 rounding or a near-tie
// expert choice changes that history for good. Reported: top-1 agreement,
// top-5 set agreement, expert choices that differ (from the decoders' load
// counters), median / p90 / p99 / worst per-row relative L2 error
// ||fast - ref|| / ||ref||, and how many layers run on tensor cores.
//
// Batch invariance (fast on its own): one sequence's logits, decoded alone
// (padded batch 8), inside a batch of 11 (padded 16, another graph), at
// another position of a batch of 5, and by an eager (no graph) decoder, are
// identical bit for bit at every step.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/model/checkpoint.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/device_decoder.h"
#include "worker/model/device_decoder_chunk_check.h"
#include "worker/model/device_decoder_synthetic.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"
#include "worker/model/widen_experts.h"

namespace weir::model {
namespace {

// A step's logits, copied: StepRows' span is the decoder's pinned buffer,
// which its next step overwrites.
absl::StatusOr<std::vector<float>> StepLogits(DeviceDecoder& d, const std::vector<int>& slots,
                                              const std::vector<int64_t>& tokens) {
  auto rows = d.StepRows(slots, tokens, std::nullopt);
  if (!rows.ok()) return rows.status();
  return std::vector<float>(rows->begin(), rows->end());
}

std::vector<int64_t> TopK(const float* row, int64_t n, int k) {
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int64_t a, int64_t b) { return row[a] > row[b]; });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

// Prints the seconds since the last mark of this clock (or its start) with
// `what`: where a fidelity case's time goes on the GPU machine (the model on
// the CPU, the decoders' creation, the two comparisons), so the test's
// slowest parts can be found from a shard's log.
class PhaseClock {
 public:
  explicit PhaseClock(const char* name) : name_(name), last_(std::chrono::steady_clock::now()) {}
  void Mark(const char* what) {
    const auto now = std::chrono::steady_clock::now();
    std::printf("  [%s] %s: %.2f s\n", name_, what,
                std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }

 private:
  const char* name_;
  std::chrono::steady_clock::time_point last_;
};

struct Agreement {
  int positions = 0, top1 = 0, top5 = 0;
  int64_t choices = 0, choices_differing = 0;  // routed (token, layer, expert) picks
  std::vector<double> rel;                     // per row, sorted at the end
  double median() const { return rel[rel.size() / 2]; }
  double quantile(double q) const { return rel[static_cast<size_t>(q * (rel.size() - 1))]; }
};

// Steps a reference and a fast decoder over the same eight sequences
// (prompts of 1 to 57 tokens prefilled on the CPU model and imported into
// both), feeding both the reference's greedy tokens. With `sync_state` the
// fast decoder's sequences are replaced by the reference's after every step
// (Export, Import), so each step compares the two on one identical history
// (KV, compressor state): the error of one step. Without it only the tokens
// are shared and the fast decoder's own KV carries each difference on.
// `text`: the eight prompts (else random ids of 1 to 57 tokens).
// `fast_prompt_end` > 0: after every Import the fast decoder's sequences
// take that prompt end (SetPromptEnd), so its rows run the prompt's maths
// (prompt_bf16_linears) on every step.
constexpr int kCompareSeqs = 8;

// Compare's eight sequences prefilled on the CPU model, and the reference's
// first token of each (the argmax of its prompt's last row).
struct Prefilled {
  std::vector<std::unique_ptr<SequenceState>> states;
  std::vector<int64_t> tokens;
};

// Prefills Compare's eight sequences: `text`'s prompts, else random ids of
// 1 to 57 tokens. Empty (with a failure recorded) when the CPU model fails.
Prefilled Prefill(Model& cpu, const std::vector<std::vector<int64_t>>* text) {
  const int64_t v = cpu.config().vocab_size;
  constexpr int kSeqs = kCompareSeqs;
  int prompts[kSeqs] = {1, 5, 9, 17, 30, 33, 41, 57};
  if (text != nullptr) {
    EXPECT_EQ(text->size(), size_t{kSeqs});
    if (text->size() != size_t{kSeqs}) return {};
    for (int i = 0; i < kSeqs; ++i) prompts[i] = static_cast<int>((*text)[i].size());
  }
  Prefilled out;
  for (int i = 0; i < kSeqs; ++i) {
    out.states.push_back(cpu.NewSequence());
    auto logits = cpu.Forward(
        *out.states[i], text != nullptr ? (*text)[i] : RandomTokens(prompts[i], 900 + i, v - 1), 0);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return {};
    out.tokens.push_back(ArgmaxRow(logits->data() + (prompts[i] - 1) * v, v));
  }
  return out;
}

// `prefilled`: the sequences Prefill made for `text` (shared between
// comparisons; never written), else Compare prefills its own.
Agreement Compare(Model& cpu, DeviceDecoder& ref, DeviceDecoder& fast, bool sync_state,
                  const std::vector<std::vector<int64_t>>* text = nullptr,
                  int64_t fast_prompt_end = 0, const Prefilled* prefilled = nullptr) {
  const ModelConfig& c = cpu.config();
  const int64_t v = c.vocab_size;
  constexpr int kSeqs = kCompareSeqs, kSteps = 64;
  Prefilled own;
  if (prefilled == nullptr) {
    own = Prefill(cpu, text);
    prefilled = &own;
  }
  if (prefilled->states.size() != size_t{kSeqs}) return {};
  std::vector<int> slots(kSeqs);
  // sync_state: the reference's sequences after each step, exported into
  // copies of the prefilled states (which stay as they were).
  std::vector<std::unique_ptr<SequenceState>> states(kSeqs);
  std::vector<int64_t> tokens = prefilled->tokens;
  for (int i = 0; i < kSeqs; ++i) {
    slots[i] = i;
    if (sync_state) {
      states[i] = cpu.NewSequence();
      const absl::Status copied = states[i]->CopyFrom(*prefilled->states[i]);
      EXPECT_TRUE(copied.ok()) << copied;
      if (!copied.ok()) return {};
    }
    EXPECT_TRUE(ref.Import(i, *prefilled->states[i]).ok());
    EXPECT_TRUE(fast.Import(i, *prefilled->states[i]).ok());
    if (fast_prompt_end > 0) EXPECT_TRUE(fast.SetPromptEnd(i, fast_prompt_end).ok());
  }
  const size_t n_load = static_cast<size_t>(c.n_layers * c.n_routed_experts);
  std::vector<int64_t> load_ref(n_load), load_fast(n_load), served(c.n_layers);
  EXPECT_TRUE(ref.TakeExpertLoad(load_ref, served).ok());
  EXPECT_TRUE(fast.TakeExpertLoad(load_fast, served).ok());
  Agreement out;
  // The seconds of the reference's steps, the fast decoder's and the state
  // copies (sync_state), printed at the end: whether sharing the reference's
  // run between the cases that use the same one would pay.
  using Clock = std::chrono::steady_clock;
  double ref_s = 0, fast_s = 0, sync_s = 0;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  for (int step = 0; step < kSteps; ++step) {
    Clock::time_point t = Clock::now();
    auto a = ref.Step(slots, tokens);
    ref_s += since(t);
    t = Clock::now();
    auto b = fast.Step(slots, tokens);
    fast_s += since(t);
    EXPECT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!a.ok() || !b.ok()) return out;
    // Expert choices of this step: per (layer, expert) counts; half the L1
    // distance is the least number of picks that differ.
    std::fill(load_ref.begin(), load_ref.end(), 0);
    std::fill(load_fast.begin(), load_fast.end(), 0);
    EXPECT_TRUE(ref.TakeExpertLoad(load_ref, served).ok());
    EXPECT_TRUE(fast.TakeExpertLoad(load_fast, served).ok());
    int64_t diff = 0;
    for (size_t j = 0; j < n_load; ++j) diff += std::abs(load_ref[j] - load_fast[j]);
    out.choices_differing += diff / 2;
    out.choices += int64_t{kSeqs} * c.n_layers * c.n_activated_experts;
    for (int i = 0; i < kSeqs; ++i) {
      const float* ra = a->data() + i * v;
      const float* rb = b->data() + i * v;
      for (int64_t j = 0; j < v; ++j) {
        EXPECT_TRUE(std::isfinite(rb[j])) << "step " << step;
        if (!std::isfinite(rb[j])) return out;
      }
      const int64_t ta = ArgmaxRow(ra, v);
      out.top1 += ta == ArgmaxRow(rb, v);
      out.top5 += TopK(ra, v, 5) == TopK(rb, v, 5);
      out.rel.push_back(RelativeL2(rb, ra, v));
      ++out.positions;
      tokens[i] = ta;  // teacher forcing: both follow the reference
      if (sync_state) {
        const Clock::time_point t = Clock::now();
        EXPECT_TRUE(ref.Export(i, *states[i]).ok());
        EXPECT_TRUE(fast.Import(i, *states[i]).ok());
        if (fast_prompt_end > 0) EXPECT_TRUE(fast.SetPromptEnd(i, fast_prompt_end).ok());
        sync_s += since(t);
      }
    }
  }
  for (int i = 0; i < kSeqs; ++i) {
    EXPECT_TRUE(ref.Release(i).ok());
    EXPECT_TRUE(fast.Release(i).ok());
  }
  std::printf("  steps: reference %.2f s, fast %.2f s, state copies %.2f s\n", ref_s, fast_s,
              sync_s);
  std::sort(out.rel.begin(), out.rel.end());
  return out;
}

void Print(const char* name, const char* mode, const Agreement& g) {
  std::printf("%s, %s: %d positions: top-1 agreement %.4f, top-5 set agreement %.4f, expert "
              "choices differing %lld of %lld (agreement %.4f), per-row relative L2 error "
              "median %.3g, p90 %.3g, p99 %.3g, worst %.3g\n",
              name, mode, g.positions, static_cast<double>(g.top1) / g.positions,
              static_cast<double>(g.top5) / g.positions,
              static_cast<long long>(g.choices_differing), static_cast<long long>(g.choices),
              1.0 - static_cast<double>(g.choices_differing) / std::max<int64_t>(g.choices, 1),
              g.median(), g.quantile(0.9), g.quantile(0.99), g.rel.back());
}

// min_top1: the one-step top-1 agreement required (0.99, the issue's bar, on
// tiny; small's random gate has near-ties that one fp32 rounding of an FP8
// product flips: measured 0.959 bf16 and 0.979 fp32 with 0.5% / 0.2% of
// expert choices differing, median row error 0 / 3e-7 — the rows without a
// flipped choice are at the summation-order floor).
// A trained model's Engram map and real prompts (CheckFidelity's `trained`).
struct TrainedInputs {
  std::vector<int64_t> engram_token_map;
  std::vector<std::vector<int64_t>> prompts;  // eight
};

// The reference decoder's options in the fidelity cases.
DeviceDecoderOptions ReferenceOptions(const TrainedInputs* trained) {
  DeviceDecoderOptions options{.max_sequences = 8, .max_positions = 128, .max_batch = 8};
  if (trained != nullptr) options.engram_token_map = trained->engram_token_map;
  return options;
}

// What the fidelity cases of one (checkpoint, precision, inputs) share: the
// row-stable CPU model, the reference decoder and Compare's prefilled
// sequences, made by the first such case of the process and kept for the
// others (one shard runs several cases on small and on the trained tiny).
// The reference is deterministic and every comparison releases its slots,
// so a later case sees the same reference as a fresh one would.
struct SharedReference {
  std::unique_ptr<Model> cpu;
  std::unique_ptr<DeviceDecoder> ref;
  Prefilled prefilled;
  int uses = 0;
};

// nullptr (with the failure recorded) when the CPU model, the decoder or
// the prefill fails.
const SharedReference* ReferenceFor(const Checkpoint& ckpt, ActivationPrecision precision,
                                    const TrainedInputs* trained) {
  using Key = std::tuple<const Checkpoint*, ActivationPrecision, const TrainedInputs*>;
  static auto* made = new std::map<Key, std::unique_ptr<SharedReference>>;
  std::unique_ptr<SharedReference>& entry = (*made)[Key(&ckpt, precision, trained)];
  if (entry == nullptr) {
    auto setup = std::make_unique<SharedReference>();
    setup->cpu = RowStableCpuModel(
        ckpt, precision, trained != nullptr ? trained->engram_token_map : std::vector<int64_t>{});
    EXPECT_NE(setup->cpu, nullptr);
    if (setup->cpu == nullptr) return nullptr;
    auto ref = DeviceDecoder::Create(*setup->cpu, precision, ReferenceOptions(trained));
    EXPECT_TRUE(ref.ok()) << ref.status();
    if (!ref.ok()) return nullptr;
    setup->ref = std::move(*ref);
    setup->prefilled = Prefill(*setup->cpu, trained != nullptr ? &trained->prompts : nullptr);
    if (setup->prefilled.states.size() != size_t{kCompareSeqs}) return nullptr;
    entry = std::move(setup);
  }
  ++entry->uses;
  return entry.get();
}

void CheckFidelity(const Checkpoint& ckpt, const char* name, ActivationPrecision precision,
                   bool expect_fast_moe, double min_top1, double max_median = 1e-2,
                   double max_choices_differing = 0.01, bool fast_mhc = false,
                   const TrainedInputs* trained = nullptr, bool expert_wgmma = false,
                   bool dense_wgmma = false, bool attention_wgmma = true,
                   bool prompt_linears = false, bool experts_every_row = false,
                   bool prompt_gate = false, bool prompt_mhc = false,
                   bool prompt_mhc_promote = false, bool prompt_fp8_lt = false) {
  const ModelConfig& c = ckpt.config();
  PhaseClock clock(name);
  const SharedReference* shared = ReferenceFor(ckpt, precision, trained);
  ASSERT_NE(shared, nullptr);
  clock.Mark(shared->uses > 1 ? "the CPU model, the reference and the prefill (shared)"
                              : "the CPU model, the reference and the prefill");
  Model* const cpu = shared->cpu.get();
  DeviceDecoder* const ref = shared->ref.get();
  DeviceDecoderOptions options = ReferenceOptions(trained);
  const std::vector<std::vector<int64_t>>* text = trained != nullptr ? &trained->prompts : nullptr;
  options.numerics = DecodeNumerics::kFast;
  options.fast_mhc = fast_mhc;
  options.expert_wgmma = expert_wgmma;
  options.dense_wgmma = dense_wgmma;
  options.attention_wgmma = attention_wgmma;
  // prompt_linears: every position of the fast decoder is a prompt's, so
  // its FP8 linears all run on the bf16 maths (prompt_bf16_linears).
  options.prompt_bf16_linears = prompt_linears;
  // experts_every_row: every row's routed experts on the bf16 route, decode's too.
  options.bf16_experts_every_row = experts_every_row;
  // prompt_gate: the prompt rows' gate logits as a bf16 GEMM (prompt_bf16_gate).
  options.prompt_bf16_gate = prompt_gate;
  // prompt_mhc: the prompt rows' mHC coefficients on TF32 tensor cores.
  options.prompt_tf32_mhc = prompt_mhc;
  options.prompt_tf32_mhc_promote = prompt_mhc_promote;
  // prompt_fp8_lt: those linears on cuBLASLt's block-scaled FP8 GEMM.
  options.prompt_fp8_lt = prompt_fp8_lt;
  const int64_t prompt_end = prompt_linears ? options.max_positions : 0;
  auto fast = DeviceDecoder::Create(*cpu, precision, options);
  ASSERT_TRUE(fast.ok()) << fast.status();
  clock.Mark("the fast decoder");
  const DeviceDecoderStats& fs = (*fast)->stats();
  std::printf(
      "%s %s: fast dense layers %d (bf16 %d), reference dense layers %d, fast MoE "
      "layers %d of %lld; weights %.1f MiB fast vs %.1f MiB reference; KV pools %.1f "
      "MiB %s vs %.1f MiB\n",
      name, precision == ActivationPrecision::kBf16 ? "bf16" : "fp32", fs.fast_dense, fs.bf16_dense,
      fs.reference_dense, fs.fast_moe_layers, static_cast<long long>(c.n_layers),
      fs.weight_bytes / 1048576.0, ref->stats().weight_bytes / 1048576.0, fs.pool_bytes / 1048576.0,
      fs.stored_kv ? "stored form" : "fp32", ref->stats().pool_bytes / 1048576.0);
  EXPECT_GT(fs.fast_dense, 0);
  EXPECT_EQ(fs.stored_kv, c.head_dim == 512);
  EXPECT_EQ(fs.bf16_dense > 0, precision == ActivationPrecision::kBf16);
  if (fs.stored_kv) {
    EXPECT_LT(fs.pool_bytes, ref->stats().pool_bytes);
  }
  // The KV pools by kind (bytes as carved from the arena, stored bytes from
  // the spec): the window, compressed and index-key entries in exactly the
  // model's stored form, the compressor state fp32 as in the reference.
  size_t kv_bytes = 0;
  for (const DeviceKvPool& pool : fs.kv_pools) {
    const double per_entry = static_cast<double>(pool.bytes) / std::max<int64_t>(pool.entries, 1);
    std::printf("  kv pool %-16s entries %8lld held %8.1f B/entry, stored %5lld B/entry\n",
                pool.name.c_str(), static_cast<long long>(pool.entries), per_entry,
                static_cast<long long>(pool.stored_bytes_per_entry));
    kv_bytes += pool.bytes;
    const bool stored_form = fs.stored_kv && (pool.name == "window" || pool.name == "compressed" ||
                                              pool.name == "index_keys");
    if (stored_form) {
      EXPECT_EQ(pool.bytes, static_cast<size_t>(pool.entries * pool.stored_bytes_per_entry))
          << pool.name;
    }
    if (pool.name == "compressor_state" && pool.entries > 0) {  // a mean over layers
      EXPECT_NEAR(per_entry, pool.stored_bytes_per_entry, 1.0);
    }
  }
  ASSERT_EQ(fs.kv_pools.size(), 4u);
  EXPECT_LE(kv_bytes, fs.pool_bytes);
  EXPECT_LT(fs.weight_bytes, ref->stats().weight_bytes);
  EXPECT_EQ(ref->stats().fast_dense, 0);
  if (expect_fast_moe) {
    EXPECT_EQ(fs.fast_moe_layers, c.n_layers);
  }

  const Agreement synced =
      Compare(*cpu, *ref, **fast, /*sync_state=*/true, text, prompt_end, &shared->prefilled);
  clock.Mark("one step on a shared history");
  ASSERT_GE(synced.positions, 512);
  Print(name, "one step on a shared history", synced);
  EXPECT_GE(static_cast<double>(synced.top1) / synced.positions, min_top1);
  EXPECT_LE(synced.median(), max_median);
  EXPECT_LE(synced.choices_differing, synced.choices * max_choices_differing);
  // Tokens only: each decoder keeps its own KV, so a difference (an FP8
  // rounding or an expert choice that flips on a near-tie) stays in the
  // history; with random weights that drift is large. Reported, and held to
  // a loose bound that still catches a broken kernel (unrelated logits give
  // errors near 1.4 and top-1 agreement near 1 / vocab).
  const Agreement drift =
      Compare(*cpu, *ref, **fast, /*sync_state=*/false, text, prompt_end, &shared->prefilled);
  clock.Mark("tokens only");
  if (prompt_linears) {
    EXPECT_GT((*fast)->stats().prompt_bf16_products + (*fast)->stats().fp8_lt_products, 0);
  }
  if (prompt_fp8_lt) {
    EXPECT_GT((*fast)->stats().fp8_lt_products, 0);
  }
  if (experts_every_row) {
    EXPECT_GT((*fast)->stats().prompt_bf16_expert_layers, 0);
  }
  EXPECT_EQ((*fast)->stats().prompt_gate_products > 0, prompt_gate && prompt_linears);
  EXPECT_EQ((*fast)->stats().prompt_tf32_mixes > 0, prompt_mhc && prompt_linears && fast_mhc);
  ASSERT_GE(drift.positions, 512);
  Print(name, "tokens only (own KV)", drift);
  EXPECT_GE(static_cast<double>(drift.top1) / drift.positions, 0.5);
  EXPECT_LE(drift.median(), 0.5);
}

// The small model with V4.1's head_dim of 512: the fast path then holds the
// KV pools in stored form and attends with SparseDecodeAttention (tiny and
// small, head_dim 256, keep fp32 pools and the reference attention).
const Checkpoint* Small512Checkpoint() {
  return DerivedCheckpoint("small", "small_hd512", {{"\"head_dim\": 256", "\"head_dim\": 512"}},
                           3);
}

// The same with nothing left to choose: every routed expert active (16 of
// 16) and index_topk 128 (every compressed entry of a 128-position slot), so
// no expert or top-k choice can flip and the logits move continuously with
// the attention's numerics.
const Checkpoint* Small512ContinuousCheckpoint() {
  return DerivedCheckpoint("small", "small_hd512_continuous",
                           {{"\"head_dim\": 256", "\"head_dim\": 512"},
                            {"\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 16"},
                            {"\"index_topk\": 64", "\"index_topk\": 128"}},
                           3);
}

// small (head_dim 256: fp32 pools, the reference attention) with nothing
// left to choose, as above: what moves the logits is only the fast kernels'
// arithmetic, here the routed experts' and FP8 linears' block sums.
const Checkpoint* SmallContinuousCheckpoint() {
  return DerivedCheckpoint("small", "small_continuous",
                           {{"\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 16"},
                            {"\"index_topk\": 64", "\"index_topk\": 128"}},
                           3);
}

// Fidelity study (prints only): one-step error on a shared history with
// parts of the fast path switched off.
TEST(DeviceDecoderFastTest, StudyParts) {
  if (std::getenv("WEIR_FAST_STUDY") == nullptr) GTEST_SKIP() << "set WEIR_FAST_STUDY";
  // WEIR_FAST_STUDY=512: only the head_dim 512 model, with the stored KV
  // pools (and SparseDecodeAttention) on and off.
  const bool only512 = std::string(std::getenv("WEIR_FAST_STUDY")) == "512";
  std::vector<const Checkpoint*> models = {Small512Checkpoint(), Small512ContinuousCheckpoint()};
  if (!only512) {
    models = {&TinyCheckpoint(11), SmallCheckpoint(3), Small512Checkpoint(),
              Small512ContinuousCheckpoint()};
  }
  for (const Checkpoint* ck : models) {
    ASSERT_NE(ck, nullptr);
    auto cpu = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
    ASSERT_NE(cpu, nullptr);
    DeviceDecoderOptions options{.max_sequences = 8, .max_positions = 128, .max_batch = 8};
    auto ref = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, options);
    ASSERT_TRUE(ref.ok());
    // Bits: 1 the head on DotRows, 2 fast experts, 4 bf16 linears on
    // Bf16Gemm, 8 stored KV pools (head_dim 512 only).
    const std::vector<int> variants =
        only512 ? std::vector<int>{7, 15} : std::vector<int>{3, 6, 7, 15};
    for (int variant : variants) {
      DeviceDecoderOptions o = options;
      o.numerics = DecodeNumerics::kFast;
      o.fast_dot_rows = variant & 1;
      o.fast_experts = variant & 2;
      o.fast_bf16 = variant & 4;
      o.stored_kv = variant & 8;
      auto fast = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, o);
      ASSERT_TRUE(fast.ok());
      const Agreement g = Compare(*cpu, **ref, **fast, true);
      char name[96];
      std::snprintf(name, sizeof(name),
                    "dim %lld head_dim %lld dot_rows %d experts %d bf16 %d stored_kv %d",
                    static_cast<long long>(ck->config().dim),
                    static_cast<long long>(ck->config().head_dim), variant & 1,
                    (variant >> 1) & 1, (variant >> 2) & 1, (variant >> 3) & 1);
      Print(name, "synced", g);
    }
  }
}

TEST(DeviceDecoderFastTest, StoredKvOnHeadDim512AgreesWithReference) {
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  // SparseDecodeAttention rounds the softmax weights to bf16 for P.V (rel. L2
  // ~1e-3 per attention output, kernels/cuda/attention's test), a thousand
  // times the FP8 products' order differences, at every layer; this random
  // model's near-tied gates turn that into expert flips that cascade (even
  // the 1e-7 differences flip 0.5% of choices on small). Measured on an H200:
  // top-1 0.574, 6.3% of choices differing, median row error 0.23; the bars
  // below hold that and still fail a broken kernel or a wrong row (unrelated
  // logits: top-1 ~1/vocab, error ~1.4).
  CheckFidelity(*ck, "small head_dim 512", ActivationPrecision::kBf16, true, 0.45, 0.35, 0.1);
}
// ... with the attention on kMma16 (attention_wgmma false; the default runs
// kWgmma64 since 2026-12-05), held to the same bars.
TEST(DeviceDecoderFastTest, StoredKvOnHeadDim512WithMma16AttentionAgreesWithReference) {
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  CheckFidelity(*ck, "small head_dim 512, mma16 attention", ActivationPrecision::kBf16, true, 0.45,
                0.35, 0.1, false, nullptr, false, false, /*attention_wgmma=*/false);
}

// The stored pools and SparseDecodeAttention on a model without discrete
// choices: what is left is the attention's own numerics (P rounded to bf16,
// rel. L2 ~1e-3 per output in its kernel test) carried through 12 layers of
// random weights. Measured on an H200: top-1 0.820, median row error 0.0952,
// p90 0.106. The CPU reference with only its softmax weights rounded to bf16
// (attention_precision_study, same model and prompts style) moves the logits
// by the same amount: median 0.0952, p90 0.107, top-1 0.78. So the stored
// path adds nothing to its numerics; this random model turns a bf16-level
// change of every attention output into ~10% of the logits. A wrong row, a
// wrong scale or a misplaced write gives errors near 1 (unrelated logits)
// and fails these bounds.
TEST(DeviceDecoderFastTest, StoredKvIsCloseWhenNothingIsChosen) {
  const Checkpoint* ck = Small512ContinuousCheckpoint();
  ASSERT_NE(ck, nullptr);
  CheckFidelity(*ck, "small head_dim 512, nothing chosen", ActivationPrecision::kBf16, true,
                0.7, 0.15, 0.0);
}
TEST(DeviceDecoderFastTest, StoredKvWithMma16AttentionIsCloseWhenNothingIsChosen) {
  const Checkpoint* ck = Small512ContinuousCheckpoint();
  ASSERT_NE(ck, nullptr);
  CheckFidelity(*ck, "small head_dim 512, nothing chosen, mma16 attention",
                ActivationPrecision::kBf16, true, 0.7, 0.15, 0.0, false, nullptr, false, false,
                /*attention_wgmma=*/false);
}

TEST(DeviceDecoderFastTest, TinyBf16AgreesWithReference) {
  CheckFidelity(TinyCheckpoint(11), "tiny", ActivationPrecision::kBf16, false, 0.99);
}
TEST(DeviceDecoderFastTest, SmallBf16AgreesWithReference) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  CheckFidelity(*small, "small", ActivationPrecision::kBf16, true, 0.95);
}
// The routed experts' block sums on wgmma, then both the FP8 linears and the
// experts, on small with its choices: measured on an H200, top-1 0.658 /
// 0.596, expert choices 0.955 / 0.941 equal, median row error 0.18 / 0.23
// (the flips of near-tie choices cascade, as with fast_mhc; see
// WgmmaIsCloseWhenNothingIsChosen for what the arithmetic alone does). Held
// to bounds that a broken kernel misses.
TEST(DeviceDecoderFastTest, SmallBf16WithWgmmaExpertsStaysClose) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  CheckFidelity(*small, "small wgmma experts", ActivationPrecision::kBf16, true, 0.5, 0.3, 0.08,
                /*fast_mhc=*/false, nullptr, /*expert_wgmma=*/true);
}
TEST(DeviceDecoderFastTest, SmallBf16WithWgmmaEverywhereStaysClose) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  CheckFidelity(*small, "small wgmma", ActivationPrecision::kBf16, true, 0.5, 0.3, 0.08,
                /*fast_mhc=*/false, nullptr, /*expert_wgmma=*/true, /*dense_wgmma=*/true);
}
// The wgmma block sums where no choice can flip (SmallContinuousCheckpoint).
// FP8 wgmma sums a 32-element block with fewer bits than the f16 mma pair
// (kernel tests on an H200: up to 6.7e-4 of sum|xw| for the FP8 linears and
// 8e-5 for the MXFP4 experts, against ~1e-7 for mma). Measured on an H200,
// one step on a shared history: mma top-1 0.988, median row error 9.4e-7;
// wgmma experts 0.818 / 0.085; wgmma everywhere 0.785 / 0.095, as far from
// the reference as rounding the attention's softmax weights to bf16 moves
// the head_dim 512 model (StoredKvIsCloseWhenNothingIsChosen: 0.0952). This
// random 12-layer model turns any change of every layer's arithmetic above
// ~1e-5 into ~10% of its logits; so the bars below hold mma at its floor and
// wgmma to "close" (a wrong descriptor, fragment or scale gives errors near
// 1.4 and top-1 near 1/vocab), and say nothing about a trained model, where
// only a trained checkpoint whose experts the MXFP4 kernel can run (tiny's
// expert width of 64 is not a multiple of its K step) would tell.
TEST(DeviceDecoderFastTest, WgmmaIsCloseWhenNothingIsChosen) {
  const Checkpoint* ck = SmallContinuousCheckpoint();
  ASSERT_NE(ck, nullptr);
  CheckFidelity(*ck, "small, nothing chosen, mma", ActivationPrecision::kBf16, true, 0.97, 1e-5,
                0.0);
  CheckFidelity(*ck, "small, nothing chosen, wgmma experts", ActivationPrecision::kBf16, true, 0.7,
                0.15, 0.0, /*fast_mhc=*/false, nullptr, /*expert_wgmma=*/true);
  CheckFidelity(*ck, "small, nothing chosen, wgmma", ActivationPrecision::kBf16, true, 0.7, 0.15,
                0.0, /*fast_mhc=*/false, nullptr, /*expert_wgmma=*/true, /*dense_wgmma=*/true);
}
// fast_mhc (HcMixSplitK) moves every mHC mix by ~1e-7 relative (its own
// test); on small's random weights that flips near-tie expert choices and the
// flips cascade (measured on an H200: top-1 0.830, expert agreement 0.9845,
// median row error 0.058 against 0.95+ / 0 with the reference's mixes), so it
// is off by default. Held here to bounds that a broken kernel misses.
TEST(DeviceDecoderFastTest, SmallBf16WithFastMhcStaysClose) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  CheckFidelity(*small, "small fast_mhc", ActivationPrecision::kBf16, true, 0.75, 0.15, 0.03,
                /*fast_mhc=*/true);
}
// The trained tiny (models/tiny, issue 19) with its tokenizer's Engram map,
// fed the first eight golden prompts (held-out text, 20 to 61 tokens): with
// trained weights the logits have margins, so the issue's bars (top-1 >= 99%,
// median row error <= 1e-2, expert choices) apply as written, with the
// reference's mixes and with fast_mhc's.
const TrainedInputs* TrainedTinyInputs() {
  static const TrainedInputs* inputs = []() -> const TrainedInputs* {
    std::vector<int64_t> engram_map = TrainedTinyEngramMap();
    if (engram_map.empty()) return nullptr;
    std::vector<std::vector<int64_t>> prompts = TrainedTinyPrompts();
    if (prompts.size() < 8) return nullptr;
    auto* out = new TrainedInputs;
    out->engram_token_map = std::move(engram_map);
    out->prompts = std::move(prompts);
    return out;
  }();
  return inputs;
}

TEST(DeviceDecoderFastTest, TrainedTinyBf16AgreesWithReference) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny", ActivationPrecision::kBf16, false, 0.99, 1e-2, 0.01,
                /*fast_mhc=*/false, in);
}
TEST(DeviceDecoderFastTest, TrainedTinyBf16WithFastMhcAgreesWithReference) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny fast_mhc", ActivationPrecision::kBf16, false, 0.99, 1e-2,
                0.01, /*fast_mhc=*/true, in);
}
TEST(DeviceDecoderFastTest, TrainedTinyFp32WithFastMhcAgreesWithReference) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny fast_mhc", ActivationPrecision::kFp32, false, 0.99, 1e-2,
                0.01, /*fast_mhc=*/true, in);
}

// The trained tiny with its experts widened from 64 to 256 units
// (WriteWidenedExperts: the same function; widen_experts_test holds the CPU's
// logits to the original's bit for bit), so that its routed experts run the
// device's MXFP4 kernels (K steps of 256): trained weights through the fast
// MoE, which the narrow tiny leaves on the reference's grouped kernel.
const Checkpoint* TrainedWideTinyCheckpoint() {
  static const Checkpoint* checkpoint = []() -> const Checkpoint* {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/tiny_wide256";
    const absl::Status written = WriteWidenedExperts("models/tiny", 256, dir);
    EXPECT_TRUE(written.ok()) << written;
    if (!written.ok()) return nullptr;
    auto c = Checkpoint::Open(dir);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->release() : nullptr;
  }();
  return checkpoint;
}

// The default fast path (the mma pair's block sums) on the widened trained
// tiny, every layer's routed experts on Mxfp4ExpertFfn: the issue's bars.
TEST(DeviceDecoderFastTest, TrainedWideTinyBf16AgreesWithReference) {
  const Checkpoint* ck = TrainedWideTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny, experts 256 wide", ActivationPrecision::kBf16, true, 0.99, 1e-2,
                0.01, /*fast_mhc=*/true, in);
}

// bf16_experts_every_row: the widened trained tiny's routed experts on the
// bf16 route at every position (bf16 sums over all of K instead of the FP8
// kernels' per-32 block sums; thirty-sixth session, not yet run): the
// issue's bars, which decide whether decode may take the route.
TEST(DeviceDecoderFastTest, TrainedWideTinyBf16WithBf16ExpertsEveryRowAgreesWithReference) {
  const Checkpoint* ck = TrainedWideTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny, experts 256 wide, bf16 experts every row",
                ActivationPrecision::kBf16, true, 0.99, 1e-2, 0.01, /*fast_mhc=*/true, in,
                /*expert_wgmma=*/false, /*dense_wgmma=*/false, /*attention_wgmma=*/true,
                /*prompt_linears=*/false, /*experts_every_row=*/true);
}

// The routed experts' block sums on e4m3 wgmma (DeviceDecoderOptions::
// expert_wgmma), on trained weights for the first time: the measurement
// kernels/cuda/moe/README.md ("wgmma block sums") waits for to decide the
// option's default (it is 12 % faster at batch 64 of the EP8 slice). Held to
// bounds a broken kernel misses; the printed top-1, median row error and
// expert-choice agreement against the issue's 0.99 / 1e-2 / 0.01 decide.
TEST(DeviceDecoderFastTest, TrainedWideTinyBf16WithWgmmaExpertsStaysClose) {
  const Checkpoint* ck = TrainedWideTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny, experts 256 wide, wgmma experts", ActivationPrecision::kBf16,
                true, 0.9, 0.1, 0.03, /*fast_mhc=*/true, in, /*expert_wgmma=*/true);
}

// The FP8 linears' block sums on e4m3 wgmma (DeviceDecoderOptions::dense_wgmma)
// on the trained tiny, with fast_mhc as served: what the random models above
// cannot say (their near-tie choices cascade; WgmmaIsCloseWhenNothingIsChosen).
// The routed experts stay on the reference's grouped kernel here (tiny's
// expert width of 64 is below the MXFP4 kernel's K step), so only the dense
// linears' block sums move. Measured on an H200 (2026-12-04), one step on a
// shared history: top-1 0.977, median row error 0.034, expert choices 0.984
// equal (mma, TrainedTinyBf16WithFastMhcAgreesWithReference: 0.998 / 2.5e-7
// / 0.9995): the issue's bars (0.99, 1e-2, 0.01) fail on trained weights
// too, so dense_wgmma stays off. (f16 wgmma sums a block with the mma pair's
// bits: tensor_core_sum_probe_test.) Held to bounds a broken kernel misses.
TEST(DeviceDecoderFastTest, TrainedTinyBf16WithWgmmaLinearsStaysClose) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny wgmma linears", ActivationPrecision::kBf16, false, 0.9, 0.1,
                0.03, /*fast_mhc=*/true, in, /*expert_wgmma=*/false, /*dense_wgmma=*/true);
}

// prompt_bf16_linears with every position a prompt's: the FP8 linears as
// Bf16Gemm over the operands' exact bf16 values (fp32 sums over all of K,
// no per-32 fold) against the reference, on trained weights with fast_mhc
// as served: the issue's bars (0.99, 1e-2, 0.01), as the FP8 products keep
// them (TrainedTinyBf16WithFastMhcAgreesWithReference).
TEST(DeviceDecoderFastTest, TrainedTinyBf16WithPromptBf16LinearsAgreesWithReference) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny prompt bf16 linears", ActivationPrecision::kBf16, false, 0.99,
                1e-2, 0.01, /*fast_mhc=*/true, in, /*expert_wgmma=*/false, /*dense_wgmma=*/false,
                /*attention_wgmma=*/true, /*prompt_linears=*/true);
}
// ... with the prompt rows' gate logits as a bf16 GEMM too
// (prompt_bf16_gate: the same exact products summed in another order, so a
// choice moves only at a near-tie): the same bars.
TEST(DeviceDecoderFastTest, TrainedTinyBf16WithPromptBf16GateAgreesWithReference) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny prompt bf16 linears and gate", ActivationPrecision::kBf16, false,
                0.99, 1e-2, 0.01, /*fast_mhc=*/true, in, /*expert_wgmma=*/false,
                /*dense_wgmma=*/false, /*attention_wgmma=*/true, /*prompt_linears=*/true,
                /*experts_every_row=*/false, /*prompt_gate=*/true);
}
// ... with the prompt rows' mHC coefficients on TF32 tensor cores too
// (prompt_tf32_mhc: each product to about 2^-21, the sums in the tensor
// core's accumulation; the coefficients within 1.6e-5 of the CPU's on an
// H100, HcMixSplitK's 3.3e-6): the same bars.
TEST(DeviceDecoderFastTest, TrainedTinyBf16WithPromptTf32MhcAgreesWithReference) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny prompt bf16 linears and TF32 mHC", ActivationPrecision::kBf16,
                false, 0.99, 1e-2, 0.01, /*fast_mhc=*/true, in, /*expert_wgmma=*/false,
                /*dense_wgmma=*/false, /*attention_wgmma=*/true, /*prompt_linears=*/true,
                /*experts_every_row=*/false, /*prompt_gate=*/false, /*prompt_mhc=*/true);
}
// ... with HcMixTf32's promoted sums (prompt_tf32_mhc_promote): the same bars.
TEST(DeviceDecoderFastTest, TrainedTinyBf16WithPromptTf32MhcPromotedAgreesWithReference) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny prompt bf16 linears and promoted TF32 mHC",
                ActivationPrecision::kBf16, false, 0.99, 1e-2, 0.01, /*fast_mhc=*/true, in,
                /*expert_wgmma=*/false, /*dense_wgmma=*/false, /*attention_wgmma=*/true,
                /*prompt_linears=*/true, /*experts_every_row=*/false, /*prompt_gate=*/false,
                /*prompt_mhc=*/true, /*prompt_mhc_promote=*/true);
}
// ... with those linears on cuBLASLt's block-scaled FP8 GEMM over the
// re-blocked stored forms (prompt_fp8_lt: the FP8 operands' products but
// for codes re-blocked below e4m3's normal range, summed on the FP8 tensor
// cores). Measured on an H100 (forty-fifth session): top-1 0.973 / 0.981,
// median row error 0.032 / 0.047, expert choices 0.985 / 0.980 equal
// (shared history / tokens only): the issue's bars (0.99, 1e-2, 0.01) fail,
// as dense_wgmma's e4m3 sums do (TrainedTinyBf16WithWgmmaLinearsStaysClose),
// so prompt_fp8_lt stays off. Held to bounds a broken product misses.
TEST(DeviceDecoderFastTest, TrainedTinyBf16WithPromptFp8LtStaysClose) {
  const Checkpoint* ck = TrainedTinyCheckpoint();
  const TrainedInputs* in = TrainedTinyInputs();
  ASSERT_NE(ck, nullptr);
  ASSERT_NE(in, nullptr);
  CheckFidelity(*ck, "trained tiny prompt FP8 linears on cuBLASLt", ActivationPrecision::kBf16,
                false, 0.95, 0.1, 0.03, /*fast_mhc=*/true, in, /*expert_wgmma=*/false,
                /*dense_wgmma=*/false, /*attention_wgmma=*/true, /*prompt_linears=*/true,
                /*experts_every_row=*/false, /*prompt_gate=*/false, /*prompt_mhc=*/false,
                /*prompt_mhc_promote=*/false, /*prompt_fp8_lt=*/true);
}
// ... and where no choice can flip (SmallContinuousCheckpoint): what the
// maths alone moves, beside the mma pair's 9.4e-7 median row error.
TEST(DeviceDecoderFastTest, PromptBf16LinearsAreCloseWhenNothingIsChosen) {
  const Checkpoint* ck = SmallContinuousCheckpoint();
  ASSERT_NE(ck, nullptr);
  CheckFidelity(*ck, "small, nothing chosen, prompt bf16 linears", ActivationPrecision::kBf16, true,
                0.95, 1e-2, 0.0, /*fast_mhc=*/false, nullptr, /*expert_wgmma=*/false,
                /*dense_wgmma=*/false, /*attention_wgmma=*/true, /*prompt_linears=*/true);
}

TEST(DeviceDecoderFastTest, SmallFp32AgreesWithReference) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  CheckFidelity(*small, "small", ActivationPrecision::kFp32, true, 0.95);
}

// One sequence (slot 3, tokens `fed`) decoded in the company of `batch` on a
// fresh decoder of `options`; returns its logits per step.
std::vector<std::vector<float>> Decode(const Model& model, const DeviceDecoderOptions& options,
                                       const std::vector<int>& batch,
                                       const std::vector<int64_t>& fed, uint32_t seed) {
  const int64_t v = model.config().vocab_size;
  auto dd = DeviceDecoder::Create(model, ActivationPrecision::kBf16, options);
  EXPECT_TRUE(dd.ok()) << dd.status();
  if (!dd.ok()) return {};
  for (int s : batch) EXPECT_TRUE((*dd)->Start(s).ok());
  const size_t me = std::find(batch.begin(), batch.end(), 3) - batch.begin();
  std::vector<std::vector<float>> out;
  for (size_t step = 0; step < fed.size(); ++step) {
    std::vector<int64_t> tokens = RandomTokens(static_cast<int>(batch.size()),
                                               seed + static_cast<uint32_t>(step), v - 1);
    tokens[me] = fed[step];
    auto r = (*dd)->Step(batch, tokens);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out.emplace_back(r->begin() + me * v, r->begin() + (me + 1) * v);
  }
  return out;
}

void CheckBatchInvariance(bool expert_wgmma, bool dense_wgmma = false,
                          bool experts_every_row = false) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions options{.numerics = DecodeNumerics::kFast, .max_sequences = 16,
                               .max_positions = 64, .max_batch = 16};
  options.expert_wgmma = expert_wgmma;
  options.dense_wgmma = dense_wgmma;
  options.bf16_experts_every_row = experts_every_row;
  DeviceDecoderOptions eager = options;
  eager.use_graphs = false;
  const std::vector<int64_t> fed = RandomTokens(40, 5, v - 1);
  const auto alone = Decode(*cpu, options, {3}, fed, 100);
  const auto crowd = Decode(*cpu, options, {0, 1, 2, 4, 5, 3, 6, 7, 8, 9, 10}, fed, 200);
  const auto first = Decode(*cpu, options, {3, 12, 11, 15, 14}, fed, 300);
  const auto unrolled = Decode(*cpu, eager, {9, 3}, fed, 400);
  ASSERT_EQ(alone.size(), fed.size());
  ASSERT_EQ(crowd.size(), fed.size());
  ASSERT_EQ(first.size(), fed.size());
  ASSERT_EQ(unrolled.size(), fed.size());
  int differing = 0;
  for (size_t s = 0; s < fed.size(); ++s) {
    differing += alone[s] != crowd[s];
    differing += alone[s] != first[s];
    differing += alone[s] != unrolled[s];
  }
  EXPECT_EQ(differing, 0) << "of " << 3 * fed.size() << " compared steps";
  // Another history gives other logits (the comparison can fail).
  const auto other = Decode(*cpu, options, {3}, RandomTokens(40, 6, v - 1), 1);
  ASSERT_EQ(other.size(), fed.size());
  EXPECT_NE(alone.back(), other.back());
}

TEST(DeviceDecoderFastTest, SmallBf16IsBatchInvariant) { CheckBatchInvariance(false); }
// bf16_experts_every_row: decode steps' experts on the bf16 register route
// (its narrow tiles picked from the step's rows): a row's logits still do
// not depend on its company.
TEST(DeviceDecoderFastTest, SmallBf16ExpertsEveryRowIsBatchInvariant) {
  CheckBatchInvariance(false, false, /*experts_every_row=*/true);
}

// The fast numerics with room for `sequences` sequences of one `chunk`-row
// prompt chunk and a few decode steps after it.
DeviceDecoderOptions FastChunkOptions(int64_t chunk, int sequences = 2) {
  return {.numerics = DecodeNumerics::kFast,
          .max_sequences = sequences,
          .max_positions = chunk + 16,
          .max_batch = chunk,
          .max_rows_per_slot = chunk};
}

// On a fresh decoder of `options`: each of `slots` started and fed `prompt`
// as one chunk, then one decode step of all slots per entry of `steps`
// (a token a slot), on activations of `precision`. Returns every call's logits, in order.
std::vector<std::vector<float>> ChunkThenSteps(
    const Model& model, const DeviceDecoderOptions& options, const std::vector<int>& slots,
    const std::vector<int64_t>& prompt, const std::vector<std::vector<int64_t>>& steps,
    DeviceDecoderStats* stats = nullptr, ActivationPrecision precision = ActivationPrecision::kBf16,
    bool mark_prompt = false) {
  std::vector<std::vector<float>> out;
  auto dd = DeviceDecoder::Create(model, precision, options);
  EXPECT_TRUE(dd.ok()) << dd.status();
  if (!dd.ok()) return out;
  for (int slot : slots) {
    EXPECT_TRUE((*dd)->Start(slot).ok());
    if (mark_prompt) {
      EXPECT_TRUE((*dd)->SetPromptEnd(slot, static_cast<int64_t>(prompt.size())).ok());
    }
    auto rows = (*dd)->StepRows(std::vector<int>(prompt.size(), slot), prompt, std::nullopt);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return out;
    out.emplace_back(rows->begin(), rows->end());
  }
  for (const std::vector<int64_t>& tokens : steps) {
    auto r = (*dd)->StepRows(slots, tokens, std::nullopt);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out.emplace_back(r->begin(), r->end());
  }
  if (stats != nullptr) *stats = (*dd)->stats();
  return out;
}

// The calls of two ChunkThenSteps runs whose logits differ in any bit.
int DifferingCalls(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  int differing = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    differing += a[i].size() != b[i].size() ||
                 std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0;
  }
  return differing;
}

// The small bf16 model under two decoder set-ups that must agree bit for
// bit: a 40-row prompt chunk (tokens from `seed`) into slots 1 and 2, then 4
// decode steps of both (tokens first_token + i and first_token + 8 + 2 i).
struct SmallChunkCase {
  static constexpr int kChunk = 40;
  std::unique_ptr<Model> cpu;  // null when the checkpoint is missing
  DeviceDecoderOptions options = FastChunkOptions(kChunk, 3);
  std::vector<int64_t> prompt;
  std::vector<std::vector<int64_t>> steps;

  // Every call's logits on a fresh decoder of `o` (ChunkThenSteps).
  std::vector<std::vector<float>> Run(const DeviceDecoderOptions& o) const {
    return ChunkThenSteps(*cpu, o, {1, 2}, prompt, steps);
  }
};

SmallChunkCase SmallChunk(uint32_t seed, int64_t first_token) {
  SmallChunkCase c;
  const Checkpoint* small = SmallCheckpoint(3);
  if (small == nullptr) return c;
  c.cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  c.prompt = RandomTokens(SmallChunkCase::kChunk, seed, small->config().vocab_size - 1);
  for (int i = 0; i < 4; ++i) c.steps.push_back({first_token + i, first_token + 8 + 2 * i});
  return c;
}

// The step's parallel paths (concurrent_branches: the shared expert, the
// window KV and compressor, and each sublayer's mHC mix beside the Collapse
// and the sublayer) change the order of launches, not their arithmetic: the
// logits equal those of one stream bit for bit, for a prompt chunk and the
// decode steps after it, in graphs.
TEST(DeviceDecoderFastTest, SmallBf16ParallelBranchesGiveTheOneStreamBits) {
  const SmallChunkCase c = SmallChunk(43, 3);
  ASSERT_NE(c.cpu, nullptr);
  DeviceDecoderOptions one = c.options;
  one.concurrent_branches = false;
  const auto with = c.Run(c.options);
  const auto without = c.Run(one);
  ASSERT_EQ(with.size(), 6u);
  EXPECT_EQ(DifferingCalls(with, without), 0) << "of " << with.size() << " calls";
}

// The mHC collapse-norms with a block a token and with each cluster size
// (norm_cluster_ranks; the default picks by the step's rows), and with
// blocks of 256 threads (norm_block_threads): the logits of a 40-row chunk
// and of 4 decode steps of two sequences bit for bit.
TEST(DeviceDecoderFastTest, SmallBf16NormClustersGiveTheOneBlockBits) {
  const SmallChunkCase c = SmallChunk(47, 5);
  ASSERT_NE(c.cpu, nullptr);
  DeviceDecoderOptions one_block = c.options;
  one_block.norm_cluster_ranks = 1;
  one_block.norm_block_threads = 1024;
  const auto want = c.Run(one_block);
  ASSERT_EQ(want.size(), 6u);
  for (int ranks : {0, 2, 4, 8}) {
    DeviceDecoderOptions clustered = c.options;
    clustered.norm_cluster_ranks = ranks;
    clustered.norm_block_threads = 1024;
    EXPECT_EQ(DifferingCalls(c.Run(clustered), want), 0) << "ranks " << ranks;
  }
  for (int ranks : {0, 1}) {
    DeviceDecoderOptions narrow = c.options;
    narrow.norm_cluster_ranks = ranks;
    narrow.norm_block_threads = 256;
    EXPECT_EQ(DifferingCalls(c.Run(narrow), want), 0) << "256 threads, ranks " << ranks;
  }
}

// Prefill-sized steps on f16 wgmma (dense_wgmma_f16 takes the FP8 linears
// of more than kDenseWgmmaF16MinRows rows to the 128 x 128 wgmma tile,
// expert_wgmma_f16 the routed experts' MXFP4 kernel, and the tile form's
// dense products at 100 rows an expert), the decode steps' linears too
// (dense_wgmma_f16_decode: kN64M8 on f16 wgmma against the mma kernel's
// decode tile): the default decoder's logits bit for bit, for a 400-row
// chunk of one sequence and the decode steps after it.
TEST(DeviceDecoderFastTest, SmallBf16WgmmaF16PrefillGivesTheMmaBits) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  constexpr int kChunk = 400;
  DeviceDecoderOptions mma = FastChunkOptions(kChunk);
  DeviceDecoderOptions f16 = mma;
  f16.dense_wgmma_f16 = true;  // the linears and the experts' tile form
  f16.expert_wgmma_f16 = true;
  f16.dense_wgmma_f16_decode = true;
  const std::vector<int64_t> prompt = RandomTokens(kChunk, 41, v - 1);
  std::vector<std::vector<int64_t>> steps;
  for (int step = 0; step < 4; ++step) steps.push_back({7 + step});
  const auto got_mma = ChunkThenSteps(*cpu, mma, {1}, prompt, steps);
  const auto got_f16 = ChunkThenSteps(*cpu, f16, {1}, prompt, steps);
  ASSERT_EQ(got_mma.size(), 5u);
  ASSERT_EQ(got_mma[0].size(), static_cast<size_t>(kChunk * v));
  EXPECT_EQ(DifferingCalls(got_mma, got_f16), 0) << "of " << got_mma.size() << " calls";
}

// fused_rope (the query's and the indexer query's RoPE in their product's
// split-K reduce, the attention output's inverse one in its transpose) gives
// the Rope launches' bits: a 40-row prompt chunk and four decode steps of two
// sequences, every call's logits equal with and without it, and the fused
// decoder did fuse.
TEST(DeviceDecoderFastTest, SmallBf16FusedRopeGivesTheRopeLaunchesBits) {
  for (const bool stored : {false, true}) {
    const Checkpoint* ck = stored ? Small512Checkpoint() : SmallCheckpoint(3);
    ASSERT_NE(ck, nullptr);
    const int64_t v = ck->config().vocab_size;
    auto cpu = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
    ASSERT_NE(cpu, nullptr);
    DeviceDecoderOptions plain{.numerics = DecodeNumerics::kFast,
                               .max_sequences = 3,
                               .max_positions = 64,
                               .kv_block_tokens = stored ? 4 : 0,
                               .max_batch = 40,
                               .max_rows_per_slot = 40};
    plain.fused_rope = false;
    DeviceDecoderOptions fused = plain;
    fused.fused_rope = true;
    const std::vector<int64_t> prompt = RandomTokens(40, 43, v - 1);
    std::vector<std::vector<int64_t>> steps;
    for (int step = 0; step < 4; ++step) steps.push_back({5 + step, 9 + step});
    DeviceDecoderStats plain_stats, fused_stats;
    const auto want = ChunkThenSteps(*cpu, plain, {1, 2}, prompt, steps, &plain_stats);
    const auto got = ChunkThenSteps(*cpu, fused, {1, 2}, prompt, steps, &fused_stats);
    ASSERT_EQ(want.size(), 6u);
    EXPECT_EQ(DifferingCalls(want, got), 0) << "of " << want.size() << " calls, stored " << stored;
    EXPECT_EQ(plain_stats.fused_ropes, 0) << "stored " << stored;
    EXPECT_GT(fused_stats.fused_ropes, 0) << "stored " << stored;
  }
}

// fused_kv_rows (each KV row's norm, RoPE, quantization and scatter in one
// KvRowFinish launch) and fold_row_ops (the indexer's inputs made in its
// scoring launch, the unstored attention output rounded in its launch) give
// the separate launches' bits: a 40-row prompt chunk and four decode steps
// of two sequences, every call's logits equal with and without them, on the
// fake-quantized pools (head_dim 256) and the stored ones (head_dim 512),
// bf16 and fp32; and the fused decoder did fuse. On the fake-quantized pools
// the plain decoder also runs the plain SparseAttention kernel and the fused
// one the staged kernel writing the grouped projection's input itself
// (staged_attention, fused_attention_out). The fused decoder also runs the
// grouped wo_a in place (direct_wo_a), the shared expert's SwiGLU with w2's
// FP8 input (fused_swiglu_fp8), the split-K sums in the last split's CTA
// with the branches on (fused_split_reduce), and the KV branch with its bf16
// compressor products on h's bf16 form from the collapse (bf16_branches),
// and small's narrow gate sums its logits in MoeGate's block
// (gate_logits_in_block_macs); wo_a's split reduce makes wo_b's FP8 input
// (reduce_fp8_out), and the compressor's kernel runs the chunk a thread a
// row (parallel_compressor_rows); on the stored pools the wgmma attention
// writes wo_a's input itself (attention_grouped_out, which counts a folded
// pass too: the plain decoder leaves it off). On the fake-quantized pools the
// fused decoder runs again with 2 and 8 heads a staged attention block
// (attention_heads_per_block), the same bits.
TEST(DeviceDecoderFastTest, SmallFusedRowLaunchesGiveTheSeparateLaunchesBits) {
  struct Case {
    bool stored;
    ActivationPrecision precision;
  };
  for (const Case& k :
       {Case{false, ActivationPrecision::kBf16}, Case{true, ActivationPrecision::kBf16},
        Case{true, ActivationPrecision::kFp32}}) {
    const std::string name = std::string(k.stored ? "stored" : "fake-quantized") +
                             (k.precision == ActivationPrecision::kBf16 ? " bf16" : " fp32");
    const Checkpoint* ck = k.stored ? Small512Checkpoint() : SmallCheckpoint(3);
    ASSERT_NE(ck, nullptr);
    const int64_t v = ck->config().vocab_size;
    auto cpu = RowStableCpuModel(*ck, k.precision);
    ASSERT_NE(cpu, nullptr);
    DeviceDecoderOptions plain{.numerics = DecodeNumerics::kFast,
                               .max_sequences = 3,
                               .max_positions = 64,
                               .kv_block_tokens = k.stored ? 4 : 0,
                               .max_batch = 40,
                               .max_rows_per_slot = 40};
    plain.fused_kv_rows = false;
    plain.fold_row_ops = false;
    plain.staged_attention = false;
    plain.fused_attention_out = false;
    plain.direct_wo_a = false;
    plain.fused_swiglu_fp8 = false;
    plain.bf16_branches = false;
    plain.reduce_fp8_out = false;
    plain.parallel_compressor_rows = 0;
    plain.stored_wo_a = false;
    plain.attention_grouped_out = false;  // (stored pools: the wgmma attention's SwapAxes fold)
    DeviceDecoderOptions fused = plain;
    fused.fused_kv_rows = true;
    fused.fold_row_ops = true;
    fused.staged_attention = true;
    fused.fused_attention_out = true;
    fused.direct_wo_a = true;
    fused.fused_swiglu_fp8 = true;
    fused.fused_split_reduce = true;  // with the branches on (each its own counters)
    fused.bf16_branches = true;
    fused.gate_logits_in_block_macs = int64_t{1} << 16;
    fused.reduce_fp8_out = true;
    fused.parallel_compressor_rows = 8;  // the 40-row chunk, not the 2-row steps
    fused.stored_wo_a = true;
    fused.attention_grouped_out = true;
    const std::vector<int64_t> prompt = RandomTokens(40, 47, v - 1);
    std::vector<std::vector<int64_t>> steps;
    for (int step = 0; step < 4; ++step) steps.push_back({7 + step, 3 + step});
    DeviceDecoderStats plain_stats, fused_stats;
    const auto want = ChunkThenSteps(*cpu, plain, {1, 2}, prompt, steps, &plain_stats, k.precision);
    const auto got = ChunkThenSteps(*cpu, fused, {1, 2}, prompt, steps, &fused_stats, k.precision);
    ASSERT_EQ(want.size(), 6u) << name;
    EXPECT_EQ(DifferingCalls(want, got), 0) << "of " << want.size() << " calls, " << name;
    // The staged attention with a query's heads grouped in a block (2 and 8
    // heads a block; the decoder's own choice above takes 1 at these sizes).
    for (const int heads_per_block : {2, 8}) {
      if (k.stored) break;  // (the stored pools take the wgmma attention)
      DeviceDecoderOptions grouped = fused;
      grouped.attention_heads_per_block = heads_per_block;
      const auto again = ChunkThenSteps(*cpu, grouped, {1, 2}, prompt, steps, nullptr, k.precision);
      EXPECT_EQ(DifferingCalls(want, again), 0)
          << "of " << want.size() << " calls, " << name << ", heads a block " << heads_per_block;
    }
    EXPECT_EQ(plain_stats.fused_kv_rows, 0) << name;
    EXPECT_GT(fused_stats.fused_kv_rows, 0) << name;
    EXPECT_EQ(plain_stats.folded_row_ops, 0) << name;
    EXPECT_GT(fused_stats.folded_row_ops, 0) << name;
    // (bf16 weights, so direct_wo_a and bf16_branches, exist with bf16
    // activations only.)
    EXPECT_EQ(plain_stats.direct_wo_a, 0) << name;
    if (k.precision == ActivationPrecision::kBf16) {
      EXPECT_GT(fused_stats.direct_wo_a, 0) << name;
      EXPECT_GT(fused_stats.reduce_fp8_out, 0) << name;  // small's wo_a splits K in two
    }
    EXPECT_EQ(plain_stats.fused_swiglu_fp8, 0) << name;
    EXPECT_GT(fused_stats.fused_swiglu_fp8, 0) << name;
    EXPECT_EQ(plain_stats.bf16_branches, 0) << name;
    if (k.precision == ActivationPrecision::kBf16) {
      EXPECT_GT(fused_stats.bf16_branches, 0) << name;
    }
    EXPECT_EQ(plain_stats.stored_wo_a, 0) << name;
    if (k.precision == ActivationPrecision::kBf16) {
      EXPECT_GT(fused_stats.stored_wo_a, 0) << name;
    }
  }
}

// stored_wo_a: small's wo_a (stored FP8 in its checkpoint, loaded as bf16)
// held as the FP8 it re-encodes to. A 400-row chunk (the warp-specialized
// tile over the bf16 widened into the x16 scratch) and decode steps (the mma
// tiles widening in shared memory) give the bf16 form's bits.
TEST(DeviceDecoderFastTest, SmallBf16StoredWoAGivesTheBf16FormsBits) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  constexpr int kChunk = 400;
  DeviceDecoderOptions bf16_form = FastChunkOptions(kChunk);
  bf16_form.stored_wo_a = false;
  DeviceDecoderOptions stored = bf16_form;
  stored.stored_wo_a = true;
  const std::vector<int64_t> prompt = RandomTokens(kChunk, 53, v - 1);
  std::vector<std::vector<int64_t>> steps;
  for (int step = 0; step < 3; ++step) steps.push_back({5 + step});
  DeviceDecoderStats want_stats, got_stats;
  const auto want = ChunkThenSteps(*cpu, bf16_form, {1}, prompt, steps, &want_stats);
  const auto got = ChunkThenSteps(*cpu, stored, {1}, prompt, steps, &got_stats);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(DifferingCalls(want, got), 0) << "of " << want.size() << " calls";
  EXPECT_EQ(want_stats.stored_wo_a, 0);
  EXPECT_EQ(got_stats.stored_wo_a, small->config().n_layers * small->config().o_groups);
  EXPECT_GT(got_stats.widened_wo_a, 0);  // the chunk
  EXPECT_GT(got_stats.direct_wo_a, 0);
}

// attention_grouped_out on V4.1's attention (head_dim 512: stored pools and
// the wgmma attention, which small's 256 never takes): the synthetic slice
// with 16 experts, a 40-position prompt chunk (the prompt's shape, one CTA a
// query) and decode steps of two sequences (the decode ranges, clusters).
// The attention writing wo_a's input itself (bf16 bits with the bf16 wo_a's
// direct_wo_a, fp32 with the FP8 stand-in) gives the plain output's and
// SwapAxes' bits.
TEST(DeviceDecoderFastTest, SyntheticV41GroupedAttentionOutputGivesTheSwapAxesBits) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig("models/v41-flash/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  config->n_routed_experts = 16;
  config->engram_layer_ids.clear();
  config->engram_num_embeddings.clear();
  const int64_t v = config->vocab_size;
  for (const bool bf16_wo_a : {true, false}) {
    std::vector<std::vector<float>> calls[2];
    int64_t folded[2] = {0, 0};
    for (int on = 0; on < 2; ++on) {
      DeviceDecoderOptions o{.numerics = DecodeNumerics::kFast,
                             .max_sequences = 2,
                             .max_positions = 128,
                             .max_batch = 40,
                             .max_rows_per_slot = 40};
      o.attention_grouped_out = on == 1;
      auto dd = CreateSyntheticDeviceDecoder(*config, ActivationPrecision::kBf16, o, 5, bf16_wo_a);
      ASSERT_TRUE(dd.ok()) << dd.status();
      ASSERT_TRUE((*dd)->Start(0).ok());
      ASSERT_TRUE((*dd)->Start(1).ok());
      const std::vector<int64_t> prompt = RandomTokens(40, 61, v - 1);
      auto chunk = (*dd)->StepRows(std::vector<int>(40, 0), prompt, std::nullopt);
      ASSERT_TRUE(chunk.ok()) << chunk.status();
      calls[on].emplace_back(chunk->begin(), chunk->end());
      for (int step = 0; step < 3; ++step) {
        const int slots[] = {0, 1};
        const int64_t tokens[] = {3 + step, 11 + step};
        auto r = (*dd)->Step(slots, tokens);
        ASSERT_TRUE(r.ok()) << r.status();
        calls[on].emplace_back(r->begin(), r->end());
      }
      folded[on] = (*dd)->stats().folded_row_ops;
    }
    ASSERT_EQ(calls[0].size(), calls[1].size());
    EXPECT_EQ(DifferingCalls(calls[0], calls[1]), 0) << "bf16 wo_a " << bf16_wo_a;
    EXPECT_GT(folded[1], folded[0]) << "bf16 wo_a " << bf16_wo_a;  // the SwapAxes left out
  }
}

constexpr int kLongChunk = 400, kShortChunk = 100;

// The prompt of kLongChunk rows as one chunk and then three decode steps
// (returned: the chunk's logits first), against the same prompt in chunks of
// kShortChunk rows and the same steps on a second decoder: every row the same
// bits. `mark_prompt`: both decoders learn where the prompt ends
// (SetPromptEnd); `stats`: the two decoders' stats at the end, long first.
std::vector<std::vector<float>> LongChunkAgainstShortChunks(
    const Model& cpu, const DeviceDecoderOptions& options, const std::vector<int64_t>& prompt,
    bool mark_prompt = false, DeviceDecoderStats (*stats)[2] = nullptr) {
  const int64_t v = cpu.config().vocab_size;
  std::vector<std::vector<int64_t>> steps;
  for (int step = 0; step < 3; ++step) steps.push_back({11 + step});
  auto whole =
      ChunkThenSteps(cpu, options, {1}, prompt, steps, stats != nullptr ? &(*stats)[0] : nullptr,
                     ActivationPrecision::kBf16, mark_prompt);
  EXPECT_EQ(whole.size(), 4u);
  if (whole.size() != 4u) return {};
  EXPECT_EQ(whole[0].size(), static_cast<size_t>(kLongChunk * v));
  auto dd = DeviceDecoder::Create(cpu, ActivationPrecision::kBf16, options);
  EXPECT_TRUE(dd.ok()) << dd.status();
  if (!dd.ok() || !(*dd)->Start(1).ok()) return {};
  if (mark_prompt && !(*dd)->SetPromptEnd(1, static_cast<int64_t>(prompt.size())).ok()) {
    ADD_FAILURE() << "SetPromptEnd";
    return {};
  }
  int64_t differing_rows = 0;
  for (int c = 0; c < kLongChunk / kShortChunk; ++c) {
    const std::vector<int64_t> part(prompt.begin() + c * kShortChunk,
                                    prompt.begin() + (c + 1) * kShortChunk);
    auto rows = (*dd)->StepRows(std::vector<int>(kShortChunk, 1), part, std::nullopt);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok() || rows->size() != static_cast<size_t>(kShortChunk * v)) return {};
    for (int r = 0; r < kShortChunk; ++r) {
      differing_rows +=
          std::memcmp(rows->data() + r * v, whole[0].data() + (c * kShortChunk + r) * v,
                      v * sizeof(float)) != 0;
    }
  }
  EXPECT_EQ(differing_rows, 0) << "of " << kLongChunk << " prompt rows";
  for (size_t i = 0; i < steps.size(); ++i) {
    auto r = (*dd)->StepRows(std::vector<int>{1}, steps[i], std::nullopt);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(std::memcmp(r->data(), whole[i + 1].data(), v * sizeof(float)), 0) << "step " << i;
  }
  if (stats != nullptr) (*stats)[1] = (*dd)->stats();
  return whole;
}

// A 400-row prompt chunk runs the FP8 linears (and the experts' tile form)
// on the warp-specialized prefill tile (Fp8GemmTile::kN128M128Ws, kAuto's
// tile above 256 rows); the same prompt in four chunks of 100 rows runs the
// mma tiles and the MXFP4 kernel. Every row's logits must be the same bits,
// and so must the decode steps after.
TEST(DeviceDecoderFastTest, SmallBf16LongChunkGivesTheShortChunksBits) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  constexpr int kChunk = kLongChunk;
  const DeviceDecoderOptions options = FastChunkOptions(kChunk);
  const std::vector<int64_t> prompt = RandomTokens(kChunk, 43, v - 1);
  const auto whole = LongChunkAgainstShortChunks(*cpu, options, prompt);
  ASSERT_EQ(whole.size(), 4u);
  // The 400-row chunk's FP8 products read X's f16 panel (prefill_x16_panel,
  // on by default); without the panel, and with the scaled panel
  // (scaled_x16_panel), the chunk's rows are the same bits.
  auto panels = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, options);
  ASSERT_TRUE(panels.ok()) << panels.status();
  DeviceDecoderOptions off = options;
  off.prefill_x16_panel = false;
  auto widened = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, off);
  ASSERT_TRUE(widened.ok()) << widened.status();
  DeviceDecoderOptions scaled_options = options;
  scaled_options.scaled_x16_panel = true;
  auto scaled = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, scaled_options);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  std::vector<float> chunk[3];
  for (int i = 0; i < 3; ++i) {
    DeviceDecoder& d = i == 0 ? **panels : i == 1 ? **widened : **scaled;
    ASSERT_TRUE(d.Start(1).ok());
    auto rows = d.StepRows(std::vector<int>(kChunk, 1), prompt, std::nullopt);
    ASSERT_TRUE(rows.ok()) << rows.status();
    chunk[i].assign(rows->begin(), rows->end());
  }
  EXPECT_GT((*panels)->stats().x16_panels, 0);
  EXPECT_EQ((*widened)->stats().x16_panels, 0);
  EXPECT_GT((*scaled)->stats().x16_panels, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(chunk[i].size(), whole[0].size());
    EXPECT_EQ(std::memcmp(chunk[i].data(), whole[0].data(), chunk[i].size() * sizeof(float)), 0)
        << "decoder " << i;
  }
}

// A prompt chunk's `rows` rows of logits `a` (one maths) against `b` (the
// other): some rows differ in their bits (the option is not a no-op; unless
// `may_agree`) and the median relative L2 distance stays within 0.3, the
// distance a change of rounding in every product makes on small; the
// distance is printed after `what`.
void ExpectOtherBitsClose(const char* what, const std::vector<float>& a,
                          const std::vector<float>& b, int rows, int64_t v, bool may_agree = false,
                          double max_median = 0.3) {
  std::vector<double> rel;
  int64_t differing = 0, top1 = 0;
  for (int r = 0; r < rows; ++r) {
    const float* x = a.data() + r * v;
    const float* y = b.data() + r * v;
    differing += std::memcmp(x, y, v * sizeof(float)) != 0;
    rel.push_back(RelativeL2(x, y, v));
    top1 += ArgmaxRow(x, v) == ArgmaxRow(y, v);
  }
  std::sort(rel.begin(), rel.end());
  std::printf(
      "small bf16, a %d-row prompt chunk, %s: %lld rows differ, top-1 agreement %.4f, "
      "relative L2 median %.3g, p90 %.3g, worst %.3g\n",
      rows, what, static_cast<long long>(differing), static_cast<double>(top1) / rows,
      rel[rel.size() / 2], rel[rel.size() * 9 / 10], rel.back());
  if (!may_agree) {
    EXPECT_GT(differing, 0);
  }
  EXPECT_LE(rel[rel.size() / 2], max_median);
}

// The prompt's maths a case turns on: prompt_bf16_linears alone, or with
// prompt_bf16_experts, or with prompt_bf16_gate, or with prompt_tf32_mhc.
enum class PromptMaths { kLinears, kExperts, kGate, kMhc, kFp8Lt };

// A 400-row prompt chunk against the same prompt in chunks of 100 rows,
// both with the prompt marked, with prompt_bf16_linears and `maths`'s
// option (LongChunkAgainstShortChunks: every row the same bits, then decode
// steps past the prompt); then the chunk without that option (the linears'
// own for kLinears): other bits, close (ExpectOtherBitsClose). The option's
// stats count its work in both chunkings and none without it.
void PromptMathsLongChunk(PromptMaths maths, uint32_t seed, const char* what) {
  const bool experts = maths == PromptMaths::kExperts;
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  constexpr int kChunk = kLongChunk;
  DeviceDecoderOptions options = FastChunkOptions(kChunk);
  options.prompt_bf16_linears = true;
  options.prompt_bf16_experts = experts;
  options.prompt_bf16_gate = maths == PromptMaths::kGate;
  options.prompt_tf32_mhc = maths == PromptMaths::kMhc;
  options.prompt_fp8_lt = maths == PromptMaths::kFp8Lt;
  const auto counted = [maths](const DeviceDecoderStats& s) {
    return maths == PromptMaths::kExperts ? s.prompt_bf16_expert_layers
           : maths == PromptMaths::kGate  ? s.prompt_gate_products
           : maths == PromptMaths::kMhc   ? s.prompt_tf32_mixes
           : maths == PromptMaths::kFp8Lt ? s.fp8_lt_products
                                          : s.prompt_bf16_products;
  };
  const std::vector<int64_t> prompt = RandomTokens(kChunk, seed, v - 1);
  DeviceDecoderStats stats[2], other_stats;
  const auto whole =
      LongChunkAgainstShortChunks(*cpu, options, prompt, /*mark_prompt=*/true, &stats);
  ASSERT_EQ(whole.size(), 4u);
  EXPECT_GT(counted(stats[0]), 0);
  EXPECT_GT(counted(stats[1]), 0);
  DeviceDecoderOptions other = options;
  (maths == PromptMaths::kExperts ? other.prompt_bf16_experts
   : maths == PromptMaths::kGate  ? other.prompt_bf16_gate
   : maths == PromptMaths::kMhc   ? other.prompt_tf32_mhc
   : maths == PromptMaths::kFp8Lt ? other.prompt_fp8_lt
                                  : other.prompt_bf16_linears) = false;
  const auto other_rows = ChunkThenSteps(*cpu, other, {1}, prompt, {}, &other_stats,
                                         ActivationPrecision::kBf16, /*mark_prompt=*/true);
  ASSERT_EQ(other_rows.size(), 1u);
  ASSERT_EQ(other_rows[0].size(), whole[0].size());
  EXPECT_EQ(counted(other_stats), 0);
  // The routed experts' two maths may agree bit for bit on small (an H100,
  // 2026-12-07: 0 of 400 rows differ): both sum exact products in fp32, and
  // where no partial sum over small's K (1,024 and 512) needs rounding both
  // give the exact sum, whatever their order. That the route ran is in the
  // stats above; its bits are Mxfp4Bf16GroupedGemm's kernel test's. The
  // gate's two sums of the same exact products may agree too where no
  // partial sum needs rounding; its stats say the GEMM ran.
  // The TF32 products are not exact: its sums differ. cuBLASLt's FP8 sums
  // keep fewer bits (about 2^-12 of a 128-block's sum of |terms|) and the
  // re-blocking rounds some codes: on the random small, whose near-ties
  // carry any change far, the median row moved 0.315 on an H100
  // (forty-fifth session), so its bound is 0.45.
  ExpectOtherBitsClose(what, whole[0], other_rows[0], kChunk, v,
                       /*may_agree=*/maths == PromptMaths::kExperts || maths == PromptMaths::kGate,
                       /*max_median=*/maths == PromptMaths::kFp8Lt ? 0.45 : 0.3);
}

// The small bf16 model, a prompt of kLongChunk tokens (from `seed`) fed as
// one chunk into slot 1, then two decode steps (ChunkThenSteps): for
// options that must not change a bit of the prefill forms.
struct SmallLongChunkCase {
  std::unique_ptr<Model> cpu;  // null when the checkpoint is missing
  int n_layers = 0;
  std::vector<int64_t> prompt;
  std::vector<std::vector<int64_t>> steps = {{7}, {11}};

  // Every call's logits on a fresh decoder of `options`; `mark_prompt`
  // marks the chunk as the prompt (its rows on the prompt's maths).
  std::vector<std::vector<float>> Run(const DeviceDecoderOptions& options,
                                      DeviceDecoderStats* stats, bool mark_prompt) const {
    auto calls = ChunkThenSteps(*cpu, options, {1}, prompt, steps, stats,
                                ActivationPrecision::kBf16, mark_prompt);
    EXPECT_EQ(calls.size(), 1 + steps.size());
    return calls;
  }
};
SmallLongChunkCase SmallLongChunk(uint32_t seed) {
  SmallLongChunkCase c;
  const Checkpoint* small = SmallCheckpoint(3);
  if (small == nullptr) return c;
  c.cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  c.n_layers = small->config().n_layers;
  c.prompt = RandomTokens(kLongChunk, seed, small->config().vocab_size - 1);
  return c;
}

// fused_expert_swiglu_fp8: the routed experts' prefill forms take h's FP8
// form from the SwiGLU's launch instead of a quantization pass after it. A
// 400-row chunk on the FP8 tile form (prompt unmarked) and on the bf16 route
// (prompt marked, both prompt options), then decode steps: the same bits
// with the option as without, and the stats count the fused SwiGLUs.
TEST(DeviceDecoderFastTest, SmallBf16FusedExpertSwigluGivesTheTwoPassesBits) {
  const SmallLongChunkCase c = SmallLongChunk(59);
  ASSERT_NE(c.cpu, nullptr);
  for (const bool route : {false, true}) {
    DeviceDecoderOptions options = FastChunkOptions(kLongChunk);
    options.prompt_bf16_linears = route;
    options.prompt_bf16_experts = route;
    std::vector<std::vector<float>> calls[2];
    DeviceDecoderStats stats[2];
    for (int fused = 0; fused < 2; ++fused) {
      options.fused_expert_swiglu_fp8 = fused == 1;
      calls[fused] = c.Run(options, &stats[fused], /*mark_prompt=*/route);
    }
    const char* form = route ? "the bf16 route" : "the FP8 tile form";
    EXPECT_EQ(stats[0].fused_expert_swiglus, 0) << form;
    EXPECT_GT(stats[1].fused_expert_swiglus, 0) << form;
    if (route) {
      EXPECT_GT(stats[1].prompt_bf16_expert_layers, 0);
    } else {
      EXPECT_GT(stats[1].tile_form_layers, 0);
    }
    EXPECT_EQ(DifferingCalls(calls[0], calls[1]), 0) << form;
  }
}

// expert_out_bf16: a 400-row chunk on the FP8 tile form (prompt unmarked)
// and on the bf16 route (prompt marked), then decode steps: the experts'
// outputs as bf16 bits for the combine give the fp32 outputs' bits, and the
// stats count the layers that took them (none on the decode steps).
TEST(DeviceDecoderFastTest, SmallBf16ExpertOutBf16GivesTheSameBits) {
  const SmallLongChunkCase c = SmallLongChunk(73);
  ASSERT_NE(c.cpu, nullptr);
  for (const bool route : {false, true}) {
    std::vector<std::vector<float>> calls[2];
    DeviceDecoderStats stats[2];
    for (int on = 0; on < 2; ++on) {
      DeviceDecoderOptions options = FastChunkOptions(kLongChunk);
      options.expert_out_bf16 = on == 1;
      calls[on] = c.Run(options, &stats[on], /*mark_prompt=*/route);
    }
    const char* form = route ? "the bf16 route" : "the FP8 tile form";
    EXPECT_EQ(stats[0].expert_out_bf16_layers, 0) << form;
    // The chunk's MoE layers (one step: at most a layer each), none of the
    // decode steps'.
    EXPECT_GT(stats[1].expert_out_bf16_layers, 0) << form;
    EXPECT_LE(stats[1].expert_out_bf16_layers, c.n_layers) << form;
    if (route) {
      EXPECT_GT(stats[1].prompt_bf16_expert_layers, 0);
    } else {
      EXPECT_GT(stats[1].tile_form_layers, 0);
    }
    EXPECT_EQ(DifferingCalls(calls[0], calls[1]), 0) << form;
  }
}

// The experts' bf16 route in its forms (four widener warps, eight, the
// consumers widening their own register fragments over 128 or 80 X rows a
// CTA, the producer's copies on the ring's barriers, one scale test a
// stage, with the wgmma N fit to the tile's rows, over three consumer
// warpgroups): the prompt's 400-row chunk and the decode steps after it give
// the same bits.
TEST(DeviceDecoderFastTest, SmallBf16RouteFormsGiveTheSameBits) {
  const SmallLongChunkCase c = SmallLongChunk(79);
  ASSERT_NE(c.cpu, nullptr);
  // 4 wideners, 8, register A over 128 X rows, over 80, with the deep ring,
  // with one scale test a stage, with the fitted N too, over three consumer
  // warpgroups, those with the ballot group search, and with the deep ring
  // too (the defaults' route since the forty-first session), and over 256 X
  // rows (two warpgroups, the deep ring, the one scale test; the chunk's 100
  // rows an expert on average: tiles of N 256 and of N 128), and that with
  // the 32-row tail (its instance; the kernel test gives it tails to hold),
  // and the 256-row tile by CTA pairs (x_multicast).
  constexpr int kForms = 13;
  std::vector<std::vector<float>> calls[kForms];
  DeviceDecoderStats stats[kForms];
  for (int form = 0; form < kForms; ++form) {
    DeviceDecoderOptions options = FastChunkOptions(kLongChunk);
    options.prompt_bf16_experts = true;
    options.bf16_route_widener_warps = form == 1 ? 8 : 4;
    options.bf16_route_register_a = form >= 2;
    options.bf16_route_x_rows = form == 3 ? 80 : form >= 10 ? 256 : 0;
    options.bf16_route_tail_rows = form == 11;
    options.bf16_route_multicast = form == 12;
    options.bf16_route_deep_ring = form == 4 || form == 9;
    options.bf16_route_stage_scale_test = form >= 5;
    options.bf16_route_fit_tile_rows = form == 6;
    options.bf16_route_warpgroups = form >= 7 && form < 10 ? 3 : 0;
    options.bf16_route_ballot_search = form >= 8;  // form 9: the deep ring beside form 8
    calls[form] = c.Run(options, &stats[form], /*mark_prompt=*/true);
    EXPECT_GT(stats[form].prompt_bf16_expert_layers, 0) << "form " << form;
    // Forms 10's - 12's every route layer on the 256-row tile (the chunk
    // gives a local expert 100 rows on average), the others' none.
    EXPECT_EQ(stats[form].route_x256_layers, form >= 10 ? stats[form].prompt_bf16_expert_layers : 0)
        << "form " << form;
  }
  for (int form = 1; form < kForms; ++form) {
    EXPECT_EQ(DifferingCalls(calls[0], calls[form]), 0) << "form " << form;
  }
}

// The small long-chunk case (`seed`: the prompt's 400-row chunk and the
// decode steps after it) with a same-bits option off, then on (`set`): the
// same logits. Returns both runs' stats.
std::array<DeviceDecoderStats, 2> SameBitsWithTheOption(
    uint32_t seed, const std::function<void(DeviceDecoderOptions&, bool)>& set) {
  std::array<DeviceDecoderStats, 2> stats;
  const SmallLongChunkCase c = SmallLongChunk(seed);
  EXPECT_NE(c.cpu, nullptr);
  if (c.cpu == nullptr) return stats;
  std::vector<std::vector<float>> calls[2];
  for (int on = 0; on < 2; ++on) {
    DeviceDecoderOptions options = FastChunkOptions(kLongChunk);
    set(options, on == 1);
    calls[on] = c.Run(options, &stats[on], /*mark_prompt=*/true);
  }
  EXPECT_EQ(DifferingCalls(calls[0], calls[1]), 0);
  return stats;
}

// bf16_route_gate_up_bf16: the route's gate and up products as bf16 bits
// and the SwiGLU reading them give the fp32 pair's bits (the SwiGLU rounds
// them to bf16 first).
TEST(DeviceDecoderFastTest, SmallBf16RouteGateUpBf16GivesTheSameBits) {
  const auto stats = SameBitsWithTheOption(83, [](DeviceDecoderOptions& o, bool on) {
    o.prompt_bf16_experts = true;
    o.bf16_route_gate_up_bf16 = on;
  });
  EXPECT_GT(stats[0].prompt_bf16_expert_layers, 0);
  EXPECT_EQ(stats[0].bf16_gate_up_layers, 0);
  EXPECT_GT(stats[1].prompt_bf16_expert_layers, 0);
  EXPECT_EQ(stats[1].bf16_gate_up_layers, stats[1].prompt_bf16_expert_layers);
}

// bf16_route_swiglu: the route's gate and up products and the SwiGLU in one
// launch (the 256-row tile) give the separate launches' bits.
TEST(DeviceDecoderFastTest, SmallBf16RouteSwigluGivesTheSameBits) {
  const auto stats = SameBitsWithTheOption(101, [](DeviceDecoderOptions& o, bool on) {
    o.prompt_bf16_experts = true;
    o.bf16_route_x_rows = 256;
    o.bf16_route_swiglu = on;
  });
  EXPECT_GT(stats[0].prompt_bf16_expert_layers, 0);
  EXPECT_EQ(stats[0].route_swiglu_layers, 0);
  EXPECT_GT(stats[1].prompt_bf16_expert_layers, 0);
  EXPECT_EQ(stats[1].route_swiglu_layers, stats[1].prompt_bf16_expert_layers);
}

// bf16_route_decode_mma: with every row's experts on the bf16 route, the
// decode steps' products on the route's decode form (mma.sync over 8 or 16
// X rows a CTA, each warp's W through its own ring) give the register
// form's bits; the stats count the decode steps' route layers it took.
TEST(DeviceDecoderFastTest, SmallBf16RouteDecodeFormGivesTheSameBits) {
  // With the route's SwiGLU launch (the default: the decode form's gate /
  // up / SwiGLU launch) and without it (gate and up as two products).
  for (const bool swiglu : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "bf16_route_swiglu " << swiglu);
    const auto stats = SameBitsWithTheOption(107, [swiglu](DeviceDecoderOptions& o, bool on) {
      o.bf16_experts_every_row = true;
      o.bf16_route_swiglu = swiglu;
      o.bf16_route_decode_mma = on;
    });
    EXPECT_GT(stats[0].prompt_bf16_expert_layers, 0);
    EXPECT_EQ(stats[0].route_decode_mma_layers, 0);
    EXPECT_GT(stats[1].route_decode_mma_layers, 0);
    EXPECT_LT(stats[1].route_decode_mma_layers, stats[1].prompt_bf16_expert_layers)
        << "the prompt's chunk stays on the register form";
    // The decode steps' layers on the decode form's SwiGLU launch, the
    // chunk's on the 256-row tile's where it took that tile.
    EXPECT_EQ(stats[1].route_swiglu_layers - stats[0].route_swiglu_layers,
              swiglu ? stats[1].route_decode_mma_layers : 0);
    // Those launches wrote h's bf16 values for the down product too, and
    // the decode steps' gathers X's for the products.
    EXPECT_EQ(stats[1].route_h_bf16_layers, swiglu ? stats[1].route_decode_mma_layers : 0);
    EXPECT_EQ(stats[0].route_x_gathered_layers, 0);
    EXPECT_EQ(stats[1].route_x_gathered_layers, stats[1].route_decode_mma_layers);
  }
}

// prompt_gate_norm_bf16: the prompt's gate GEMM reading the FFN
// collapse-norm's bf16 form of h instead of a ToBf16 launch: the same bits.
TEST(DeviceDecoderFastTest, SmallBf16PromptGateNormBf16GivesTheSameBits) {
  const auto stats = SameBitsWithTheOption(
      89, [](DeviceDecoderOptions& o, bool on) { o.prompt_gate_norm_bf16 = on; });
  EXPECT_GT(stats[0].prompt_gate_products, 0);
  EXPECT_EQ(stats[0].prompt_gate_norm_inputs, 0);
  EXPECT_GT(stats[1].prompt_gate_products, 0);
  EXPECT_EQ(stats[1].prompt_gate_norm_inputs, stats[1].prompt_gate_products);
}

// prompt_norm_dequant_bf16: the prompt's products of h's FP8 form reading
// the collapse-norm's bf16 values of it instead of widening the codes each:
// the same bits.
TEST(DeviceDecoderFastTest, SmallBf16PromptNormDequantBf16GivesTheSameBits) {
  const auto stats = SameBitsWithTheOption(
      97, [](DeviceDecoderOptions& o, bool on) { o.prompt_norm_dequant_bf16 = on; });
  EXPECT_GT(stats[0].prompt_bf16_products, 0);
  EXPECT_EQ(stats[0].prompt_norm_dequant_inputs, 0);
  EXPECT_GT(stats[1].prompt_norm_dequant_inputs, 0);
}

// prompt_tf32_mhc_wide: HcMixTf32 with two m16 tiles a warp gives the
// prompt rows' mHC coefficients the one-tile form's bits.
TEST(DeviceDecoderFastTest, SmallBf16PromptTf32MhcWideGivesTheSameBits) {
  const auto stats = SameBitsWithTheOption(
      89, [](DeviceDecoderOptions& o, bool on) { o.prompt_tf32_mhc_wide = on; });
  EXPECT_GT(stats[0].prompt_tf32_mixes, 0);
  EXPECT_GT(stats[1].prompt_tf32_mixes, 0);
}

// bf16_ws_m256 and bf16_ws_persistent, alone and together: the prompt's
// 400-row chunk (its linears on the bf16 warp-specialized tile: with 256 X
// rows a CTA a whole tile and a partial one) and decode steps after it give
// the 128-row tile's bits.
TEST(DeviceDecoderFastTest, SmallBf16WsFormsGiveTheSameBits) {
  const SmallLongChunkCase c = SmallLongChunk(67);
  ASSERT_NE(c.cpu, nullptr);
  std::vector<std::vector<float>> calls[4];
  DeviceDecoderStats stats[4];
  for (int form = 0; form < 4; ++form) {  // bit 0: ws_m256, bit 1: ws_persistent
    DeviceDecoderOptions options = FastChunkOptions(kLongChunk);
    options.bf16_cutlass = false;  // the warp-specialized tile's forms, not CUTLASS's
    options.bf16_ws_m256 = (form & 1) != 0;
    options.bf16_ws_persistent = (form & 2) != 0;
    calls[form] = c.Run(options, &stats[form], /*mark_prompt=*/true);
  }
  for (int form = 1; form < 4; ++form) {
    EXPECT_GT(stats[form].prompt_bf16_products, 0);
    EXPECT_EQ(DifferingCalls(calls[0], calls[form]), 0)
        << "ws_m256 " << (form & 1) << " ws_persistent " << (form >> 1);
  }
}

// prompt_bf16_unsplit: the prompt's products unsplit at every chunk
// length, so a 400-row chunk (the warp-specialized tile over the widened
// weights) and four of 100 rows (the mma tiles) give every row the same bits
// (LongChunkAgainstShortChunks), then the decode steps past it.
TEST(DeviceDecoderFastTest, SmallBf16PromptUnsplitLongChunkGivesTheShortChunksBits) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions options = FastChunkOptions(kLongChunk);
  options.prompt_bf16_linears = true;
  options.prompt_bf16_unsplit = true;
  const std::vector<int64_t> prompt = RandomTokens(kLongChunk, 59, v - 1);
  DeviceDecoderStats stats[2];
  const auto whole =
      LongChunkAgainstShortChunks(*cpu, options, prompt, /*mark_prompt=*/true, &stats);
  ASSERT_EQ(whole.size(), 4u);
  EXPECT_GT(stats[0].prompt_bf16_products, 0);
  EXPECT_GT(stats[1].prompt_bf16_products, 0);
}

// prompt_bf16_gate: the prompt rows' gate logits as one unsplit bf16 GEMM,
// so a 400-row chunk (CUTLASS's GEMM or the warp-specialized tile) and four
// of 100 rows (the mma tiles) give every row the same bits, then the decode
// steps past it (MoeGateLogits for the generated rows); without the option
// the chunk's rows take MoeGateLogits: close.
TEST(DeviceDecoderFastTest, SmallBf16PromptGateLongChunkGivesTheShortChunksBits) {
  PromptMathsLongChunk(PromptMaths::kGate, 61,
                       "the prompt's gate as a bf16 GEMM against MoeGateLogits");
}

// prompt_tf32_mhc: the prompt rows' mHC coefficients on HcMixTf32 (a row's
// bits its own in any call), so a 400-row chunk and four of 100 rows give
// every row the same bits, then the decode steps past it (HcMixSplitK for
// the generated rows); without the option the chunk's rows take
// HcMixSplitK: other bits, close.
TEST(DeviceDecoderFastTest, SmallBf16PromptTf32MhcLongChunkGivesTheShortChunksBits) {
  PromptMathsLongChunk(PromptMaths::kMhc, 67,
                       "the prompt's mHC on TF32 tensor cores against HcMixSplitK");
}

// bf16_cutlass with prompt_bf16_unsplit: the prompt's 400-row chunk (its
// linears on CUTLASS's GEMM where Bf16GemmCutlassTakes them) and decode
// steps after it give the unsplit warp-specialized tile's bits.
TEST(DeviceDecoderFastTest, SmallBf16CutlassGivesTheUnsplitTilesBits) {
  const SmallLongChunkCase c = SmallLongChunk(71);
  ASSERT_NE(c.cpu, nullptr);
  std::vector<std::vector<float>> calls[2];
  DeviceDecoderStats stats[2];
  for (int form = 0; form < 2; ++form) {
    DeviceDecoderOptions options = FastChunkOptions(kLongChunk);
    options.prompt_bf16_unsplit = true;
    options.bf16_cutlass = form == 1;
    calls[form] = c.Run(options, &stats[form], /*mark_prompt=*/true);
  }
  EXPECT_EQ(stats[0].cutlass_products, 0);
  EXPECT_GT(stats[1].cutlass_products, 0);
  EXPECT_EQ(DifferingCalls(calls[0], calls[1]), 0);
}

// prompt_bf16_linears: a 400-row prompt chunk (the FP8 linears as the
// warp-specialized bf16 tile over each weight widened into the scratch
// first) against the same prompt in four chunks of 100 rows (the bf16 mma
// tiles widening the weight's codes in their stages), both with the prompt
// marked (SetPromptEnd), then decode steps past it (the FP8 products): every
// row the same bits (LongChunkAgainstShortChunks). Without the option the
// chunk's rows take the FP8 maths: other bits (the option is not a no-op),
// close.
TEST(DeviceDecoderFastTest, SmallBf16PromptLinearsLongChunkGivesTheShortChunksBits) {
  PromptMathsLongChunk(PromptMaths::kLinears, 47, "prompt bf16 linears against the FP8 products");
}

// prompt_bf16_experts: a 400-row prompt chunk's routed experts on the bf16
// route (Mxfp4Bf16GroupedGemm) against the same prompt in chunks of 100
// rows: every row the same bits, then the decode steps (the FP8 experts).
// Against prompt_bf16_linears alone (the FP8 experts for the prompt too):
// other bits, close.
TEST(DeviceDecoderFastTest, SmallBf16PromptExpertsLongChunkGivesTheShortChunksBits) {
  PromptMathsLongChunk(PromptMaths::kExperts, 53, "bf16 experts against the FP8 experts");
}

// prompt_fp8_lt: a 400-row prompt chunk's FP8 products on cuBLASLt's
// block-scaled FP8 GEMM (one algorithm a shape, chosen at 4,096 rows, no
// split-K) against the same prompt in chunks of 100 rows: every row the
// same bits; then decode steps (the FP8 products). Against the bf16 maths:
// close.
TEST(DeviceDecoderFastTest, SmallBf16PromptFp8LtLongChunkGivesTheShortChunksBits) {
  PromptMathsLongChunk(PromptMaths::kFp8Lt, 59, "cuBLASLt FP8 against the bf16 maths");
}

// prompt_bf16_linears with the prompts marked: steps mixing prompt rows (the
// bf16 maths) and generated rows (the FP8 products) run both products, the
// second writing its role's rows only (Bf16GemmParams::row_role), so the
// chunked steps equal one position a step bit for bit. Small (head_dim 256;
// also with prompt_bf16_experts, graphs on) and small at head_dim 512 with
// the prompt's attention shape as well.
TEST(DeviceDecoderFastTest, PromptBf16LinearsChunkedStepsAreBatchInvariant) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions options{.numerics = DecodeNumerics::kFast};
  options.prompt_bf16_linears = true;
  options.prompt_range_tiles = 0;  // small's head_dim has no prompt shape to count
  testing::CheckChunkedSteps(*cpu, ActivationPrecision::kBf16, options, nullptr,
                             "small bf16 fast, prompt bf16 linears", /*mark_prompts=*/true);
  DeviceDecoderOptions experts = options;
  experts.prompt_bf16_experts = true;
  testing::CheckChunkedSteps(*cpu, ActivationPrecision::kBf16, experts, nullptr,
                             "small bf16 fast, prompt bf16 linears and experts",
                             /*mark_prompts=*/true);
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  auto cpu512 = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
  ASSERT_NE(cpu512, nullptr);
  DeviceDecoderOptions stored{.numerics = DecodeNumerics::kFast, .kv_block_tokens = 2};
  stored.prompt_bf16_linears = true;
  stored.prompt_range_tiles = 16;
  testing::CheckChunkedSteps(*cpu512, ActivationPrecision::kBf16, stored, nullptr,
                             "small head_dim 512 fast, stored KV, prompt shape 16, prompt bf16 "
                             "linears",
                             /*mark_prompts=*/true);
}

// prompt_bf16_linears on eager steps of both roles: the FP8 products run
// over the generated rows' ranges alone (fp8_span_products), and every row
// still gets the bits it gets in a step of its own role (`experts`: with
// prompt_bf16_experts too). Two sequences with
// prompts of 5 and 150 positions: slot 3's prompt, then steps of slot 3's
// generated token beside a 37-row chunk of slot 1's prompt (generated row
// first, then last, so a range starts inside the step and ends at its
// padding), against the same rows in separate steps.
struct MixedCase {
  bool linears = true;     // prompt_bf16_linears (false: every row the FP8 maths)
  bool experts = false;    // prompt_bf16_experts
  bool spans = true;       // fp8_span_products
  bool graphs = false;     // use_graphs (the steps of up to 64 rows in graphs)
  int part = 37;           // the prompt chunk's rows a step
  bool reference = false;  // the reference numerics (no role changes a product)
  bool gate = false;       // prompt_bf16_gate (the prompt rows' gate logits as a bf16 GEMM)
  bool mhc = false;        // prompt_tf32_mhc (the prompt rows' mHC on TF32 tensor cores)
  bool fp8_lt = false;     // prompt_fp8_lt (the prompt rows' FP8 products on cuBLASLt)
};
void MixedStepsGiveEachRoleItsBits(const MixedCase& mc) {
  const bool experts = mc.experts, spans = mc.spans;
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions options{
      .numerics = mc.reference ? DecodeNumerics::kReference : DecodeNumerics::kFast,
      .max_sequences = 4,
      .max_positions = 192,
      .max_batch = 64,
      .max_rows_per_slot = 64};
  options.prompt_bf16_linears = mc.linears;
  options.prompt_bf16_experts = experts;
  options.fp8_span_products = spans;
  options.use_graphs = mc.graphs;
  options.prompt_bf16_gate = mc.gate;
  options.prompt_tf32_mhc = mc.mhc;
  options.prompt_fp8_lt = mc.fp8_lt;
  constexpr int kLong = 150, kShort = 5;
  const int kPart = mc.part;
  const std::vector<int64_t> long_prompt = RandomTokens(kLong, 91, v - 1);
  const std::vector<int64_t> short_prompt = RandomTokens(kShort, 92, v - 1);
  auto mixed = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, options);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto apart = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, options);
  ASSERT_TRUE(apart.ok()) << apart.status();
  for (DeviceDecoder* d : {mixed->get(), apart->get()}) {
    ASSERT_TRUE(d->Start(1).ok());
    ASSERT_TRUE(d->Start(3).ok());
    ASSERT_TRUE(d->SetPromptEnd(1, kLong).ok());
    ASSERT_TRUE(d->SetPromptEnd(3, kShort).ok());
    ASSERT_TRUE(d->StepRows(std::vector<int>(kShort, 3), short_prompt, std::nullopt).ok());
  }
  // The setup's own prompt steps took the route already; the mixed steps'
  // layers are counted from here.
  const int64_t routed_before = (*mixed)->stats().prompt_bf16_expert_layers;
  int64_t differing = 0, rows = 0, parts = 0;
  std::string which;  // the differing rows, for the failure message
  for (int part = 0; part * kPart < kLong && part < 4; ++part) {
    ++parts;
    const std::vector<int64_t> chunk(long_prompt.begin() + part * kPart,
                                     long_prompt.begin() + std::min(kLong, (part + 1) * kPart));
    const int64_t generated = 200 + part;
    const bool generated_first = part % 2 == 0;
    std::vector<int> slots(chunk.size(), 1);
    std::vector<int64_t> tokens = chunk;
    slots.insert(generated_first ? slots.begin() : slots.end(), 3);
    tokens.insert(generated_first ? tokens.begin() : tokens.end(), generated);
    auto together = StepLogits(**mixed, slots, tokens);
    ASSERT_TRUE(together.ok()) << together.status();
    // Copied before the generated row's step reuses the buffer.
    auto prompt_rows = StepLogits(**apart, std::vector<int>(chunk.size(), 1), chunk);
    ASSERT_TRUE(prompt_rows.ok()) << prompt_rows.status();
    auto generated_row = StepLogits(**apart, std::vector<int>{3}, std::vector<int64_t>{generated});
    ASSERT_TRUE(generated_row.ok()) << generated_row.status();
    const size_t g = generated_first ? 0 : chunk.size();
    const size_t p0 = generated_first ? 1 : 0;
    if (std::memcmp(together->data() + g * v, generated_row->data(), v * sizeof(float)) != 0) {
      ++differing;
      absl::StrAppend(&which, " part ", part, " generated row ", g, " (rel L2 ",
                      RelativeL2(together->data() + g * v, generated_row->data(), v), ");");
    }
    for (size_t r = 0; r < chunk.size(); ++r) {
      if (std::memcmp(together->data() + (p0 + r) * v, prompt_rows->data() + r * v,
                      v * sizeof(float)) != 0) {
        ++differing;
        absl::StrAppend(&which, " part ", part, " prompt row ", p0 + r, " (rel L2 ",
                        RelativeL2(together->data() + (p0 + r) * v, prompt_rows->data() + r * v, v),
                        ");");
      }
    }
    rows += static_cast<int64_t>(chunk.size()) + 1;
  }
  EXPECT_EQ(differing, 0) << "of " << rows << " rows (bf16 linears " << (mc.linears ? "on" : "off")
                          << ", FP8 ranges " << (spans ? "on" : "off") << ", graphs "
                          << (mc.graphs ? "on" : "off") << "):" << which;
  if (!mc.linears || mc.reference) {
    EXPECT_EQ((*mixed)->stats().prompt_bf16_products, 0);
    return;
  }
  if (spans && !mc.graphs) {
    EXPECT_GT((*mixed)->stats().fp8_span_products, 0);
  } else {
    EXPECT_EQ((*mixed)->stats().fp8_span_products, 0);
  }
  EXPECT_GT((*mixed)->stats().prompt_bf16_products + (*mixed)->stats().fp8_lt_products, 0);
  EXPECT_EQ((*mixed)->stats().fp8_lt_products > 0, mc.fp8_lt);
  EXPECT_EQ((*mixed)->stats().prompt_gate_products > 0, mc.gate);
  EXPECT_EQ((*mixed)->stats().prompt_tf32_mixes > 0, mc.mhc);
  EXPECT_EQ((*apart)->stats().fp8_span_products, 0);  // no step had both roles
  if (experts) {  // every mixed step's every MoE layer took the route
    EXPECT_GE((*mixed)->stats().prompt_bf16_expert_layers - routed_before,
              parts * small->config().n_layers);
    EXPECT_GT((*apart)->stats().prompt_bf16_expert_layers, 0);
  } else {
    EXPECT_EQ((*mixed)->stats().prompt_bf16_expert_layers, 0);
  }
}

TEST(DeviceDecoderFastTest, PromptBf16LinearsMixedEagerStepsGiveEachRoleItsBits) {
  MixedStepsGiveEachRoleItsBits({});
}

// The same steps with every row on the FP8 maths (no role changes a
// product): two sequences' rows in one eager step against each apart.
TEST(DeviceDecoderFastTest, FastMixedEagerStepsGiveEachSequenceItsBits) {
  MixedStepsGiveEachRoleItsBits({.linears = false});
}

// The same with prompt chunks shorter than small's window (32 positions).
TEST(DeviceDecoderFastTest, FastMixedEagerStepsOfShortChunksGiveEachSequenceItsBits) {
  MixedStepsGiveEachRoleItsBits({.linears = false, .part = 20});
}

// The same on the reference numerics.
TEST(DeviceDecoderFastTest, ReferenceMixedEagerStepsGiveEachSequenceItsBits) {
  MixedStepsGiveEachRoleItsBits({.linears = false, .reference = true});
}

// The same steps in graphs (no FP8 ranges: a graph runs them over every row).
TEST(DeviceDecoderFastTest, PromptBf16LinearsMixedGraphStepsGiveEachRoleItsBits) {
  MixedStepsGiveEachRoleItsBits({.graphs = true});
}

// prompt_fp8_lt: a step of both roles runs cuBLASLt's FP8 over every row
// into lt_y and copies the prompt's rows (CopyRowsOfRole) over the FP8
// product's; the prompt rows alone (37 a step: 36 rows, then the last one
// padded to 4) write y straight: the same bits, eager and in graphs.
TEST(DeviceDecoderFastTest, PromptFp8LtMixedStepsGiveEachRoleItsBits) {
  MixedStepsGiveEachRoleItsBits({.fp8_lt = true});
  MixedStepsGiveEachRoleItsBits({.graphs = true, .fp8_lt = true});
}

// prompt_bf16_gate beside it: MoeGateLogits writes every row's logits of a
// step of both roles, the bf16 GEMM (Bf16Gemm's row_role) the prompt's over
// them, so each row still gets its role's bits; eager and in graphs.
TEST(DeviceDecoderFastTest, PromptBf16GateMixedStepsGiveEachRoleItsBits) {
  MixedStepsGiveEachRoleItsBits({.gate = true});
  MixedStepsGiveEachRoleItsBits({.graphs = true, .gate = true});
}

// prompt_tf32_mhc beside it: HcMixSplitK writes every row's coefficients of
// a step of both roles, HcMixTf32 (its row_role) the prompt's over them, so
// each row still gets its role's bits; eager and in graphs.
TEST(DeviceDecoderFastTest, PromptTf32MhcMixedStepsGiveEachRoleItsBits) {
  MixedStepsGiveEachRoleItsBits({.mhc = true});
  MixedStepsGiveEachRoleItsBits({.graphs = true, .mhc = true});
}

// The same with the FP8 products over every row of the mixed steps
// (fp8_span_products off): the ranges change time, never bits.
TEST(DeviceDecoderFastTest, PromptBf16LinearsMixedEagerStepsWithoutRangesGiveEachRoleItsBits) {
  MixedStepsGiveEachRoleItsBits({.spans = false});
}

// prompt_bf16_experts beside it: a step of both roles groups its rows
// role-major (MoeGroupRowsParams::token_role), the FP8 experts take the
// generated rows' groups and the bf16 route the prompt's, so again every row
// gets its own role's bits.
TEST(DeviceDecoderFastTest, PromptBf16ExpertsMixedEagerStepsGiveEachRoleItsBits) {
  MixedStepsGiveEachRoleItsBits({.experts = true});
}

// prompt_bf16_experts, one eager step of both roles large enough for the
// FP8 experts' tile form: a 400-row chunk whose first 10 positions are the
// prompt's and the other 390 past its end (so the generated rows' half of the
// role-major groups runs the tile form, 390 x topk / experts rows an expert,
// and the prompt's the bf16 route), against the same rows as a 10-row
// prompt step and a 390-row step of generated positions: every row the same
// bits. `route_swiglu`: the prompt's route with the gate / up / SwiGLU launch
// (bf16_route_swiglu; its groups behind the generated rows' in the
// role-major layout).
void TileFormBesideThePrompt(bool route_swiglu) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  constexpr int kChunk = 400, kPrompt = 10;
  DeviceDecoderOptions options = FastChunkOptions(kChunk);
  options.prompt_bf16_linears = true;
  options.prompt_bf16_experts = true;
  options.bf16_route_swiglu = route_swiglu;
  const std::vector<int64_t> tokens = RandomTokens(kChunk, 61, v - 1);
  auto together = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, options);
  ASSERT_TRUE(together.ok()) << together.status();
  auto apart = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, options);
  ASSERT_TRUE(apart.ok()) << apart.status();
  for (DeviceDecoder* d : {together->get(), apart->get()}) {
    ASSERT_TRUE(d->Start(1).ok());
    ASSERT_TRUE(d->SetPromptEnd(1, kPrompt).ok());
  }
  auto whole = StepLogits(**together, std::vector<int>(kChunk, 1), tokens);
  ASSERT_TRUE(whole.ok()) << whole.status();
  // Copied before the rest's step reuses the buffer.
  auto prompt = StepLogits(**apart, std::vector<int>(kPrompt, 1),
                           std::vector<int64_t>(tokens.begin(), tokens.begin() + kPrompt));
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  auto rest = StepLogits(**apart, std::vector<int>(kChunk - kPrompt, 1),
                         std::vector<int64_t>(tokens.begin() + kPrompt, tokens.end()));
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(whole->size(), static_cast<size_t>(kChunk * v));
  int64_t differing = 0;
  for (int r = 0; r < kChunk; ++r) {
    const float* want = r < kPrompt ? prompt->data() + r * v : rest->data() + (r - kPrompt) * v;
    differing += std::memcmp(whole->data() + r * v, want, v * sizeof(float)) != 0;
  }
  EXPECT_EQ(differing, 0) << "of " << kChunk << " rows";
  EXPECT_GT((*together)->stats().prompt_bf16_expert_layers, 0);
  EXPECT_GT((*together)->stats().tile_form_layers, 0);  // small's experts convert exactly
  if (route_swiglu) {
    EXPECT_EQ((*together)->stats().route_swiglu_layers,
              (*together)->stats().prompt_bf16_expert_layers);
  }
}
TEST(DeviceDecoderFastTest, PromptBf16ExpertsTileFormBesideThePromptGivesEachRoleItsBits) {
  TileFormBesideThePrompt(/*route_swiglu=*/false);
}
TEST(DeviceDecoderFastTest, PromptBf16RouteSwigluBesideThePromptGivesEachRoleItsBits) {
  TileFormBesideThePrompt(/*route_swiglu=*/true);
}

// The same with the e4m3 wgmma maths (dense_wgmma, expert_wgmma): the 400-row
// chunk's FP8 linears and the experts' tile form run the warp-specialized
// tile's e4m3 instance, the 100-row chunks kWgmma's other tiles and the
// MXFP4 kernel's wgmma math.
TEST(DeviceDecoderFastTest, SmallBf16WithWgmmaLongChunkGivesTheShortChunksBits) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  const DeviceDecoderOptions options{.numerics = DecodeNumerics::kFast,
                                     .max_sequences = 2,
                                     .max_positions = kLongChunk + 16,
                                     .max_batch = kLongChunk,
                                     .max_rows_per_slot = kLongChunk,
                                     .expert_wgmma = true,
                                     .dense_wgmma = true};
  const auto whole = LongChunkAgainstShortChunks(
      *cpu, options, RandomTokens(kLongChunk, 44, small->config().vocab_size - 1));
  ASSERT_EQ(whole.size(), 4u);
}

// A chunk of kIndexerSharedKeysMinRows rows and more scores its index keys in
// the shared-keys form with indexer_shared_keys (kernels/cuda/attention,
// IndexerScoreForm::kSharedKeys, the CPU's bits like every form): the
// chunk's logits and the decode steps after it are the default decoder's.
// On `small` (its fast decoder's defaults): the chunk and steps with the
// per-query form, with the shared-keys form, and with indexer_mma (the
// shared-keys form's dots on the tensor cores where the keys are MXFP4:
// `mma` says whether they must be), alone, with indexer_mma_sum and with
// indexer_mma_bf16, all give the same bits; and so do the mma form with
// the top-k's rows in registers (topk_in_registers) and the decode steps'
// indexer on the tensor cores (indexer_decode_mma, beside the defaults).
void SharedKeysIndexerGivesThePerQueryBits(const Checkpoint* small, bool mma) {
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  constexpr int kChunk = 600;
  static_assert(kChunk >= kIndexerSharedKeysMinRows);
  DeviceDecoderOptions options = FastChunkOptions(kChunk);
  const std::vector<int64_t> prompt = RandomTokens(kChunk, 47, v - 1);
  // per query, shared keys, mma, mma_sum, mma_bf16, mma with
  // topk_in_registers, mma_bf16 with indexer_decode_mma
  constexpr int kForms = 7;
  std::vector<float> got[kForms];
  int64_t shared[kForms] = {}, on_mma[kForms] = {}, decode_mma[kForms] = {};
  for (int i = 0; i < kForms; ++i) {
    options.indexer_shared_keys = i >= 1;
    options.indexer_mma = i >= 2;
    options.indexer_mma_sum = i == 3;
    options.indexer_mma_bf16 = i == 4 || i == 6;
    options.topk_in_registers = i == 5;
    options.indexer_decode_mma = i == 6;
    auto dd = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, options);
    ASSERT_TRUE(dd.ok()) << dd.status();
    ASSERT_TRUE((*dd)->Start(1).ok());
    auto rows = (*dd)->StepRows(std::vector<int>(kChunk, 1), prompt, std::nullopt);
    ASSERT_TRUE(rows.ok()) << rows.status();
    got[i].assign(rows->begin(), rows->end());
    for (int step = 0; step < 3; ++step) {
      auto r = (*dd)->StepRows(std::vector<int>{1}, std::vector<int64_t>{11 + step}, std::nullopt);
      ASSERT_TRUE(r.ok()) << r.status();
      got[i].insert(got[i].end(), r->begin(), r->end());
    }
    shared[i] = (*dd)->stats().shared_key_scores;
    on_mma[i] = (*dd)->stats().mma_key_scores;
    decode_mma[i] = (*dd)->stats().decode_mma_key_scores;
  }
  EXPECT_EQ(shared[0], 0);
  EXPECT_GT(shared[1], 0) << "the model has no index-source layer the chunk scored";
  EXPECT_EQ(on_mma[1], 0);
  for (int i = 2; i < kForms; ++i) EXPECT_EQ(on_mma[i] > 0, mma) << "form " << i;
  for (int i = 0; i < kForms - 1; ++i) EXPECT_EQ(decode_mma[i], 0) << "form " << i;
  EXPECT_EQ(decode_mma[kForms - 1] > 0, mma);
  ASSERT_EQ(got[0].size(), static_cast<size_t>((kChunk + 3) * v));
  for (int i = 1; i < kForms; ++i) {
    ASSERT_EQ(got[i].size(), got[0].size());
    int64_t differing_rows = 0;
    for (int r = 0; r < kChunk + 3; ++r) {
      differing_rows +=
          std::memcmp(got[0].data() + r * v, got[i].data() + r * v, v * sizeof(float)) != 0;
    }
    EXPECT_EQ(differing_rows, 0) << "form " << i << ": of " << kChunk << " chunk rows and 3 steps";
  }
}

TEST(DeviceDecoderFastTest, SmallBf16SharedKeysIndexerGivesThePerQueryBits) {
  SharedKeysIndexerGivesThePerQueryBits(SmallCheckpoint(3), /*mma=*/false);  // fp32 index keys
}

// The same on small with head_dim 512, whose fast decoder holds the KV and
// index keys in stored form (MXFP4 keys: the tensor-core dots run).
TEST(DeviceDecoderFastTest, StoredKvMmaIndexerGivesThePerQueryBits) {
  SharedKeysIndexerGivesThePerQueryBits(Small512Checkpoint(), /*mma=*/true);
}

// The routed experts' f16 block sums on wgmma (expert_wgmma_f16) give the
// mma pair's bits: a row's logits equal the default decoder's, alone and in a
// crowd, step for step (tensor_core_sum_probe_test: f16 wgmma sums as the
// mma.sync pair does).
TEST(DeviceDecoderFastTest, SmallBf16WgmmaF16ExpertsGiveTheMmaBits) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  const int64_t v = small->config().vocab_size;
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions mma{
      .numerics = DecodeNumerics::kFast, .max_sequences = 16, .max_positions = 64, .max_batch = 16};
  DeviceDecoderOptions f16 = mma;
  f16.expert_wgmma_f16 = true;
  const std::vector<int64_t> fed = RandomTokens(40, 5, v - 1);
  const auto mma_alone = Decode(*cpu, mma, {3}, fed, 100);
  const auto f16_alone = Decode(*cpu, f16, {3}, fed, 100);
  const auto f16_crowd = Decode(*cpu, f16, {0, 1, 2, 4, 5, 3, 6, 7, 8, 9, 10}, fed, 200);
  ASSERT_EQ(mma_alone.size(), fed.size());
  ASSERT_EQ(f16_alone.size(), fed.size());
  ASSERT_EQ(f16_crowd.size(), fed.size());
  int differing = 0;
  for (size_t s = 0; s < fed.size(); ++s) {
    differing += mma_alone[s] != f16_alone[s];
    differing += mma_alone[s] != f16_crowd[s];
  }
  EXPECT_EQ(differing, 0) << "of " << 2 * fed.size() << " compared steps";
}

// Several positions of a slot in one step on kFast: bit-identical to one
// position a step (batch invariance with a slot's rows side by side), the
// head on some rows equal to the head on all (device_decoder_chunk_check.h).
TEST(DeviceDecoderFastTest, SmallBf16ChunkedStepsAreBatchInvariant) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  testing::CheckChunkedSteps(*cpu, ActivationPrecision::kBf16, {.numerics = DecodeNumerics::kFast},
                             nullptr, "small bf16 fast");
}
// Verification rollback on kFast with stored KV: the kept rows of rolled-back
// runs equal the kept rows stepped alone, bit for bit (batch invariance
// with rejected rows beside them).
TEST(DeviceDecoderFastTest, StoredKvRollbackIsBatchInvariant) {
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  auto cpu = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  testing::CheckRollback(*cpu, ActivationPrecision::kBf16,
                         {.numerics = DecodeNumerics::kFast, .kv_block_tokens = 4},
                         "small head_dim 512 fast, stored KV");
}
TEST(DeviceDecoderFastTest, StoredKvChunkedStepsAreBatchInvariant) {
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  auto cpu = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  // Blocks of 2 positions: the stored pools' entries scattered by the tables.
  testing::CheckChunkedSteps(*cpu, ActivationPrecision::kBf16,
                             {.numerics = DecodeNumerics::kFast, .kv_block_tokens = 2}, nullptr,
                             "small head_dim 512 fast, stored KV");
}
// ... and with the attention on SparseDecodeKernel::kWgmma64 (all heads of a
// query on wgmma), at the default ranges (a query's list over a cluster of
// CTAs) and at one CTA a query (attention_range_tiles past the list's 10
// tiles: no cluster, no fold): each is batch-invariant on its own.
TEST(DeviceDecoderFastTest, StoredKvWgmmaAttentionChunkedStepsAreBatchInvariant) {
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  auto cpu = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  for (const int range_tiles : {0, 16}) {
    DeviceDecoderOptions options{.numerics = DecodeNumerics::kFast, .kv_block_tokens = 2};
    options.attention_wgmma = true;
    options.attention_range_tiles = range_tiles;
    testing::CheckChunkedSteps(
        *cpu, ActivationPrecision::kBf16, options, nullptr,
        range_tiles == 0 ? "small head_dim 512 fast, stored KV, wgmma attention"
                         : "small head_dim 512 fast, stored KV, wgmma attention, one CTA a query");
  }
}
// prompt_range_tiles: the prompts' positions (SetPromptEnd) at one CTA a
// query, the generated ones at the default ranges, steps holding both in
// two launches: every row's bits follow its position's role alone, so the
// chunked steps equal one position a step.
TEST(DeviceDecoderFastTest, StoredKvPromptShapeChunkedStepsAreBatchInvariant) {
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  auto cpu = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  for (const bool wgmma : {true, false}) {
    DeviceDecoderOptions options{.numerics = DecodeNumerics::kFast, .kv_block_tokens = 2};
    options.attention_wgmma = wgmma;
    options.prompt_range_tiles = 16;
    testing::CheckChunkedSteps(*cpu, ActivationPrecision::kBf16, options, nullptr,
                               wgmma ? "small head_dim 512 fast, stored KV, prompt shape 16 / "
                                       "decode wgmma ranges"
                                     : "small head_dim 512 fast, stored KV, prompt shape 16 / "
                                       "decode kMma16",
                               /*mark_prompts=*/true);
  }
}
// prompt_kv_mirror: the prompt launches read the rows as bf16 from mirrors
// made once a layer instead of dequantizing them a query at a time; the same
// bits. Small at head_dim 512 (stored pools, the wgmma attention): a staged
// 40-row prompt chunk of slot 0, then a step holding slot 1's first 30 prompt
// rows beside slot 0's first generated row (two launches), slot 1's next 30
// prompt rows (the ring and entries of the chunk before) beside slot 0's
// next, a 296-row prompt chunk of slot 0 (its prompt extended), and decode
// steps. Without graphs every step takes the mirror; with graphs the
// small steps do not (a graph would keep one step's grid) and the 300-row
// chunk past graph_max_rows does. attention_overlap (every kWgmma64 launch,
// the decode ranges' clusters included) keeps the bits too.
TEST(DeviceDecoderFastTest, StoredKvPromptMirrorGivesTheDequantizedRowsBits) {
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  auto cpu = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  const int64_t v = ck->config().vocab_size;
  const std::vector<int64_t> prompt0 = RandomTokens(300, 71, v - 1);
  const std::vector<int64_t> prompt1 = RandomTokens(60, 72, v - 1);
  std::vector<std::vector<float>> calls[4];
  int64_t mirrors[4] = {0, 0, 0, 0};
  // Off, on without graphs, on with graphs, and on with attention_overlap.
  for (int mode = 0; mode < 4; ++mode) {
    DeviceDecoderOptions o{.numerics = DecodeNumerics::kFast,
                           .max_sequences = 2,
                           .max_positions = 400,
                           .kv_block_tokens = 8,
                           .max_batch = 300,
                           .max_rows_per_slot = 300};
    o.prompt_range_tiles = 16;
    o.prompt_kv_mirror = mode > 0;
    o.use_graphs = mode != 1;
    o.attention_overlap = mode == 3;
    auto dd = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, o);
    ASSERT_TRUE(dd.ok()) << dd.status();
    ASSERT_TRUE((*dd)->Start(0).ok());
    ASSERT_TRUE((*dd)->Start(1).ok());
    ASSERT_TRUE((*dd)->SetPromptEnd(0, 40).ok());
    ASSERT_TRUE((*dd)->SetPromptEnd(1, 60).ok());
    auto step = [&](const std::vector<int>& slots, const std::vector<int64_t>& tokens) {
      auto r = (*dd)->StepRows(slots, tokens, std::nullopt);
      ASSERT_TRUE(r.ok()) << r.status();
      calls[mode].emplace_back(r->begin(), r->end());
    };
    step(std::vector<int>(40, 0), std::vector<int64_t>(prompt0.begin(), prompt0.begin() + 40));
    std::vector<int> slots(30, 1);
    std::vector<int64_t> tokens(prompt1.begin(), prompt1.begin() + 30);
    slots.push_back(0);
    tokens.push_back(prompt0[40]);
    step(slots, tokens);
    tokens.assign(prompt1.begin() + 30, prompt1.end());
    tokens.push_back(prompt0[41]);
    step(slots, tokens);
    // A chunk past graph_max_rows (eager with graphs too): slot 0's prompt
    // continues at 42 and ends with it; then decode steps.
    ASSERT_TRUE((*dd)->SetPromptEnd(0, 42 + 296).ok());
    step(std::vector<int>(256 + 40, 0),
         std::vector<int64_t>(prompt0.begin(), prompt0.begin() + 296));
    for (int s = 0; s < 2; ++s) step({0, 1}, {5 + s, 9 + s});
    mirrors[mode] = (*dd)->stats().kv_mirrors;
  }
  EXPECT_EQ(DifferingCalls(calls[0], calls[1]), 0) << "without graphs, of " << calls[0].size();
  EXPECT_EQ(DifferingCalls(calls[0], calls[2]), 0) << "with graphs, of " << calls[0].size();
  EXPECT_EQ(DifferingCalls(calls[0], calls[3]), 0) << "with the overlap, of " << calls[0].size();
  const int64_t layers = ck->config().n_layers;
  EXPECT_EQ(mirrors[0], 0);
  EXPECT_EQ(mirrors[1], 4 * layers);  // the four steps holding prompt rows
  EXPECT_EQ(mirrors[2], layers);      // the eager chunk alone
  EXPECT_EQ(mirrors[3], layers);
}

TEST(DeviceDecoderFastTest, StoredKvWgmmaAttentionRollbackIsBatchInvariant) {
  const Checkpoint* ck = Small512Checkpoint();
  ASSERT_NE(ck, nullptr);
  auto cpu = RowStableCpuModel(*ck, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions options{.numerics = DecodeNumerics::kFast, .kv_block_tokens = 4};
  options.attention_wgmma = true;
  testing::CheckRollback(*cpu, ActivationPrecision::kBf16, options,
                         "small head_dim 512 fast, stored KV, wgmma attention");
}
// ... and with wgmma block sums everywhere (the tiles of either math give a
// row the same bits; a chunk's rows go through one wide wgmma a block).
TEST(DeviceDecoderFastTest, SmallBf16WithWgmmaChunkedStepsAreBatchInvariant) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  DeviceDecoderOptions options{.numerics = DecodeNumerics::kFast};
  options.expert_wgmma = true;
  options.dense_wgmma = true;
  testing::CheckChunkedSteps(*cpu, ActivationPrecision::kBf16, options, nullptr,
                             "small bf16 fast, wgmma everywhere");
}
// expert_prefill_tiles: a 400-row prompt chunk of small (16 experts, top-4:
// 100 rows an expert) runs its routed experts on the FP8 tile form and the
// dense kernel, which must give the MXFP4 kernel's bits in either math (the
// f16 mma pair, the default, and e4m3 wgmma): every row's logits equal the
// decoder without it, and so do the decode steps after (those run the MXFP4
// kernel in both).
TEST(DeviceDecoderFastTest, SmallBf16TileFormExpertsGiveTheMxfp4KernelsBits) {
  const Checkpoint* small = SmallCheckpoint(3);
  ASSERT_NE(small, nullptr);
  auto cpu = RowStableCpuModel(*small, ActivationPrecision::kBf16);
  ASSERT_NE(cpu, nullptr);
  const int64_t v = small->config().vocab_size;
  constexpr int kChunk = 400;
  for (const bool wgmma : {false, true}) {
    DeviceDecoderOptions options = FastChunkOptions(kChunk);
    options.expert_wgmma = wgmma;
    options.expert_prefill_tiles = false;  // the MXFP4 kernel at every size
    DeviceDecoderOptions tiles = options;
    tiles.expert_prefill_tiles = true;
    DeviceDecoderOptions resident_options = tiles;  // converted once, kept in the arena
    resident_options.expert_tiles_resident = true;
    auto plain = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, options);
    auto tiled = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, tiles);
    auto resident = DeviceDecoder::Create(*cpu, ActivationPrecision::kBf16, resident_options);
    ASSERT_TRUE(plain.ok()) << plain.status();
    ASSERT_TRUE(tiled.ok()) << tiled.status();
    ASSERT_TRUE(resident.ok()) << resident.status();
    EXPECT_EQ((*resident)->stats().tile_form_layers, (*tiled)->stats().tile_form_layers);
    EXPECT_EQ((*tiled)->stats().tile_resident_bytes, 0);
    EXPECT_GT((*resident)->stats().tile_resident_bytes, 0);
    EXPECT_GT((*tiled)->stats().tile_form_layers, 0)
        << "no layer converted exactly: nothing tested";
    const std::vector<int64_t> prompt = RandomTokens(kChunk, 91, v - 1);
    const std::vector<int> slots(kChunk, 1);
    ASSERT_TRUE((*plain)->Start(1).ok());
    ASSERT_TRUE((*tiled)->Start(1).ok());
    ASSERT_TRUE((*resident)->Start(1).ok());
    auto a = (*plain)->StepRows(slots, prompt, std::nullopt);
    ASSERT_TRUE(a.ok()) << a.status();
    const std::vector<float> want(a->begin(), a->end());
    auto b = (*tiled)->StepRows(slots, prompt, std::nullopt);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(b->size(), want.size());
    int64_t rows_differ = 0;
    for (int64_t r = 0; r < kChunk; ++r) {
      rows_differ += std::memcmp(b->data() + r * v, want.data() + r * v, v * sizeof(float)) != 0;
    }
    EXPECT_EQ(rows_differ, 0) << "of " << kChunk << " prompt rows, wgmma " << wgmma;
    auto c = (*resident)->StepRows(slots, prompt, std::nullopt);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_EQ(c->size(), want.size());
    EXPECT_EQ(std::memcmp(c->data(), want.data(), want.size() * sizeof(float)), 0)
        << "resident tiles, wgmma " << wgmma;
    for (int step = 0; step < 8; ++step) {
      const std::vector<int64_t> token = RandomTokens(1, 500 + step, v - 1);
      auto pa = (*plain)->Step(std::vector<int>{1}, token);
      auto pb = (*tiled)->Step(std::vector<int>{1}, token);
      auto pc = (*resident)->Step(std::vector<int>{1}, token);
      ASSERT_TRUE(pa.ok() && pb.ok() && pc.ok());
      EXPECT_EQ(*pa, *pb) << "decode step " << step << ", wgmma " << wgmma;
      EXPECT_EQ(*pa, *pc) << "decode step " << step << ", resident, wgmma " << wgmma;
    }
    std::printf(
        "tile form (%s): %d layers converted exactly; %lld of %d prompt rows differ; "
        "resident tiles %.1f MiB\n",
        wgmma ? "e4m3 wgmma" : "mma pair", (*tiled)->stats().tile_form_layers,
        static_cast<long long>(rows_differ), kChunk,
        (*resident)->stats().tile_resident_bytes / 1048576.0);
  }
}

TEST(DeviceDecoderFastTest, SmallBf16WithWgmmaExpertsIsBatchInvariant) {
  CheckBatchInvariance(true);
}
TEST(DeviceDecoderFastTest, SmallBf16WithWgmmaEverywhereIsBatchInvariant) {
  CheckBatchInvariance(true, true);
}

}  // namespace
}  // namespace weir::model
