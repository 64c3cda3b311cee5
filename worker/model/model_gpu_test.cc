// The whole V4.1 forward on CudaOps against CpuOps: prefill + 64 greedy
// decode steps of the tiny model and of the `small` config (a checkpoint
// generated under TEST_TMPDIR), in both activation precisions.
//
// The CPU run decodes greedily; the GPU run is fed the CPU's tokens (so its
// logits stay comparable after a disagreement) and its own argmax of every
// row is compared with the CPU's token.
//
// Bounds (max over rows of max|gpu - cpu| / max|cpu|):
//   kFp32  1e-3. The kernels differ from the CPU only in fp32 reduction order
//          and libm ulps (~1e-7 per op; Matmul and the FP8/FP4 fake-quants
//          are bit-identical), which reach the logits as ~1e-6. 1e-3 is the
//          bound tests/golden uses between two backends for the same reason:
//          it leaves room for libm and summation order but not for a rounding
//          flip of an FP8/FP4 element or a different top-k / expert choice,
//          which shows as >= 1e-2.
//   kBf16  5e-2. Every activation is rounded to bf16 (8 bits), so a ~1e-7
//          difference just below a rounding tie moves one element by 2^-8;
//          that happens a few times per forward and each such step travels
//          through the later FP8 roundings. The bound is what a handful of
//          bf16 steps spread through 12 layers can give, far below the
//          difference between two unrelated rows (~1, checked below).
// Greedy tokens must be identical on tiny (both precisions); on small they are
// counted and printed (a flip needs the top-2 gap of a row to be below the
// error above).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/cuda_ops.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

constexpr int kDecodeSteps = 64;

std::unique_ptr<Model> NewModel(const Checkpoint& ckpt, ActivationPrecision precision, bool gpu,
                                CudaOps** cuda = nullptr) {
  ModelOptions options;
  options.precision = precision;
  if (gpu) {
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
  double max_rel = 0;
  int worst_row = -1;
  int token_mismatches = 0;  // decode positions whose GPU argmax differs from the CPU token
  int first_mismatch = -1;
};

Comparison Compare(const Trace& gpu, const Trace& cpu, size_t prompt, int64_t v) {
  Comparison c;
  EXPECT_EQ(gpu.rows.size(), cpu.rows.size());
  for (size_t r = 0; r < std::min(gpu.rows.size(), cpu.rows.size()); ++r) {
    const double rel = RowRel(gpu.rows[r].data(), cpu.rows[r].data(), v);
    if (rel > c.max_rel || c.worst_row < 0) {
      c.max_rel = std::max(c.max_rel, rel);
      c.worst_row = static_cast<int>(r);
    }
    // Row r (r >= prompt - 1) predicts the token at r + 1.
    if (r + 1 >= prompt && r + 1 < cpu.tokens.size() &&
        Argmax(gpu.rows[r].data(), v) != cpu.tokens[r + 1]) {
      ++c.token_mismatches;
      if (c.first_mismatch < 0) c.first_mismatch = static_cast<int>(r + 1);
    }
  }
  return c;
}

void CheckModel(const Checkpoint& ckpt, const char* name, ActivationPrecision precision,
                const std::vector<int64_t>& prompt, bool require_tokens) {
  const bool fp32 = precision == ActivationPrecision::kFp32;
  const int64_t v = ckpt.config().vocab_size;
  Trace cpu_trace;
  {
    auto cpu = NewModel(ckpt, precision, /*gpu=*/false);
    ASSERT_NE(cpu, nullptr);
    cpu_trace = Run(*cpu, prompt, nullptr);
  }
  ASSERT_EQ(cpu_trace.rows.size(), prompt.size() + kDecodeSteps);
  CudaOps* cuda = nullptr;
  auto gpu = NewModel(ckpt, precision, /*gpu=*/true, &cuda);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cuda, nullptr);
  const Trace gpu_trace = Run(*gpu, prompt, &cpu_trace.tokens);
  ASSERT_EQ(gpu_trace.rows.size(), cpu_trace.rows.size());
  const Comparison c = Compare(gpu_trace, cpu_trace, prompt.size(), v);
  const CudaOpsStats& s = cuda->cuda_stats();
  std::printf(
      "%s %s: prefill %zu + %d decode: max relative logit error %.3g (row %d); greedy "
      "tokens differing %d (first at position %d); %lld ops, %lld CPU fallbacks, %.1f MiB "
      "weights on the device\n",
      name, fp32 ? "fp32" : "bf16", prompt.size(), kDecodeSteps, c.max_rel, c.worst_row,
      c.token_mismatches, c.first_mismatch, static_cast<long long>(s.calls),
      static_cast<long long>(s.cpu_fallbacks), cuda->weight_bytes_used() / 1048576.0);
  EXPECT_LT(c.max_rel, fp32 ? 1e-3 : 5e-2);
  if (require_tokens) {
    EXPECT_EQ(c.token_mismatches, 0);
  }
  EXPECT_EQ(s.cpu_fallbacks, 0);
  // The comparison can see a difference: two positions' logits are far apart.
  EXPECT_GT(RowRel(cpu_trace.rows.front().data(), cpu_trace.rows.back().data(), v), 1e-2);
}

TEST(ModelGpuTest, TinyFp32) {
  CheckModel(TinyCheckpoint(11), "tiny", ActivationPrecision::kFp32, RandomTokens(16, 1), true);
}

TEST(ModelGpuTest, TinyBf16) {
  CheckModel(TinyCheckpoint(11), "tiny", ActivationPrecision::kBf16, RandomTokens(16, 1), true);
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
  CheckModel(*Small(), "small", ActivationPrecision::kFp32, RandomTokens(16, 2), false);
}

TEST(ModelGpuTest, SmallBf16) {
  ASSERT_NE(Small(), nullptr);
  CheckModel(*Small(), "small", ActivationPrecision::kBf16, RandomTokens(16, 2), false);
}

}  // namespace
}  // namespace weir::model
