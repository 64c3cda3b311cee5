// greedy_trace: runs the CPU model of a checkpoint directory greedily from a
// prompt of token ids and prints, per generated token, the chosen id and the
// two best logits — for comparing the engine with another implementation of
// the same checkpoint (tools/train/compare_weir.py does it against v41.py).
//
//   tools/bazel run //tools:greedy_trace -- --dir=DIR --ids=0,403 --steps=32 \
//       --precision=fp32
//
// Output, one line a step: "<step> <chosen id> <its logit> <second id>
// <its logit>". The Engram compressed vocabulary comes from the directory's
// tokenizer.json when its size is the config's (as the worker does).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/init.h"
#include "base/logging.h"
#include "tokenizer/engram_vocab.h"
#include "tokenizer/tokenizer.h"
#include "worker/model/checkpoint.h"
#include "worker/model/model.h"

ABSL_FLAG(std::string, dir, "", "checkpoint directory (config.json, shards, tokenizer.json)");
ABSL_FLAG(std::string, ids, "", "comma-separated prompt token ids");
ABSL_FLAG(int, steps, 32, "tokens to generate");
ABSL_FLAG(std::string, precision, "fp32", "activation precision: fp32 or bf16");
ABSL_FLAG(int, prefill_chunk, 0,
          "feed the prompt in chunks of this many tokens (0 = one forward); the model's "
          "outputs do not depend on it");
ABSL_FLAG(bool, prompt_rows, false,
          "also print every prompt row's best id and logit first (\"row <r> <id> <logit>\")");

namespace {

using weir::model::ActivationPrecision;

int Run() {
  std::vector<int64_t> prompt;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_ids), ',', absl::SkipEmpty())) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      WEIR_LOG(ERROR) << "--ids: not a number: " << part;
      return 1;
    }
    prompt.push_back(id);
  }
  if (prompt.empty()) {
    WEIR_LOG(ERROR) << "--ids is required";
    return 1;
  }
  const std::string precision = absl::GetFlag(FLAGS_precision);
  if (precision != "fp32" && precision != "bf16") {
    WEIR_LOG(ERROR) << "--precision: fp32 or bf16, not " << precision;
    return 1;
  }
  auto checkpoint = weir::model::Checkpoint::Open(absl::GetFlag(FLAGS_dir));
  if (!checkpoint.ok()) {
    WEIR_LOG(ERROR) << checkpoint.status();
    return 1;
  }
  const weir::model::ModelConfig& config = (*checkpoint)->config();
  weir::model::ModelOptions options;
  options.precision = precision == "fp32" ? ActivationPrecision::kFp32 : ActivationPrecision::kBf16;
  if (auto tok = weir::tokenizer::Tokenizer::FromDirectory(absl::GetFlag(FLAGS_dir)); tok.ok()) {
    auto map = weir::tokenizer::EngramTokenMap(**tok, config.engram_compressed_vocab_size);
    if (map.ok()) options.engram_token_map = *std::move(map);
  }
  auto model = weir::model::Model::Create(config, **checkpoint, std::move(options));
  if (!model.ok()) {
    WEIR_LOG(ERROR) << model.status();
    return 1;
  }
  const int64_t vocab = config.vocab_size;
  auto seq = (*model)->NewSequence();
  std::vector<int64_t> next = prompt;
  int64_t pos = 0;
  if (const int chunk = absl::GetFlag(FLAGS_prefill_chunk);
      chunk > 0 && static_cast<int64_t>(prompt.size()) > chunk) {
    // All but the last chunk here; the loop below runs the last one.
    const int64_t head = (static_cast<int64_t>(prompt.size()) - 1) / chunk * chunk;
    for (; pos < head; pos += chunk) {
      auto logits = (*model)->Forward(*seq, std::span(prompt).subspan(pos, chunk), pos);
      if (!logits.ok()) {
        WEIR_LOG(ERROR) << logits.status();
        return 1;
      }
      if (absl::GetFlag(FLAGS_prompt_rows)) {
        for (int r = 0; r < chunk; ++r) {
          const float* row = logits->data() + static_cast<int64_t>(r) * vocab;
          const int64_t best = std::max_element(row, row + vocab) - row;
          std::printf("row %lld %lld %.6f\n", static_cast<long long>(pos + r),
                      static_cast<long long>(best), row[best]);
        }
      }
    }
    next.assign(prompt.begin() + head, prompt.end());
  }
  const int64_t first_row = pos;
  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    auto logits = (*model)->Forward(*seq, next, pos);
    if (!logits.ok()) {
      WEIR_LOG(ERROR) << logits.status();
      return 1;
    }
    if (step == 0 && absl::GetFlag(FLAGS_prompt_rows)) {
      for (size_t r = 0; r < next.size(); ++r) {
        const float* row = logits->data() + static_cast<int64_t>(r) * vocab;
        const int64_t best = std::max_element(row, row + vocab) - row;
        std::printf("row %lld %lld %.6f\n", static_cast<long long>(first_row + r),
                    static_cast<long long>(best), row[best]);
      }
    }
    pos += static_cast<int64_t>(next.size());
    const float* row = logits->data() + (static_cast<int64_t>(next.size()) - 1) * vocab;
    const int64_t best = std::max_element(row, row + vocab) - row;
    int64_t second = best == 0 ? 1 : 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (i != best && row[i] > row[second]) second = i;
    }
    std::printf("%d %lld %.6f %lld %.6f\n", step, static_cast<long long>(best), row[best],
                static_cast<long long>(second), row[second]);
    next = {best};
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "greedy_trace --dir=DIR --ids=IDS [--steps=N] [--precision=fp32|bf16]",
                    "greedy_trace");
  return Run();
}
