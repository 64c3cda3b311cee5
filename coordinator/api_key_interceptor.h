// coordinator/api_key_interceptor.h
//
// The API key on the coordinator's gRPC server (--api_key / --api_key_file).
// Every public call (weir.v1.Inference, weir.v1.BatchJobs, server
// reflection, and any method not named below) needs the metadata
// "authorization: Bearer <key>" (compared in constant time, base/api_key.h,
// the same check as the HTTP server's); otherwise it ends UNAUTHENTICATED.
// Open without a key:
//   * weir.v1.Coordinator: the internal control plane on the same server
//     (workers' Register, EPLB's CommitExpertMap / GetPlacement);
//   * grpc.health.v1.Health, while `open_health` (the coordinator's
//     --http_open_health_and_metrics, which also opens HTTP /health, /ready,
//     /metrics).
//
// How a call is refused: gRPC 1.51's server interceptors cannot stop the
// handler, so at POST_RECV_INITIAL_METADATA the interceptor ends the call
// with grpc_call_cancel_with_status(UNAUTHENTICATED, message) (what the
// client sees), clears a weir.v1 request message at POST_RECV_MESSAGE so the
// handler sees an empty request and does nothing (every public request
// needs at least an id or a prompt), and keeps UNAUTHENTICATED at
// PRE_SEND_STATUS so the metrics interceptor counts it as such.
//
// Thread safety: the factories and the pure functions are thread-safe; one
// interceptor per call.

#ifndef WEIR_COORDINATOR_API_KEY_INTERCEPTOR_H_
#define WEIR_COORDINATOR_API_KEY_INTERCEPTOR_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/support/server_interceptor.h"

namespace weir::coordinator {

struct ApiKeyPolicy {
  std::string api_key;      // empty: every call is open
  bool open_health = true;  // grpc.health.v1.Health without a key
};

// Whether `method` ("/weir.v1.Inference/Generate") needs the key.
bool MethodNeedsApiKey(std::string_view method, const ApiKeyPolicy& policy);

// The decision for one call: OK, or UNAUTHENTICATED with a message saying
// what to send. `authorizations` are the call's "authorization" metadata
// values (any one "Bearer <key>" passes).
absl::Status CheckApiKey(std::string_view method,
                         const std::vector<std::string_view>& authorizations,
                         const ApiKeyPolicy& policy);

// For ServerBuilder::experimental().SetInterceptorCreators; put it first.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeApiKeyInterceptorFactory(ApiKeyPolicy policy);

// A client interceptor that adds "authorization: Bearer <api_key>" to every
// call (unless that exact value is already there): the HTTP server's
// in-process channel, whose callers were checked against the same key.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeApiKeyClientInterceptorFactory(std::string api_key);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_API_KEY_INTERCEPTOR_H_
