#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace weir::worker::sampling {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Whether bias or a penalty changes any logit of the row.
bool Adjusts(const SamplingParams& p) { return !p.logit_bias.empty() || UsesHistory(p); }

void ApplyBiasAndPenalties(const SampleRow& row, std::vector<float>& logits) {
  const SamplingParams& p = *row.params;
  const int32_t vocab = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < vocab) logits[id] += std::clamp(bias, -kMaxLogitBias, kMaxLogitBias);
  }
  if (!UsesHistory(p)) return;  // the output's counts are not needed
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

// The first index of a row's maximum (ties to the lowest id, as a scan
// keeping the first strictly greater value) and whether any value is NaN or
// +inf: eight running maxima (lanes i mod 8, which the compiler keeps in
// vector registers), then a search for the first index holding the maximum,
// eight values a test.
struct RowScan {
  int32_t best = 0;
  bool bad = false;
};
RowScan ScanRow(const float* x, int32_t n) {
  constexpr int kLanes = 8;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // NaN or +inf: the magnitude's bits at or above +inf's, unless -inf.
  auto is_bad = [](uint32_t bits) -> uint32_t {
    return static_cast<uint32_t>((bits & 0x7fffffffu) >= 0x7f800000u) &
           static_cast<uint32_t>(bits != 0xff800000u);
  };
  float lane_max[kLanes];
  uint32_t lane_bad[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    lane_max[j] = -kInf;
    lane_bad[j] = 0;
  }
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    uint32_t bits[kLanes];
    std::memcpy(bits, x + i, sizeof(bits));
    for (int j = 0; j < kLanes; ++j) {
      lane_bad[j] |= is_bad(bits[j]);
      lane_max[j] = x[i + j] > lane_max[j] ? x[i + j] : lane_max[j];
    }
  }
  float m = -kInf;
  uint32_t bad = 0;
  for (; i < n; ++i) {
    bad |= !(x[i] < kInf);  // NaN or +inf
    m = x[i] > m ? x[i] : m;
  }
  for (int j = 0; j < kLanes; ++j) {
    bad |= lane_bad[j];
    m = lane_max[j] > m ? lane_max[j] : m;
  }
  RowScan scan;
  scan.bad = bad != 0;
  if (scan.bad) return scan;
  int32_t at = 0;
  for (; at + kLanes <= n; at += kLanes) {
    uint32_t hit = 0;
    for (int j = 0; j < kLanes; ++j) hit |= static_cast<uint32_t>(x[at + j] == m);
    if (hit != 0) break;
  }
  while (at < n - 1 && !(x[at] == m)) ++at;
  scan.best = at;
  return scan;
}

// log-softmax value of logits[id] over the whole row.
float LogSoftmaxAt(const float* logits, int32_t vocab, int32_t id, float max_logit) {
  double sum = 0.0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  return static_cast<float>(static_cast<double>(logits[id]) - max_logit - std::log(sum));
}

}  // namespace

absl::Status NonFiniteLogitsError() {
  return absl::InternalError("NUMERICAL_ERROR: non-finite logits");
}

absl::Status EveryTokenMaskedError() { return absl::InvalidArgumentError("every token is masked"); }

