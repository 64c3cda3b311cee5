#include "coordinator/batch_client.h"

#include <unistd.h>

#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "coordinator/jsonl_batch.h"
#include "proto/inference.grpc.pb.h"
#include "tools/progress_bar.h"

namespace weir::coordinator {

absl::StatusOr<BatchCounts> RunJsonlBatch(const std::shared_ptr<grpc::Channel>& channel,
                                          std::string_view jsonl, std::ostream& out,
                                          const std::function<void(int, int)>& progress) {
  absl::StatusOr<v1::GenerateBatchRequest> batch = ParseBatchJsonl(jsonl);
  if (!batch.ok()) return batch.status();
  batch->set_ordering(v1::BATCH_ORDERING_INPUT_ORDER);
  auto stub = v1::Inference::NewStub(channel);
  grpc::ClientContext context;
  auto reader = stub->GenerateBatch(&context, *batch);
  BatchCounts counts;
  counts.total = batch->items_size();
  v1::BatchEvent event;
  while (reader->Read(&event)) {
    if (!event.has_item_result()) continue;
    out << FormatResultJsonl(event.item_result()) << "\n";
    if (event.item_result().has_error()) {
      ++counts.failed;
    } else {
      ++counts.completed;
    }
    if (progress) progress(counts.completed + counts.failed, counts.total);
  }
  out.flush();
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return counts;
}

absl::StatusOr<BatchCounts> RunJsonlBatchToOutput(const std::shared_ptr<grpc::Channel>& channel,
                                                  std::string_view jsonl,
                                                  const std::string& output) {
  std::ofstream file;
  if (!output.empty()) {
    file.open(output, std::ios::binary | std::ios::trunc);
    if (!file.is_open()) {
      return absl::FailedPreconditionError(absl::StrCat("cannot write --output ", output));
    }
  }
  std::ostream& out = output.empty() ? std::cout : file;
  tools::ProgressBar bar(std::cerr, isatty(STDERR_FILENO) != 0, absl::Now());
  absl::StatusOr<BatchCounts> counts = RunJsonlBatch(
      channel, jsonl, out, [&bar](int done, int total) { bar.Update(done, total, absl::Now()); });
  bar.Finish(absl::Now());
  if (counts.ok() && !out.flush()) {
    return absl::DataLossError(
        absl::StrCat("writing the results to ", output.empty() ? "stdout" : output, " failed"));
  }
  return counts;
}

}  // namespace weir::coordinator
