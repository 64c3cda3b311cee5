#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace weir::worker::sampling {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void ApplyBiasAndPenalties(const SampleRow& row, std::vector<float>& logits) {
  const SamplingParams& p = *row.params;
  const int32_t vocab = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < vocab) logits[id] += std::clamp(bias, -kMaxLogitBias, kMaxLogitBias);
  }
  absl::flat_hash_map<int32_t, int32_t> output_counts;
  for (int32_t t : row.output_tokens) {
    if (t >= 0 && t < vocab) ++output_counts[t];
  }
  if (p.repetition_penalty != 1.0f) {
    absl::flat_hash_set<int32_t> seen;
    for (int32_t t : row.prompt_tokens) {
      if (t >= 0 && t < vocab) seen.insert(t);
    }
    for (const auto& [t, count] : output_counts) seen.insert(t);
    for (int32_t t : seen) {
      logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty
                                : logits[t] * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [t, count] : output_counts) {
      logits[t] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
    }
  }
}

// log-softmax value of logits[id] over the whole row.
float LogSoftmaxAt(const std::vector<float>& logits, int32_t id, float max_logit) {
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  return static_cast<float>(static_cast<double>(logits[id]) - max_logit - std::log(sum));
}

SampleResult SampleRowImpl(const SampleRow& row, int32_t vocab) {
  SampleResult result;
  if (row.logits == nullptr || row.params == nullptr) {
    result.status = absl::InvalidArgumentError("sample row without logits or params");
    return result;
  }
  std::vector<float> logits(row.logits, row.logits + vocab);
  for (float v : logits) {
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) {
      result.status = absl::InternalError("NUMERICAL_ERROR: non-finite logits");
      return result;
    }
  }
  ApplyBiasAndPenalties(row, logits);
  const SamplingParams& p = *row.params;
  // Argmax with ties to the lowest id.
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  if (logits[best] == -std::numeric_limits<float>::infinity()) {
    result.status = absl::InvalidArgumentError("every token is masked");
    return result;
  }
  if (p.temperature == 0.0f) {
    result.token = best;
    result.logprob = LogSoftmaxAt(logits, best, logits[best]);
    return result;
  }
  for (float& v : logits) v /= p.temperature;
  const float max_logit = logits[best];

  // Candidates by descending logit, ties by id. Only the top k need sorting.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t keep = static_cast<size_t>(vocab);
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  std::vector<double> probs(keep);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[order[i]]) - max_logit);
    total += probs[i];
  }
  // top-p over the (top-k) candidates, keeping at least one.
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    while (n < keep) {
      mass += probs[n++];
      if (mass >= p.top_p * total) break;
    }
    keep = n;
  }
  // min-p relative to the most likely token (probs[0] is the max).
  if (p.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && probs[n] >= p.min_p * probs[0]) ++n;
    keep = n;
  }
  double kept_mass = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_mass += probs[i];
  const double target = DrawUniform(p.seed, row.position, row.is_draft) * kept_mass;
  double cumulative = 0.0;
  size_t chosen = keep - 1;  // Rounding can leave target just above the sum.
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (target < cumulative) {
      chosen = i;
      break;
    }
  }
  result.token = order[chosen];
  result.logprob = LogSoftmaxAt(logits, result.token, max_logit);
  return result;
}

}  // namespace

double DrawUniform(uint64_t seed, int64_t position, bool is_draft) {
  uint64_t bits = SplitMix64(seed);
  bits = SplitMix64(bits ^ static_cast<uint64_t>(position));
  bits = SplitMix64(bits ^ (is_draft ? 0xd5a61266f0c9392cULL : 0));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

std::vector<SampleResult> SampleBatch(absl::Span<const SampleRow> rows, int32_t vocab_size) {
  std::vector<SampleResult> results;
  results.reserve(rows.size());
  for (const SampleRow& row : rows) results.push_back(SampleRowImpl(row, vocab_size));
  return results;
}

}  // namespace weir::worker::sampling