namespace {

SampleResult SampleRowImpl(const SampleRow& row, int32_t vocab) {
  SampleResult result;
  if (row.logits == nullptr || row.params == nullptr) {
    result.status = absl::InvalidArgumentError("sample row without logits or params");
    return result;
  }
  const SamplingParams& p = *row.params;
  // The row as given until something must change it (bias, penalties, a
  // temperature): then a copy.
  std::vector<float> copy;
  const float* logits = row.logits;
  RowScan scan = ScanRow(logits, vocab);
  if (scan.bad) {
    result.status = NonFiniteLogitsError();
    return result;
  }
  if (Adjusts(p)) {
    copy.assign(row.logits, row.logits + vocab);
    ApplyBiasAndPenalties(row, copy);
    logits = copy.data();
    scan = ScanRow(logits, vocab);  // the argmax of the adjusted row
  }
  // Argmax with ties to the lowest id.
  const int32_t best = scan.best;
  if (logits[best] == -std::numeric_limits<float>::infinity()) {
    result.status = EveryTokenMaskedError();
    return result;
  }
  if (p.temperature == 0.0f) {
    result.token = best;
    if (row.want_logprob) result.logprob = LogSoftmaxAt(logits, vocab, best, logits[best]);
    return result;
  }
  if (copy.empty()) copy.assign(row.logits, row.logits + vocab);
  for (float& v : copy) v /= p.temperature;
  const float max_logit = copy[best];

  // Candidates by descending logit, ties by id, as (logit, id) pairs, sorted
  // only as far as the filters and the draw look: the first `sorted` are
  // the largest, in order (nth_element, then a sort of the new ones).
  struct Candidate {
    float logit;
    int32_t id;
  };
  auto before = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  std::vector<Candidate> order(vocab);
  for (int32_t i = 0; i < vocab; ++i) order[i] = {copy[i], i};
  size_t sorted = 0;
  std::vector<double> probs;  // e^(logit - max) of order[0 .. probs.size())
  auto sort_to = [&](size_t k) {
    k = std::min(k, order.size());
    if (k <= sorted) return;
    if (k - sorted <= 1024) {  // a few: one heap pass over the rest
      std::partial_sort(order.begin() + sorted, order.begin() + k, order.end(), before);
    } else {
      if (k < order.size()) {
        std::nth_element(order.begin() + sorted, order.begin() + k, order.end(), before);
      }
      std::sort(order.begin() + sorted, order.begin() + k, before);
    }
    sorted = k;
  };
  // The probability (unnormalized) of the j-th candidate.
  auto prob = [&](size_t j) -> double {
    if (j >= sorted) sort_to(std::max({j + 1, 4 * sorted, size_t{64}}));
    while (probs.size() <= j) {
      probs.push_back(std::exp(static_cast<double>(order[probs.size()].logit) - max_logit));
    }
    return probs[j];
  };
  size_t keep = static_cast<size_t>(vocab);
  double total = 0.0;
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = static_cast<size_t>(p.top_k);
    for (size_t i = 0; i < keep; ++i) total += prob(i);
  } else {
    // Every token: the sum in id order (no sort needed for it).
    for (int32_t i = 0; i < vocab; ++i) total += std::exp(static_cast<double>(copy[i]) - max_logit);
  }
  // top-p over the (top-k) candidates, keeping at least one.
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    while (n < keep) {
      mass += prob(n++);
      if (mass >= p.top_p * total) break;
    }
    keep = n;
  }
  // min-p relative to the most likely token (prob(0) is the max).
  if (p.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && prob(n) >= p.min_p * prob(0)) ++n;
    keep = n;
  }
  double kept_mass = 0.0;
  if (keep == static_cast<size_t>(vocab)) {
    kept_mass = total;  // nothing cut: every token
  } else {
    for (size_t i = 0; i < keep; ++i) kept_mass += prob(i);
  }
  const double target = DrawUniform(p.seed, row.position, row.is_draft) * kept_mass;
  double cumulative = 0.0;
  size_t chosen = keep - 1;  // Rounding can leave target just above the sum.
  for (size_t i = 0; i < keep; ++i) {
    cumulative += prob(i);
    if (target < cumulative) {
      chosen = i;
      break;
    }
  }
  sort_to(chosen + 1);
  result.token = order[chosen].id;
  if (row.want_logprob) {
    result.logprob = LogSoftmaxAt(copy.data(), vocab, result.token, max_logit);
  }
  return result;
}

}  // namespace

