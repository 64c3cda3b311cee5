// tools/progress_bar.h
//
// ProgressBar: how far a long client job is (items done of a total), with
// the rate and an ETA. On a terminal it redraws one line in place (at most
// every 100 ms); otherwise (a file, a pipe, CI logs) it writes a plain line
// at each tenth of the total and at least every 10 s, so logs stay short.
//
// Thread safety: not thread-safe; one job, one thread.

#ifndef WEIR_TOOLS_PROGRESS_BAR_H_
#define WEIR_TOOLS_PROGRESS_BAR_H_

#include <ostream>
#include <string>

#include "absl/time/time.h"

namespace weir::tools {

// One progress line: with `bar_width` > 0 a bar first, then
// "done/total pct%  rate/s  ETA m:ss" ("ETA --:--" before the first item,
// "elapsed m:ss" once done == total). `elapsed` is the time since the start.
std::string FormatProgress(int done, int total, absl::Duration elapsed, int bar_width);

class ProgressBar {
 public:
  // Writes to `out` (not owned; must outlive the bar). `terminal`: redraw in
  // place (e.g. isatty of the stream's descriptor).
  ProgressBar(std::ostream& out, bool terminal, absl::Time start);

  // Reports `done` of `total` at `now` (writes only when due, see above).
  void Update(int done, int total, absl::Time now);
  // Writes the final line (and ends a terminal's line) once; nothing when
  // Update never wrote (a job that ended before its first report).
  void Finish(absl::Time now);

 private:
  std::ostream& out_;
  const bool terminal_;
  const absl::Time start_;
  absl::Time last_write_ = absl::InfinitePast();
  int last_tenth_ = -1;
  int done_ = 0;
  int total_ = 0;
  bool finished_ = false;
};

}  // namespace weir::tools

#endif  // WEIR_TOOLS_PROGRESS_BAR_H_
