// Losslessness of speculative sampling (issue 18), on fixed logits of the
// random-weight tiny: at a fixed prefix [prompt, t], the verify forward of
// [t, d1, d2] with greedy drafts gives the logits of the two verified
// positions. 20,000 seeds run AcceptDrafts and the row's own sample there
// (the step executor's code); 20,000 other seeds sample plain decoding's
// one-token forwards. The joint distribution of the two emitted tokens
// (pooled to expected counts >= 5) must pass a chi-square test of homogeneity
// at p > 0.01, while two biased acceptors (one that always accepts, one that
// redraws from p instead of p without the draft after a rejection) must fail
// it. The seeds are fixed, so every run computes the same p-values.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "worker/draft_acceptance.h"
#include "worker/step_executor_test_util.h"

namespace weir::worker {
namespace {

constexpr int kSamples = 20000;
const std::vector<int64_t> kPrompt = {5, 9, 300, 14, 2, 77, 1000, 31, 8};

// Q(a, x), the regularized upper incomplete gamma function: a power series
// below x = a + 1, a continued fraction (modified Lentz) above.
double UpperGammaQ(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < 10000 && term > sum * 1e-16; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefix));
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}

// P(chi-square with `df` degrees of freedom >= `stat`).
double ChiSquarePValue(double stat, int df) { return UpperGammaQ(df / 2.0, stat / 2.0); }

struct ChiSquare {
  double stat = 0.0;
  int bins = 0;
  double p = 1.0;
};

// Chi-square test of homogeneity of two samples' counts by category. Bins
// whose expected count is below 5 in either sample are pooled into one; a
// pooled bin still below 5 joins the smallest other bin.
ChiSquare Homogeneity(const std::map<int64_t, int64_t>& a, const std::map<int64_t, int64_t>& b) {
  std::map<int64_t, std::pair<double, double>> cells;
  double total_a = 0.0;
  double total_b = 0.0;
  for (const auto& [key, n] : a) {
    cells[key].first += n;
    total_a += n;
  }
  for (const auto& [key, n] : b) {
    cells[key].second += n;
    total_b += n;
  }
  const double share_a = total_a / (total_a + total_b);
  auto min_expected = [&](const std::pair<double, double>& cell) {
    const double column = cell.first + cell.second;
    return std::min(column * share_a, column * (1.0 - share_a));
  };
  std::vector<std::pair<double, double>> bins;
  std::pair<double, double> pooled{0.0, 0.0};
  for (const auto& [key, cell] : cells) {
    if (min_expected(cell) >= 5.0) {
      bins.push_back(cell);
    } else {
      pooled.first += cell.first;
      pooled.second += cell.second;
    }
  }
  if (pooled.first + pooled.second > 0.0) {
    if (min_expected(pooled) >= 5.0 || bins.empty()) {
      bins.push_back(pooled);
    } else {
      auto smallest = std::min_element(bins.begin(), bins.end(), [](const auto& x, const auto& y) {
        return x.first + x.second < y.first + y.second;
      });
      smallest->first += pooled.first;
      smallest->second += pooled.second;
    }
  }
  ChiSquare out;
  out.bins = static_cast<int>(bins.size());
  for (const auto& [na, nb] : bins) {
    const double column = na + nb;
    const double ea = column * share_a;
    const double eb = column * (1.0 - share_a);
    out.stat += (na - ea) * (na - ea) / ea + (nb - eb) * (nb - eb) / eb;
  }
  out.p = out.bins > 1 ? ChiSquarePValue(out.stat, out.bins - 1) : 1.0;
  return out;
}

int64_t Argmax(const float* logits, int64_t vocab) {
  return std::max_element(logits, logits + vocab) - logits;
}

// The fixed prefix [kPrompt, t] and the logits the two sides sample from.
struct Prefix {
  int64_t vocab = 0;
  int64_t t = 0;
  int64_t position = 0;  // of d1 (t's is position - 1)
  std::vector<int64_t> drafts;  // [d1, d2]: the target's greedy tokens
  // [3, vocab]: the verify forward of [t, d1, d2] (row j predicts position + j).
  std::vector<float> verify;
  // Plain decoding's one-token forwards: after t, and after t, d1.
  std::vector<float> plain1;
  std::vector<float> plain2;
};

