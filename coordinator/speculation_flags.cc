#include "coordinator/speculation_flags.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace weir::coordinator {

absl::StatusOr<int32_t> NumDraftTokensFromFlags(std::string_view mode, int num_draft_tokens,
                                                const model::ModelConfig& config) {
  if (mode != "off" && mode != "dspark") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative must be off or dspark, got \"", std::string(mode), "\""));
  }
  if (mode == "off") {
    if (num_draft_tokens != 0) {
      return absl::InvalidArgumentError(
          "--num_draft_tokens is set but --speculative=off; add --speculative=dspark");
    }
    return 0;
  }
  const int64_t block = config.n_mtp_layers > 0 ? config.dspark_block_size : 0;
  if (block <= 0) {
    return absl::InvalidArgumentError(
        "--speculative=dspark needs a model with DSpark stages (num_nextn_predict_layers > 0 "
        "and a dspark_block_size); this one has none");
  }
  if (num_draft_tokens < 0 || num_draft_tokens > block) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_draft_tokens must be in [1, ", block,
                     "] (the model's DSpark block size), or 0 for ", block, "; got ",
                     num_draft_tokens));
  }
  return num_draft_tokens == 0 ? static_cast<int32_t>(block) : num_draft_tokens;
}

absl::Status VerifyLengthFromFlags(std::string_view policy, int32_t num_draft_tokens) {
  if (policy.empty()) return absl::OkStatus();  // EffectiveVerifyLength's default
  if (policy != "fixed" && policy != "confidence") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--verify_length must be fixed or confidence, got \"", std::string(policy), "\""));
  }
  if (policy == "confidence" && num_draft_tokens == 0) {
    return absl::InvalidArgumentError("--verify_length=confidence needs --speculative=dspark");
  }
  return absl::OkStatus();
}

absl::Status SpeculativeMaxBatchFromFlags(int rows, int32_t num_draft_tokens) {
  if (rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative_max_batch must be >= 0 (0: no limit); got ", rows));
  }
  if (rows > 0 && num_draft_tokens == 0) {
    return absl::InvalidArgumentError(
        "--speculative_max_batch is set but --speculative=off; add --speculative=dspark");
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> NgramLookupFromFlags(int flag, int32_t num_draft_tokens) {
  if (flag < -1 || flag > worker::kMaxNgramMatch) {
    return absl::InvalidArgumentError(absl::StrCat("--ngram_lookup must be in [0, ",
                                                   worker::kMaxNgramMatch,
                                                   "] (the match length; 0: off); got ", flag));
  }
  if (flag == -1) return num_draft_tokens > 0 ? kDefaultNgramLookup : 0;
  if (flag > 0 && num_draft_tokens == 0) {
    return absl::InvalidArgumentError(
        "--ngram_lookup is set but --speculative=off; add --speculative=dspark");
  }
  return flag;
}

absl::Status NgramLookupTokensFromFlags(int tokens, int32_t ngram_lookup) {
  if (tokens < 0 || tokens > worker::kMaxNgramMatch) {
    return absl::InvalidArgumentError(absl::StrCat("--ngram_lookup_tokens must be in [0, ",
                                                   worker::kMaxNgramMatch,
                                                   "] (0: --num_draft_tokens); got ", tokens));
  }
  if (tokens > 0 && ngram_lookup == 0) {
    return absl::InvalidArgumentError(
        "--ngram_lookup_tokens is set but prompt lookup is off (--ngram_lookup=0 or "
        "--speculative=off)");
  }
  return absl::OkStatus();
}

int32_t MaxDraftTokens(int32_t num_draft_tokens, int32_t ngram_lookup, int32_t lookup_tokens) {
  return ngram_lookup > 0 ? std::max(num_draft_tokens, lookup_tokens) : num_draft_tokens;
}

std::string EffectiveVerifyLength(std::string_view flag) {
  // Fixed: on the H200 the trained tiny's drafts pay at batch 1 whatever a
  // few verifications say, and the pacer's pauses cost more than they save
  // there (tools/bench/README.md, 2026-12-05).
  return flag.empty() ? "fixed" : std::string(flag);
}

bool MeasureVerifyCost(std::string_view policy, std::string_view backend,
                       const std::string& model_dir) {
  return policy == "confidence" && backend != "cuda" &&
         !std::filesystem::exists(std::filesystem::path(model_dir) / "verify_cost.json");
}

}  // namespace weir::coordinator
