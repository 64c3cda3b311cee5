// The whole V4.1 forward on CudaOps against CpuOps: prefill + 64 greedy
// decode steps of the tiny model and of the `small` config (a checkpoint
// generated under TEST_TMPDIR), in both activation precisions, each backend
// feeding its own greedy tokens.
//
// Every CudaOps kernel reproduces its CPU op bit for bit (the same summation
// orders, kernels/common/fmath.h for exp / log1p / sigmoid, the CPU's rope
// cos/sin, no fused multiply-add; Logits row-stable on both sides: the CPU
// model here runs CpuOps with row_stable_logits). So the forwards are equal,
// not merely close: the random models are chaotic (tests/golden/README.md
// "Tolerances": one ulp moved across an FP8 / FP4 / bf16 rounding point is a
// whole quantization step, which later layers amplify), and only identical
// arithmetic keeps a 64-step greedy trajectory identical.
//
// What is required:
//   * tiny and small, fp32 and bf16: every logit of the prefill and of the 64
//     decode steps bit-identical, the same greedy tokens, and 32 fresh
//     one-token forwards bit-identical (on the H200, 2026-11-29: all four
//     identical); a failure prints the per-row max|gpu - cpu| / max|cpu|;
//   * the DSpark drafts after every decode step (stages, Markov head,
//     confidence) bit-identical, tokens and values;
//   * every op on the GPU (no CPU fallback), finite logits.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/cuda_ops.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

constexpr int kDecodeSteps = 64;

enum class Backend { kCpu, kCuda };

