#include "base/read_file.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace weir {
namespace {

std::string TmpPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

TEST(ReadFileTest, ReturnsEveryByte) {
  const std::string path = TmpPath("bytes");
  const std::string bytes("a\0b\r\n\xff", 6);
  std::ofstream(path, std::ios::binary) << bytes;
  absl::StatusOr<std::string> got = ReadFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);

  std::ofstream(TmpPath("empty"), std::ios::binary).flush();
  got = ReadFile(TmpPath("empty"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
}

TEST(ReadFileTest, MissingFileIsNotFoundNamingIt) {
  const absl::StatusOr<std::string> got = ReadFile(TmpPath("no_such_file"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("no_such_file"), std::string::npos) << got.status();
}

}  // namespace
}  // namespace weir
