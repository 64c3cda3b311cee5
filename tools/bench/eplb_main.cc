// tools/bench/eplb_main.cc
//
// EPLB quality benchmark: on synthetic traces (tools/bench/eplb_trace.h) it
// runs the global (and hierarchical) policy on the first --train_windows
// windows and reports the balance ratio (max rank load / mean rank load,
// averaged over windows and layers) of the identity placement and of the
// policy's placement, on the windows the policy saw and on the next
// --test_windows windows it did not see, next to the lower bound for the
// slot budget, and the policy's wall time measured in this process. Physical
// slots are logical + redundant rounded up to a multiple of the ranks, as the
// coordinator sizes its initial map; the table says when it rounded.

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "base/init.h"
#include "eplb/policy/balance.h"
#include "eplb/policy/expert_load.h"
#include "eplb/policy/global_policy.h"
#include "eplb/policy/hierarchical_policy.h"
#include "eplb/policy/placement.h"
#include "tools/bench/eplb_trace.h"

ABSL_FLAG(int, train_windows, 100, "Windows the policy sees (the service's window_size).");
ABSL_FLAG(int, test_windows, 20, "Following windows used only for evaluation.");
ABSL_FLAG(int, layers, 40, "MoE layers.");
ABSL_FLAG(int, experts, 384, "Logical experts per layer.");
ABSL_FLAG(double, zipf, 0.9, "Zipf exponent of expert popularity.");
ABSL_FLAG(double, drift, 0.005, "Adjacent popularity swaps per window, per expert.");
ABSL_FLAG(int, group_size, 4, "Experts hot together.");
ABSL_FLAG(double, burst_sigma, 0.3, "Log-normal sigma of a group's activity factor.");
ABSL_FLAG(double, burst_corr, 0.995, "Window-to-window correlation of the activity factor.");
ABSL_FLAG(int64_t, tokens, 128 * 256, "Tokens per window (steps per report x batch).");
ABSL_FLAG(std::vector<std::string>, ranks, std::vector<std::string>({"8", "16", "64"}),
          "Rank counts to place onto.");
ABSL_FLAG(std::vector<std::string>, redundant, std::vector<std::string>({"0", "32", "64"}),
          "Redundant slot counts (physical - logical experts), rounded up so that the "
          "physical slots divide over the ranks.");
ABSL_FLAG(bool, summed_rows, true,
          "Also run the global policy on the seen windows summed into one (window-blind).");
ABSL_FLAG(int, threads, 1, "Threads the policy plans layers on.");
ABSL_FLAG(int, nodes, 8, "Nodes of the hierarchical rows (0: no hierarchical rows).");
ABSL_FLAG(uint64_t, seed, 1, "Trace seed.");

