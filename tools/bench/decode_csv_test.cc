#include "tools/bench/decode_csv.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace weir::bench {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(DecodeCsvTest, WritesTheHeaderAndOneLinePerRow) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/decode.csv";
  absl::StatusOr<DecodeCsv> csv = DecodeCsv::Open(path);
  ASSERT_TRUE(csv.ok()) << csv.status();
  ASSERT_TRUE(csv->Add({.model = "small", .path = "device_decoder", .numerics = "fast",
                        .mode = "graph", .batch = 64, .context = 21, .step_ms = 6.4,
                        .device_ms = 6.1, .floor_ms = 0.064, .fp32_floor_ms = 3.2,
                        .graph_nodes = 894})
                  .ok());
  ASSERT_TRUE(csv->Add({.model = "v41-flash, ep8 \"slice\"", .path = "ep_slice",
                        .numerics = "reference", .mode = "graph", .batch = 1, .context = 68,
                        .step_ms = 160, .floor_ms = 0})
                  .ok());
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], kDecodeCsvHeader);
  const std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  ASSERT_EQ(header.size(), 14u);
  const std::vector<std::string> first = absl::StrSplit(lines[1], ',');
  ASSERT_EQ(first.size(), header.size());
  EXPECT_EQ(first, (std::vector<std::string>{"small", "device_decoder", "fast", "graph", "64",
                                             "21", "6.4", "6.1", "0.064", "100", "3.2", "2",
                                             "10000", "894"}));
  // Quoted text; empty optional fields and no ratio against a zero floor.
  EXPECT_EQ(lines[2],
            "\"v41-flash, ep8 \"\"slice\"\"\",ep_slice,reference,graph,1,68,160,,0,,,,6.25,");
}

// The committed sample that plot.py's test renders has decode_gpu's header.
TEST(DecodeCsvTest, TheCommittedSampleHasTheWritersHeader) {
  const std::vector<std::string> lines = Lines("tools/bench/plots/decode_sample.csv");
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0], kDecodeCsvHeader);
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(std::vector<std::string>(absl::StrSplit(lines[i], ',')).size(), 14u)
        << "line " << i + 1 << ": " << lines[i];
  }
}

TEST(DecodeCsvTest, UnwritablePathsAreErrors) {
  EXPECT_EQ(DecodeCsv::Open("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeCsv::Open("/nonexistent-dir/decode.csv").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace weir::bench