void MakePrefix(model::Model& model, Prefix& out) {
  out.vocab = model.config().vocab_size;
  const int64_t n = static_cast<int64_t>(kPrompt.size());
  auto prefill = [&]() {
    std::unique_ptr<model::SequenceState> seq = model.NewSequence();
    absl::StatusOr<std::vector<float>> logits = model.Forward(*seq, kPrompt, 0);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (logits.ok()) out.t = Argmax(logits->data() + (n - 1) * out.vocab, out.vocab);
    return seq;
  };
  std::unique_ptr<model::SequenceState> plain = prefill();
  absl::StatusOr<std::vector<float>> one = model.Forward(*plain, std::vector<int64_t>{out.t}, n);
  ASSERT_TRUE(one.ok()) << one.status();
  out.plain1 = std::move(*one);
  const int64_t d1 = Argmax(out.plain1.data(), out.vocab);
  one = model.Forward(*plain, std::vector<int64_t>{d1}, n + 1);
  ASSERT_TRUE(one.ok()) << one.status();
  out.plain2 = std::move(*one);
  out.drafts = {d1, Argmax(out.plain2.data(), out.vocab)};
  std::unique_ptr<model::SequenceState> spec = prefill();
  absl::StatusOr<std::vector<float>> block =
      model.Forward(*spec, std::vector<int64_t>{out.t, out.drafts[0], out.drafts[1]}, n);
  ASSERT_TRUE(block.ok()) << block.status();
  out.verify = std::move(*block);
  out.position = n + 1;
}

// Temperature 1 over the 6 most likely tokens, with a repetition penalty so
// that the second position depends on whether d1 joined the history.
sampling::SamplingParams Params(uint64_t seed) {
  sampling::SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 6;
  p.repetition_penalty = 1.3f;
  p.seed = seed;
  return p;
}

// The category of an emission: x1 when it is not d1, else vocab + x2.
int64_t Category(const Prefix& f, const std::vector<int32_t>& emitted) {
  if (emitted[0] != f.drafts[0]) return emitted[0];
  return f.vocab + emitted.at(1);
}

int32_t Sample(const Prefix& f, const float* logits, uint64_t seed,
               const std::vector<int32_t>& output, int64_t position) {
  const sampling::SamplingParams params = Params(seed);
  MaskScratch scratch;
  const std::vector<int32_t> prompt(kPrompt.begin(), kPrompt.end());
  const RowSampling row{.params = &params, .prompt = prompt, .output = output};
  const sampling::SampleResult r = SamplePosition(logits, f.vocab, row, position, scratch);
  EXPECT_TRUE(r.status.ok()) << r.status;
  return r.token;
}

// Plain decoding of the two positions with `seed`.
std::vector<int32_t> PlainEmission(const Prefix& f, uint64_t seed) {
  std::vector<int32_t> output = {static_cast<int32_t>(f.t)};
  const int32_t x1 = Sample(f, f.plain1.data(), seed, output, f.position);
  if (x1 != f.drafts[0]) return {x1};
  output.push_back(x1);
  return {x1, Sample(f, f.plain2.data(), seed, output, f.position + 1)};
}

// The speculative row with `seed`: AcceptDrafts over the verify logits, then
// the row's own sample after the accepted drafts. Counts acceptances.
std::vector<int32_t> SpeculativeEmission(const Prefix& f, uint64_t seed,
                                         std::vector<int64_t>& accepted_hist) {
  const sampling::SamplingParams params = Params(seed);
  const std::vector<int32_t> prompt(kPrompt.begin(), kPrompt.end());
  std::vector<int32_t> output = {static_cast<int32_t>(f.t)};
  MaskScratch scratch;
  const RowSampling row{.params = &params, .prompt = prompt};
  const Acceptance a =
      AcceptDrafts(f.verify.data(), f.vocab, f.drafts, row, output, f.position, scratch);
  ++accepted_hist[a.accepted];
  std::vector<int32_t> emitted(f.drafts.begin(), f.drafts.begin() + a.accepted);
  if (a.accepted < static_cast<int64_t>(f.drafts.size())) {
    emitted.push_back(Sample(f, f.verify.data() + a.accepted * f.vocab, seed, output,
                             f.position + a.accepted));
  }
  return emitted;
}

