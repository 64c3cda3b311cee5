// base/registration_client.h
//
// RegisterWithCoordinator: how a worker or the EPLB service announces itself
// to the coordinator's weir.v1.Coordinator service, retrying while the
// coordinator starts up.
//
// Thread safety: free function; thread-safe.

#ifndef WEIR_BASE_REGISTRATION_CLIENT_H_
#define WEIR_BASE_REGISTRATION_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace weir {

// Calls Coordinator.Register at `coordinator_address` until it answers or
// `timeout` passes. Retries only UNAVAILABLE and DEADLINE_EXCEEDED (the
// coordinator is not up yet, or it asks to retry: no rank free until a lost
// worker's is freed), logging the reason at most every 10 s; any other
// refusal (ALREADY_EXISTS, RESOURCE_EXHAUSTED, ...) is returned at once.
absl::StatusOr<v1::RegisterResponse> RegisterWithCoordinator(
    const std::string& coordinator_address, const v1::RegisterRequest& request,
    absl::Duration timeout);

}  // namespace weir

#endif  // WEIR_BASE_REGISTRATION_CLIENT_H_
