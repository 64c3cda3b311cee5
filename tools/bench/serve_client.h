// tools/bench/serve_client.h
//
// The load generator of the serving benchmark: runs RequestSpecs through
// `weir.v1.Inference/Generate` with streamed tokens, either closed loop (a
// fixed number of clients, each sending its next request when the previous
// one ends) or open loop (requests sent at given arrival times, whatever is
// in flight), and records what each request saw.
//
// Thread safety: the functions are thread-safe; each call starts and joins
// its own client threads. `stub` must be usable from many threads (gRPC stubs
// are).

#ifndef WEIR_TOOLS_BENCH_SERVE_CLIENT_H_
#define WEIR_TOOLS_BENCH_SERVE_CLIENT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/inference.grpc.pb.h"
#include "tools/bench/serve_stats.h"
#include "tools/bench/serve_workload.h"

namespace weir::bench {

struct ClientOptions {
  // Deadline of each Generate call.
  absl::Duration request_timeout = absl::Seconds(120);
  // request_id = "<id_prefix>-<index>"; must be unique among requests in
  // flight on the server.
  std::string id_prefix = "bench";
};

// The records of one level (in request order) and its wall time (first send
// -> last completion).
struct LevelRun {
  std::vector<RequestRecord> records;
  double wall_s = 0;
};

// Sends one greedy request (ignore_eos, max_new_tokens, stream_tokens) and
// measures it against `level_start`. A request is ok only if the stream ends
// with OK after exactly one Final whose completion count equals the tokens
// streamed; anything else fills RequestRecord::error.
RequestRecord RunRequest(weir::v1::Inference::Stub& stub, const RequestSpec& spec,
                         const std::string& request_id, const ClientOptions& options,
                         absl::Time level_start);

// Closed loop: `concurrency` clients share `specs` (each takes the next
// unsent one). REQUIRES: concurrency >= 1.
LevelRun RunClosedLoop(weir::v1::Inference::Stub& stub, const std::vector<RequestSpec>& specs,
                       int concurrency, const ClientOptions& options);

// Open loop: request i is sent `arrivals_s[i]` seconds after the start.
// REQUIRES: arrivals_s.size() == specs.size(), arrivals non-decreasing.
LevelRun RunOpenLoop(weir::v1::Inference::Stub& stub, const std::vector<RequestSpec>& specs,
                     const std::vector<double>& arrivals_s, const ClientOptions& options);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_SERVE_CLIENT_H_
