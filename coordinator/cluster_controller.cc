#include "coordinator/cluster_controller.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"

namespace weir::coordinator {

ClusterController::ClusterController(ClusterState& cluster, ControllerOptions options)
    : cluster_(cluster), options_(std::move(options)) {}

ClusterController::~ClusterController() { StopMonitor(); }

std::vector<std::shared_ptr<WorkerClient>> ClusterController::Clients() {
  absl::MutexLock lock(&mu_);
  return clients_;
}

absl::Status ClusterController::BringUp() {
  std::vector<WorkerRecord> workers = cluster_.Workers();
  if (static_cast<int>(workers.size()) != cluster_.world_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "BringUp: ", workers.size(), " of ", cluster_.world_size(), " workers registered"));
  }
  std::vector<std::shared_ptr<WorkerClient>> clients;
  uint64_t group_epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    group_epoch = ++group_epoch_;
  }
  cluster_.set_group_epoch(group_epoch);
  WEIR_LOG(INFO) << "bringing up the worker group at group epoch " << group_epoch;
  v1::InitRequest init;
  init.set_coordinator_epoch(options_.epoch);
  init.set_group_epoch(group_epoch);
  init.mutable_layout()->set_world_size(cluster_.world_size());
  init.mutable_layout()->set_dp_size(cluster_.world_size());
  init.mutable_layout()->set_ep_size(cluster_.world_size());
  init.set_eplb_address(cluster_.eplb_address());
  for (const WorkerRecord& w : workers) {
    clients.push_back(std::make_shared<WorkerClient>(w.address));
    v1::PeerInfo* peer = init.add_peers();
    peer->set_rank(w.rank.value());
    peer->set_address(w.address);
    peer->set_hostname(w.hostname);
  }
  {
    absl::MutexLock lock(&mu_);
    clients_ = clients;
  }
  std::vector<std::string> tensor_addresses(workers.size()), staging_addresses(workers.size());
  std::string nccl_unique_id;  // CUDA backend: made by rank 0, joined by all
  for (const WorkerRecord& w : workers) {
    init.set_rank(w.rank.value());
    absl::StatusOr<v1::InitResponse> reply =
        clients[w.rank.value()]->Init(init, options_.rpc_timeout);
    RETURN_IF_ERROR(reply.status()) << "Init of worker rank " << w.rank << " at " << w.address;
    tensor_addresses[w.rank.value()] = reply->tensor_address();
    staging_addresses[w.rank.value()] = reply->staging_address();
    if (w.rank.value() == 0) nccl_unique_id = reply->nccl_unique_id();
  }
  // LoadWeights connects the tensor plane, which is collective: every worker
  // must be inside it at once, so the calls run in parallel.
  v1::LoadWeightsRequest load;
  load.set_coordinator_epoch(options_.epoch);
  load.set_group_epoch(group_epoch);
  load.set_model_dir(options_.model_dir);
  load.set_nccl_unique_id(nccl_unique_id);
  load.set_kv_block_tokens(static_cast<uint32_t>(std::max(0, options_.kv_block_tokens)));
  load.set_num_draft_tokens(static_cast<uint32_t>(std::max(0, options_.num_draft_tokens)));
  load.set_ced_replay(options_.ced_replay);
  load.set_verify_length(options_.verify_length);
  load.set_measure_verify_cost(options_.measure_verify_cost);
  load.set_speculative_max_batch(
      static_cast<uint32_t>(std::max(0, options_.speculative_max_batch)));
  load.set_ngram_lookup(static_cast<uint32_t>(std::max(0, options_.ngram_lookup)));
  load.set_ngram_lookup_max(static_cast<uint32_t>(std::max(0, options_.ngram_lookup_max)));
  load.set_ngram_lookup_tokens(static_cast<uint32_t>(std::max(0, options_.ngram_lookup_tokens)));
  for (const WorkerRecord& w : workers) {
    v1::PeerInfo* peer = load.add_peers();
    peer->set_rank(w.rank.value());
    peer->set_address(w.address);
    peer->set_hostname(w.hostname);
    peer->set_tensor_address(tensor_addresses[w.rank.value()]);
    peer->set_staging_address(staging_addresses[w.rank.value()]);
  }
  // The initial expert map (redundant slots included), when one was set.
  if (v1::ExpertMap map = cluster_.expert_map(); map.num_layers() > 0) {
    *load.mutable_expert_map() = std::move(map);
  }
  for (const WorkerRecord& w : workers) {
    RETURN_IF_ERROR(cluster_.SetWorkerStatus(w.rank, WorkerStatus::kLoading, ""));
  }
  std::vector<absl::StatusOr<v1::LoadWeightsResponse>> replies(
      workers.size(), absl::UnknownError("not called"));
  {
    std::vector<std::thread> calls;
    for (const WorkerRecord& w : workers) {
      const int r = w.rank.value();
      calls.emplace_back([&, r] { replies[r] = clients[r]->LoadWeights(load, options_.load_timeout); });
    }
    for (std::thread& call : calls) call.join();
  }
  for (const WorkerRecord& w : workers) {
    const auto& reply = replies[w.rank.value()];
    RETURN_IF_ERROR(reply.status())
        << "LoadWeights of worker rank " << w.rank << " at " << w.address;
    const v1::KvCacheInfo& kv = reply->kv_cache();
    WorkerKvCapacity capacity{.block_tokens = static_cast<int32_t>(kv.block_tokens()),
                              .compress_ratios = {kv.compress_ratios().begin(),
                                                  kv.compress_ratios().end()},
                              .num_blocks = static_cast<int64_t>(kv.num_blocks()),
                              .num_seq_slots = static_cast<int32_t>(kv.num_seq_slots()),
                              .block_bytes = static_cast<int64_t>(kv.block_bytes()),
                              .slot_bytes = static_cast<int64_t>(kv.slot_bytes())};
    RETURN_IF_ERROR(cluster_.SetWorkerKv(w.rank, std::move(capacity)));
    RETURN_IF_ERROR(cluster_.SetWorkerStatus(w.rank, WorkerStatus::kReady, ""));
    WEIR_LOG(INFO) << "worker rank " << w.rank << " at " << w.address << " loaded "
                   << reply->model_name() << " (revision " << reply->revision() << ", "
                   << reply->bytes_loaded() << " bytes); KV: " << kv.num_blocks()
                   << " blocks of " << kv.block_tokens() << " positions, "
                   << kv.num_seq_slots() << " sequence slots";
  }
  return absl::OkStatus();
}

