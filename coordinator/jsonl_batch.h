// coordinator/jsonl_batch.h
//
// The JSON Lines batch format of the offline mode (`main --input --output`)
// and of `weir batch`. One request per input line:
//
//   {"custom_id": "q1", "text": "Hello", "max_new_tokens": 32, "temperature": 0}
//   {"custom_id": "q2", "tokens": [5, 6, 7]}
//   {"custom_id": "q3", "messages": [{"role": "user", "content": "Hi"}],
//    "stop": ["\n\n"], "seed": 7, "top_p": 0.9, "top_k": 50, "ignore_eos": true}
//
// and one result per output line:
//
//   {"custom_id": "q1", "text": "...", "token_ids": [...],
//    "finish_reason": "MAX_TOKENS", "usage": {"prompt_tokens": 3, "completion_tokens": 32}}
//   {"custom_id": "q2", "error": {"code": "INVALID_ARGUMENT", "message": "..."}}
//
// Thread safety: pure functions.

#ifndef WEIR_COORDINATOR_JSONL_BATCH_H_
#define WEIR_COORDINATOR_JSONL_BATCH_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "proto/inference.pb.h"

namespace weir::coordinator {

// Parses every non-empty line into a BatchItem. INVALID_ARGUMENT naming the
// line for malformed JSON, an unknown key, a wrongly typed value, or a line
// without exactly one of text / tokens / messages. A missing custom_id
// becomes "line-<n>".
absl::StatusOr<v1::GenerateBatchRequest> ParseBatchJsonl(std::string_view text);

// One output line (without the newline) for `result`.
std::string FormatResultJsonl(const v1::BatchEvent::ItemResult& result);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_JSONL_BATCH_H_
