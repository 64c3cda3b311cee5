// The whole V4.1 forward on CudaOps against CpuOps: prefill + 64 greedy
// decode steps of the tiny model and of the `small` config (a checkpoint
// generated under TEST_TMPDIR), in both activation precisions.
//
// The random models are chaotic (tests/golden/README.md "Tolerances"): the
// CUDA kernels differ from the CPU ones by fp32 reduction order (~1e-7 per
// op; Matmul, fake-quant, top-k and mHC collapse/expand are bit-identical),
// and one such difference just below an FP8 / FP4 / bf16 rounding point, or a
// near-tie of a top-k or expert choice, moves an element by a whole
// quantization step, which the following layers amplify. So a long greedy
// trajectory is not expected to stay within fp32 tolerance, and the test
// measures that in-process: the same trajectory on a CPU backend whose only
// change is a one-ulp nudge of every 7th RmsNorm output (PerturbedCpuOps) is
// the chaos baseline printed next to the GPU's. It perturbs far fewer
// elements than the GPU does (the GPU's HcMix / MoeGate / EngramGate outputs
// differ by ~2e-7 in every element, and each FP8 activation quantization of
// ~150k elements per token turns that into about one flip every other token),
// so it diverges later: on the H200 (2026-11-29) the GPU trajectory left fp32
// tolerance at row 43 (tiny fp32), row 5 (tiny bf16) and row 0 (small), the
// baseline at row 30 (small bf16) and never within 80 rows otherwise.
//
// What is required:
//   * single forwards (32 fresh one-token sequences, 12 layers each): median
//     over rows of max|gpu - cpu| / max|cpu| below 1e-3 under kFp32 (the
//     tests/golden bound between two backends: room for reduction order and
//     libm, not for a wrong op, which gives ~1) and below 5e-2 under kBf16
//     (bf16 storage steps of 2^-8 flipped at rounding ties);
//   * every op on the GPU (no CPU fallback), finite logits;
//   * the trajectory: printed per row (error, greedy agreement) for GPU and
//     baseline; greedy tokens must agree with the CPU on the rows before the
//     first row whose error exceeds 1e-3 (fp32; before divergence the argmax
//     can only flip at a top-2 gap below that error).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

// CpuOps with every 7th RmsNorm output moved by one ulp: a backend that
// differs from CpuOps at fp32 rounding level only (the chaos baseline).
class PerturbedCpuOps : public CpuOps {
 public:
  using CpuOps::CpuOps;
  absl::Status RmsNorm(std::span<const float> x, std::span<const float> weight, int64_t rows,
                       int64_t dim, float eps, std::span<float> out) override {
    absl::Status st = CpuOps::RmsNorm(x, weight, rows, dim, eps, out);
    for (size_t i = 3; st.ok() && i < out.size(); i += 7) out[i] = std::nextafter(out[i], INFINITY);
    return st;
  }
};

enum class Backend { kCpu, kPerturbedCpu, kCuda };

std::unique_ptr<Model> NewModel(const Checkpoint& ckpt, ActivationPrecision precision,
                                Backend backend, CudaOps** cuda = nullptr) {
  ModelOptions options;
  options.precision = precision;
  if (backend == Backend::kPerturbedCpu) {
    options.make_ops = [](ActivationPrecision p) -> absl::StatusOr<std::unique_ptr<Ops>> {
      return std::unique_ptr<Ops>(new PerturbedCpuOps(p));
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

int64_t Argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

double RowRel(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, double{std::fabs(a[i] - b[i])});
    scale = std::max(scale, double{std::fabs(b[i])});
  }
  return diff / scale;
}

struct Trace {
  std::vector<std::vector<float>> rows;  // logits per position [vocab]
  std::vector<int64_t> tokens;           // prompt, then the fed decode tokens
};

// Prefill `prompt`, then kDecodeSteps steps; feeds `forced` when non-null,
// else its own argmax.
Trace Run(Model& model, const std::vector<int64_t>& prompt, const std::vector<int64_t>* forced) {
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
    const int64_t next = forced ? (*forced)[pos] : Argmax(t.rows.back().data(), v);
    t.tokens.push_back(next);
    const int64_t one[] = {next};
    auto step = model.Forward(*seq, one, static_cast<int64_t>(pos));
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return t;
    t.rows.push_back(std::move(*step));
  }
  return t;
}

struct Comparison {
  std::vector<double> rel;   // per row
  double max_rel = 0;
  int first_diverged = -1;   // first row with rel > 1e-3
  int token_mismatches = 0;  // decode positions whose argmax differs from the CPU token
  int first_mismatch = -1;   // the row predicting the first such token
};

