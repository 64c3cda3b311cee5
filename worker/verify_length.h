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

}  // namespace weir::worker

#endif  // WEIR_WORKER_VERIFY_LENGTH_H_
