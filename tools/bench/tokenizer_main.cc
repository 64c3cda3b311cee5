// Encode throughput of weir's tokenizer vs Hugging Face `tokenizers` (the
// Python binding of the pinned environment, @pyenv//:python) on the same
// tokenizer.json and the same inputs, single-threaded, add_special_tokens
// off, best of --runs:
//
//   tools/bazel run //tools/bench:tokenizer     # tiny tokenizer, parity corpus
//   tools/bazel run //tools/bench:tokenizer -- --tokenizer=my/tokenizer.json
//       --input=/usr/share/doc --max_bytes=16000000 --runs=5
//
// Without --input the inputs are the parity corpus (tests/tokenizer/
// make_corpus.py, written to a temporary directory and removed afterwards);
// without --tokenizer the tokenizer is models/tiny/tokenizer.json from the
// runfiles. Both sides measure "per-call" (one encode per input) and "batch"
// (HF: one encode_batch over all inputs, kept on one thread; weir has no
// batch encode, so its batch row is the per-call loop). The HF side runs in
// its own process (tokenizer_hf.py) and its per-call figure includes the
// Python-to-Rust call overhead, small next to inputs of tens of KB.
//
// Bad flags are usage errors (message, exit 2); a failed measurement exits 1.

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/init.h"
#include "base/read_file.h"
#include "tokenizer/tokenizer.h"
#include "tools/cpp/runfiles/runfiles.h"

ABSL_FLAG(std::string, tokenizer, "",
          "Path of tokenizer.json; empty: models/tiny/tokenizer.json from the runfiles.");
ABSL_FLAG(std::string, input, "",
          "Comma-separated files or directories of text; empty: the tokenizer parity corpus "
          "(tests/tokenizer/make_corpus.py) in a temporary directory.");
ABSL_FLAG(int64_t, max_bytes, 8 << 20, "Read at most this many bytes of input.");
ABSL_FLAG(int, runs, 3, "Timed runs per side and mode; the best is reported.");
ABSL_FLAG(bool, hf, true, "Also measure Hugging Face tokenizers (through --python).");
ABSL_FLAG(std::string, python, "",
          "Python interpreter with `tokenizers` (a path, or a name looked up on PATH); "
          "empty: @pyenv//:python from the runfiles.");

namespace {

namespace fs = std::filesystem;
using bazel::tools::cpp::runfiles::Runfiles;

constexpr char kUsage[] =
    "tokenizer [--tokenizer=FILE] [--input=PATHS] [--max_bytes=N] [--runs=N] [--hf=false] "
    "[--python=FILE]\n"
    "Encode MB/s of weir's tokenizer vs Hugging Face tokenizers, per call and batched.";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "tokenizer: %s\nusage: %s\n", message.c_str(), kUsage);
  return 2;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "tokenizer: %s\n", message.c_str());
  return 1;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `command` through the shell; returns its stdout, or nullopt if it
// could not start or exited non-zero (its stderr goes to ours).
std::optional<std::string> RunCommand(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  if (pclose(pipe) != 0) return std::nullopt;
  return out;
}

// Regular files (not links) under the comma-separated `spec`, sorted, the
// empty ones left out, until `max_bytes`.
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

// A path from a flag: relative ones are taken from the directory `bazel run`
// was called in (BUILD_WORKING_DIRECTORY), not from the runfiles.
std::string UserPath(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || cwd == nullptr || *cwd == 0) return path;
  return std::string(cwd) + "/" + path;
}

// Returns `flag` if set, else the runfile `rlocation`, else "" (with `what`
// explained in *error).
std::string Locate(const std::string& flag, const Runfiles* runfiles, const std::string& rlocation,
                   const std::string& what, std::string* error) {
  if (!flag.empty()) return flag;
  const std::string path = runfiles == nullptr ? "" : runfiles->Rlocation(rlocation);
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) {
    *error = "cannot find " + what + " (" + rlocation +
             ") in the runfiles: run through `tools/bazel run //tools/bench:tokenizer`";
    return "";
  }
  return path;
}

// A temporary directory removed when this goes out of scope.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/weir_tokenizer_bench.XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }  // empty if creation failed

 private:
  std::string path_;
};

