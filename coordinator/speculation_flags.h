// coordinator/speculation_flags.h
//
// The coordinator's speculative-decoding flags (--speculative,
// --num_draft_tokens, --verify_length, --speculative_max_batch,
// --ngram_lookup, --ngram_lookup_tokens) checked against the model and
// resolved into what every worker gets at LoadWeights and every rank's
// scheduler books (README.md "Speculative decoding").
//
// Two modes speculate. "dspark": the model's DSpark stages draft a block
// after every sample, with prompt lookup beside them (a row whose last
// tokens repeat earlier ones takes what followed them instead). "ngram":
// prompt lookup alone (vLLM's ngram method), on any model, stages or not; a
// row without a match decodes one token.
//
// Thread safety: pure functions.

#ifndef WEIR_COORDINATOR_SPECULATION_FLAGS_H_
#define WEIR_COORDINATOR_SPECULATION_FLAGS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/ngram_lookup.h"

namespace weir::coordinator {

// The flags as given (see coordinator/main.cc for their help).
struct SpeculationFlags {
  std::string mode = "off";     // --speculative: off, dspark or ngram
  int num_draft_tokens = 0;     // dspark: drafts a row verifies; ngram: a lookup's tokens
  std::string verify_length;    // "", fixed or confidence
  int max_batch = 0;            // --speculative_max_batch
  int ngram_lookup = -1;        // -1 = unset
  int ngram_lookup_max = 0;     // 0 = unset
  int ngram_lookup_tokens = 0;  // dspark only: a lookup's tokens (0: num_draft_tokens)
};

// Unset --ngram_lookup with speculation on: matches of 3 tokens. With
// DSpark (the trained tiny, CPU) 3.76 tokens a verification against 3.70
// with 2 and 3.37 with 1: a short match displaces a better DSpark block.
// Alone, 4 .. 1 makes more tokens a step (2.82 against 2.42) but verifies
// far more drafts: 0.87x of off on 2 CPU cores against 1.15x
// (tools/bench/README.md); on a GPU at batch 1 it should pay (not yet
// measured).
inline constexpr int32_t kDefaultNgramLookup = 3;
// --speculative=ngram without --num_draft_tokens: a lookup proposes 5 tokens.
inline constexpr int32_t kDefaultLookupTokens = 5;

// The resolved settings (all 0 with speculation off).
struct Speculation {
  // LoadWeightsRequest.num_draft_tokens: DSpark drafts a row makes (0 with
  // "off" and "ngram").
  int32_t dspark_drafts = 0;
  // LoadWeightsRequest.ngram_lookup: the match length (0: no lookup).
  int32_t ngram_lookup = 0;
  // LoadWeightsRequest.ngram_lookup_max: the longest match tried first
  // (>= ngram_lookup; equal: that length alone).
  int32_t ngram_lookup_max = 0;
  // LoadWeightsRequest.ngram_lookup_tokens: the tokens a lookup proposes (0
  // with "dspark": its drafts'; always set with "ngram").
  int32_t lookup_tokens = 0;
  // LoadWeightsRequest.verify_length: "fixed" or "confidence".
  std::string verify_length = "fixed";
  // LoadWeightsRequest.speculative_max_batch (0: no limit).
  int32_t max_batch = 0;

  bool on() const { return dspark_drafts > 0 || ngram_lookup > 0; }
  // The most drafts a speculative row verifies, what the scheduler books for
  // it: DSpark's, or a lookup's when lookup is on and they are more.
  int32_t max_draft_tokens() const;
};

// Checks `flags` against `config` and resolves them. INVALID_ARGUMENT, whose
// message names the flag and what it allows, for:
// * --speculative other than off, dspark, ngram; dspark on a model without
//   DSpark stages;
// * --num_draft_tokens outside [0, dspark_block_size] with dspark, outside
//   [0, 16] with ngram (0: the block, or kDefaultLookupTokens), non-zero
//   with off;
// * --verify_length other than "", fixed, confidence; confidence with off;
// * --speculative_max_batch negative, or positive with off;
// * --ngram_lookup outside [-1, 16]; positive with off; 0 with ngram;
// * --ngram_lookup_max outside [0, 16], below the match length, or positive
//   with lookup off;
// * --ngram_lookup_tokens outside [0, 16]; positive with lookup off or with
//   ngram (where --num_draft_tokens is the lookup's tokens).
absl::StatusOr<Speculation> SpeculationFromFlags(const SpeculationFlags& flags,
                                                 const model::ModelConfig& config);

// Whether CPU workers should measure the verify cost curve at load
// (LoadWeightsRequest.measure_verify_cost): "confidence" on the CPU backend
// with no verify_cost.json in `model_dir`.
bool MeasureVerifyCost(std::string_view policy, std::string_view backend,
                       const std::string& model_dir);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_SPECULATION_FLAGS_H_
