// Compares weir's Engram compressed vocabulary with the one hf_engram.py
// built with the Hugging Face library. Exits non-zero on any difference.
//
//   engram_check <tokenizer.json> <hf_engram.json>

#include <iostream>
#include <string>
#include <vector>

#include "base/read_file.h"
#include "nlohmann/json.hpp"
#include "tokenizer/engram_vocab.h"

namespace {

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: engram_check <tokenizer.json> <hf_engram.json>\n";
    return 2;
  }
  const absl::StatusOr<std::string> json = weir::ReadFile(argv[1]);
  const absl::StatusOr<std::string> reference = weir::ReadFile(argv[2]);
  for (const absl::StatusOr<std::string>* read : {&json, &reference}) {
    if (!read->ok()) {
      std::cerr << read->status() << "\n";
      return 1;
    }
  }
  auto tok = weir::tokenizer::Tokenizer::FromJson(*json);
  if (!tok.ok()) {
    std::cerr << "load failed: " << tok.status() << "\n";
    return 1;
  }
  auto mine = weir::tokenizer::BuildEngramVocab(**tok);
  if (!mine.ok()) {
    std::cerr << "engram vocab failed: " << mine.status() << "\n";
    return 1;
  }
  const nlohmann::json hf = nlohmann::json::parse(*reference, nullptr, false);
  if (hf.is_discarded()) {
    std::cerr << "bad reference file\n";
    return 1;
  }
  const auto want = hf["map"].get<std::vector<int32_t>>();
  int mismatches = 0;
  if (want.size() != mine->compressed_id.size()) {
    std::cerr << "MISMATCH map size: hf " << want.size() << ", weir " << mine->compressed_id.size()
              << "\n";
    ++mismatches;
  }
  for (size_t id = 0; id < want.size() && id < mine->compressed_id.size(); ++id) {
    if (want[id] != mine->compressed_id[id] && ++mismatches <= 10) {
      auto key = weir::tokenizer::EngramKey(**tok, static_cast<int32_t>(id));
      std::cerr << "MISMATCH id " << id << ": hf " << want[id] << ", weir "
                << mine->compressed_id[id] << " (weir key '" << key.value_or("?") << "')\n";
    }
  }
  if (hf["size"].get<int32_t>() != mine->size) ++mismatches;
  std::cout << argv[1] << ": engram compressed vocabulary " << mine->size << " of "
            << (*tok)->vocab_size() << " ids (hf " << hf["size"] << "), " << mismatches
            << " mismatches\n";
  return mismatches == 0 ? 0 : 1;
}
