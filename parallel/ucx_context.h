// parallel/ucx_context.h
//
// UcxContext: one process's UCX endpoint-to-be: a UCP context and worker (tag
// matching feature, single-threaded) and the worker's address, the opaque bytes
// that peers need to reach this process. Phase one of building a
// UcxCommunicator:
//
//   ASSIGN_OR_RETURN(std::unique_ptr<UcxContext> ucx, UcxContext::Create({}));
//   // Publish ucx->address() (InitResponse.tensor_address); receive the table
//   // of every rank's address (InitRequest.peers[*].tensor_address).
//   ASSIGN_OR_RETURN(auto comm, UcxCommunicator::Create(*ucx, rank, table, {}));
//
// Transports: UCX picks them (shared memory and TCP on one machine) unless
// `transports` or the UCX_TLS environment variable names them, e.g. "tcp,self"
// or "sm,self". `transports` wins over UCX_TLS.
//
// Thread safety: not thread-safe. The context and every communicator built on
// it are used from one thread (the UCP worker runs in single-thread mode).

#ifndef WEIR_PARALLEL_UCX_CONTEXT_H_
#define WEIR_PARALLEL_UCX_CONTEXT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

// Opaque UCX handles; <ucp/api/ucp.h> stays out of users' includes.
typedef struct ucp_context* ucp_context_h;
typedef struct ucp_worker* ucp_worker_h;

namespace weir::parallel {

struct UcxContextOptions {
  // UCX transport list (the UCX_TLS syntax); empty = environment or default.
  std::string transports;
};

class UcxContext {
 public:
  // Initializes UCP and creates the worker. Returns UNAVAILABLE if UCX cannot
  // initialize (no usable transport), INVALID_ARGUMENT for an unknown
  // transport list.
  static absl::StatusOr<std::unique_ptr<UcxContext>> Create(const UcxContextOptions& options);

  // Destroys the worker and context. REQUIRES: every communicator built on
  // this context has been destroyed.
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  // The worker address: opaque bytes, valid for this process's lifetime.
  const std::string& address() const { return address_; }

  // Handles for UcxCommunicator. Owned by this context.
  ucp_worker_h worker() const { return worker_; }

 private:
  UcxContext(ucp_context_h context, ucp_worker_h worker, std::string address);

  ucp_context_h context_;
  ucp_worker_h worker_;
  std::string address_;
};

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_UCX_CONTEXT_H_
