#include "base/logging.h"

#include "gtest/gtest.h"

namespace weir {
namespace {

TEST(LoggingTest, DisabledSeverityDoesNotEvaluateStream) {
  SetMinLogSeverity(LogSeverity::kError);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  WEIR_LOG(INFO) << count();
  EXPECT_EQ(evaluated, 0);
  WEIR_LOG(ERROR) << "expected test line " << count();
  EXPECT_EQ(evaluated, 1);
  SetMinLogSeverity(LogSeverity::kInfo);
}

TEST(LoggingTest, LineCarriesTagFileAndMessage) {
  SetLogTag("unit");
  testing::internal::CaptureStderr();
  WEIR_LOG(WARNING) << "hello " << 42;
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out[0], 'W');
  EXPECT_NE(out.find("logging_test.cc:"), std::string::npos);
  EXPECT_NE(out.find("[unit] hello 42\n"), std::string::npos);
}

TEST(LoggingDeathTest, CheckFailureAbortsWithReason) {
  int value = 3;
  EXPECT_DEATH(WEIR_CHECK_EQ(value, 4) << "because reasons", "Check failed.*because reasons");
}

}  // namespace
}  // namespace weir
