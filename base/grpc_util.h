// base/grpc_util.h
//
// What every weir gRPC server and client shares: Status conversion at the RPC
// edge, explicit message-size limits, and a server start helper that turns on
// health checking and reflection.
//
// Thread safety: free functions, thread-safe.

#ifndef WEIR_BASE_GRPC_UTIL_H_
#define WEIR_BASE_GRPC_UTIL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace weir {

// Receive/send limits of the control plane (StepPlans, expert maps, loads).
inline constexpr int kControlMaxMessageBytes = 256 << 20;
// Receive limit of the public API (a GenerateBatch with many items).
inline constexpr int kPublicMaxRequestBytes = 64 << 20;
// Send limit of the public API (a Final with logprobs of a long output).
inline constexpr int kPublicMaxResponseBytes = 64 << 20;

// Takes one reference on the gRPC library for the rest of the process
// (grpc_init, never released). Call it from main() before any gRPC object
// exists. Without it the library's count can fall to zero between
// short-lived objects during start-up, and gRPC then shuts down (partly on a
// thread of its own) and initializes again, replacing its event engine while
// the old one's poller may still be waiting. A coordinator once aborted at
// start-up in gRPC 1.51's poller ("epoll_wait error: Bad file descriptor",
// one loaded suite run in three); this removes the only teardown path we
// could find in our own start-up for that, so it is a mitigation, not a
// confirmed fix.
void HoldGrpcForProcess();

// absl::StatusCode and grpc::StatusCode share numbering: map 1:1.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

struct ServerOptions {
  // "host:port"; port 0 picks a free port.
  std::string address;
  int max_receive_bytes = kControlMaxMessageBytes;
  int max_send_bytes = kControlMaxMessageBytes;
  int max_concurrent_streams = 1024;
  // If set, called on the builder just before the server starts (e.g. to add
  // interceptors).
  std::function<void(grpc::ServerBuilder&)> configure;
};

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  // The port actually bound (differs from the request when it asked for 0).
  int port = 0;
  // "host:port" with the bound port, for handing to peers.
  std::string address;
};

// Builds and starts a server for `services` (not owned; must outlive the
// server) with gRPC's health service and reflection enabled. The overall ("")
// health status is SERVING (liveness); callers publish per-service readiness
// with GetHealthCheckService()->SetServingStatus. SO_REUSEPORT is off, so a
// busy port is an error: returns UNAVAILABLE if the address cannot be bound.
absl::StatusOr<StartedServer> StartServer(const ServerOptions& options,
                                          const std::vector<grpc::Service*>& services);

// HTTP/2 keepalive of a channel: a ping after `time` without traffic, the
// connection (and every stream on it) failed with UNAVAILABLE when no answer
// comes within `timeout`. This is what ends a Steps stream to a peer that is
// gone without closing its socket (a powered-off host, a half-open TCP
// connection) or frozen (SIGSTOP). StartServer accepts pings every 10 s, so
// `time` must be at least that.
struct ChannelKeepalive {
  std::chrono::milliseconds time{20000};
  std::chrono::milliseconds timeout{10000};
};

// A channel with the control-plane message limits and keepalive.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           int max_message_bytes = kControlMaxMessageBytes,
                                           ChannelKeepalive keepalive = {});

// Calls grpc.health.v1.Health/Check for `service` on `channel`. Returns the
// serving status name ("SERVING", "NOT_SERVING", ...) or the RPC error.
absl::StatusOr<std::string> CheckHealth(grpc::Channel& channel, const std::string& service,
                                        std::chrono::milliseconds timeout);

// Deadline `timeout` from now, for ClientContext::set_deadline.
std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds timeout);

}  // namespace weir

#endif  // WEIR_BASE_GRPC_UTIL_H_
