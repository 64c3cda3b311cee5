#include "worker/model/safetensors_set.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/safetensors_writer.h"

namespace weir::model {
namespace {

using ::testing::HasSubstr;

// A fresh directory under TEST_TMPDIR.
std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteShard(const std::string& path, const std::vector<TensorDecl>& decls) {
  ASSERT_TRUE(WriteSafetensors(path, decls,
                               [](const TensorDecl& d, std::span<uint8_t> out) {
                                 for (uint8_t& b : out) b = static_cast<uint8_t>(d.name.size());
                                 return absl::OkStatus();
                               })
                  .ok());
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(SafetensorsSetTest, OpensDirectoryOfShardsWithoutIndex) {
  const std::string dir = FreshDir("plain");
  WriteShard(dir + "/b.safetensors", {{"x", DType::kF32, {2}}});
  WriteShard(dir + "/a.safetensors", {{"yy", DType::kBF16, {3}}});
  WriteText(dir + "/notes.txt", "ignored");
  absl::StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(dir);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->Names(), (std::vector<std::string>{"x", "yy"}));
  const SafetensorsSet::Entry* e = (*set)->Find("yy");
  ASSERT_NE(e, nullptr);
  EXPECT_THAT(e->file->path(), HasSubstr("a.safetensors"));
  EXPECT_EQ((*set)->Data(*e).size(), 6u);
  EXPECT_EQ((*set)->Data(*e)[0], 2);
  EXPECT_EQ((*set)->Find("z"), nullptr);
}

TEST(SafetensorsSetTest, OpensIndexAndSingleFile) {
  const std::string dir = FreshDir("indexed");
  WriteShard(dir + "/s1.safetensors", {{"a", DType::kF32, {1}}, {"b", DType::kF32, {1}}});
  WriteShard(dir + "/s2.safetensors", {{"c", DType::kI8, {4}}});
  WriteText(dir + "/" + kSafetensorsIndexName,
            R"({"metadata": {"total_size": 12},
                "weight_map": {"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"}})");
  for (const std::string& path : {dir, dir + "/" + kSafetensorsIndexName}) {
    absl::StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(path);
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ((*set)->size(), 3u);
    EXPECT_EQ((*set)->files().size(), 2u);
  }
  absl::StatusOr<std::unique_ptr<SafetensorsSet>> one = SafetensorsSet::Open(dir + "/s2.safetensors");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->Names(), (std::vector<std::string>{"c"}));
}

TEST(SafetensorsSetTest, IndexErrorsNameTensorAndShard) {
  const std::string dir = FreshDir("bad_index");
  WriteShard(dir + "/s1.safetensors", {{"a", DType::kF32, {1}}});
  const std::string index = dir + "/" + kSafetensorsIndexName;

  WriteText(index, R"({"weight_map": {"a": "s1.safetensors", "q": "s1.safetensors"}})");
  absl::StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(dir);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(set.status().message()), HasSubstr("'q'"));

  WriteText(index, R"({"weight_map": {"a": "missing.safetensors"}})");
  EXPECT_EQ(SafetensorsSet::Open(dir).status().code(), absl::StatusCode::kNotFound);

  WriteText(index, R"({"weight_map": {"a": "../s1.safetensors"}})");
  set = SafetensorsSet::Open(dir);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(set.status().message()), HasSubstr("'a'"));

  WriteText(index, R"({"weight_map": 3})");
  EXPECT_EQ(SafetensorsSet::Open(dir).status().code(), absl::StatusCode::kInvalidArgument);
  WriteText(index, "{not json");
  EXPECT_EQ(SafetensorsSet::Open(dir).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsSetTest, DuplicateTensorAcrossShardsIsRejected) {
  const std::string dir = FreshDir("dup");
  WriteShard(dir + "/s1.safetensors", {{"a", DType::kF32, {1}}});
  WriteShard(dir + "/s2.safetensors", {{"a", DType::kF32, {1}}});
  absl::StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(dir);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(set.status().message()), HasSubstr("'a'"));
}

TEST(SafetensorsSetTest, EmptyDirectoryAndCorruptShard) {
  const std::string dir = FreshDir("empty_dir");
  EXPECT_EQ(SafetensorsSet::Open(dir).status().code(), absl::StatusCode::kInvalidArgument);
  WriteText(dir + "/broken.safetensors", "\x05\0\0\0\0\0\0\0{\"a\"");
  absl::StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(dir);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(set.status().message()), HasSubstr("broken.safetensors"));
}

}  // namespace
}  // namespace weir::model
