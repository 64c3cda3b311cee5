// coordinator/batch_client.h
//
// RunJsonlBatch: sends a JSON Lines batch (see jsonl_batch.h) to a weir
// server as one GenerateBatch call in input order and writes one result line
// per item. Used by the offline mode of //coordinator:main and by
// `weir batch`.
//
// Thread safety: free function; one call per output stream.

#ifndef WEIR_COORDINATOR_BATCH_CLIENT_H_
#define WEIR_COORDINATOR_BATCH_CLIENT_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace weir::coordinator {

struct BatchCounts {
  int total = 0;
  int completed = 0;
  int failed = 0;
};

// Parses `jsonl`, runs it on `channel` and writes result lines to `out`.
// `progress` (may be empty) is called with (done, total) as results arrive.
// INVALID_ARGUMENT for a malformed input (naming the line); the RPC's status
// if the call fails as a whole. Per-item errors are result lines, not errors.
absl::StatusOr<BatchCounts> RunJsonlBatch(const std::shared_ptr<grpc::Channel>& channel,
                                          std::string_view jsonl, std::ostream& out,
                                          const std::function<void(int, int)>& progress);

// RunJsonlBatch as the offline mode and `weir batch` run it: the results to
// the file `output` (stdout when empty), progress on stderr (tools::ProgressBar:
// redrawn in place on a terminal, a plain line a tenth otherwise).
// FAILED_PRECONDITION when `output` cannot be opened, before any request (no
// result is computed to be lost); DATA_LOSS when writing the results fails;
// otherwise RunJsonlBatch's result.
absl::StatusOr<BatchCounts> RunJsonlBatchToOutput(const std::shared_ptr<grpc::Channel>& channel,
                                                  std::string_view jsonl,
                                                  const std::string& output);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_BATCH_CLIENT_H_
