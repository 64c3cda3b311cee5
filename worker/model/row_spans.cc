// worker/model/row_spans.cc — see row_spans.h.

#include "worker/model/row_spans.h"

#include <algorithm>

namespace weir::model {

std::vector<RowSpan> SpansOfRole(std::span<const int32_t> roles, int32_t role, int64_t align) {
  const int64_t rows = static_cast<int64_t>(roles.size());
  std::vector<RowSpan> spans;
  for (int64_t i = 0; i < rows;) {
    if (roles[i] != role) {
      ++i;
      continue;
    }
    int64_t end = i + 1;
    while (end < rows && roles[end] == role) ++end;
    const RowSpan widened{.begin = i / align * align,
                          .end = std::min(rows, (end + align - 1) / align * align)};
    if (!spans.empty() && widened.begin <= spans.back().end) {
      spans.back().end = std::max(spans.back().end, widened.end);
    } else {
      spans.push_back(widened);
    }
    i = end;
  }
  return spans;
}

}  // namespace weir::model