std::vector<Rank> ClusterController::LostWorkers(int attempts) {
  std::vector<Rank> lost;
  for (const WorkerRecord& w : cluster_.Workers()) {
    if (w.address.empty()) continue;
    bool alive = false;
    if (w.status != WorkerStatus::kDead) {
      WorkerClient client(w.address);
      for (int i = 0; i < attempts && !alive; ++i) {
        if (i > 0) absl::SleepFor(options_.health_interval);
        absl::StatusOr<std::string> health = client.Health(options_.health_timeout);
        // LOADING / NOT_SERVING still answer: the process is there.
        alive = health.ok();
      }
    }
    if (!alive) lost.push_back(w.rank);
  }
  return lost;
}

void ClusterController::StartMonitor(std::function<void()> on_change) {
  {
    absl::MutexLock lock(&mu_);
    on_change_ = std::move(on_change);
  }
  {
    absl::MutexLock lock(&monitor_mu_);
    monitor_stop_ = false;  // a monitor stopped for a recovery starts again
  }
  monitor_ = std::thread([this] { MonitorLoop(); });
}

void ClusterController::StopMonitor() {
  {
    absl::MutexLock lock(&monitor_mu_);
    monitor_stop_ = true;
  }
  if (monitor_.joinable()) monitor_.join();
}

bool ClusterController::MonitorStopped(absl::Duration wait) {
  absl::MutexLock lock(&monitor_mu_);
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(monitor_mu_) { return monitor_stop_; };
  return monitor_mu_.AwaitWithTimeout(absl::Condition(&stopped), wait);
}

void ClusterController::MarkDead(Rank rank, const std::string& detail) {
  std::vector<WorkerRecord> before = cluster_.Workers();
  bool was_dead = false;
  for (const WorkerRecord& w : before) {
    if (w.rank == rank) was_dead = w.status == WorkerStatus::kDead;
  }
  if (was_dead || !cluster_.SetWorkerStatus(rank, WorkerStatus::kDead, detail).ok()) return;
  if (cluster_.lifecycle() == ClusterLifecycle::kStopping) {
    WEIR_LOG(INFO) << "worker rank " << rank << " stopped: " << detail;
  } else {
    WEIR_LOG(ERROR) << "worker rank " << rank << " is DEAD: " << detail
                    << "; cluster is " << LifecycleName(cluster_.lifecycle());
  }
  std::function<void()> on_change;
  {
    absl::MutexLock lock(&mu_);
    on_change = on_change_;
  }
  if (on_change) on_change();
}

void ClusterController::ReportExit(int64_t pid, const std::string& description) {
  absl::StatusOr<Rank> rank = cluster_.RankOfPid(pid);
  if (!rank.ok()) return;
  MarkDead(*rank, "process " + description);
}

void ClusterController::MonitorLoop() {
  std::vector<int> failures(cluster_.world_size(), 0);
  while (!MonitorStopped(options_.health_interval)) {
    std::vector<std::shared_ptr<WorkerClient>> clients = Clients();
    for (const WorkerRecord& w : cluster_.Workers()) {
      if (w.status == WorkerStatus::kDead || w.status == WorkerStatus::kStopped) continue;
      const int r = w.rank.value();
      if (r >= static_cast<int>(clients.size())) continue;
      absl::StatusOr<std::string> health = clients[r]->Health(options_.health_timeout);
      if (health.ok() && *health == "SERVING") {
        failures[r] = 0;
        continue;
      }
      if (++failures[r] >= options_.failure_threshold) {
        MarkDead(w.rank, absl::StrCat("health check failed ", failures[r], " times: ",
                                      health.ok() ? *health : health.status().ToString()));
      }
    }
  }
}

void ClusterController::ShutdownWorkers(const std::string& reason) {
  std::vector<std::thread> calls;
  std::vector<std::shared_ptr<WorkerClient>> clients = Clients();
  for (const WorkerRecord& w : cluster_.Workers()) {
    if (w.status == WorkerStatus::kDead || w.rank.value() >= static_cast<int>(clients.size())) {
      continue;
    }
    std::shared_ptr<WorkerClient> client = clients[w.rank.value()];
    calls.emplace_back([client, reason] {
      absl::Status status = client->Shutdown(reason, absl::Seconds(3));
      if (!status.ok()) {
        WEIR_LOG(WARNING) << "Shutdown of " << client->address() << ": " << status;
      }
    });
  }
  for (std::thread& call : calls) call.join();
}

}  // namespace weir::coordinator
