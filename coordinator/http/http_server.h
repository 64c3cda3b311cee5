// coordinator/http/http_server.h
//
// HttpServer is the coordinator's OpenAI-compatible HTTP front door (cpp-httplib):
//
//   GET  /v1/models, /v1/models/{id}      the served model
//   POST /v1/completions                  text or token prompts (several per request)
//   POST /v1/chat/completions             chats through the DeepSeek chat template
//   /v1/files, /v1/batches                OpenAI's Files and Batch APIs over
//                                         weir.v1.BatchJobs (batch_api.h)
//   GET  /metrics                         Prometheus text format (metrics.h)
//   GET  /health, /ready                  gRPC health "" (liveness) and
//                                         "weir.v1.Inference" (readiness): 200 or 503
//
// Generation requests are translated (openai_request.h) into GenerateRequests
// and run by the coordinator's own gRPC Generate handler through the server's
// in-process channel (generate_calls.h), so HTTP and gRPC share validation,
// admission, the step loop, cancellation and metrics. Streaming answers are
// server-sent events; the status line is sent only once every call has been
// accepted, so validation and admission errors are ordinary HTTP errors in the
// OpenAI error JSON (openai_response.h). A client that disconnects cancels its
// calls within `client_poll`.
//
// Limits: request bodies over `max_body_bytes` get 413, more than
// `max_headers` headers 431 (cpp-httplib caps each header line at 8 KiB and
// the URI at 8 KiB); requests are served by `threads` threads, and at most
// `max_queued_connections` accepted connections wait for one (then accepting
// pauses and the kernel's backlog holds further clients). With an `api_key`,
// every route needs "Authorization: Bearer <key>" (401 otherwise), except
// /health, /ready and /metrics while `open_health_and_metrics`.
//
// Thread safety: Start/Stop from one thread; handlers run on the server's
// own pool, never on gRPC or step-loop threads.

#ifndef WEIR_COORDINATOR_HTTP_HTTP_SERVER_H_
#define WEIR_COORDINATOR_HTTP_HTTP_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/http/batch_api.h"
#include "coordinator/http/metrics.h"
#include "coordinator/http/openai_request.h"
#include "coordinator/http/openai_response.h"
#include "grpcpp/grpcpp.h"
#include "proto/batch.grpc.pb.h"
#include "proto/inference.grpc.pb.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace weir::coordinator::http {

struct HttpServerOptions {
  // "host:port" ("[v6]:port" for IPv6); port 0 picks a free port.
  std::string address = "127.0.0.1:8000";
  int threads = 64;
  int max_queued_connections = 256;
  size_t max_body_bytes = size_t{16} << 20;
  size_t max_headers = 128;
  // Empty: no authentication.
  std::string api_key;
  bool open_health_and_metrics = true;
  // Prompts one /v1/completions request may carry.
  uint32_t max_prompts = 64;
  // How often a waiting handler checks whether its client is still there.
  absl::Duration client_poll = absl::Milliseconds(100);
  int keep_alive_timeout_s = 5;
  // Connections the kernel may hold for accept() (listen_backlog.h: the
  // library's own 5 resets some of a burst); capped at net.core.somaxconn.
  int listen_backlog = 1024;
};

class HttpServer {
 public:
  // Binds `options.address` and serves on its own threads. `channel` reaches
  // the weir.v1.Inference and health services (the coordinator's in-process
  // channel). `metrics` may be null (/metrics then answers 404);
  // `token_bytes` may be null (logprob tokens are then empty). UNAVAILABLE
  // if the address cannot be bound; the GetModelInfo error if the model
  // cannot be described.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           std::shared_ptr<grpc::Channel> channel,
                                                           Metrics* metrics,
                                                           TokenBytes token_bytes);
  // Stops (see Stop).
  ~HttpServer();

  // Stops accepting, lets running handlers finish (a generation ends when the
  // step loop stops) and joins the threads. Idempotent.
  void Stop();

  // "host:port" with the bound port.
  const std::string& address() const { return address_; }

 private:
  HttpServer(HttpServerOptions options, std::shared_ptr<grpc::Channel> channel, Metrics* metrics,
             TokenBytes token_bytes);
  void Route();
  bool Authorized(const httplib::Request& req) const;
  void Models(const httplib::Request& req, httplib::Response& res) const;
  void Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void Health(const std::string& service, httplib::Response& res) const;
  void MetricsPage(httplib::Response& res) const;
  void RouteBatches();

  const HttpServerOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Inference::Stub> stub_;
  const std::unique_ptr<v1::BatchJobs::Stub> batch_stub_;
  Metrics* const metrics_;
  const TokenBytes token_bytes_;
  ServedModel served_;
  std::unique_ptr<BatchApi> batch_;
  int64_t created_ = 0;
  std::string address_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_HTTP_SERVER_H_
