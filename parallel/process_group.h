// parallel/process_group.h
//
// Process groups: the subsets of ranks that share collectives, and the maps
// between a rank's global index and its index inside a group. Built from a
// ParallelLayout:
//
//   world  all world_size ranks.
//   EP     expert-parallel groups: contiguous blocks of ep_size ranks
//          ({0..ep-1}, {ep..2ep-1}, ...); MoE all-to-alls run inside one.
//   DP     attention data-parallel groups. Attention may be split over
//          tp = world_size / dp_size contiguous ranks; the DP group of a rank is
//          the ranks with the same position inside their attention split:
//          {t, t + tp, t + 2 tp, ...}. With dp_size == world_size (pure DP
//          attention) the DP group is the world.
//
// Example: world 8, dp 4, ep 4: EP groups {0,1,2,3} {4,5,6,7};
// DP groups {0,2,4,6} {1,3,5,7}.
//
// Thread safety: immutable after construction; safe to share between threads.

#ifndef WEIR_PARALLEL_PROCESS_GROUP_H_
#define WEIR_PARALLEL_PROCESS_GROUP_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/strong_id.h"

namespace weir::parallel {

struct ParallelLayout {
  int world_size = 1;
  int dp_size = 1;
  int ep_size = 1;
};

// Returns INVALID_ARGUMENT unless world_size >= 1 and dp_size, ep_size are
// positive divisors of world_size.
absl::Status ValidateLayout(const ParallelLayout& layout);

// An ordered set of global ranks. Group rank i is members()[i].
class ProcessGroup {
 public:
  // REQUIRES: `members` non-empty, distinct, non-negative (checked).
  ProcessGroup(std::string name, std::vector<Rank> members);

  std::string_view name() const { return name_; }
  int size() const { return static_cast<int>(members_.size()); }
  std::span<const Rank> members() const { return members_; }

  // Returns the global rank of group rank `group_rank`.
  // REQUIRES: 0 <= group_rank < size() (checked).
  Rank ToGlobal(Rank group_rank) const;

  // Returns the group rank of `global`, or nullopt if it is not a member.
  std::optional<Rank> ToGroup(Rank global) const;

  bool Contains(Rank global) const { return ToGroup(global).has_value(); }

 private:
  std::string name_;
  std::vector<Rank> members_;
  std::vector<int> group_of_global_;  // [max member + 1], -1 = not a member
};

// The groups one rank belongs to.
struct RankGroups {
  ProcessGroup world;
  ProcessGroup dp;
  ProcessGroup ep;
  int dp_group_index = 0;  // which DP group (in [0, tp))
  int ep_group_index = 0;  // which EP group (in [0, world_size / ep_size))
};

// Returns the groups of `rank` under `layout`. INVALID_ARGUMENT for an invalid
// layout or a rank outside [0, world_size).
absl::StatusOr<RankGroups> GroupsForRank(const ParallelLayout& layout, Rank rank);

// Returns every EP group of `layout` (the failure domains), in index order.
// INVALID_ARGUMENT for an invalid layout.
absl::StatusOr<std::vector<ProcessGroup>> AllEpGroups(const ParallelLayout& layout);

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_PROCESS_GROUP_H_