namespace weir::bench {
namespace {

using eplb::policy::ExpertLoad;
using eplb::policy::Placement;

struct Row {
  std::string policy;
  int ranks = 0;
  int redundant = 0;
  int nodes = 1;
};

// Physical slots of a row: like the coordinator's initial map, logical +
// redundant rounded up to a multiple of the ranks (equal slots per rank).
int PhysicalSlots(const Row& row, int num_logical) {
  return (num_logical + row.redundant + row.ranks - 1) / row.ranks * row.ranks;
}

// "32", or "32 (rounded to 64)" when the rounding added slots.
std::string RedundantLabel(const Row& row, int num_logical) {
  const int used = PhysicalSlots(row, num_logical) - num_logical;
  return used == row.redundant ? std::to_string(row.redundant)
                               : absl::StrFormat("%d (rounded to %d)", row.redundant, used);
}

double Ratio(const Placement& p, const ExpertLoad& load) {
  absl::StatusOr<double> r = eplb::policy::PredictBalanceRatio(p, load);
  return r.ok() ? *r : -1;
}

absl::StatusOr<Placement> Plan(const Row& row, const ExpertLoad& load, int num_groups) {
  const int physical = PhysicalSlots(row, load.num_logical_experts());
  if (row.nodes == 1) {
    return eplb::policy::RebalanceGlobal(load, physical, row.ranks, absl::GetFlag(FLAGS_threads));
  }
  return eplb::policy::RebalanceHierarchical(load, {.num_physical = physical,
                                                    .num_ranks = row.ranks,
                                                    .num_nodes = row.nodes,
                                                    .num_groups = num_groups,
                                                    .num_threads = absl::GetFlag(FLAGS_threads)});
}

// Balance ratio of re-planning every window of `counts` [windows, layers,
// experts] on that window alone and running it on the same window: a
// placement that followed the load instantly. It keeps the limits of integral
// replicas and fixed slots that the lower bound ignores, and none of the drift.
double PerWindowOracle(const Row& row, const std::vector<int64_t>& counts, int first, int count,
                       int layers, int experts, int num_groups) {
  const size_t per_window = static_cast<size_t>(layers) * experts;
  double sum = 0;
  for (int w = first; w < first + count; ++w) {
    absl::StatusOr<ExpertLoad> one = ExpertLoad::FromCounts(
        1, layers, experts, absl::MakeConstSpan(counts).subspan(w * per_window, per_window));
    if (!one.ok()) return -1;
    absl::StatusOr<Placement> placement = Plan(row, *one, num_groups);
    if (!placement.ok()) return -1;
    sum += Ratio(*placement, *one);
  }
  return sum / count;
}

int Run() {
  TraceOptions trace;
  const int train = absl::GetFlag(FLAGS_train_windows);
  const int test = absl::GetFlag(FLAGS_test_windows);
  trace.num_windows = train + test;
  trace.num_layers = absl::GetFlag(FLAGS_layers);
  trace.num_experts = absl::GetFlag(FLAGS_experts);
  trace.zipf_exponent = absl::GetFlag(FLAGS_zipf);
  trace.drift_swaps = absl::GetFlag(FLAGS_drift);
  trace.group_size = absl::GetFlag(FLAGS_group_size);
  trace.burst_sigma = absl::GetFlag(FLAGS_burst_sigma);
  trace.burst_corr = absl::GetFlag(FLAGS_burst_corr);
  trace.seed = absl::GetFlag(FLAGS_seed);
  trace.tokens_per_window = absl::GetFlag(FLAGS_tokens);
  const std::vector<int64_t> counts = GenerateTrace(trace);
  const size_t per_window = static_cast<size_t>(trace.num_layers) * trace.num_experts;
  absl::StatusOr<ExpertLoad> seen =
      ExpertLoad::FromCounts(train, trace.num_layers, trace.num_experts,
                             absl::MakeConstSpan(counts).subspan(0, train * per_window));
  absl::StatusOr<ExpertLoad> held_out = ExpertLoad::FromCounts(
      test, trace.num_layers, trace.num_experts,
      absl::MakeConstSpan(counts).subspan(train * per_window, test * per_window));
  // The seen windows summed into one, the input of a window-blind policy.
  std::vector<int64_t> summed(counts.begin(), counts.begin() + per_window);
  for (int w = 1; w < train; ++w) {
    for (size_t i = 0; i < per_window; ++i) summed[i] += counts[w * per_window + i];
  }
  absl::StatusOr<ExpertLoad> seen_sum =
      ExpertLoad::FromCounts(1, trace.num_layers, trace.num_experts, summed);
  if (!seen.ok() || !held_out.ok() || !seen_sum.ok()) {
    std::fprintf(stderr, "bad trace: %s\n", seen.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "trace: %lld tokens x top-%d per window, %d experts x %d layers, zipf %.2f, drift %.3f, "
      "groups of %d, burst sigma "
      "%.2f corr %.3f; policy sees %d windows, %d held out; %d policy thread(s)\n\n",
      static_cast<long long>(trace.tokens_per_window), trace.top_k, trace.num_experts,
      trace.num_layers, trace.zipf_exponent, trace.drift_swaps, trace.group_size, trace.burst_sigma,
      trace.burst_corr, train, test, absl::GetFlag(FLAGS_threads));
  std::printf(
      "| policy | ranks | redundant | before seen | after seen | bound seen | "
      "before held-out | after held-out | oracle held-out | bound held-out | policy wall ms | "
      "policy cpu ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<int> rank_counts, redundant_counts;
  for (const std::string& r : absl::GetFlag(FLAGS_ranks)) rank_counts.push_back(std::stoi(r));
  for (const std::string& r : absl::GetFlag(FLAGS_redundant)) {
    redundant_counts.push_back(std::stoi(r));
  }
  std::vector<Row> rows;
  for (const int ranks : rank_counts) {
    for (const int redundant : redundant_counts) {
      rows.push_back({"global", ranks, redundant, 1});
      if (absl::GetFlag(FLAGS_summed_rows)) rows.push_back({"global, summed", ranks, redundant, 1});
    }
  }
  const int nodes = absl::GetFlag(FLAGS_nodes);
  if (nodes > 0) {
    const std::string name = "hier " + std::to_string(nodes) + " nodes";
    for (const int redundant : redundant_counts) {
      rows.push_back({name, rank_counts.back(), redundant, nodes});
    }
  }

  for (const Row& row : rows) {
    const int physical = PhysicalSlots(row, trace.num_experts);
    const std::string redundant = RedundantLabel(row, trace.num_experts);
    absl::StatusOr<Placement> before = eplb::policy::TrivialPlacement(
        trace.num_layers, trace.num_experts, trace.num_experts, row.ranks);
    const bool summed_row = row.policy == "global, summed";
    const int num_groups = trace.num_experts / trace.group_size;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    absl::StatusOr<Placement> after = Plan(row, summed_row ? *seen_sum : *seen, num_groups);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const double cpu_ms = 1e3 * static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    if (!before.ok() || !after.ok()) {
      const absl::Status& s = before.ok() ? after.status() : before.status();
      std::printf("| %s | %d | %s | n/a: %s |||||||||\n", row.policy.c_str(), row.ranks,
                  redundant.c_str(), std::string(s.message()).c_str());
      continue;
    }
    const double bound_seen = *eplb::policy::BalanceRatioLowerBound(*seen, physical, row.ranks);
    const double bound_test = *eplb::policy::BalanceRatioLowerBound(*held_out, physical, row.ranks);
    const std::string oracle =
        summed_row
            ? "-"
            : absl::StrFormat("%.3f", PerWindowOracle(row, counts, train, test, trace.num_layers,
                                                      trace.num_experts, num_groups));
    std::printf("| %s | %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %.3f | %.0f | %.0f |\n",
                row.policy.c_str(), row.ranks, redundant.c_str(), Ratio(*before, *seen),
                Ratio(*after, *seen), bound_seen, Ratio(*before, *held_out),
                Ratio(*after, *held_out), oracle.c_str(), bound_test, ms, cpu_ms);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "EPLB placement quality on synthetic traces", "eplb_bench");
  return weir::bench::Run();
}
