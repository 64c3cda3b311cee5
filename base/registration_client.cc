#include "base/registration_client.h"

#include "base/grpc_util.h"
#include "base/logging.h"
#include "proto/worker.grpc.pb.h"

namespace weir {

absl::StatusOr<v1::RegisterResponse> RegisterWithCoordinator(
    const std::string& coordinator_address, const v1::RegisterRequest& request,
    absl::Duration timeout) {
  auto stub = v1::Coordinator::NewStub(MakeChannel(coordinator_address));
  const absl::Time give_up = absl::Now() + timeout;
  absl::Status last;
  absl::Time logged = absl::InfinitePast();
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    v1::RegisterResponse response;
    grpc::Status status = stub->Register(&context, request, &response);
    if (status.ok()) return response;
    last = FromGrpcStatus(status);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
        status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return last;
    }
    if (absl::Now() > give_up) break;
    if (absl::Now() - logged > absl::Seconds(10)) {
      // E.g. a spare worker waiting for a rank to be freed.
      WEIR_LOG(WARNING) << "registration with " << coordinator_address
                        << " not accepted yet (retrying for up to "
                        << absl::FormatDuration(give_up - absl::Now()) << "): " << last;
      logged = absl::Now();
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::UnavailableError("coordinator at " + coordinator_address +
                                " did not answer Register: " + last.ToString());
}

}  // namespace weir
