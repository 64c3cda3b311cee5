// tools/bench/kernel_timeline.h — where a GPU step's time goes, kernel by
// kernel, without nsys (the GPU machine has none).
//
// RecordKernels records every kernel the process executes between Start and
// Stop through CUPTI's activity API (concurrent-kernel records, which include
// each node of a replayed CUDA graph: start and end on the GPU's clock, the
// stream, the kernel's name). SummarizeTimeline says what the records mean
// for a step: the GPU's span, its idle time, each kernel name's share of the
// wall time (an interval in which k kernels run counts 1/k to each: a kernel
// alone on the GPU, on the critical path, gets all of its time; one beside
// others gets less), and the largest idle gaps with the kernels on their
// sides. Idle time before the first kernel of a launch (a step's graph)
// is the host's and is reported apart (`host_us`), so a step's idle time is
// the GPU's own.
//
// With programmatic edges a kernel starts while its predecessor runs and
// waits in its prologue: its record then includes that wait, and the busy
// and wall figures of such kernels are upper bounds (decode_gpu
// --programmatic=false gives each kernel's own time).
//
// Thread safety: one recording at a time per process (CUPTI's activity
// buffers are process-wide); SummarizeTimeline and ShortKernelName are pure.

#ifndef WEIR_TOOLS_BENCH_KERNEL_TIMELINE_H_
#define WEIR_TOOLS_BENCH_KERNEL_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::bench {

struct KernelRecord {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t stream = 0;
  std::string name;  // as CUPTI reports it (mangled)
  // The host call that launched it (CUPTI's correlation id: every node of one
  // cudaGraphLaunch shares it). Time before the first kernel of a launch in
  // which nothing runs is the host's, not the step's: counted apart.
  uint32_t launch = 0;
};

struct TimelineShare {
  std::string name;      // ShortKernelName
  int64_t count = 0;     // launches
  double busy_us = 0;    // sum of the launches' durations
  double wall_us = 0;    // the wall time attributed to them (see the top)
};

struct TimelineGap {
  double us = 0;
  std::string before, after;  // ShortKernelName of the kernels around it
};

struct TimelineSummary {
  int64_t kernels = 0;
  double span_us = 0;  // first start to last end, less host_us
  double idle_us = 0;  // time in the span with no kernel running (host_us apart)
  // Idle time that ends at the first kernel of a launch: the host between
  // launches (e.g. between two replayed steps), not a gap inside a step.
  double host_us = 0;
  int64_t launches = 0;               // distinct `launch` values
  std::vector<TimelineShare> shares;  // by wall_us, largest first
  std::vector<TimelineGap> gaps;      // the `top_gaps` largest, largest first
};

// The summary of `records` (any order; empty gives an empty summary).
TimelineSummary SummarizeTimeline(std::vector<KernelRecord> records, size_t top_gaps);

// A kernel's name without its parameter list and namespaces' noise:
// demangled when it is a mangled C++ name, then cut at the first '(' and
// the leading "void " dropped; template arguments stay (they tell the tiles
// apart).
std::string ShortKernelName(const std::string& name);

// Starts recording (CUPTI concurrent-kernel activity). FAILED_PRECONDITION
// when a recording is running; INTERNAL with CUPTI's error otherwise.
absl::Status StartKernelRecording();
// Flushes and stops; the kernels that ran since Start (their records come
// in as the device completes them: synchronize before). Records CUPTI had
// to drop are an INTERNAL error, not a silently short timeline.
absl::StatusOr<std::vector<KernelRecord>> StopKernelRecording();

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_KERNEL_TIMELINE_H_
