// base/status_macros.h
//
// RETURN_IF_ERROR and ASSIGN_OR_RETURN for Abseil 20220623, which predates
// ABSL_RETURN_IF_ERROR. Semantics follow the later Abseil macros: the error is
// returned unchanged unless context is streamed onto it.
//
//   RETURN_IF_ERROR(LoadShard(path)) << "while loading shard " << index;
//   ASSIGN_OR_RETURN(Config config, ParseConfig(text));
//
// Thread safety: macros only; no state.

#ifndef WEIR_BASE_STATUS_MACROS_H_
#define WEIR_BASE_STATUS_MACROS_H_

#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::internal {

// Collects context streamed after RETURN_IF_ERROR and converts to a Status
// whose message is "<original>; <context>". Never used on the OK path.
class StatusBuilder {
 public:
  explicit StatusBuilder(absl::Status status) : status_(std::move(status)) {}

  template <typename T>
  StatusBuilder& operator<<(const T& value) {
    context_ << value;
    return *this;
  }

  operator absl::Status() const {  // NOLINT(google-explicit-constructor)
    const std::string extra = context_.str();
    if (extra.empty()) return status_;
    absl::Status out(status_.code(), std::string(status_.message()) + "; " + extra);
    status_.ForEachPayload(
        [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
    return out;
  }

  template <typename T>
  operator absl::StatusOr<T>() const {  // NOLINT(google-explicit-constructor)
    return absl::StatusOr<T>(static_cast<absl::Status>(*this));
  }

 private:
  absl::Status status_;
  std::ostringstream context_;
};

inline absl::Status AsStatus(absl::Status status) { return status; }
template <typename T>
absl::Status AsStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace weir::internal

#define WEIR_STATUS_CONCAT_INNER_(a, b) a##b
#define WEIR_STATUS_CONCAT_(a, b) WEIR_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status or StatusOr); returns its status from the
// enclosing function if it is not OK. Context may be streamed onto it.
// A `for` whose body returns is one statement with no `else` of its own, so
// an unbraced `if` around the macro cannot capture one (no dangling-else
// warning), and `if (c) RETURN_IF_ERROR(x); else ...` still parses as written.
#define RETURN_IF_ERROR(expr)                                                        \
  for (::absl::Status weir_status_ = ::weir::internal::AsStatus(expr); !weir_status_.ok();) \
  return ::weir::internal::StatusBuilder(std::move(weir_status_))

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status,
// otherwise move-assigns the value to `lhs` (which may be a declaration).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  WEIR_ASSIGN_OR_RETURN_IMPL_(WEIR_STATUS_CONCAT_(weir_statusor_, __LINE__), lhs, rexpr)

#define WEIR_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                \
  if (!statusor.ok()) return statusor.status();           \
  lhs = std::move(statusor).value()

#endif  // WEIR_BASE_STATUS_MACROS_H_
