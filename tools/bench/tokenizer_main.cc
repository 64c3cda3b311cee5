// Encode throughput of weir's tokenizer vs Hugging Face `tokenizers` (node
// bindings) on the same tokenizer.json and text, single-threaded: each side
// encodes the input files one call at a time; best of --runs.
//
//   (cd tests/tokenizer && npm ci)
//   tools/bazel run -c opt //tools/bench:tokenizer -- \
//       --tokenizer=$PWD/models/tiny/tokenizer.json --input=/usr/share/doc \
//       --hf_modules=$PWD/tests/tokenizer/node_modules
//
// The HF figure includes the node-to-Rust call overhead per file (small next
// to files of tens of KB). Without --hf_modules only weir is measured.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "base/init.h"
#include "base/logging.h"
#include "coordinator/tokenizer/tokenizer.h"

ABSL_FLAG(std::string, tokenizer, "", "Path of tokenizer.json.");
ABSL_FLAG(std::string, input, "/usr/share/common-licenses",
          "Comma-separated files or directories of text.");
ABSL_FLAG(int64_t, max_bytes, 8 << 20, "Read at most this many bytes of input.");
ABSL_FLAG(int, runs, 3, "Timed runs per side; the best is reported.");
ABSL_FLAG(std::string, hf_modules, "", "node_modules holding the `tokenizers` package.");
ABSL_FLAG(std::string, hf_script, "tools/bench/tokenizer_hf.js", "The node side of the bench.");

namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ListFiles(const std::string& spec, int64_t max_bytes) {
  std::vector<std::string> all;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const fs::path p(std::string(part.data(), part.size()));
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p, ec)) {
        if (e.is_regular_file(ec) && !e.is_symlink(ec)) all.push_back(e.path().string());
      }
    } else if (fs::is_regular_file(p, ec)) {
      all.push_back(p.string());
    }
  }
  std::sort(all.begin(), all.end());
  std::vector<std::string> out;
  int64_t total = 0;
  for (const std::string& f : all) {
    std::error_code ec;
    const int64_t size = static_cast<int64_t>(fs::file_size(f, ec));
    if (ec || size == 0 || total + size > max_bytes) continue;
    out.push_back(f);
    total += size;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "Tokenizer encode throughput: weir vs Hugging Face", "bench");
  const std::string tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  WEIR_CHECK(!tokenizer_path.empty()) << "--tokenizer is required";
  auto tok = weir::tokenizer::Tokenizer::FromJson(ReadFile(tokenizer_path));
  WEIR_CHECK(tok.ok()) << tok.status();
  const std::vector<std::string> files =
      ListFiles(absl::GetFlag(FLAGS_input), absl::GetFlag(FLAGS_max_bytes));
  WEIR_CHECK(!files.empty()) << "no input files";
  std::vector<std::string> texts;
  int64_t bytes = 0;
  for (const std::string& f : files) {
    texts.push_back(ReadFile(f));
    bytes += static_cast<int64_t>(texts.back().size());
  }

  double best = 1e30;
  int64_t tokens = 0;
  for (int run = 0; run < absl::GetFlag(FLAGS_runs); ++run) {
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& t : texts) {
      auto ids = (*tok)->Encode(t, /*add_special_tokens=*/false);
      WEIR_CHECK(ids.ok()) << ids.status();
      tokens += static_cast<int64_t>(ids->size());
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                              .count());
  }
  const double weir_mbs = bytes / best / 1e6;
  std::printf("input: %zu files, %.2f MB\n", files.size(), bytes / 1e6);
  std::printf("weir: %.2f MB/s (%lld tokens, best of %d)\n", weir_mbs,
              static_cast<long long>(tokens), absl::GetFlag(FLAGS_runs));

  const std::string modules = absl::GetFlag(FLAGS_hf_modules);
  if (modules.empty()) {
    std::printf("hf: not measured (no --hf_modules)\n");
    return 0;
  }
  const fs::path list = fs::temp_directory_path() / "weir_tokenizer_bench_files.txt";
  std::string cmd = "TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 node '" +
                    absl::GetFlag(FLAGS_hf_script) + "' '" + modules + "' '" + tokenizer_path +
                    "' " + std::to_string(absl::GetFlag(FLAGS_runs));
  for (const std::string& f : files) cmd += " '" + f + "'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  WEIR_CHECK(pipe != nullptr) << "cannot run node";
  long long hf_bytes = 0, hf_tokens = 0;
  double hf_seconds = 0;
  const int n = std::fscanf(pipe.get(), "%lld %lf %lld", &hf_bytes, &hf_seconds, &hf_tokens);
  WEIR_CHECK(n == 3 && hf_seconds > 0) << "node side failed: " << cmd;
  const double hf_mbs = hf_bytes / hf_seconds / 1e6;
  std::printf("hf:   %.2f MB/s (%lld tokens, best of %d)\n", hf_mbs, hf_tokens,
              absl::GetFlag(FLAGS_runs));
  std::printf("ratio weir/hf: %.2fx%s\n", weir_mbs / hf_mbs,
              hf_tokens == tokens ? "" : "  (WARNING: token counts differ)");
  return 0;
}
