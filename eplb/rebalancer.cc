#include "eplb/rebalancer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "eplb/expert_map.h"
#include "eplb/policy/balance.h"
#include "eplb/policy/global_policy.h"
#include "eplb/policy/hierarchical_policy.h"

namespace weir::eplb {
namespace {

double MillisSince(absl::Time start) { return absl::ToDoubleMilliseconds(absl::Now() - start); }

// Returns the placement's workers ordered by rank. INVALID_ARGUMENT unless
// their ranks are exactly 0..n-1.
absl::StatusOr<std::vector<v1::PeerInfo>> WorkersByRank(const v1::PlacementInfo& info) {
  const int world = info.workers_size();
  if (world == 0) return absl::FailedPreconditionError("the coordinator lists no workers");
  std::vector<v1::PeerInfo> workers(world);
  std::vector<bool> seen(world, false);
  for (const v1::PeerInfo& worker : info.workers()) {
    if (worker.rank() < 0 || worker.rank() >= world || seen[worker.rank()]) {
      return absl::InvalidArgumentError(absl::StrCat("the coordinator's worker table has rank ",
                                                     worker.rank(), " in a world of ", world));
    }
    seen[worker.rank()] = true;
    workers[worker.rank()] = worker;
  }
  return workers;
}

// Returns the committed placement `info` describes for a load of
// `num_layers` x `num_logical`: its committed map, or the initial map when
// the coordinator has none yet.
absl::StatusOr<policy::Placement> CommittedPlacement(const v1::PlacementInfo& info,
                                                     int num_layers, int num_logical) {
  const int world = info.workers_size();
  absl::StatusOr<policy::Placement> placement =
      info.committed_map().physical_to_logical().empty()
          ? InitialPlacement(num_layers, num_logical, world)
          : FromExpertMapProto(info.committed_map());
  if (!placement.ok()) return placement.status();
  if (placement->num_ranks != world) {
    return absl::InvalidArgumentError(absl::StrCat("committed map ",
                                                   info.committed_map().version(), " spans ",
                                                   placement->num_ranks, " ranks, the world ",
                                                   world));
  }
  if (placement->num_layers != num_layers || placement->num_logical != num_logical) {
    return absl::InvalidArgumentError(absl::StrCat(
        "committed map ", info.committed_map().version(), " is [", placement->num_layers, ", ",
        placement->num_logical, "], the reported load [", num_layers, ", ", num_logical, "]"));
  }
  return placement;
}

}  // namespace

Rebalancer::Rebalancer(RebalancerOptions options, ClusterLink* link)
    : options_(std::move(options)), link_(link) {
  WEIR_CHECK_GE(options_.rearrange_interval, 1);
  WEIR_CHECK_GE(options_.min_window_rounds, 1);
  WEIR_CHECK_GE(options_.max_history, 1);
  thread_ = std::thread([this] { Loop(); });
}

Rebalancer::~Rebalancer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    pending_.reset();
  }
  thread_.join();
}

bool Rebalancer::Due(uint64_t complete_rounds, int complete_steps_in_window) {
  absl::MutexLock lock(&mu_);
  if (complete_steps_in_window < options_.min_window_rounds) return false;
  if (complete_rounds < last_due_rounds_ + static_cast<uint64_t>(options_.rearrange_interval)) {
    return false;
  }
  last_due_rounds_ = complete_rounds;
  return true;
}

void Rebalancer::Submit(LoadSnapshot snapshot) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  pending_ = std::move(snapshot);
}

void Rebalancer::WaitIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || (!pending_.has_value() && !running_);
  };
  mu_.Await(absl::Condition(&idle));
}

void Rebalancer::Loop() {
  while (true) {
    std::optional<LoadSnapshot> snapshot;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || pending_.has_value();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      snapshot = std::move(pending_);
      pending_.reset();
      running_ = true;
    }
    RebalanceOnce(*snapshot);
    absl::MutexLock lock(&mu_);
    running_ = false;
  }
}

RebalancerState Rebalancer::State() const {
  absl::MutexLock lock(&mu_);
  RebalancerState state = state_;
  state.history.assign(history_.begin(), history_.end());
  return state;
}

void Rebalancer::Record(v1::EplbState::Rebalance entry) {
  WEIR_LOG(INFO) << "expert map " << entry.version() << ": "
                 << (entry.committed() ? "committed" : "not committed") << ", predicted ratio "
                 << entry.ratio_before() << " -> " << entry.ratio_after() << ", "
                 << entry.bytes_moved() << " bytes moved, prepare " << entry.prepare_ms()
                 << " ms, commit " << entry.commit_ms() << " ms"
                 << (entry.detail().empty() ? "" : "; " + entry.detail());
  absl::MutexLock lock(&mu_);
  history_.push_back(std::move(entry));
  while (static_cast<int>(history_.size()) > options_.max_history) history_.pop_front();
}

