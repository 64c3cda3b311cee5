#include "tools/progress_bar.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace weir::tools {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(ProgressBarTest, FormatShowsBarCountsRateAndEta) {
  EXPECT_EQ(FormatProgress(0, 100, absl::Seconds(1), 10),
            "[..........] 0/100   0%  0.0/s  ETA --:--");
  // 25 in 5 s: 5/s, 75 left: 15 s.
  EXPECT_EQ(FormatProgress(25, 100, absl::Seconds(5), 8),
            "[##......] 25/100  25%  5.0/s  ETA 0:15");
  EXPECT_EQ(FormatProgress(1, 3, absl::Seconds(0.5), 0), "1/3  33%  2.0/s  ETA 0:01");
  EXPECT_EQ(FormatProgress(3, 3, absl::Seconds(125), 0), "3/3 100%  0.0/s  elapsed 2:05");
  EXPECT_NE(FormatProgress(1, 10000, absl::Seconds(1), 0).find("ETA 2:46:39"), std::string::npos);
  // Never more than the bar, whatever the counts.
  EXPECT_EQ(FormatProgress(7, 5, absl::Seconds(1), 4).substr(0, 6), "[####]");
  EXPECT_EQ(FormatProgress(0, 0, absl::Seconds(1), 4).substr(0, 6), "[....]");
}

TEST(ProgressBarTest, ATerminalRedrawsOneLineAtMostEvery100Ms) {
  std::ostringstream out;
  ProgressBar bar(out, /*terminal=*/true, kStart);
  bar.Update(1, 4, kStart + absl::Milliseconds(10));
  bar.Update(2, 4, kStart + absl::Milliseconds(50));   // too soon: skipped
  bar.Update(3, 4, kStart + absl::Milliseconds(200));
  bar.Update(4, 4, kStart + absl::Milliseconds(210));  // the last one always shows
  bar.Finish(kStart + absl::Milliseconds(220));
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 4);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);  // only Finish ends the line
  EXPECT_EQ(text.find(" 2/4 "), std::string::npos);
  EXPECT_NE(text.find("[##############################] 4/4 100%"), std::string::npos);
}

TEST(ProgressBarTest, NotATerminalWritesPlainLinesAtEachTenth) {
  std::ostringstream out;
  ProgressBar bar(out, /*terminal=*/false, kStart);
  for (int done = 0; done <= 100; ++done) bar.Update(done, 100, kStart + absl::Milliseconds(done));
  bar.Finish(kStart + absl::Seconds(1));
  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 11u) << out.str();  // 0%, 10%, ..., 100%
  EXPECT_EQ(lines[0].rfind("0/100 ", 0), 0u);
  EXPECT_EQ(lines[5].rfind("50/100  50%", 0), 0u);
  EXPECT_EQ(lines[10].rfind("100/100 100%", 0), 0u);
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
  EXPECT_EQ(out.str().find('\x1b'), std::string::npos);
}

TEST(ProgressBarTest, NotATerminalStillWritesEveryTenSeconds) {
  std::ostringstream out;
  ProgressBar bar(out, /*terminal=*/false, kStart);
  bar.Update(1, 1000, kStart + absl::Seconds(1));
  bar.Update(2, 1000, kStart + absl::Seconds(5));   // same tenth, 4 s later: nothing
  bar.Update(3, 1000, kStart + absl::Seconds(12));  // 11 s later: a line
  bar.Finish(kStart + absl::Seconds(13));           // not done: the last state
  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out.str();
  EXPECT_EQ(lines[1].rfind("3/1000 ", 0), 0u);
}

// A job that ends before any progress (e.g. its input is refused) leaves no
// "0/0" line behind, on a terminal or not.
TEST(ProgressBarTest, FinishWithoutProgressWritesNothing) {
  for (bool terminal : {false, true}) {
    std::ostringstream out;
    ProgressBar bar(out, terminal, kStart);
    bar.Finish(kStart + absl::Seconds(1));
    EXPECT_EQ(out.str(), "") << (terminal ? "terminal" : "log");
  }
}

}  // namespace
}  // namespace weir::tools
