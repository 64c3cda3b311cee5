#include "base/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "absl/strings/str_format.h"

namespace weir {
namespace {

std::atomic<int> g_min_severity{0};

std::mutex& TagMutex() {
  static std::mutex mu;
  return mu;
}

std::string& Tag() {
  static std::string tag;
  return tag;
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

}  // namespace

void SetLogTag(std::string_view tag) {
  std::lock_guard<std::mutex> lock(TagMutex());
  Tag() = std::string(tag);
}

void SetMinLogSeverity(LogSeverity severity) {
  g_min_severity.store(static_cast<int>(severity), std::memory_order_relaxed);
}

LogSeverity MinLogSeverity() {
  return static_cast<LogSeverity>(g_min_severity.load(std::memory_order_relaxed));
}

namespace internal {

LogMessage::LogMessage(const char* file, int line, LogSeverity severity)
    : file_(file), line_(line), severity_(severity) {}

LogMessage::~LogMessage() {
  static constexpr char kLetters[] = {'I', 'W', 'E', 'F'};
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm local;
  localtime_r(&now.tv_sec, &local);
  std::string tag;
  {
    std::lock_guard<std::mutex> lock(TagMutex());
    tag = Tag();
  }
  std::string text = absl::StrFormat(
      "%c%02d%02d %02d:%02d:%02d.%06d %d %s:%d] %s%s%s\n", kLetters[static_cast<int>(severity_)],
      local.tm_mon + 1, local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec,
      static_cast<int>(now.tv_nsec / 1000), static_cast<int>(syscall(SYS_gettid)),
      Basename(file_), line_, tag.empty() ? "" : "[" + tag + "] ", stream_.str(), "");
  // One write per line keeps concurrent lines whole.
  const char* data = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, data, left);
    if (n <= 0) break;
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace internal
}  // namespace weir
