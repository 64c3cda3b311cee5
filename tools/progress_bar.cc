#include "tools/progress_bar.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weir::tools {
namespace {

std::string Clock(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace

std::string FormatProgress(int done, int total, absl::Duration elapsed, int bar_width) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  const double fraction = total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 0;
  std::string line;
  if (bar_width > 0) {
    const int filled = static_cast<int>(fraction * bar_width);
    absl::StrAppend(&line, "[", std::string(filled, '#'), std::string(bar_width - filled, '.'),
                    "] ");
  }
  absl::StrAppendFormat(&line, "%d/%d %3d%%", done, total,
                        static_cast<int>(std::floor(fraction * 100)));
  const double rate = seconds > 0 ? done / seconds : 0;
  absl::StrAppendFormat(&line, "  %.1f/s", rate);
  if (total > 0 && done >= total) {
    absl::StrAppend(&line, "  elapsed ", Clock(seconds));
  } else if (done > 0 && rate > 0) {
    absl::StrAppend(&line, "  ETA ", Clock((total - done) / rate));
  } else {
    absl::StrAppend(&line, "  ETA --:--");
  }
  return line;
}

ProgressBar::ProgressBar(std::ostream& out, bool terminal, absl::Time start)
    : out_(out), terminal_(terminal), start_(start) {}

void ProgressBar::Update(int done, int total, absl::Time now) {
  done_ = done;
  total_ = total;
  if (finished_) return;
  if (terminal_) {
    if (now - last_write_ < absl::Milliseconds(100) && done < total) return;
    // \r back to the line's start, \x1b[K clears what a longer line left.
    out_ << "\r" << FormatProgress(done, total, now - start_, 30) << "\x1b[K" << std::flush;
  } else {
    const int tenth = total > 0 ? done * 10 / total : 0;
    if (tenth == last_tenth_ && now - last_write_ < absl::Seconds(10)) return;
    last_tenth_ = tenth;
    out_ << FormatProgress(done, total, now - start_, 0) << "\n" << std::flush;
  }
  last_write_ = now;
}

void ProgressBar::Finish(absl::Time now) {
  if (finished_) return;
  // No progress was ever reported (a job that ended before its first item):
  // no "0/0" line.
  if (last_write_ == absl::InfinitePast()) {
    finished_ = true;
    return;
  }
  if (terminal_) {
    out_ << "\r" << FormatProgress(done_, total_, now - start_, 30) << "\x1b[K\n" << std::flush;
  } else if (last_tenth_ != 10) {
    out_ << FormatProgress(done_, total_, now - start_, 0) << "\n" << std::flush;
  }
  finished_ = true;
}

}  // namespace weir::tools
