// Trains the byte-level BPE tokenizer of a small model and writes
// tokenizer.json and tokenizer_config.json into --output_dir.
//
//   bazel run //tools:train_tokenizer -- --input=/usr/share/common-licenses \
//       --vocab_size=4096 --output_dir=$PWD/models/tiny
//
// Inputs are files or directories (read recursively, in sorted path order).
// The special tokens follow the DeepSeek-V3/V4 family so that the chat
// template of tokenizer applies unchanged: BOS, EOS and PAD take
// ids 0, 1, 2, and the last id is reserved for the DSpark noise token.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "base/init.h"
#include "base/read_file.h"
#include "base/logging.h"
#include "nlohmann/json.hpp"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

ABSL_FLAG(std::string, input, "", "Comma-separated training files or directories.");
ABSL_FLAG(int, vocab_size, 4096, "Total number of ids, special tokens included.");
ABSL_FLAG(std::string, output_dir, "", "Directory for tokenizer.json and tokenizer_config.json.");

namespace {

namespace fs = std::filesystem;

std::vector<std::string> ListFiles(const std::string& spec) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const fs::path p(std::string(part.data(), part.size()));
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p, ec)) {
        if (e.is_regular_file()) out.push_back(e.path().string());
      }
    } else if (fs::is_regular_file(p, ec)) {
      out.push_back(p.string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool WriteFile(const fs::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "Trains a byte-level BPE tokenizer.json", "train_tokenizer");
  const std::vector<std::string> files = ListFiles(absl::GetFlag(FLAGS_input));
  WEIR_CHECK(!files.empty()) << "no input files in --input";
  const std::string out_dir = absl::GetFlag(FLAGS_output_dir);
  WEIR_CHECK(!out_dir.empty()) << "--output_dir is required";
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (const std::string& f : files) {
    absl::StatusOr<std::string> text = weir::ReadFile(f);
    WEIR_CHECK(text.ok()) << text.status();
    texts.push_back(*std::move(text));
    bytes += texts.back().size();
  }
  namespace tk = weir::tokenizer;
  tk::BpeTrainerOptions options;
  options.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  options.head_special_tokens = {tk::kBosToken, tk::kEosToken, tk::kPadToken, tk::kUserToken,
                                 tk::kAssistantToken, tk::kThinkStart, tk::kThinkEnd};
  options.tail_special_tokens = {"<｜▁noise▁｜>"};
  auto json = tk::TrainByteLevelBpe(texts, options);
  WEIR_CHECK(json.ok()) << json.status();

  nlohmann::json config = {
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"bos_token", tk::kBosToken},
      {"eos_token", tk::kEosToken},
      {"pad_token", tk::kPadToken},
      {"clean_up_tokenization_spaces", false},
      {"legacy", true},
      {"model_max_length", 65536},
      {"tokenizer_class", "LlamaTokenizerFast"},
      {"chat_template", tk::DeepSeekChatTemplateJinja()},
  };
  const std::string config_text = config.dump(2, ' ', false) + "\n";
  auto check = tk::Tokenizer::FromJson(*json, config_text);
  WEIR_CHECK(check.ok()) << "trained tokenizer does not load: " << check.status();
  WEIR_CHECK((*check)->vocab_size() == options.vocab_size);

  WEIR_CHECK(WriteFile(fs::path(out_dir) / "tokenizer.json", *json + "\n"));
  WEIR_CHECK(WriteFile(fs::path(out_dir) / "tokenizer_config.json", config_text));
  WEIR_LOG(INFO) << "trained on " << files.size() << " files, " << bytes << " bytes; vocab "
                 << (*check)->vocab_size() << " ids; wrote " << out_dir;
  return 0;
}
