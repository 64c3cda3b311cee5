// parallel/process_group.cc

#include "parallel/process_group.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"

namespace weir::parallel {
namespace {

ProcessGroup EpGroup(const ParallelLayout& layout, int index) {
  std::vector<Rank> members;
  for (int i = 0; i < layout.ep_size; ++i) members.push_back(Rank(index * layout.ep_size + i));
  return ProcessGroup(absl::StrCat("ep", index), std::move(members));
}

}  // namespace

absl::Status ValidateLayout(const ParallelLayout& layout) {
  if (layout.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size ", layout.world_size, " < 1"));
  }
  for (auto [name, size] : {std::pair{"dp_size", layout.dp_size}, {"ep_size", layout.ep_size}}) {
    if (size < 1 || layout.world_size % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " ", size, " must be a positive divisor of world_size ", layout.world_size));
    }
  }
  return absl::OkStatus();
}

ProcessGroup::ProcessGroup(std::string name, std::vector<Rank> members)
    : name_(std::move(name)), members_(std::move(members)) {
  WEIR_CHECK(!members_.empty()) << "group " << name_ << " is empty";
  int max_rank = 0;
  for (Rank r : members_) {
    WEIR_CHECK(r.value() >= 0) << "group " << name_ << " has rank " << r;
    max_rank = std::max(max_rank, r.value());
  }
  group_of_global_.assign(max_rank + 1, -1);
  for (int i = 0; i < size(); ++i) {
    int& slot = group_of_global_[members_[i].value()];
    WEIR_CHECK(slot == -1) << "group " << name_ << " lists rank " << members_[i] << " twice";
    slot = i;
  }
}

Rank ProcessGroup::ToGlobal(Rank group_rank) const {
  WEIR_CHECK(group_rank.value() >= 0 && group_rank.value() < size())
      << "group rank " << group_rank << " outside group " << name_ << " of size " << size();
  return members_[group_rank.value()];
}

std::optional<Rank> ProcessGroup::ToGroup(Rank global) const {
  const int g = global.value();
  if (g < 0 || g >= static_cast<int>(group_of_global_.size()) || group_of_global_[g] < 0) {
    return std::nullopt;
  }
  return Rank(group_of_global_[g]);
}

absl::StatusOr<RankGroups> GroupsForRank(const ParallelLayout& layout, Rank rank) {
  RETURN_IF_ERROR(ValidateLayout(layout));
  if (rank.value() < 0 || rank.value() >= layout.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank.value(), " outside [0, ", layout.world_size, ")"));
  }
  std::vector<Rank> world;
  for (int r = 0; r < layout.world_size; ++r) world.push_back(Rank(r));
  const int tp = layout.world_size / layout.dp_size;
  const int dp_index = rank.value() % tp;
  std::vector<Rank> dp;
  for (int k = 0; k < layout.dp_size; ++k) dp.push_back(Rank(dp_index + k * tp));
  const int ep_index = rank.value() / layout.ep_size;
  return RankGroups{
      .world = ProcessGroup("world", std::move(world)),
      .dp = ProcessGroup(absl::StrCat("dp", dp_index), std::move(dp)),
      .ep = EpGroup(layout, ep_index),
      .dp_group_index = dp_index,
      .ep_group_index = ep_index,
  };
}

absl::StatusOr<std::vector<ProcessGroup>> AllEpGroups(const ParallelLayout& layout) {
  RETURN_IF_ERROR(ValidateLayout(layout));
  std::vector<ProcessGroup> groups;
  for (int g = 0; g < layout.world_size / layout.ep_size; ++g) groups.push_back(EpGroup(layout, g));
  return groups;
}

}  // namespace weir::parallel
