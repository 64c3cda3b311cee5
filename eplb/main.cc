// The weir EPLB service: registers with the coordinator, collects expert-load
// reports from workers over a sliding window, and serves its state. Exits on
// SIGINT/SIGTERM or when the coordinator has been gone for
// --coordinator_timeout_s.

#include <unistd.h>

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/synchronization/notification.h"
#include "base/grpc_util.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/peer_watchdog.h"
#include "base/signals.h"
#include "coordinator/registration_client.h"
#include "eplb/eplb_service.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator address HOST:PORT (required).");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "Address of the EPLB gRPC server.");
ABSL_FLAG(int, window_size, 100, "Number of load reports in the sliding window.");
ABSL_FLAG(int, register_timeout_s, 60, "How long to retry registering.");
ABSL_FLAG(int, coordinator_timeout_s, 10, "Exit after the coordinator is gone this long.");

namespace weir::eplb {
namespace {

int Run(int argc, char** argv) {
  absl::Notification stop;
  InitProcess(argc, argv, "weir EPLB service: --coordinator=HOST:PORT", "eplb");
  InstallTerminationHandler([&stop](int, int count) {
    if (count > 1) _exit(1);
    if (!stop.HasBeenNotified()) stop.Notify();
  });
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty() || absl::GetFlag(FLAGS_window_size) < 1) {
    std::cerr << "eplb: --coordinator=HOST:PORT and a positive --window_size are required\n";
    return 2;
  }
  EplbService service(absl::GetFlag(FLAGS_window_size));
  absl::StatusOr<StartedServer> server =
      StartServer({.address = absl::GetFlag(FLAGS_listen)}, {&service});
  if (!server.ok()) {
    std::cerr << "eplb: " << server.status() << "\n";
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->server->GetHealthCheckService();
  health->SetServingStatus("weir.v1.Eplb", false);

  v1::RegisterRequest request;
  request.set_role(v1::PROCESS_ROLE_EPLB);
  request.set_address(server->address);
  request.set_pid(getpid());
  absl::StatusOr<v1::RegisterResponse> reply = coordinator::RegisterWithCoordinator(
      coordinator, request, absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s)));
  if (!reply.ok()) {
    std::cerr << "eplb: registration failed: " << reply.status() << "\n";
    server->server->Shutdown(DeadlineIn(std::chrono::seconds(1)));
    return 1;
  }
  service.SetWorldSize(static_cast<int>(reply->world_size()));
  health->SetServingStatus("weir.v1.Eplb", true);
  WEIR_LOG(INFO) << "serving at " << server->address << " for " << reply->world_size()
                 << " ranks";

  return ServeUntilStoppedOrFenced(*server->server, "weir.v1.Eplb", coordinator,
                                   absl::Seconds(absl::GetFlag(FLAGS_coordinator_timeout_s)),
                                   stop);
}

}  // namespace
}  // namespace weir::eplb

int main(int argc, char** argv) { return weir::eplb::Run(argc, argv); }
