// DP x EP at 1, 8 and 64 ranks: the embedded (trained) tiny model (8 experts, so at 64 ranks each
// expert has 8 replicas) runs the same batch through the offline mode of
// //coordinator:main, i.e. real worker processes exchanging MoE tokens over
// UCX every layer; the greedy tokens of every request must be identical.

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weir {
namespace {

std::string Dir() { return std::getenv("TEST_TMPDIR"); }

// Runs the batch on `workers` ranks; returns custom_id -> token ids.
std::map<std::string, std::vector<uint32_t>> RunBatch(int workers) {
  const std::string output = absl::StrCat(Dir(), "/out", workers, ".jsonl");
  const std::string command = absl::StrCat(
      std::getenv("TEST_SRCDIR"), "/weir/coordinator/main --listen=127.0.0.1:0 --eplb=false",
      " --workers=", workers, " --startup_timeout_s=600 --model_cache_dir=", Dir(), "/models",
      " --input=", Dir(), "/in.jsonl --output=", output, " 2>", Dir(), "/log", workers);
  const int status = std::system(command.c_str());
  if (status != 0) {
    // Show the end of the coordinator's log: start-up or step errors are there.
    std::ifstream log(absl::StrCat(Dir(), "/log", workers));
    std::vector<std::string> lines;
    for (std::string line; std::getline(log, line);) lines.push_back(line);
    std::string tail;
    for (size_t i = lines.size() > 40 ? lines.size() - 40 : 0; i < lines.size(); ++i) {
      tail += lines[i] + "\n";
    }
    // An empty log was seen once in a loaded suite run (exit status 1, nothing on
    // stderr): say what the status and the disk looked like.
    std::error_code ec;
    const std::filesystem::space_info space = std::filesystem::space(Dir(), ec);
    ADD_FAILURE() << "the " << workers << "-rank run exited with "
                  << (WIFEXITED(status) ? absl::StrCat("code ", WEXITSTATUS(status))
                                        : absl::StrCat("signal ", WTERMSIG(status)))
                  << "; its log has " << lines.size() << " lines; "
                  << (ec ? "free disk unknown" : absl::StrCat(space.available >> 20, " MiB free"))
                  << " under the test's directory:\n" << tail;
  }
  std::map<std::string, std::vector<uint32_t>> tokens;
  std::ifstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded());
    EXPECT_FALSE(j.contains("error")) << line;
    tokens[j["custom_id"].get<std::string>()] = j["token_ids"].get<std::vector<uint32_t>>();
  }
  return tokens;
}

TEST(WideEpTest, GreedyTokensIdenticalAt1And8And64Ranks) {
  {
    std::ofstream in(Dir() + "/in.jsonl");
    for (int i = 0; i < 80; ++i) {
      in << "{\"custom_id\": \"r" << i << "\", \"tokens\": [" << i + 3 << ", " << (i * 37) % 4000 + 1
         << ", 11], \"max_new_tokens\": 5, \"temperature\": 0}\n";
    }
  }
  const auto one = RunBatch(1);
  ASSERT_EQ(one.size(), 80u);
  EXPECT_EQ(RunBatch(8), one);
  EXPECT_EQ(RunBatch(64), one);
}

}  // namespace
}  // namespace weir
