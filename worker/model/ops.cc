#include "worker/model/ops.h"

#include "absl/strings/str_cat.h"

namespace weir::model {

absl::Status CheckMatmulShapes(const DenseWeight& w, size_t x, int64_t rows, size_t y) {
  if (rows <= 0 || static_cast<int64_t>(w.w.size()) != w.out * w.in ||
      static_cast<int64_t>(x) != rows * w.in || static_cast<int64_t>(y) != rows * w.out) {
    return absl::InvalidArgumentError(absl::StrCat("Matmul: x ", x, " y ", y, " rows ", rows,
                                                   " weight [", w.out, ", ", w.in, "]"));
  }
  return absl::OkStatus();
}

}  // namespace weir::model
