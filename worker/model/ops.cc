#include "worker/model/ops.h"

#include <cstring>

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

bool KeepBf16Form(DenseWeight& w) {
  w.w_bf16.clear();
  std::vector<uint16_t> narrow(w.w.size());
  for (size_t i = 0; i < w.w.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w.w[i], sizeof(bits));
    if ((bits & 0xFFFFu) != 0) return false;  // not a bf16 value (NaN payloads included)
    narrow[i] = static_cast<uint16_t>(bits >> 16);
  }
  w.w_bf16 = std::move(narrow);
  return true;
}

}  // namespace weir::model
