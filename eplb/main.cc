// The weir EPLB service: registers with the coordinator, collects expert-load
// reports from workers over a sliding window, rearranges the experts every
// --rearrange_interval report rounds when the predicted gain is worth it
// (prepare on every worker, then commit through the coordinator), and serves
// its state. Exits on
// SIGINT/SIGTERM or when the coordinator has been gone for
// --coordinator_timeout_s.

#include <unistd.h>

#include <iostream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/synchronization/notification.h"
#include "base/grpc_util.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/peer_watchdog.h"
#include "base/registration_client.h"
#include "base/signals.h"
#include "eplb/eplb_service.h"
#include "eplb/grpc_cluster_link.h"
#include "eplb/policy/global_policy.h"
#include "eplb/rebalancer.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator address HOST:PORT (required).");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "Address of the EPLB gRPC server.");
ABSL_FLAG(int, window_size, 100, "Number of load reports in the sliding window.");
ABSL_FLAG(int, register_timeout_s, 60, "How long to retry registering.");
ABSL_FLAG(int, coordinator_timeout_s, 10, "Exit after the coordinator is gone this long.");
ABSL_FLAG(bool, rearrange, true, "Rearrange experts (false: only collect load and report it).");
ABSL_FLAG(int, rearrange_interval, 10, "Complete report rounds between rearrange attempts.");
ABSL_FLAG(int, min_window_rounds, 2, "Complete report rounds the window needs before any attempt.");
ABSL_FLAG(double, gain_threshold, 0.05,
          "Smallest predicted relative gain of the balance ratio worth moving weights for.");
ABSL_FLAG(int, prepare_timeout_s, 60, "Deadline of PrepareExpertMap on the workers.");
ABSL_FLAG(int, commit_timeout_s, 60, "Deadline of the coordinator's CommitExpertMap.");
ABSL_FLAG(int, policy_threads, 1, "Threads the placement policy may use.");
ABSL_FLAG(int, nodes, 0,
          "0: the global policy (decode). N: the hierarchical policy over N nodes (each "
          "expert group's replicas stay on one node; multi-node prefill).");
ABSL_FLAG(int, groups, 1, "Hierarchical policy: expert groups (a multiple of --nodes).");

namespace weir::eplb {
namespace {

int Run(int argc, char** argv) {
  absl::Notification stop;
  InitProcess(argc, argv, "weir EPLB service: --coordinator=HOST:PORT", "eplb");
  HoldGrpcForProcess();
  InstallTerminationHandler([&stop](int, int count) {
    if (count > 1) _exit(1);
    if (!stop.HasBeenNotified()) stop.Notify();
  });
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty() || absl::GetFlag(FLAGS_window_size) < 1) {
    std::cerr << "eplb: --coordinator=HOST:PORT and a positive --window_size are required\n";
    return 2;
  }
  const RebalancerOptions options{
      .rearrange_interval = absl::GetFlag(FLAGS_rearrange_interval),
      .min_window_rounds = absl::GetFlag(FLAGS_min_window_rounds),
      .gain_threshold = absl::GetFlag(FLAGS_gain_threshold),
      .prepare_timeout = absl::Seconds(absl::GetFlag(FLAGS_prepare_timeout_s)),
      .commit_timeout = absl::Seconds(absl::GetFlag(FLAGS_commit_timeout_s)),
      .policy_threads = absl::GetFlag(FLAGS_policy_threads),
      .nodes = absl::GetFlag(FLAGS_nodes),
      .groups = absl::GetFlag(FLAGS_groups)};
  if (options.nodes < 0 || options.groups < 1 ||
      (options.nodes > 0 && options.groups % options.nodes != 0)) {
    std::cerr << "eplb: --nodes must be >= 0 and --groups a positive multiple of --nodes\n";
    return 2;
  }
  if (options.rearrange_interval < 1 || options.min_window_rounds < 1 ||
      options.policy_threads < 1 || options.policy_threads > policy::kMaxPolicyThreads ||
      absl::GetFlag(FLAGS_prepare_timeout_s) < 1 || absl::GetFlag(FLAGS_commit_timeout_s) < 1) {
    std::cerr << "eplb: --rearrange_interval, --min_window_rounds, --prepare_timeout_s and "
                 "--commit_timeout_s must be positive, --policy_threads in [1, "
              << policy::kMaxPolicyThreads << "]\n";
    return 2;
  }
  GrpcClusterLink link(coordinator);
  std::optional<Rebalancer> rebalancer;
  if (absl::GetFlag(FLAGS_rearrange)) rebalancer.emplace(options, &link);
  EplbService service(absl::GetFlag(FLAGS_window_size),
                      rebalancer.has_value() ? &*rebalancer : nullptr);
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
  absl::StatusOr<v1::RegisterResponse> reply = RegisterWithCoordinator(
      coordinator, request, absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s)));
  if (!reply.ok()) {
    std::cerr << "eplb: registration failed: " << reply.status() << "\n";
    server->server->Shutdown(DeadlineIn(std::chrono::seconds(1)));
    return 1;
  }
  service.SetWorldSize(static_cast<int>(reply->world_size()));
  health->SetServingStatus("weir.v1.Eplb", true);
  WEIR_LOG(INFO) << "serving at " << server->address << " for " << reply->world_size()
                 << " ranks; rearranging "
                 << (rebalancer.has_value()
                         ? "every " + std::to_string(options.rearrange_interval) + " rounds"
                         : std::string("off"));

  return ServeUntilStoppedOrFenced(*server->server, "weir.v1.Eplb", coordinator,
                                   absl::Seconds(absl::GetFlag(FLAGS_coordinator_timeout_s)),
                                   stop);
}

}  // namespace
}  // namespace weir::eplb

int main(int argc, char** argv) { return weir::eplb::Run(argc, argv); }