Comparison Compare(const Trace& other, const Trace& cpu, size_t prompt, int64_t v) {
  Comparison c;
  EXPECT_EQ(other.rows.size(), cpu.rows.size());
  for (size_t r = 0; r < std::min(other.rows.size(), cpu.rows.size()); ++r) {
    const double rel = RowRel(other.rows[r].data(), cpu.rows[r].data(), v);
    c.rel.push_back(rel);
    c.max_rel = std::max(c.max_rel, rel);
    if (rel > 1e-3 && c.first_diverged < 0) c.first_diverged = static_cast<int>(r);
    // Row r (r >= prompt - 1) predicts the token at r + 1.
    if (r + 1 >= prompt && r + 1 < cpu.tokens.size() &&
        Argmax(other.rows[r].data(), v) != cpu.tokens[r + 1]) {
      ++c.token_mismatches;
      if (c.first_mismatch < 0) c.first_mismatch = static_cast<int>(r);
    }
  }
  return c;
}

void Print(const char* what, const Comparison& c) {
  std::printf("  %-9s max rel %.3g, first row > 1e-3: %d, greedy tokens differing %d (first "
              "predicted by row %d)\n    rows:",
              what, c.max_rel, c.first_diverged, c.token_mismatches, c.first_mismatch);
  for (double r : c.rel) std::printf(" %.0e", r);
  std::printf("\n");
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
  Trace cpu_trace, base_trace;
  std::vector<std::vector<float>> cpu_singles;
  {
    auto cpu = NewModel(ckpt, precision, Backend::kCpu);
    ASSERT_NE(cpu, nullptr);
    cpu_trace = Run(*cpu, prompt, nullptr);
    cpu_singles = run_singles(*cpu);
  }
  {
    auto base = NewModel(ckpt, precision, Backend::kPerturbedCpu);
    ASSERT_NE(base, nullptr);
    base_trace = Run(*base, prompt, &cpu_trace.tokens);
  }
  ASSERT_EQ(cpu_trace.rows.size(), prompt.size() + kDecodeSteps);
  CudaOps* cuda = nullptr;
  auto gpu = NewModel(ckpt, precision, Backend::kCuda, &cuda);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cuda, nullptr);
  const Trace gpu_trace = Run(*gpu, prompt, &cpu_trace.tokens);
  ASSERT_EQ(gpu_trace.rows.size(), cpu_trace.rows.size());
  const std::vector<std::vector<float>> gpu_singles = run_singles(*gpu);

  std::vector<double> single_rel;
  for (size_t i = 0; i < singles.size(); ++i) {
    single_rel.push_back(RowRel(gpu_singles[i].data(), cpu_singles[i].data(), v));
  }
  const double single_median = Median(single_rel);
  const double single_max = *std::max_element(single_rel.begin(), single_rel.end());
  const Comparison c = Compare(gpu_trace, cpu_trace, prompt.size(), v);
  const Comparison b = Compare(base_trace, cpu_trace, prompt.size(), v);
  const CudaOpsStats& s = cuda->cuda_stats();
  std::printf("%s %s: single forwards (32 fresh 1-token sequences): median rel %.3g, max %.3g; "
              "trajectory prefill %zu + %d decode; %lld ops, %lld CPU fallbacks, %.1f MiB "
              "weights on the device\n",
              name, fp32 ? "fp32" : "bf16", single_median, single_max, prompt.size(),
              kDecodeSteps, static_cast<long long>(s.calls),
              static_cast<long long>(s.cpu_fallbacks), cuda->weight_bytes_used() / 1048576.0);
  Print("gpu", c);
  Print("ulp-cpu", b);
  EXPECT_LT(single_median, fp32 ? 1e-3 : 5e-2);
  EXPECT_EQ(s.cpu_fallbacks, 0);
  for (const std::vector<float>& row : gpu_trace.rows) {
    for (float x : row) ASSERT_TRUE(std::isfinite(x));
  }
  if (fp32) {
    const int agreeing = c.first_diverged < 0 ? static_cast<int>(c.rel.size()) : c.first_diverged;
    EXPECT_TRUE(c.first_mismatch < 0 || c.first_mismatch >= agreeing)
        << "greedy token differs at row " << c.first_mismatch << " before the logits diverged";
  }
  // The comparison can see a difference: two positions' logits are far apart.
  EXPECT_GT(RowRel(cpu_trace.rows.front().data(), cpu_trace.rows.back().data(), v), 1e-2);
}

TEST(ModelGpuTest, TinyFp32) {
  CheckModel(TinyCheckpoint(11), "tiny", ActivationPrecision::kFp32, RandomTokens(16, 1));
}

TEST(ModelGpuTest, TinyBf16) {
  CheckModel(TinyCheckpoint(11), "tiny", ActivationPrecision::kBf16, RandomTokens(16, 1));
}

const Checkpoint* Small() {
  static const Checkpoint* ckpt = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    auto c = GenerateAndOpenCheckpoint("models/small/config.json",
                                       std::string(tmp ? tmp : "/tmp") + "/small_seed3", 3);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->release() : nullptr;
  }();
  return ckpt;
}

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