bool UsesHistory(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

double DrawUniform(uint64_t seed, int64_t position, bool is_draft) {
  uint64_t bits = SplitMix64(seed);
  bits = SplitMix64(bits ^ static_cast<uint64_t>(position));
  bits = SplitMix64(bits ^ (is_draft ? 0xd5a61266f0c9392cULL : 0));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

namespace {

// A fixed set of threads that run the parts of one batch at a time with the
// caller (fork-join); a batch that finds them busy (another caller's) runs
// on its caller alone.
class SamplerThreads {
 public:
  explicit SamplerThreads(int threads) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { Serve(); });
  }
  ~SamplerThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()); }

  // Runs body(part) for every part in [0, parts), on the threads and the
  // caller; returns when all are done. False (nothing run) when another
  // batch holds the threads.
  bool Run(int parts, const std::function<void(int)>& body) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      body_ = &body;
      parts_ = parts;
      next_ = 0;
      done_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    Work();
    std::unique_lock<std::mutex> lock(mu_);
    finished_.wait(lock, [&] { return done_ == parts_; });
    body_ = nullptr;
    return true;
  }

 private:
  // Takes parts of the current batch until none is left.
  void Work() {
    while (true) {
      const std::function<void(int)>* body;
      int part;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (body_ == nullptr || next_ >= parts_) return;
        body = body_;
        part = next_++;
      }
      (*body)(part);
      std::lock_guard<std::mutex> lock(mu_);
      if (++done_ == parts_) finished_.notify_all();
    }
  }
  void Serve() {
    uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      Work();
    }
  }

  std::mutex run_mu_;  // one batch at a time
  std::mutex mu_;
  std::condition_variable wake_, finished_;
  const std::function<void(int)>* body_ = nullptr;
  int parts_ = 0, next_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

int DefaultSamplerThreads() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2 - 1, 0, 8);
}

std::mutex threads_mu;
std::shared_ptr<SamplerThreads>& ThreadsSlot() {
  static std::shared_ptr<SamplerThreads>* slot = new std::shared_ptr<SamplerThreads>(
      std::make_shared<SamplerThreads>(DefaultSamplerThreads()));
  return *slot;
}

std::shared_ptr<SamplerThreads> Threads() {
  std::lock_guard<std::mutex> lock(threads_mu);
  return ThreadsSlot();
}

}  // namespace

absl::Status SetSamplerThreads(int threads) {
  if (threads < -1 || threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler threads must be -1 (automatic) or 0 to 256, got ", threads));
  }
  auto fresh = std::make_shared<SamplerThreads>(threads < 0 ? DefaultSamplerThreads() : threads);
  std::shared_ptr<SamplerThreads> old;
  {
    std::lock_guard<std::mutex> lock(threads_mu);
    old = std::move(ThreadsSlot());
    ThreadsSlot() = std::move(fresh);
  }
  return absl::OkStatus();  // `old` joins its threads when its last batch is done
}

int SamplerThreadCount() { return Threads()->size(); }

std::vector<SampleResult> SampleBatch(absl::Span<const SampleRow> rows, int32_t vocab_size) {
  std::vector<SampleResult> results(rows.size());
  // Rows are independent: a large batch is split over the sampler threads
  // (each row sampled by one thread, as alone: the same results).
  constexpr int64_t kParallelLogits = int64_t{1} << 19;
  const int64_t logits = static_cast<int64_t>(rows.size()) * vocab_size;
  if (logits >= kParallelLogits) {
    const std::shared_ptr<SamplerThreads> threads = Threads();
    const int parts = static_cast<int>(std::min<int64_t>(rows.size(), threads->size() + 1));
    const std::function<void(int)> body = [&](int part) {
      for (size_t i = part; i < rows.size(); i += parts) {
        results[i] = SampleRowImpl(rows[i], vocab_size);
      }
    };
    if (parts > 1 && threads->Run(parts, body)) return results;
  }
  for (size_t i = 0; i < rows.size(); ++i) results[i] = SampleRowImpl(rows[i], vocab_size);
  return results;
}

}  // namespace weir::worker::sampling