// A wrong acceptor: after a rejection it redraws from p (the draft included)
// instead of emitting the sample, p without the draft. Biased towards d1.
std::vector<int32_t> RedrawEmission(const Prefix& f, uint64_t seed) {
  std::vector<int32_t> output = {static_cast<int32_t>(f.t)};
  int32_t x1 = Sample(f, f.verify.data(), seed, output, f.position);
  if (x1 != f.drafts[0]) x1 = Sample(f, f.verify.data(), seed + 1000003, output, f.position);
  if (x1 != f.drafts[0]) return {x1};
  output.push_back(x1);
  return {x1, Sample(f, f.verify.data() + f.vocab, seed, output, f.position + 1)};
}

std::map<int64_t, int64_t> Histogram(const Prefix& f, uint64_t first_seed,
                                     const std::function<std::vector<int32_t>(uint64_t)>& emit) {
  std::map<int64_t, int64_t> counts;
  for (uint64_t s = first_seed; s < first_seed + kSamples; ++s) ++counts[Category(f, emit(s))];
  return counts;
}

TEST(DraftAcceptanceTest, ChiSquarePValueMatchesTables) {
  EXPECT_NEAR(ChiSquarePValue(3.841, 1), 0.05, 1e-4);
  EXPECT_NEAR(ChiSquarePValue(23.209, 10), 0.01, 1e-4);
  EXPECT_NEAR(ChiSquarePValue(2.0, 2), std::exp(-1.0), 1e-9);
  EXPECT_NEAR(ChiSquarePValue(124.342, 100), 0.05, 1e-3);
}

TEST(DraftAcceptanceTest, SpeculativeSamplesFollowTheTargetDistribution) {
  const model::Checkpoint* checkpoint =
      model::DerivedCheckpoint("random/tiny", "random_tiny_seed5", {}, 5);
  ASSERT_NE(checkpoint, nullptr);
  std::unique_ptr<model::Model> model = model::NewModelOrFail(*checkpoint);
  ASSERT_NE(model, nullptr);
  Prefix f;
  MakePrefix(*model, f);
  ASSERT_FALSE(HasFatalFailure());

  // Plain decoding over seeds [kSamples, 2 kSamples); the others over [0, kSamples).
  const std::map<int64_t, int64_t> plain =
      Histogram(f, kSamples, [&](uint64_t s) { return PlainEmission(f, s); });
  std::vector<int64_t> accepted(f.drafts.size() + 1, 0);
  const std::map<int64_t, int64_t> speculative =
      Histogram(f, 0, [&](uint64_t s) { return SpeculativeEmission(f, s, accepted); });
  const ChiSquare lossless = Homogeneity(speculative, plain);
  std::cout << "speculative vs plain: chi2 " << lossless.stat << " over " << lossless.bins
            << " bins, p " << lossless.p << "; verifications by accepted drafts:";
  for (int64_t n : accepted) std::cout << " " << n;
  std::cout << "\n";
  // Both branches of both verified positions occur often.
  for (int64_t n : accepted) EXPECT_GT(n, kSamples / 50);
  EXPECT_GE(lossless.bins, 8);
  EXPECT_GT(lossless.p, 0.01);

  // The negative controls: each must fail the same test.
  const std::map<int64_t, int64_t> always = Histogram(f, 0, [&](uint64_t) {
    return std::vector<int32_t>(f.drafts.begin(), f.drafts.end());
  });
  const ChiSquare greedy_accept = Homogeneity(always, plain);
  const std::map<int64_t, int64_t> redraw =
      Histogram(f, 0, [&](uint64_t s) { return RedrawEmission(f, s); });
  const ChiSquare biased = Homogeneity(redraw, plain);
  std::cout << "always-accept control: chi2 " << greedy_accept.stat << ", p "
            << greedy_accept.p << "; redraw-from-p control: chi2 " << biased.stat << ", p "
            << biased.p << "\n";
  EXPECT_LT(greedy_accept.p, 0.01);
  EXPECT_LT(biased.p, 0.01);
}

}  // namespace
}  // namespace weir::worker
