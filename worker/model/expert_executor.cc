#include "worker/model/expert_executor.h"

#include <algorithm>

namespace weir::model {

ExpertLoad::ExpertLoad(std::vector<int64_t> experts_per_layer) {
  for (int64_t n : experts_per_layer) counts_.emplace_back(n, 0);
}

void ExpertLoad::Record(int layer, const ExpertAssignments& a) {
  for (int32_t e : a.experts) ++counts_[layer][e];
}

void ExpertLoad::Reset() {
  for (auto& layer : counts_) std::fill(layer.begin(), layer.end(), 0);
}

}  // namespace weir::model