struct Timing {
  double seconds = 0;
  int64_t tokens = 0;
};

// The HF side's result line, "hf key=value ...", as a map.
std::optional<std::map<std::string, std::string>> ParseHfLine(const std::string& out) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (line.substr(0, 3) != "hf ") continue;
    std::map<std::string, std::string> fields;
    for (absl::string_view kv : absl::StrSplit(line.substr(3), ' ', absl::SkipEmpty())) {
      const size_t eq = kv.find('=');
      if (eq == absl::string_view::npos) return std::nullopt;
      fields[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
    }
    return fields;
  }
  return std::nullopt;
}

void PrintRow(const char* mode, double bytes, const Timing& weir, const char* weir_note,
              const std::optional<Timing>& hf) {
  std::printf("%-9s %10.2f%-1s %12lld", mode, bytes / weir.seconds / 1e6, weir_note,
              static_cast<long long>(weir.tokens));
  if (hf.has_value()) {
    std::printf(" %10.2f %12lld %8.2fx%s", bytes / hf->seconds / 1e6,
                static_cast<long long>(hf->tokens), hf->seconds / weir.seconds,
                hf->tokens == weir.tokens ? "" : "  (token counts differ)");
  } else {
    std::printf(" %10s %12s %9s", "-", "-", "-");
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> positional = weir::InitProcess(argc, argv, kUsage, "bench");
  if (positional.size() > 1) return UsageError("unexpected argument '" + positional[1] + "'");
  const int runs = absl::GetFlag(FLAGS_runs);
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_bytes);
  if (runs < 1) return UsageError("--runs must be at least 1");
  if (max_bytes < 1) return UsageError("--max_bytes must be positive");
  const bool measure_hf = absl::GetFlag(FLAGS_hf);

  std::string runfiles_error;
  std::unique_ptr<Runfiles> runfiles(Runfiles::Create(argv[0], &runfiles_error));
  std::string error;
  const std::string tokenizer_path =
      Locate(UserPath(absl::GetFlag(FLAGS_tokenizer)), runfiles.get(),
             "weir/models/tiny/tokenizer.json", "the embedded tokenizer", &error);
  if (tokenizer_path.empty()) return Fail(error + "; or pass --tokenizer=FILE");
  const bool need_python = measure_hf || absl::GetFlag(FLAGS_input).empty();
  std::string python;
  if (need_python) {
    const std::string flag = absl::GetFlag(FLAGS_python);
    python = Locate(flag.find('/') == std::string::npos ? flag : UserPath(flag), runfiles.get(),
                    "pyenv/python", "the Python environment", &error);
    if (python.empty()) return Fail(error + "; or pass --python=FILE");
  }

  const absl::StatusOr<std::string> json = weir::ReadFile(tokenizer_path);
  if (!json.ok()) return UsageError("cannot read --tokenizer=" + tokenizer_path);
  auto tok = weir::tokenizer::Tokenizer::FromJson(*json);
  if (!tok.ok()) {
    std::ostringstream status;
    status << tok.status();
    return UsageError(tokenizer_path + ": " + status.str());
  }

  // Inputs: --input, or the parity corpus written to a temporary directory.
  TempDir corpus_dir;
  std::string input;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty())) {
    input += (input.empty() ? "" : ",") + UserPath(std::string(part.data(), part.size()));
  }
  std::string input_label = input;
  if (input.empty()) {
    const std::string script = Locate("", runfiles.get(), "weir/tests/tokenizer/make_corpus.py",
                                      "the corpus generator", &error);
    if (script.empty()) return Fail(error);
    if (corpus_dir.path().empty()) return Fail("cannot create a temporary directory");
    const std::optional<std::string> out =
        RunCommand(ShellQuote(python) + " " + ShellQuote(script) + " " +
                   ShellQuote(corpus_dir.path() + "/corpus"));
    if (!out.has_value()) return Fail("tests/tokenizer/make_corpus.py failed");
    input = corpus_dir.path() + "/corpus";
    input_label = "the parity corpus (tests/tokenizer/make_corpus.py)";
  }
  const std::vector<std::string> files = ListFiles(input, max_bytes);
  if (files.empty()) return UsageError("no non-empty input files in --input=" + input);
  std::vector<std::string> texts;
  int64_t bytes = 0;
  for (const std::string& f : files) {
    absl::StatusOr<std::string> text = weir::ReadFile(f);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    bytes += static_cast<int64_t>(text->size());
    texts.push_back(*std::move(text));
  }

  // weir, per call.
  Timing weir{.seconds = 1e30};
  for (int run = 0; run < runs; ++run) {
    int64_t tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& t : texts) {
      auto ids = (*tok)->Encode(t, /*add_special_tokens=*/false);
      if (!ids.ok()) {
        std::ostringstream status;
        status << ids.status();
        return Fail("weir failed to encode: " + status.str());
      }
      tokens += static_cast<int64_t>(ids->size());
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    weir.seconds = std::min(weir.seconds, seconds);
    weir.tokens = tokens;
  }

  // Hugging Face, in its own process over the same files.
  std::optional<Timing> hf_per_call, hf_batch;
  std::string hf_note = "hf: not measured (--hf=false)";
  if (measure_hf) {
    const std::string script = Locate("", runfiles.get(), "weir/tools/bench/tokenizer_hf.py",
                                      "the Hugging Face side", &error);
    if (script.empty()) return Fail(error);
    TempDir list_dir;
    if (list_dir.path().empty()) return Fail("cannot create a temporary directory");
    const std::string list = list_dir.path() + "/inputs";
    {
      std::ofstream out(list, std::ios::binary);
      for (const std::string& f : files) out << f << '\0';
      if (!out) return Fail("cannot write " + list);
    }
    const std::optional<std::string> out = RunCommand(
        ShellQuote(python) + " " + ShellQuote(script) + " " + ShellQuote(tokenizer_path) + " " +
        std::to_string(runs) + " " + ShellQuote(list));
    if (!out.has_value()) return Fail("the Hugging Face side (tokenizer_hf.py) failed");
    const auto fields = ParseHfLine(*out);
    auto field = [&](const char* key) {
      const auto it = fields->find(key);
      return it == fields->end() ? std::string() : it->second;
    };
    Timing per_call, batch;
    int64_t hf_bytes = 0, threads = 0;
    if (!fields.has_value() || !absl::SimpleAtoi(field("bytes"), &hf_bytes) ||
        !absl::SimpleAtod(field("per_call_s"), &per_call.seconds) ||
        !absl::SimpleAtoi(field("per_call_tokens"), &per_call.tokens) ||
        !absl::SimpleAtod(field("batch_s"), &batch.seconds) ||
        !absl::SimpleAtoi(field("batch_tokens"), &batch.tokens) ||
        !absl::SimpleAtoi(field("threads"), &threads)) {
      return Fail("unexpected output of tokenizer_hf.py: " + *out);
    }
    if (hf_bytes != bytes) {
      return Fail("tokenizer_hf.py read " + std::to_string(hf_bytes) + " bytes, weir " +
                  std::to_string(bytes));
    }
    hf_per_call = per_call;
    hf_batch = batch;
    hf_note = "hf: tokenizers " + field("version") + " on Python " + field("python") + ", " +
              std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") +
              " (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false; cpu/wall " +
              field("cpu_per_wall") + ")" + (threads == 1 ? "" : "  WARNING: not single-threaded");
  }

  std::printf("tokenizer: %s\n", absl::GetFlag(FLAGS_tokenizer).empty()
                                     ? "models/tiny/tokenizer.json (embedded)"
                                     : tokenizer_path.c_str());
  std::printf("input: %s, %zu files, %.2f MB; add_special_tokens=false, best of %d runs\n",
              input_label.c_str(), files.size(), bytes / 1e6, runs);
  std::printf("%-9s %11s %12s %10s %12s %9s\n", "mode", "weir MB/s", "weir tokens", "hf MB/s",
              "hf tokens", "weir/hf");
  PrintRow("per-call", static_cast<double>(bytes), weir, " ", hf_per_call);
  PrintRow("batch", static_cast<double>(bytes), weir, "*", hf_batch);
  std::printf("* weir has no batch encode: its batch row is the per-call loop.\n%s\n",
              hf_note.c_str());
  return 0;
}
