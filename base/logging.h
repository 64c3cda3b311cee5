// base/logging.h
//
// Minimal leveled logging and CHECKs (Abseil 20220623 has no absl/log). A log
// line is "I1129 08:32:39.123456 12345 file.cc:42] [coordinator] message" on
// stderr, written with one write() so lines of concurrent threads never mix.
//
//   WEIR_LOG(INFO) << "worker " << rank << " registered";
//   WEIR_CHECK(ptr != nullptr) << "guaranteed by Create()";
//   WEIR_DCHECK_LT(i, n);
//
// Thread safety: all functions and macros are thread-safe.

#ifndef WEIR_BASE_LOGGING_H_
#define WEIR_BASE_LOGGING_H_

#include <sstream>
#include <string_view>

namespace weir {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2, kFatal = 3 };

// Sets the process tag printed on every line ("coordinator", "worker 3").
void SetLogTag(std::string_view tag);

// Drops lines below `severity`. Default kInfo.
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();

namespace internal {

// Builds one log line; emits it on destruction. kFatal aborts after emitting.
class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Swallows the stream of a disabled log statement.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace weir

#define WEIR_LOG_SEVERITY_INFO ::weir::LogSeverity::kInfo
#define WEIR_LOG_SEVERITY_WARNING ::weir::LogSeverity::kWarning
#define WEIR_LOG_SEVERITY_ERROR ::weir::LogSeverity::kError
#define WEIR_LOG_SEVERITY_FATAL ::weir::LogSeverity::kFatal

#define WEIR_LOG(severity)                                             \
  (WEIR_LOG_SEVERITY_##severity < ::weir::MinLogSeverity())            \
      ? (void)0                                                        \
      : ::weir::internal::LogVoidify() &                               \
            ::weir::internal::LogMessage(__FILE__, __LINE__, WEIR_LOG_SEVERITY_##severity) \
                .stream()

// Always-on check for programming errors (never for request or peer data).
#define WEIR_CHECK(cond)                                                                  \
  (cond) ? (void)0                                                                        \
         : ::weir::internal::LogVoidify() &                                               \
               ::weir::internal::LogMessage(__FILE__, __LINE__, ::weir::LogSeverity::kFatal) \
                       .stream()                                                          \
                   << "Check failed: " #cond " "

#define WEIR_CHECK_OK(expr)                                                              \
  if (const auto& weir_check_status_ = (expr); weir_check_status_.ok()) {                \
  } else /* NOLINT */                                                                    \
    ::weir::internal::LogMessage(__FILE__, __LINE__, ::weir::LogSeverity::kFatal).stream() \
        << "Check failed: " #expr " is OK: " << weir_check_status_ << " "

#define WEIR_CHECK_OP_(a, op, b) \
  WEIR_CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define WEIR_CHECK_EQ(a, b) WEIR_CHECK_OP_(a, ==, b)
#define WEIR_CHECK_NE(a, b) WEIR_CHECK_OP_(a, !=, b)
#define WEIR_CHECK_LT(a, b) WEIR_CHECK_OP_(a, <, b)
#define WEIR_CHECK_LE(a, b) WEIR_CHECK_OP_(a, <=, b)
#define WEIR_CHECK_GT(a, b) WEIR_CHECK_OP_(a, >, b)
#define WEIR_CHECK_GE(a, b) WEIR_CHECK_OP_(a, >=, b)

#ifdef NDEBUG
#define WEIR_DCHECK(cond) \
  while (false) WEIR_CHECK(cond)
#else
#define WEIR_DCHECK(cond) WEIR_CHECK(cond)
#endif
#define WEIR_DCHECK_EQ(a, b) WEIR_DCHECK((a) == (b))
#define WEIR_DCHECK_LT(a, b) WEIR_DCHECK((a) < (b))
#define WEIR_DCHECK_LE(a, b) WEIR_DCHECK((a) <= (b))

#endif  // WEIR_BASE_LOGGING_H_
