#include "tools/bench/decode_csv.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace weir::bench {
namespace {

std::string Text(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\"", "\"\""}}), "\"");
}

// Enough digits for sub-microsecond floors and multi-second steps.
std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string Ratio(double step, std::optional<double> floor) {
  return floor.has_value() && *floor > 0 ? Number(step / *floor) : "";
}

}  // namespace

std::string DecodeCsvLine(const DecodeRow& row) {
  return absl::StrCat(
      Text(row.model), ",", Text(row.path), ",", Text(row.numerics), ",", Text(row.mode), ",",
      row.batch, ",", row.context, ",", Number(row.step_ms), ",",
      row.device_ms.has_value() ? Number(*row.device_ms) : "", ",", Number(row.floor_ms), ",",
      Ratio(row.step_ms, row.floor_ms), ",",
      row.fp32_floor_ms.has_value() ? Number(*row.fp32_floor_ms) : "", ",",
      Ratio(row.step_ms, row.fp32_floor_ms), ",",
      row.step_ms > 0 ? Number(row.batch / (row.step_ms * 1e-3)) : "", ",",
      row.graph_nodes.has_value() ? absl::StrCat(*row.graph_nodes) : "");
}

absl::StatusOr<DecodeCsv> DecodeCsv::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("DecodeCsv: empty path");
  std::ofstream out(path, std::ios::trunc);
  out << kDecodeCsvHeader << "\n";
  out.flush();
  if (!out) return absl::UnavailableError("DecodeCsv: cannot write " + path);
  return DecodeCsv(std::move(out));
}

absl::Status DecodeCsv::Add(const DecodeRow& row) {
  out_ << DecodeCsvLine(row) << "\n";
  out_.flush();
  if (!out_) return absl::UnavailableError("DecodeCsv: write failed");
  return absl::OkStatus();
}

}  // namespace weir::bench