AttemptOutcome Rebalancer::RebalanceOnce(const LoadSnapshot& snapshot) {
  absl::MutexLock attempt(&attempt_mu_);
  const policy::ExpertLoad& load = snapshot.load;
  v1::EplbState::Rebalance entry;
  auto fail = [&](const absl::Status& status) {
    entry.set_committed(false);
    entry.set_detail(absl::StrCat(absl::StatusCodeToString(status.code()), ": ",
                                  std::string(status.message())));
    Record(entry);
    return AttemptOutcome::kFailed;
  };
  {
    absl::MutexLock lock(&mu_);
    entry.set_version(state_.committed_version + 1);
  }

  // 1. The committed placement and the workers, from the coordinator.
  absl::StatusOr<v1::PlacementInfo> info =
      link_->GetPlacement(absl::Now() + options_.placement_timeout);
  if (!info.ok()) return fail(info.status());
  absl::StatusOr<std::vector<v1::PeerInfo>> workers = WorkersByRank(*info);
  if (!workers.ok()) return fail(workers.status());
  absl::StatusOr<policy::Placement> current =
      CommittedPlacement(*info, load.num_layers(), load.num_logical_experts());
  if (!current.ok()) return fail(current.status());
  const uint64_t committed_version = info->committed_map().version();
  {
    absl::MutexLock lock(&mu_);
    state_.committed_version = committed_version;
    state_.committed_map = ToExpertMapProto(*current, committed_version);
    state_.committed_placement = *current;
    ++state_.proposals;
  }
  const uint64_t version = committed_version + 1;
  entry.set_version(version);
  if (auto it = snapshot.measured_ratio.find(committed_version);
      it != snapshot.measured_ratio.end()) {
    entry.set_measured_before(it->second);
  }

  // 2. A proposal of the same shape, and whether it is worth moving weights.
  const int world = static_cast<int>(workers->size());
  absl::StatusOr<policy::Placement> proposed =
      options_.nodes == 0
          ? policy::RebalanceGlobal(load, current->num_physical, world, options_.policy_threads)
          : policy::RebalanceHierarchical(load, {.num_physical = current->num_physical,
                                                 .num_ranks = world,
                                                 .num_nodes = options_.nodes,
                                                 .num_groups = options_.groups,
                                                 .num_threads = options_.policy_threads});
  if (!proposed.ok()) return fail(proposed.status());
  absl::StatusOr<policy::BalanceGain> gain = policy::PredictGain(*current, *proposed, load);
  if (!gain.ok()) return fail(gain.status());
  entry.set_ratio_before(gain->current_ratio);
  entry.set_ratio_after(gain->proposed_ratio);
  if (gain->relative_gain < options_.gain_threshold) {
    absl::MutexLock lock(&mu_);
    ++state_.skipped_low_gain;
    return AttemptOutcome::kSkippedLowGain;
  }

  // 3. Prepare on every worker at once: the workers exchange expert weights
  // with each other, so each Prepare waits for its peers.
  const v1::ExpertMap map = ToExpertMapProto(*proposed, version);
  const uint64_t epoch = info->coordinator_epoch();
  const absl::Time prepare_start = absl::Now();
  const absl::Time prepare_deadline = prepare_start + options_.prepare_timeout;
  std::vector<absl::StatusOr<v1::PrepareExpertMapResponse>> prepared(
      world, absl::UnknownError("not called"));
  {
    std::vector<std::thread> callers;
    callers.reserve(world);
    for (int r = 0; r < world; ++r) {
      callers.emplace_back([&, r] {
        prepared[r] = link_->Prepare((*workers)[r], epoch, map, prepare_deadline);
      });
    }
    for (std::thread& caller : callers) caller.join();
  }
  entry.set_prepare_ms(MillisSince(prepare_start));
  uint64_t bytes_moved = 0;
  int failed = 0;
  absl::Status first_failure;
  for (int r = 0; r < world; ++r) {
    absl::Status status = prepared[r].status();
    if (status.ok() && prepared[r]->prepared_version() != version) {
      status = absl::InternalError(absl::StrCat("prepared version ",
                                                prepared[r]->prepared_version(), ", not ",
                                                version));
    }
    if (!status.ok()) {
      if (failed++ == 0) {
        first_failure = absl::Status(status.code(), absl::StrCat("prepare failed on rank ", r,
                                                                 ": ", status.message()));
      }
      continue;
    }
    bytes_moved += prepared[r]->bytes_staged();
  }
  entry.set_bytes_moved(bytes_moved);
  if (failed > 0) {
    return fail(absl::Status(first_failure.code(),
                             absl::StrCat(first_failure.message(), " (", failed, " of ", world,
                                          " ranks failed)")));
  }

  // 4. Commit at the coordinator's next step boundary.
  const absl::Time commit_start = absl::Now();
  absl::StatusOr<v1::CommitExpertMapResponse> committed =
      link_->Commit(version, map, commit_start + options_.commit_timeout);
  entry.set_commit_ms(MillisSince(commit_start));
  if (!committed.ok()) {
    return fail(absl::Status(committed.status().code(),
                             absl::StrCat("commit: ", committed.status().message())));
  }
  if (committed->committed_version() != version) {
    return fail(absl::InternalError(absl::StrCat(
        "commit: the coordinator reports version ", committed->committed_version(), ", not ",
        version)));
  }
  {
    absl::MutexLock lock(&mu_);
    state_.committed_version = version;
    state_.committed_map = map;
    state_.committed_placement = *std::move(proposed);
  }
  entry.set_committed(true);
  Record(entry);
  return AttemptOutcome::kCommitted;
}

}  // namespace weir::eplb
