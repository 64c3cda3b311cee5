// eplb/policy/hierarchical_policy.cc

#include "eplb/policy/hierarchical_policy.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "eplb/policy/layer_plan.h"
#include "eplb/policy/packing.h"

namespace weir::eplb::policy {
namespace {

absl::Status CheckOptions(const ExpertLoad& load, const HierarchicalOptions& o) {
  RETURN_IF_ERROR(CheckPlacementShape(load.num_layers(), load.num_logical_experts(), o.num_physical,
                                      o.num_ranks))
      << "in RebalanceHierarchical";
  if (o.num_threads < 1 || o.num_threads > kMaxPolicyThreads) {
    return absl::InvalidArgumentError(absl::StrCat("RebalanceHierarchical: num_threads ",
                                                   o.num_threads, " outside [1, ",
                                                   kMaxPolicyThreads, "]"));
  }
  if (o.num_nodes < 1 || o.num_groups < 1 || o.num_ranks % o.num_nodes != 0 ||
      load.num_logical_experts() % o.num_groups != 0 || o.num_groups % o.num_nodes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hierarchical policy needs ranks % nodes == 0, experts % groups == 0 and groups % nodes "
        "== 0; got ranks=",
        o.num_ranks, " nodes=", o.num_nodes, " experts=", load.num_logical_experts(),
        " groups=", o.num_groups));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Placement> RebalanceHierarchical(const ExpertLoad& load,
                                                const HierarchicalOptions& options) {
  RETURN_IF_ERROR(CheckOptions(load, options));
  const int num_layers = load.num_layers();
  const int num_logical = load.num_logical_experts();
  const int num_windows = load.num_windows();
  const int num_groups = options.num_groups;
  const int num_nodes = options.num_nodes;
  const int group_size = num_logical / num_groups;
  const int ranks_per_node = options.num_ranks / num_nodes;
  const int slots_per_rank = options.num_physical / options.num_ranks;
  const size_t slots_per_node = static_cast<size_t>(ranks_per_node) * slots_per_rank;

  std::vector<int32_t> map(static_cast<size_t>(num_layers) * options.num_physical);
  ForEachLayer(num_layers, options.num_threads, [&](int l) {
    const std::vector<double> layer = load.LayerByExpert(l);  // [E, W]
    std::vector<double> group_loads(static_cast<size_t>(num_groups) * num_windows, 0.0);
    for (int e = 0; e < num_logical; ++e) {
      for (int w = 0; w < num_windows; ++w) {
        group_loads[static_cast<size_t>(e / group_size) * num_windows + w] +=
            layer[static_cast<size_t>(e) * num_windows + w];
      }
    }
    const std::vector<int> node_of_group =
        PackBalanced(group_loads, num_groups, num_windows, num_nodes, num_groups / num_nodes);
    for (int node = 0; node < num_nodes; ++node) {
      std::vector<int32_t> experts;
      std::vector<double> node_loads;
      for (int g = 0; g < num_groups; ++g) {
        if (node_of_group[g] != node) continue;
        for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
          experts.push_back(e);
          const double* row = &layer[static_cast<size_t>(e) * num_windows];
          node_loads.insert(node_loads.end(), row, row + num_windows);
        }
      }
      PlanLayer(node_loads, experts, num_windows, ranks_per_node, slots_per_rank,
                absl::MakeSpan(map).subspan(
                    static_cast<size_t>(l) * options.num_physical + node * slots_per_node,
                    slots_per_node));
    }
  });
  return PlacementFromPhysicalMap(num_layers, num_logical, options.num_ranks, std::move(map));
}

}  // namespace weir::eplb::policy
