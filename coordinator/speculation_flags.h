// coordinator/speculation_flags.h
//
// The coordinator's speculative-decoding flags (--speculative,
// --num_draft_tokens) checked against the model: how many DSpark drafts a
// decode row verifies, sent to every worker at LoadWeights and to every
// rank's scheduler (README.md "Speculative decoding").
//
// Thread safety: a pure function.

#ifndef WEIR_COORDINATOR_SPECULATION_FLAGS_H_
#define WEIR_COORDINATOR_SPECULATION_FLAGS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/ngram_lookup.h"

namespace weir::coordinator {

// Returns the drafts a speculative decode row verifies: 0 for mode "off",
// and for "dspark" `num_draft_tokens`, or the model's dspark_block_size when
// it is 0. INVALID_ARGUMENT (naming the flag and the allowed values) for
// another mode, num_draft_tokens outside [0, dspark_block_size], a non-zero
// num_draft_tokens with "off", or "dspark" on a model without DSpark stages.
absl::StatusOr<int32_t> NumDraftTokensFromFlags(std::string_view mode, int num_draft_tokens,
                                                const model::ModelConfig& config);

// Checks --verify_length `policy` given the drafts a row verifies
// (NumDraftTokensFromFlags). INVALID_ARGUMENT (naming the flag) unless it is
// "" (the default: EffectiveVerifyLength), "fixed" or "confidence"; for an
// explicit "confidence" with speculation off (`num_draft_tokens` 0). The curve itself is the
// workers' business: the model directory's verify_cost.json (they check its contents), or one they
// measure at load (CUDA workers always; CPU workers when the directory has
// none: MeasureVerifyCost).
absl::Status VerifyLengthFromFlags(std::string_view policy, int32_t num_draft_tokens);

// Checks --speculative_max_batch `rows` (the speculative rows a worker's
// step may hold and still draft; 0 = no limit): INVALID_ARGUMENT (naming the
// flag) when negative, or positive with speculation off (`num_draft_tokens` 0).
absl::Status SpeculativeMaxBatchFromFlags(int rows, int32_t num_draft_tokens);

// The prompt lookup's match length the workers get (--ngram_lookup `flag`):
// -1 (unset) is kDefaultNgramLookup with speculation on and 0 with it off;
// 0 turns it off. INVALID_ARGUMENT (naming the flag) below -1, above
// kMaxNgramMatch, or positive with speculation off (`num_draft_tokens` 0).
inline constexpr int32_t kDefaultNgramLookup = 3;
absl::StatusOr<int32_t> NgramLookupFromFlags(int flag, int32_t num_draft_tokens);

// Checks --ngram_lookup_tokens `tokens` (how many tokens a lookup proposes;
// 0: num_draft_tokens) against the resolved `ngram_lookup`: INVALID_ARGUMENT
// (naming the flag) outside [0, kMaxNgramMatch], or positive with lookup off.
absl::Status NgramLookupTokensFromFlags(int tokens, int32_t ngram_lookup);

// The most drafts a speculative row verifies, what the scheduler books for
// it: DSpark's num_draft_tokens, or a lookup's tokens when lookup is on and
// they are more.
int32_t MaxDraftTokens(int32_t num_draft_tokens, int32_t ngram_lookup, int32_t lookup_tokens);

// The policy the workers get: `flag` when set, else "fixed".
std::string EffectiveVerifyLength(std::string_view flag);

// Whether CPU workers should measure the verify cost curve at load
// (LoadWeightsRequest.measure_verify_cost): "confidence" on the CPU backend
// with no verify_cost.json in `model_dir`.
bool MeasureVerifyCost(std::string_view policy, std::string_view backend,
                       const std::string& model_dir);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_SPECULATION_FLAGS_H_
