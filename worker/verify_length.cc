// worker/verify_length.cc

#include "worker/verify_length.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/read_file.h"
#include "nlohmann/json.hpp"

namespace weir::worker {
namespace {

using Json = nlohmann::json;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("verify cost curve: ", what));
}

double PointCost(const VerifyCostCurve::Point& p, int64_t drafts) {
  return p.step_ms[drafts] + static_cast<double>(p.batch) * p.draft_ms;
}

// cost(point) at `batch`: linear between the measured batch sizes around it,
// the nearest one's outside them.
template <typename Cost>
double Interpolate(const std::vector<VerifyCostCurve::Point>& points, int64_t batch, Cost cost) {
  if (batch <= points.front().batch) return cost(points.front());
  if (batch >= points.back().batch) return cost(points.back());
  size_t hi = 1;
  while (points[hi].batch < batch) ++hi;
  const VerifyCostCurve::Point& a = points[hi - 1];
  const VerifyCostCurve::Point& b = points[hi];
  const double t = static_cast<double>(batch - a.batch) / static_cast<double>(b.batch - a.batch);
  return (1 - t) * cost(a) + t * cost(b);
}

}  // namespace

double VerifyCostCurve::StepCost(int64_t batch, int64_t drafts) const {
  return Interpolate(points, batch, [drafts](const Point& p) { return PointCost(p, drafts); });
}

double VerifyCostCurve::PlainStepCost(int64_t batch) const {
  return Interpolate(points, batch, [](const Point& p) { return p.step_ms[0]; });
}

absl::StatusOr<VerifyCostCurve> ParseVerifyCostCurve(std::string_view json) {
  const Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  VerifyCostCurve curve;
  for (auto [key, field] :
       {std::pair{"measured_on", &curve.measured_on}, std::pair{"backend", &curve.backend},
        std::pair{"model", &curve.model}}) {
    if (j.contains(key)) {
      if (!j[key].is_string()) return Bad(absl::StrCat(key, " is not a string"));
      *field = j[key].get<std::string>();
    }
  }
  if (!j.contains("points") || !j["points"].is_array() || j["points"].empty()) {
    return Bad("no points");
  }
  auto positive = [](const Json& v) {
    return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
  };
  for (const Json& p : j["points"]) {
    if (!p.is_object() || !p.contains("batch") || !p["batch"].is_number_integer() ||
        !p.contains("draft_ms") || !p.contains("step_ms") || !p["step_ms"].is_array()) {
      return Bad("a point needs an integer batch, draft_ms and an array step_ms");
    }
    VerifyCostCurve::Point point{.batch = p["batch"].get<int64_t>()};
    if (point.batch <= 0 || (!curve.points.empty() && point.batch <= curve.points.back().batch)) {
      return Bad("batch sizes must be positive and increasing");
    }
    if (!positive(p["draft_ms"])) return Bad("draft_ms must be positive");
    point.draft_ms = p["draft_ms"].get<double>();
    for (const Json& ms : p["step_ms"]) {
      if (!positive(ms)) return Bad("step_ms entries must be positive");
      point.step_ms.push_back(ms.get<double>());
    }
    if (point.step_ms.empty() ||
        (!curve.points.empty() && point.step_ms.size() != curve.points[0].step_ms.size())) {
      return Bad("every point needs the same, non-zero number of step_ms entries");
    }
    curve.points.push_back(std::move(point));
  }
  return curve;
}

std::string VerifyCostCurveToJson(const VerifyCostCurve& curve) {
  std::string out =
      absl::StrCat("{\n  \"measured_on\": ", Json(curve.measured_on).dump(),
                   ",\n  \"backend\": ", Json(curve.backend).dump(),
                   ",\n  \"model\": ", Json(curve.model).dump(), ",\n  \"points\": [");
  for (size_t i = 0; i < curve.points.size(); ++i) {
    const VerifyCostCurve::Point& p = curve.points[i];
    Json point = {{"batch", p.batch}, {"draft_ms", p.draft_ms}, {"step_ms", p.step_ms}};
    absl::StrAppend(&out, i == 0 ? "\n    " : ",\n    ", point.dump());
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

absl::StatusOr<VerifyCostCurve> LoadVerifyCostCurve(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kVerifyCostFile).string();
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("no ", path));
  absl::StatusOr<VerifyCostCurve> curve = ParseVerifyCostCurve(*text);
  if (!curve.ok()) {
    return absl::Status(curve.status().code(), absl::StrCat(path, ": ", curve.status().message()));
  }
  return curve;
}

double ExpectedTokens(std::span<const float> confidence, int64_t k) {
  double expected = 1, survive = 1;
  for (int64_t i = 0; i < k; ++i) {
    survive *= 1.0 / (1.0 + std::exp(-static_cast<double>(confidence[i])));
    expected += survive;
  }
  return expected;
}

int64_t ChooseVerifyLength(std::span<const float> confidence, int64_t max_drafts,
                           const VerifyCostCurve& curve, int64_t batch) {
  const int64_t limit =
      std::min({max_drafts, static_cast<int64_t>(confidence.size()), curve.max_drafts()});
  int64_t best = 0;
  double best_rate = 1.0 / curve.StepCost(batch, 0);
  for (int64_t k = 1; k <= limit; ++k) {
    const double rate = ExpectedTokens(confidence, k) / curve.StepCost(batch, k);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

bool SpeculationPays(double tokens, double drafts, const VerifyCostCurve& curve, int64_t batch) {
  const double k = std::clamp(drafts, 0.0, static_cast<double>(curve.max_drafts()));
  const int64_t lo = static_cast<int64_t>(std::floor(k));
  const int64_t hi = std::min<int64_t>(lo + 1, curve.max_drafts());
  const double t = k - static_cast<double>(lo);
  const double cost = (1 - t) * curve.StepCost(batch, lo) + t * curve.StepCost(batch, hi);
  return tokens / cost >= 1.0 / curve.PlainStepCost(batch);
}

bool DraftPacer::ShouldDraft() {
  if (pause_left_ == 0) return true;
  if (--pause_left_ == 0) {  // the next step drafts again: fresh means
    seen_ = 0;
    tokens_ = verified_ = 0;
  }
  return false;
}

void DraftPacer::Observe(int64_t verified, int64_t accepted, const VerifyCostCurve& curve,
                         int64_t batch) {
  const double tokens = 1.0 + static_cast<double>(accepted);
  if (seen_ == 0) {
    tokens_ = tokens;
    verified_ = static_cast<double>(verified);
  } else {
    tokens_ += 0.25 * (tokens - tokens_);
    verified_ += 0.25 * (static_cast<double>(verified) - verified_);
  }
  ++seen_;
  if (seen_ < kProbe || pause_left_ > 0) return;
  if (SpeculationPays(tokens_, verified_, curve, batch)) {
    next_pause_ = kFirstPause;
    return;
  }
  pause_left_ = next_pause_;
  next_pause_ = std::min(2 * next_pause_, kMaxPause);
}

}  // namespace weir::worker
