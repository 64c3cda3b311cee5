// tools/bench/kernel_timeline_cupti.cc — StartKernelRecording and
// StopKernelRecording over CUPTI's activity API (concurrent-kernel records:
// CUDA-graph nodes are recorded one by one).

#include <cupti.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/bench/kernel_timeline.h"

namespace weir::bench {
namespace {

constexpr size_t kBufferBytes = 8 << 20;

// CUPTI hands completed buffers to its own thread: the records go here.
struct Recording {
  std::mutex mu;
  bool running = false;
  std::vector<KernelRecord> records;
  uint64_t dropped = 0;
};
Recording& State() {
  static Recording* r = new Recording;
  return *r;
}

absl::Status Cupti(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  return absl::InternalError(absl::StrCat("CUPTI ", what, ": ", text != nullptr ? text : "?"));
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream, uint8_t* buffer, size_t size,
                              size_t valid) {
  (void)size;
  std::vector<KernelRecord> got;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.push_back({.start_ns = k->start,
                   .end_ns = k->end,
                   .stream = k->streamId,
                   .name = k->name != nullptr ? k->name : "?",
                   .launch = k->correlationId});
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(context, stream, &dropped);
  std::free(buffer);
  Recording& r = State();
  std::lock_guard<std::mutex> lock(r.mu);
  for (KernelRecord& k : got) r.records.push_back(std::move(k));
  r.dropped += dropped;
}

}  // namespace

absl::Status StartKernelRecording() {
  Recording& r = State();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.running) return absl::FailedPreconditionError("a kernel recording is running");
    r.running = true;
    r.records.clear();
    r.dropped = 0;
  }
  // The buffer callbacks are registered once for the process (decode_gpu
  // records each batch size's timed steps in turn).
  static const absl::Status registered =
      Cupti(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted), "register callbacks");
  absl::Status s = registered;
  if (s.ok()) s = Cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable");
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(r.mu);
    r.running = false;
  }
  return s;
}

absl::StatusOr<std::vector<KernelRecord>> StopKernelRecording() {
  Recording& r = State();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.running) return absl::FailedPreconditionError("no kernel recording is running");
  }
  absl::Status s = Cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
  const absl::Status disabled =
      Cupti(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disable");
  if (s.ok()) s = disabled;
  std::lock_guard<std::mutex> lock(r.mu);
  r.running = false;
  if (!s.ok()) return s;
  if (r.dropped > 0) {
    return absl::InternalError(
        absl::StrCat("CUPTI dropped ", r.dropped, " kernel records: the timeline is short"));
  }
  return std::move(r.records);
}

}  // namespace weir::bench
