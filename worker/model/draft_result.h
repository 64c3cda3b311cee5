// worker/model/draft_result.h
//
// DraftResult: what one DSpark draft of a sequence gives (dspark.h makes it
// on the model; a DecodeBackend that drafts returns it too).
//
// Thread safety: a value type.

#ifndef WEIR_WORKER_MODEL_DRAFT_RESULT_H_
#define WEIR_WORKER_MODEL_DRAFT_RESULT_H_

#include <cstdint>
#include <vector>

namespace weir::model {

struct DraftResult {
  std::vector<int64_t> tokens;       // [B] drafted tokens for positions p+2 .. p+B+1
  std::vector<float> confidence;     // [B] logits; sigmoid = P(accept i | prefix accepted)
  std::vector<float> logits;         // [B, vocab] draft logits incl. the Markov bias
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_DRAFT_RESULT_H_
