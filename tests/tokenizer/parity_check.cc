// Compares weir's tokenizer with the Hugging Face reference output written by
// hf_dump.py: ids with and without special tokens, and decoded text with and
// without skip_special_tokens, for every input file. Exits non-zero on any
// mismatch after printing the first differing position of each.
//
//   parity_check <tokenizer.json> <hf.jsonl> <input files...>
//   parity_check --lines <tokenizer.json> <hf.jsonl> <input files...>
//
// With --lines (hf_dump.py --lines) each LF-separated line is encoded on its
// own without special tokens; prints the count of mismatching lines and the
// first ones.

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "base/read_file.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace {

// Returns the number of mismatching fields (0 or 1) and reports the first
// differing index.
int CompareIds(const std::string& what, const std::vector<int32_t>& want,
               const std::vector<int32_t>& got) {
  if (want == got) return 0;
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  std::cerr << "MISMATCH " << what << ": hf " << want.size() << " ids, weir " << got.size()
            << " ids, first difference at " << i << ":";
  for (size_t k = i; k < i + 8 && k < want.size(); ++k) std::cerr << " hf=" << want[k];
  for (size_t k = i; k < i + 8 && k < got.size(); ++k) std::cerr << " weir=" << got[k];
  std::cerr << "\n";
  return 1;
}

int CompareText(const std::string& what, const std::string& want, const std::string& got) {
  if (want == got) return 0;
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  std::cerr << "MISMATCH " << what << ": text differs at byte " << i << " (hf " << want.size()
            << " bytes, weir " << got.size() << ")\n";
  return 1;
}

// Compares line by line; returns the number of mismatching lines.
int CompareLines(const weir::tokenizer::Tokenizer& tok, const std::string& name,
                 const std::string& text, const nlohmann::json& want, size_t* count) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (true) {
    const size_t nl = text.find('\n', start);
    lines.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  if (want.size() != lines.size()) {
    std::cerr << "MISMATCH " << name << ": hf " << want.size() << " lines, weir " << lines.size()
              << "\n";
    return static_cast<int>(lines.size());
  }
  int bad = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto ids = tok.Encode(lines[i], false);
    const auto hf = want[i].get<std::vector<int32_t>>();
    if (ids.ok() && *ids == hf) continue;
    if (++bad <= 5) {
      std::cerr << "MISMATCH " << name << " line " << i << " (";
      for (unsigned char c : lines[i]) std::fprintf(stderr, "%02x", c);
      std::cerr << "):";
      for (int32_t id : hf) std::cerr << " hf=" << id;
      if (ids.ok()) {
        for (int32_t id : *ids) std::cerr << " weir=" << id;
      }
      std::cerr << "\n";
    }
  }
  *count += lines.size();
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  const bool by_line = argc > 1 && std::string(argv[1]) == "--lines";
  if (by_line) {
    ++argv;
    --argc;
  }
  if (argc < 3) {
    std::cerr << "usage: parity_check <tokenizer.json> <hf.jsonl> <inputs...>\n";
    return 2;
  }
  const absl::StatusOr<std::string> json = weir::ReadFile(argv[1]);
  if (!json.ok()) {
    std::cerr << json.status() << "\n";
    return 1;
  }
  auto tok = weir::tokenizer::Tokenizer::FromJson(*json);
  if (!tok.ok()) {
    std::cerr << "load failed: " << tok.status() << "\n";
    return 1;
  }
  std::ifstream hf(argv[2]);
  std::string line;
  int mismatches = 0, inputs = 0;
  size_t bytes = 0, tokens = 0;
  for (int a = 3; a < argc; ++a) {
    if (!std::getline(hf, line)) {
      std::cerr << "reference output has fewer records than inputs\n";
      return 1;
    }
    const nlohmann::json rec = nlohmann::json::parse(line, nullptr, false);
    if (rec.is_discarded()) {
      std::cerr << "bad reference record " << a - 3 << "\n";
      return 1;
    }
    const absl::StatusOr<std::string> read = weir::ReadFile(argv[a]);
    if (!read.ok()) {
      std::cerr << read.status() << "\n";
      return 1;
    }
    const std::string& text = *read;
    const std::string name = rec["name"].get<std::string>();
    if (by_line) {
      mismatches += CompareLines(**tok, name, text, rec["lines"], &tokens);
      ++inputs;
      bytes += text.size();
      continue;
    }
    auto ids = (*tok)->Encode(text, true);
    auto plain = (*tok)->Encode(text, false);
    if (!ids.ok() || !plain.ok()) {
      std::cerr << "encode failed on " << name << ": " << ids.status() << "\n";
      ++mismatches;
      continue;
    }
    mismatches += CompareIds(name + " ids", rec["ids"].get<std::vector<int32_t>>(), *ids);
    mismatches +=
        CompareIds(name + " plain_ids", rec["plain_ids"].get<std::vector<int32_t>>(), *plain);
    mismatches += CompareText(name + " decoded", rec["decoded"].get<std::string>(),
                              (*tok)->Decode(*ids, false));
    mismatches += CompareText(name + " decoded_skip", rec["decoded_skip"].get<std::string>(),
                              (*tok)->Decode(*ids, true));
    ++inputs;
    bytes += text.size();
    tokens += ids->size();
  }
  std::cout << argv[1] << ": " << inputs << " inputs, " << bytes << " bytes, " << tokens
            << (by_line ? " lines, " : " tokens, ") << mismatches << " mismatches\n";
  return mismatches == 0 ? 0 : 1;
}
