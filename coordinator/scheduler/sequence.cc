// coordinator/scheduler/sequence.cc

#include "coordinator/scheduler/sequence.h"

#include <algorithm>

namespace weir::coordinator::scheduler {

FinishReason CheckStop(const Sequence& seq, absl::Span<const uint32_t> eos_token_ids,
                       int64_t max_model_len) {
  const uint32_t token = seq.tokens.back();
  const int64_t generated = seq.num_generated();
  if (generated >= seq.request.min_new_tokens) {
    if (!seq.request.ignore_eos &&
        std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end()) {
      return FinishReason::kEos;
    }
    const auto& stops = seq.request.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      return FinishReason::kStopToken;
    }
  }
  if (generated >= seq.request.max_new_tokens) return FinishReason::kMaxTokens;
  if (static_cast<int64_t>(seq.tokens.size()) >= max_model_len) {
    return FinishReason::kContextLimit;
  }
  return FinishReason::kNone;
}

bool EndsByLength(const Sequence& seq, int64_t max_model_len) {
  const int64_t len = seq.committed_len();
  return len - static_cast<int64_t>(seq.request.prompt.size()) >= seq.request.max_new_tokens ||
         len >= max_model_len;
}

}  // namespace weir::coordinator::scheduler
