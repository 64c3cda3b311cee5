// worker/verify_length.h
//
// How many of its drafts a speculative row verifies (spec §4.8, DSpark's
// confidence-scheduled verification): the DSpark confidence head gives a
// logit c_i per draft, sigmoid(c_i) = P(draft i accepted | drafts before it
// accepted), so the chance that drafts 1..j all survive is the cumulative
// product, and verifying k drafts delivers E[tokens | k] = 1 + sum_{j<=k}
// prod_{i<=j} sigmoid(c_i) tokens (the row's own sample plus the accepted
// drafts). ChooseVerifyLength picks the k with the most expected tokens per
// unit of step cost, from a cost curve measured on the machine
// (VerifyCostCurve, stored as `verify_cost.json` in the model directory by
// `tools/bench:speculative --profile_verify`).
//
// Thread safety: plain values and stateless functions.

#ifndef WEIR_WORKER_VERIFY_LENGTH_H_
#define WEIR_WORKER_VERIFY_LENGTH_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::worker {

// The file in a model directory that holds its VerifyCostCurve.
inline constexpr char kVerifyCostFile[] = "verify_cost.json";

// A step's cost as a function of the verify length, per batch size.
//
// JSON form (what ParseVerifyCostCurve reads and VerifyCostCurveToJson
// writes):
//   {"measured_on": "...", "backend": "cpu", "model": "...",
//    "points": [{"batch": 1, "draft_ms": 12.6,
//                "step_ms": [12.1, 19.0, ...]}, ...]}
// step_ms[L - 1] is one step of `batch` rows of L positions each (the
// token and L - 1 drafts), in ms; draft_ms is one row's share of a
// Model::DraftBatch of `batch` rows (the step drafts its rows in one call).
// Curves written before batched drafting hold one row's Model::Draft there,
// an overestimate at batch > 1 (verify lengths chosen a little short).
struct VerifyCostCurve {
  struct Point {
    int64_t batch = 0;
    double draft_ms = 0;
    std::vector<double> step_ms;  // [max verify length + 1], index = length - 1
  };
  std::string measured_on;  // machine and date, free text
  std::string backend;      // "cpu"
  std::string model;        // the model directory's name
  // Increasing batch sizes, each with the same number of lengths.
  std::vector<Point> points;

  // Drafts the curve covers (step_ms.size() - 1).
  int64_t max_drafts() const {
    return points.empty() ? 0 : static_cast<int64_t>(points[0].step_ms.size()) - 1;
  }
  // The cost of one step of `batch` rows verifying `drafts` drafts each,
  // drafting after included, in ms: linear in the batch size between
  // measured points, the nearest point's outside them.
  // REQUIRES: !points.empty(), 0 <= drafts <= max_drafts().
  double StepCost(int64_t batch, int64_t drafts) const;
  // The cost of one plain step of `batch` rows (one position each, nothing
  // drafted after): step_ms[0], interpolated as StepCost.
  // REQUIRES: !points.empty().
  double PlainStepCost(int64_t batch) const;
};

// Parses the JSON form. INVALID_ARGUMENT when it is not JSON, a field is
// missing or of the wrong type, no points, batch sizes not increasing and
// positive, step_ms lengths that differ or are empty, or a cost that is
// not positive and finite.
absl::StatusOr<VerifyCostCurve> ParseVerifyCostCurve(std::string_view json);

// The JSON form of `curve` (indented, one point a line).
std::string VerifyCostCurveToJson(const VerifyCostCurve& curve);

// Reads `dir`/verify_cost.json. NOT_FOUND when there is no such file; the
// parse errors of ParseVerifyCostCurve otherwise.
absl::StatusOr<VerifyCostCurve> LoadVerifyCostCurve(const std::string& dir);

// Expected tokens a row delivers when it verifies the first `k` drafts of
// `confidence` [>= k] (logits): 1 + sum_{j<=k} prod_{i<=j} sigmoid(c_i).
double ExpectedTokens(std::span<const float> confidence, int64_t k);

// Returns the k in [0, min(max_drafts, confidence.size(), curve.max_drafts())]
// maximizing ExpectedTokens(confidence, k) / curve.StepCost(batch, k); the
// smallest such k on ties. REQUIRES: !curve.points.empty().
int64_t ChooseVerifyLength(std::span<const float> confidence, int64_t max_drafts,
                           const VerifyCostCurve& curve, int64_t batch);

// Whether speculating pays at `batch` rows for a row that emits `tokens` a
// verification on average while verifying `drafts` drafts on average (>= 0,
// fractional: the step cost interpolated between the whole lengths, capped
// at curve.max_drafts()): tokens / StepCost(batch, drafts) against one token
// a PlainStepCost(batch). REQUIRES: !curve.points.empty().
bool SpeculationPays(double tokens, double drafts, const VerifyCostCurve& curve, int64_t batch);

// Whether a speculative row drafts its next block. The draft pass is paid
// whatever the row verifies next (ChooseVerifyLength weighs only what it
// verifies), so a row whose drafts do not pay for their cost has to stop
// drafting to decode at the plain rate; the text (and so the acceptance)
// changes along a sequence, so it tries again later.
//
// The pacer keeps the row's mean tokens a verification and mean verified
// drafts over its recent verifications (exponential weights, 1/4 the
// newest). After kProbe verifications since drafting (re)started, a mean
// that SpeculationPays rejects pauses drafting for a number of the row's
// steps: kFirstPause, doubled after each pause that ends in another (at
// most kMaxPause), back to kFirstPause once drafting pays. A resumed row
// starts its means afresh. Drafting never changes what a row emits, only how
// many tokens a step gives it.
//
// Thread safety: a plain value (the step executor keeps one per slot).
class DraftPacer {
 public:
  static constexpr int64_t kProbe = 3;
  static constexpr int64_t kFirstPause = 16;
  static constexpr int64_t kMaxPause = 256;

  // One step of the row that may draft after it: false while paused (one
  // paused step used up).
  bool ShouldDraft();
  // One verification of the row at `batch` rows: `verified` drafts of which
  // `accepted` were taken (0 <= accepted <= verified).
  void Observe(int64_t verified, int64_t accepted, const VerifyCostCurve& curve, int64_t batch);

  bool paused() const { return pause_left_ > 0; }
  // The current means (0 before the first verification since drafting
  // started).
  double mean_tokens() const { return tokens_; }
  double mean_verified() const { return verified_; }

 private:
  double tokens_ = 0;
  double verified_ = 0;
  int64_t seen_ = 0;        // verifications since drafting (re)started
  int64_t pause_left_ = 0;  // steps still paused
  int64_t next_pause_ = kFirstPause;
};

}  // namespace weir::worker

#endif  // WEIR_WORKER_VERIFY_LENGTH_H_
