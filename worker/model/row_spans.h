// worker/model/row_spans.h
//
// SpansOfRole: the row ranges of a step that a product must cover to reach
// every row of one role. The device decoder's mixed steps (prompt rows on the
// bf16 maths, generated rows and padding on the FP8 products, under
// prompt_bf16_linears) run the FP8 product over these ranges only, instead of
// over every row and then the bf16 one over the prompt's.
//
// Thread safety: a pure function.

#ifndef WEIR_WORKER_MODEL_ROW_SPANS_H_
#define WEIR_WORKER_MODEL_ROW_SPANS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace weir::model {

struct RowSpan {
  int64_t begin = 0;  // first row
  int64_t end = 0;    // one past the last row
  bool operator==(const RowSpan&) const = default;
};

// The ranges [begin, end) of the rows of `roles` (one entry a row) that hold
// every row whose entry is `role`: each run of such rows widened outward to
// multiples of `align` rows (the end clamped to the row count), runs that
// then touch or overlap merged. Ascending and disjoint; empty when no row
// has the role. Rows of other roles inside a range are covered too (a
// caller writes them again afterwards). REQUIRES: align >= 1.
std::vector<RowSpan> SpansOfRole(std::span<const int32_t> roles, int32_t role, int64_t align);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_ROW_SPANS_H_
