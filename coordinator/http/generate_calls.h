// coordinator/http/generate_calls.h
//
// GenerateCalls runs the Generate RPCs of one HTTP request (one per prompt)
// through the coordinator's own gRPC server over its in-process channel
// (grpc::Server::InProcessChannel: no socket, the same handler, validation,
// admission and interceptors as any gRPC client), on one completion queue,
// so the HTTP thread can wait with a timeout and watch its client between
// events.
//
//   GenerateCalls calls(stub, std::move(requests), authorization);
//   while (!calls.done()) {
//     std::optional<GenerateCalls::Event> e = calls.Next(absl::Milliseconds(100));
//     if (!e) { if (client_gone) calls.CancelAll(); continue; }
//     ...
//   }
//
// Thread safety: not thread-safe; one thread drives it.

#ifndef WEIR_COORDINATOR_HTTP_GENERATE_CALLS_H_
#define WEIR_COORDINATOR_HTTP_GENERATE_CALLS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/inference.grpc.pb.h"

namespace weir::coordinator::http {

class GenerateCalls {
 public:
  // Starts one Generate call per request. `stub` must outlive this object.
  // A non-empty `authorization` is sent as the calls' "authorization"
  // metadata.
  GenerateCalls(v1::Inference::Stub& stub, std::vector<v1::GenerateRequest> requests,
                const std::string& authorization);
  // Cancels the calls still running and waits for them to end.
  ~GenerateCalls();

  GenerateCalls(const GenerateCalls&) = delete;
  GenerateCalls& operator=(const GenerateCalls&) = delete;

  struct Event {
    size_t call = 0;
    // A message of the call's stream, or (ended) its final status.
    bool ended = false;
    v1::GenerateEvent message;
    grpc::Status status;
  };

  // Waits up to `timeout` for the next event; nullopt on timeout or once
  // every call has ended. Events of one call come in stream order; its
  // `ended` event is its last.
  std::optional<Event> Next(absl::Duration timeout);

  // Cancels every call still running (each then ends with CANCELLED).
  void CancelAll();

  // Every call has ended.
  bool done() const { return running_ == 0; }

 private:
  enum class Op { kStart, kRead, kFinish };
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReader<v1::GenerateEvent>> reader;
    v1::GenerateEvent message;
    grpc::Status status;
    bool ended = false;
  };
  struct Tag {
    size_t call;
    Op op;
  };
  void* TagFor(size_t call, Op op);

  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Call>> calls_;
  // One tag per call and operation, stable addresses.
  std::vector<Tag> tags_;
  size_t running_ = 0;
};

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_GENERATE_CALLS_H_