std::unique_ptr<Model> NewModel(const Checkpoint& ckpt, ActivationPrecision precision,
                                Backend backend, CudaOps** cuda = nullptr) {
  ModelOptions options;
  options.precision = precision;
  if (backend == Backend::kCpu) {
    options.make_ops = [](ActivationPrecision p) -> absl::StatusOr<std::unique_ptr<Ops>> {
      return std::unique_ptr<Ops>(new CpuOps(p, {.row_stable_logits = true}));
    };
  }
  if (backend == Backend::kCuda) {
    options.make_ops = [cuda](ActivationPrecision p) -> absl::StatusOr<std::unique_ptr<Ops>> {
      absl::StatusOr<std::unique_ptr<CudaOps>> ops = CudaOps::Create(p);
      if (!ops.ok()) return ops.status();
      if (cuda != nullptr) *cuda = ops->get();
      return std::unique_ptr<Ops>(std::move(*ops));
    };
  }
  auto m = Model::Create(ckpt.config(), ckpt, std::move(options));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

int64_t Argmax(const float* row, int64_t n) { return ArgmaxRow(row, n); }

double RowRel(const float* a, const float* b, int64_t n) { return RowRelativeDifference(a, b, n); }

struct Trace {
  std::vector<std::vector<float>> rows;  // logits per position [vocab]
  std::vector<int64_t> tokens;           // prompt, then the fed decode tokens
  // DSpark after every forward (models with stages): drafted tokens, and the
  // draft logits followed by the confidences.
  std::vector<std::vector<int64_t>> draft_tokens;
  std::vector<std::vector<float>> draft_values;
};

// Drafts after the last forward of `seq` (the target's next token given).
void RecordDraft(Model& model, const SequenceState& seq, int64_t next, Trace& t) {
  if (model.config().n_mtp_layers == 0) return;
  auto draft = model.Draft(seq, next);
  EXPECT_TRUE(draft.ok()) << draft.status();
  if (!draft.ok()) return;
  t.draft_tokens.push_back(draft->tokens);
  std::vector<float> values = draft->logits;
  values.insert(values.end(), draft->confidence.begin(), draft->confidence.end());
  t.draft_values.push_back(std::move(values));
}

// Prefill `prompt`, then kDecodeSteps greedy steps (each feeds its own argmax).
Trace Run(Model& model, const std::vector<int64_t>& prompt) {
  const int64_t v = model.config().vocab_size;
  Trace t;
  t.tokens = prompt;
  auto seq = model.NewSequence();
  auto logits = model.Forward(*seq, prompt, 0);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return t;
  for (size_t r = 0; r < prompt.size(); ++r) {
    t.rows.emplace_back(logits->begin() + r * v, logits->begin() + (r + 1) * v);
  }
  for (int i = 0; i < kDecodeSteps; ++i) {
    const size_t pos = prompt.size() + i;
    const int64_t next = Argmax(t.rows.back().data(), v);
    if (pos >= 2) RecordDraft(model, *seq, next, t);
    t.tokens.push_back(next);
    const int64_t one[] = {next};
    auto step = model.Forward(*seq, one, static_cast<int64_t>(pos));
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return t;
    t.rows.push_back(std::move(*step));
  }
  return t;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Comparison {
  std::vector<double> rel;   // per row
  double max_rel = 0;
  int differing_rows = 0;    // rows not bit-identical
  int first_differing = -1;
  int token_mismatches = 0;  // greedy tokens that differ
  int first_token_mismatch = -1;  // its position
};

Comparison Compare(const Trace& gpu, const Trace& cpu, int64_t v) {
  Comparison c;
  EXPECT_EQ(gpu.rows.size(), cpu.rows.size());
  for (size_t r = 0; r < std::min(gpu.rows.size(), cpu.rows.size()); ++r) {
    const double rel = RowRel(gpu.rows[r].data(), cpu.rows[r].data(), v);
    c.rel.push_back(rel);
    c.max_rel = std::max(c.max_rel, rel);
    if (!BitEqual(gpu.rows[r], cpu.rows[r])) {
      ++c.differing_rows;
      if (c.first_differing < 0) c.first_differing = static_cast<int>(r);
    }
  }
  EXPECT_EQ(gpu.tokens.size(), cpu.tokens.size());
  for (size_t i = 0; i < std::min(gpu.tokens.size(), cpu.tokens.size()); ++i) {
    if (gpu.tokens[i] == cpu.tokens[i]) continue;
    ++c.token_mismatches;
    if (c.first_token_mismatch < 0) c.first_token_mismatch = static_cast<int>(i);
  }
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void CheckModel(const Checkpoint& ckpt, const char* name, ActivationPrecision precision,
                const std::vector<int64_t>& prompt) {
  const bool fp32 = precision == ActivationPrecision::kFp32;
  const int64_t v = ckpt.config().vocab_size;
  const std::vector<int64_t> singles = RandomTokens(32, 9);
  auto run_singles = [&](Model& m) {
    std::vector<std::vector<float>> rows;
    for (int64_t t : singles) {
      auto seq = m.NewSequence();
      const int64_t one[] = {t};
      auto l = m.Forward(*seq, one, 0);
      EXPECT_TRUE(l.ok()) << l.status();
      rows.push_back(l.ok() ? std::move(*l) : std::vector<float>(v, NAN));
    }
    return rows;
  };
  Trace cpu_trace;
  std::vector<std::vector<float>> cpu_singles;
  {
    auto cpu = NewModel(ckpt, precision, Backend::kCpu);
    ASSERT_NE(cpu, nullptr);
    cpu_trace = Run(*cpu, prompt);
    cpu_singles = run_singles(*cpu);
  }
  ASSERT_EQ(cpu_trace.rows.size(), prompt.size() + kDecodeSteps);
  CudaOps* cuda = nullptr;
  auto gpu = NewModel(ckpt, precision, Backend::kCuda, &cuda);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cuda, nullptr);
  const Trace gpu_trace = Run(*gpu, prompt);
  ASSERT_EQ(gpu_trace.rows.size(), cpu_trace.rows.size());
  const std::vector<std::vector<float>> gpu_singles = run_singles(*gpu);

  std::vector<double> single_rel;
  int singles_differing = 0;
  for (size_t i = 0; i < singles.size(); ++i) {
    single_rel.push_back(RowRel(gpu_singles[i].data(), cpu_singles[i].data(), v));
    singles_differing += !BitEqual(gpu_singles[i], cpu_singles[i]);
  }
  const double single_median = Median(single_rel);
  const double single_max = *std::max_element(single_rel.begin(), single_rel.end());
  const Comparison c = Compare(gpu_trace, cpu_trace, v);
  const CudaOpsStats& s = cuda->cuda_stats();
  std::printf("%s %s: single forwards (32 fresh 1-token sequences): %d not bit-identical, "
              "median rel %.3g, max %.3g; trajectory prefill %zu + %d greedy decode: %d of %zu "
              "rows not bit-identical (first %d), max rel %.3g, %d greedy tokens differ (first "
              "at position %d); %lld ops, %lld CPU fallbacks, %.1f MiB weights on the device\n",
              name, fp32 ? "fp32" : "bf16", singles_differing, single_median, single_max,
              prompt.size(), kDecodeSteps, c.differing_rows, c.rel.size(), c.first_differing,
              c.max_rel, c.token_mismatches, c.first_token_mismatch,
              static_cast<long long>(s.calls), static_cast<long long>(s.cpu_fallbacks),
              cuda->weight_bytes_used() / 1048576.0);
  if (c.differing_rows > 0) {
    std::printf("    rows:");
    for (double r : c.rel) std::printf(" %.0e", r);
    std::printf("\n");
  }
  EXPECT_EQ(s.cpu_fallbacks, 0);
  for (const std::vector<float>& row : gpu_trace.rows) {
    for (float x : row) ASSERT_TRUE(std::isfinite(x));
  }
  EXPECT_EQ(gpu_trace.tokens, cpu_trace.tokens) << "greedy tokens";
  EXPECT_EQ(c.differing_rows, 0) << "first differing row " << c.first_differing;
  EXPECT_EQ(singles_differing, 0);
  // DSpark drafts (stages, Markov head, confidence) on the same ops.
  ASSERT_EQ(gpu_trace.draft_values.size(), cpu_trace.draft_values.size());
  int drafts_differing = 0;
  for (size_t i = 0; i < gpu_trace.draft_values.size(); ++i) {
    drafts_differing += !BitEqual(gpu_trace.draft_values[i], cpu_trace.draft_values[i]) ||
                        gpu_trace.draft_tokens[i] != cpu_trace.draft_tokens[i];
  }
  std::printf("%s %s: %zu DSpark drafts, %d not bit-identical\n", name, fp32 ? "fp32" : "bf16",
              gpu_trace.draft_values.size(), drafts_differing);
  EXPECT_GT(cpu_trace.draft_values.size(), 0u);
  EXPECT_EQ(drafts_differing, 0);
  // The comparison can see a difference: two positions' logits are far apart.
  EXPECT_GT(RowRel(cpu_trace.rows.front().data(), cpu_trace.rows.back().data(), v), 1e-2);
}

TEST(ModelGpuTest, TinyFp32) {
  CheckModel(TinyCheckpoint(11), "tiny", ActivationPrecision::kFp32, RandomTokens(16, 1));
}

TEST(ModelGpuTest, TinyBf16) {
  CheckModel(TinyCheckpoint(11), "tiny", ActivationPrecision::kBf16, RandomTokens(16, 1));
}

const Checkpoint* Small() { return SmallCheckpoint(3); }

TEST(ModelGpuTest, SmallFp32) {
  ASSERT_NE(Small(), nullptr);
  CheckModel(*Small(), "small", ActivationPrecision::kFp32, RandomTokens(16, 2));
}

TEST(ModelGpuTest, SmallBf16) {
  ASSERT_NE(Small(), nullptr);
  CheckModel(*Small(), "small", ActivationPrecision::kBf16, RandomTokens(16, 2));
}

}  // namespace
}  // namespace weir::model
