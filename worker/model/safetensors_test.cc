#include "worker/model/safetensors.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/safetensors_writer.h"

namespace weir::model {
namespace {

using ::testing::HasSubstr;

std::span<const uint8_t> Bytes(const std::string& s) {
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// An image whose header is exactly `json` followed by `data_bytes` zero bytes.
std::string Image(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  return out + json + std::string(data_bytes, '\0');
}

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(SafetensorsTest, RoundTripsThroughWriterAndMmap) {
  const std::vector<TensorDecl> decls = {{"w", DType::kF32, {2, 3}},
                                         {"s", DType::kF8E8M0, {2, 1}},
                                         {"e", DType::kBF16, {0}}};
  const std::string path = TmpPath("round_trip.safetensors");
  ASSERT_TRUE(WriteSafetensors(
                  path, decls,
                  [](const TensorDecl& d, std::span<uint8_t> out) {
                    for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(i + d.name[0]);
                    return absl::OkStatus();
                  },
                  {{"format", "pt"}})
                  .ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->header().data_offset % 8, 0);
  EXPECT_EQ((*f)->header().metadata.at("format"), "pt");
  ASSERT_EQ((*f)->tensors().size(), 3u);
  const TensorInfo* w = (*f)->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  std::span<const uint8_t> data = (*f)->Data(*w);
  ASSERT_EQ(data.size(), 24u);
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], uint8_t(i + 'w'));
  const TensorInfo* s = (*f)->Find("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ((*f)->Data(*s)[1], uint8_t(1 + 's'));
  EXPECT_EQ((*f)->Find("e")->num_bytes(), 0);
  EXPECT_EQ((*f)->Find("missing"), nullptr);
}

TEST(SafetensorsTest, EveryTruncationIsDataLoss) {
  absl::StatusOr<std::string> image = SerializeSafetensors(
      {{"a", DType::kF32, {2, 2}}, {"b", DType::kI8, {3}}},
      {std::string(16, '\1'), std::string(3, '\2')});
  ASSERT_TRUE(image.ok());
  ASSERT_TRUE(ParseSafetensorsHeader(Bytes(*image), "x").ok());
  for (size_t n = 0; n < image->size(); ++n) {
    absl::StatusOr<SafetensorsHeader> h =
        ParseSafetensorsHeader(Bytes(*image).subspan(0, n), "cut.safetensors");
    ASSERT_FALSE(h.ok()) << n;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kDataLoss) << n;
    EXPECT_THAT(std::string(h.status().message()), HasSubstr("cut.safetensors"));
  }
  // Cut inside the data section: the message names the tensor that no longer fits.
  absl::StatusOr<SafetensorsHeader> h =
      ParseSafetensorsHeader(Bytes(*image).subspan(0, image->size() - 1), "f");
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("'b'"));
}

struct BadHeader {
  const char* json;
  size_t data_bytes;
  absl::StatusCode code;
  const char* message;
};

TEST(SafetensorsTest, CorruptHeadersNameTheProblem) {
  const BadHeader cases[] = {
      {"{", 0, absl::StatusCode::kDataLoss, "not valid JSON"},
      {"[1, 2]", 0, absl::StatusCode::kDataLoss, "not a JSON object"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 8,
       absl::StatusCode::kDataLoss, "'a'"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", 8,
       absl::StatusCode::kDataLoss, "'a'"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 0]}})", 8,
       absl::StatusCode::kDataLoss, "'a'"},
      {R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8,
       absl::StatusCode::kDataLoss, "'a'"},
      {R"({"a": {"dtype": "F32", "shape": [2, "x"], "data_offsets": [0, 8]}})", 8,
       absl::StatusCode::kDataLoss, "shape"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8,
       absl::StatusCode::kDataLoss, "data_offsets"},
      {R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", 8, absl::StatusCode::kDataLoss,
       "dtype"},
      {R"({"a": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", 8,
       absl::StatusCode::kInvalidArgument, "'F4'"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12, absl::StatusCode::kDataLoss, "overlap"},
      {R"({"a": {"dtype": "U8", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 8,
       absl::StatusCode::kDataLoss, "overflow"},
      {R"({"__metadata__": {"k": 1}})", 0, absl::StatusCode::kDataLoss, "__metadata__"},
      {R"({"a": 5})", 0, absl::StatusCode::kDataLoss, "'a'"},
  };
  for (const BadHeader& c : cases) {
    const std::string image = Image(c.json, c.data_bytes);
    absl::StatusOr<SafetensorsHeader> h = ParseSafetensorsHeader(Bytes(image), "bad.safetensors");
    ASSERT_FALSE(h.ok()) << c.json;
    EXPECT_EQ(h.status().code(), c.code) << c.json << " -> " << h.status();
    EXPECT_THAT(std::string(h.status().message()), HasSubstr(c.message)) << c.json;
  }
}

TEST(SafetensorsTest, HeaderLengthLargerThanFileIsDataLoss) {
  std::string image = Image("{}", 0);
  image[0] = 100;  // header claims 100 bytes, file has 2
  absl::StatusOr<SafetensorsHeader> h = ParseSafetensorsHeader(Bytes(image), "f");
  EXPECT_EQ(h.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("header length 100"));
  image[7] = '\x7f';  // ~2^63
  EXPECT_EQ(ParseSafetensorsHeader(Bytes(image), "f").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, OpenErrors) {
  EXPECT_EQ(SafetensorsFile::Open(TmpPath("absent.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
  const char* dir = std::getenv("TEST_TMPDIR");
  EXPECT_EQ(SafetensorsFile::Open(dir ? dir : "/tmp").status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string empty = TmpPath("empty.safetensors");
  std::ofstream(empty).close();
  EXPECT_EQ(SafetensorsFile::Open(empty).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, WriterRejectsBadDeclarations) {
  EXPECT_EQ(BuildSafetensorsHeader({{"a", DType::kF32, {1}}, {"a", DType::kF32, {1}}}, {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildSafetensorsHeader({{"__metadata__", DType::kF32, {1}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildSafetensorsHeader({{"a", DType::kF32, {-1}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SerializeSafetensors({{"a", DType::kF32, {2}}}, {"abc"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, DTypeNamesRoundTrip) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I16", "U16",
                           "F16", "BF16", "I32", "U32", "F32", "I64", "U64", "F64"}) {
    std::optional<DType> d = DTypeFromName(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(DTypeName(*d), name);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kF8E8M0), 1);
  EXPECT_FALSE(DTypeFromName("f32").has_value());
}

}  // namespace
}  // namespace weir::model
