// coordinator/http/metrics_interceptor.h
//
// A gRPC server interceptor that feeds Metrics from the public API's own
// messages, so the services need no metrics code: for weir.v1.Inference
// Generate it reads every GenerateEvent the handler sends (Delta arrival
// times give inter-token latency; Final gives finish reason, usage, TTFT and
// end-to-end time) and the call's final status; for GenerateBatch the same
// from each item's result. The HTTP server's in-process calls pass through it
// like any client's. Batch jobs (weir.v1.BatchJobs) run their items off any
// RPC and are not counted.
//
// Inter-token latency: with streamed deltas, the gap between deltas divided
// over the delta's tokens; without (stream_tokens=false or batch items), the
// sample's mean gap, (total - ttft) / (tokens - 1), once per gap.
//
// Thread safety: the factory is thread-safe; one interceptor per call, which
// gRPC runs on that call's threads in order.

#ifndef WEIR_COORDINATOR_HTTP_METRICS_INTERCEPTOR_H_
#define WEIR_COORDINATOR_HTTP_METRICS_INTERCEPTOR_H_

#include <memory>
#include <vector>

#include "coordinator/http/metrics.h"
#include "grpcpp/support/server_interceptor.h"

namespace weir::coordinator::http {

// Returns the interceptor factories for ServerBuilder::experimental()
// .SetInterceptorCreators. Does not take ownership; `metrics` must outlive
// the server.
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MakeMetricsInterceptors(Metrics& metrics);

// Records one finished sample (shared by Generate and batch items; exposed
// for tests). `streamed` says whether its deltas were already timed.
void RecordFinal(const v1::GenerateEvent::Final& final_event, bool streamed, Metrics& metrics);

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_METRICS_INTERCEPTOR_H_
