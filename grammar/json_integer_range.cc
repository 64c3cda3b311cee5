// grammar/json_integer_range.cc
//
// JsonRules::IntegerRange: integer bounds (minimum/maximum) as a grammar.
// The range is split by sign, then by digit count, then digit by digit, the
// classic construction of a regular expression for a numeric range.

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/json_rules.h"

namespace weir::grammar {
namespace {

constexpr int64_t kMaxMagnitude = 999'999'999'999'999'999;  // 18 nines

int64_t Pow10(int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

int Digits(int64_t v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

}  // namespace

absl::StatusOr<ExprId> JsonRules::FixedWidthRange(int64_t a, int64_t b, int width) {
  if (width == 0) return g_.AddEmpty();
  const int64_t p = Pow10(width - 1);
  const int64_t la = a / p, lb = b / p, ra = a % p, rb = b % p;
  if (la == lb) {
    ASSIGN_OR_RETURN(ExprId head, g_.AddByteRange('0' + la, '0' + la));
    ASSIGN_OR_RETURN(ExprId tail, FixedWidthRange(ra, rb, width - 1));
    return g_.AddSeq({head, tail});
  }
  std::vector<ExprId> alts;
  // Leading digit la with the rest >= ra; a full range folds into the middle.
  const int64_t mid_lo = ra == 0 ? la : la + 1;
  const int64_t mid_hi = rb == p - 1 ? lb : lb - 1;
  if (ra != 0) {
    ASSIGN_OR_RETURN(ExprId head, g_.AddByteRange('0' + la, '0' + la));
    ASSIGN_OR_RETURN(ExprId tail, FixedWidthRange(ra, p - 1, width - 1));
    ASSIGN_OR_RETURN(ExprId seq, g_.AddSeq({head, tail}));
    alts.push_back(seq);
  }
  if (mid_lo <= mid_hi) {
    ASSIGN_OR_RETURN(ExprId head, g_.AddByteRange('0' + mid_lo, '0' + mid_hi));
    ASSIGN_OR_RETURN(ExprId digit, g_.AddByteRange('0', '9'));
    ASSIGN_OR_RETURN(ExprId rest, g_.AddRepeat(digit, width - 1, width - 1));
    ASSIGN_OR_RETURN(ExprId seq, g_.AddSeq({head, rest}));
    alts.push_back(seq);
  }
  if (rb != p - 1) {
    ASSIGN_OR_RETURN(ExprId head, g_.AddByteRange('0' + lb, '0' + lb));
    ASSIGN_OR_RETURN(ExprId tail, FixedWidthRange(0, rb, width - 1));
    ASSIGN_OR_RETURN(ExprId seq, g_.AddSeq({head, tail}));
    alts.push_back(seq);
  }
  return g_.AddAlt(std::move(alts));
}

absl::StatusOr<ExprId> JsonRules::MagnitudeRange(int64_t a, int64_t b) {
  std::vector<ExprId> alts;
  // Each digit count d covers [10^(d-1), 10^d - 1] (and 0 for d = 1); a
  // d-digit value has a non-zero leading digit unless it is 0 itself.
  for (int d = Digits(a); d <= Digits(b); ++d) {
    const int64_t lo = std::max(a, d == 1 ? 0 : Pow10(d - 1));
    const int64_t hi = std::min(b, Pow10(d) - 1);
    if (lo > hi) continue;
    ASSIGN_OR_RETURN(ExprId e, FixedWidthRange(lo, hi, d));
    alts.push_back(e);
  }
  return g_.AddAlt(std::move(alts));
}

absl::StatusOr<ExprId> JsonRules::IntegerRange(std::optional<int64_t> lo,
                                               std::optional<int64_t> hi) {
  const int64_t low = std::max(lo.value_or(-kMaxMagnitude), -kMaxMagnitude);
  const int64_t high = std::min(hi.value_or(kMaxMagnitude), kMaxMagnitude);
  if (low > high) {
    return absl::InvalidArgumentError(absl::StrCat("empty integer range [", low, ", ", high, "]"));
  }
  std::vector<ExprId> alts;
  if (high >= 0) {
    ASSIGN_OR_RETURN(ExprId e, MagnitudeRange(std::max<int64_t>(low, 0), high));
    alts.push_back(e);
  }
  if (low < 0) {  // "-" then a magnitude in [max(-high, 1), -low]
    ASSIGN_OR_RETURN(ExprId minus, g_.AddString("-"));
    ASSIGN_OR_RETURN(ExprId mag, MagnitudeRange(std::max<int64_t>(-high, 1), -low));
    ASSIGN_OR_RETURN(ExprId e, g_.AddSeq({minus, mag}));
    alts.push_back(e);
  }
  return g_.AddAlt(std::move(alts));
}

}  // namespace weir::grammar
