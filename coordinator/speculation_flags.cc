#include "coordinator/speculation_flags.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace weir::coordinator {
namespace {

// DSpark's drafts a row verifies (0 unless "dspark").
absl::StatusOr<int32_t> DsparkDrafts(const SpeculationFlags& f, const model::ModelConfig& c) {
  if (f.mode != "dspark") return 0;
  const int64_t block = c.n_mtp_layers > 0 ? c.dspark_block_size : 0;
  if (block <= 0) {
    return absl::InvalidArgumentError(
        "--speculative=dspark needs a model with DSpark stages (num_nextn_predict_layers > 0 "
        "and a dspark_block_size); this one has none (--speculative=ngram needs none)");
  }
  if (f.num_draft_tokens < 0 || f.num_draft_tokens > block) {
    return absl::InvalidArgumentError(absl::StrCat("--num_draft_tokens must be in [1, ", block,
                                                   "] (the model's DSpark block size), or 0 for ",
                                                   block, "; got ", f.num_draft_tokens));
  }
  return f.num_draft_tokens == 0 ? static_cast<int32_t>(block) : f.num_draft_tokens;
}

}  // namespace

int32_t Speculation::max_draft_tokens() const {
  return ngram_lookup > 0 ? std::max(dspark_drafts, lookup_tokens) : dspark_drafts;
}

absl::StatusOr<Speculation> SpeculationFromFlags(const SpeculationFlags& f,
                                                 const model::ModelConfig& config) {
  if (f.mode != "off" && f.mode != "dspark" && f.mode != "ngram") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative must be off, dspark or ngram, got \"", f.mode, "\""));
  }
  const bool on = f.mode != "off";
  const bool ngram = f.mode == "ngram";
  Speculation s;
  if (!on && f.num_draft_tokens != 0) {
    return absl::InvalidArgumentError(
        "--num_draft_tokens is set but --speculative=off; add --speculative=dspark or ngram");
  }
  if (ngram && (f.num_draft_tokens < 0 || f.num_draft_tokens > worker::kMaxNgramMatch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_draft_tokens must be in [1, ", worker::kMaxNgramMatch,
                     "] with --speculative=ngram (the tokens a lookup proposes), or 0 "
                     "for ",
                     kDefaultLookupTokens, "; got ", f.num_draft_tokens));
  }
  absl::StatusOr<int32_t> dspark = DsparkDrafts(f, config);
  if (!dspark.ok()) return dspark.status();
  s.dspark_drafts = *dspark;

  if (!f.verify_length.empty() && f.verify_length != "fixed" && f.verify_length != "confidence") {
    return absl::InvalidArgumentError(
        absl::StrCat("--verify_length must be fixed or confidence, got \"", f.verify_length, "\""));
  }
  if (f.verify_length == "confidence" && !on) {
    return absl::InvalidArgumentError(
        "--verify_length=confidence needs --speculative=dspark or ngram");
  }
  // Fixed by default: on the H200 the trained tiny's drafts pay at batch 1
  // whatever a few verifications say, and the pacer's pauses cost more than
  // they save there (tools/bench/README.md, 2026-12-05).
  s.verify_length = f.verify_length.empty() ? "fixed" : f.verify_length;

  if (f.max_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative_max_batch must be >= 0 (0: no limit); got ", f.max_batch));
  }
  if (f.max_batch > 0 && !on) {
    return absl::InvalidArgumentError(
        "--speculative_max_batch is set but --speculative=off; add --speculative=dspark or "
        "ngram");
  }
  s.max_batch = f.max_batch;

  if (f.ngram_lookup < -1 || f.ngram_lookup > worker::kMaxNgramMatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ngram_lookup must be in [0, ", worker::kMaxNgramMatch,
                     "] (the match length; 0: off); got ", f.ngram_lookup));
  }
  if (f.ngram_lookup > 0 && !on) {
    return absl::InvalidArgumentError(
        "--ngram_lookup is set but --speculative=off; add --speculative=dspark or ngram");
  }
  if (f.ngram_lookup == 0 && ngram) {
    return absl::InvalidArgumentError(
        "--speculative=ngram needs prompt lookup: --ngram_lookup must be in [1, 16]");
  }
  s.ngram_lookup = f.ngram_lookup == -1 ? (on ? kDefaultNgramLookup : 0) : f.ngram_lookup;
  if (f.ngram_lookup_max < 0 || f.ngram_lookup_max > worker::kMaxNgramMatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ngram_lookup_max must be in [0, ", worker::kMaxNgramMatch,
        "] (the longest match tried first; 0: --ngram_lookup alone); got ", f.ngram_lookup_max));
  }
  if (f.ngram_lookup_max > 0 && s.ngram_lookup == 0) {
    return absl::InvalidArgumentError(
        "--ngram_lookup_max is set but prompt lookup is off (--ngram_lookup=0 or "
        "--speculative=off)");
  }
  if (f.ngram_lookup_max > 0 && f.ngram_lookup_max < s.ngram_lookup) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ngram_lookup_max (", f.ngram_lookup_max,
                     ") must not be below the match length --ngram_lookup (", s.ngram_lookup, ")"));
  }
  s.ngram_lookup_max = f.ngram_lookup_max > 0 ? f.ngram_lookup_max : s.ngram_lookup;

  if (f.ngram_lookup_tokens < 0 || f.ngram_lookup_tokens > worker::kMaxNgramMatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ngram_lookup_tokens must be in [0, ", worker::kMaxNgramMatch,
                     "] (0: --num_draft_tokens); got ", f.ngram_lookup_tokens));
  }
  if (f.ngram_lookup_tokens > 0 && ngram) {
    return absl::InvalidArgumentError(
        "--ngram_lookup_tokens is for --speculative=dspark; with --speculative=ngram "
        "--num_draft_tokens is the tokens a lookup proposes");
  }
  if (f.ngram_lookup_tokens > 0 && s.ngram_lookup == 0) {
    return absl::InvalidArgumentError(
        "--ngram_lookup_tokens is set but prompt lookup is off (--ngram_lookup=0 or "
        "--speculative=off)");
  }
  s.lookup_tokens = ngram ? (f.num_draft_tokens > 0 ? f.num_draft_tokens : kDefaultLookupTokens)
                          : f.ngram_lookup_tokens;
  return s;
}

bool MeasureVerifyCost(std::string_view policy, std::string_view backend,
                       const std::string& model_dir) {
  return policy == "confidence" && backend != "cuda" &&
         !std::filesystem::exists(std::filesystem::path(model_dir) / "verify_cost.json");
}

}  // namespace weir::coordinator
