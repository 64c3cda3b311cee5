#include "parallel/abort_signal.h"

#include "absl/strings/str_cat.h"

namespace weir::parallel {

void AbortSignal::Abort(absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (aborted_.load(std::memory_order_relaxed)) return;
  reason_ = std::string(reason);
  aborted_.store(true, std::memory_order_release);
}

absl::Status AbortSignal::Check(absl::string_view what) const {
  if (!aborted()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return absl::AbortedError(absl::StrCat(what, " aborted: ", reason_));
}

}  // namespace weir::parallel
