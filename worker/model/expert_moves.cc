#include "worker/model/expert_moves.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::model {
namespace {

// Logical experts with a slot on `rank` in `layer`, ascending.
std::set<int32_t> HeldBy(const ExpertPlacement& p, int layer, int rank) {
  std::set<int32_t> held;
  for (int s = rank * p.slots_per_rank; s < (rank + 1) * p.slots_per_rank; ++s) {
    held.insert(p.logical(layer, s));
  }
  return held;
}

int64_t Floats(const ExpertWeightsF32& w) {
  return static_cast<int64_t>(w.w1.w.size() + w.w3.w.size() + w.w2.w.size());
}

bool Loaded(const ExpertWeightsF32& w) { return w.w1.out > 0 && !w.w1.w.empty(); }

// The first loaded expert of `layer`, whose shapes every routed expert of
// the layer shares; null if none.
const ExpertWeightsF32* Template(const ModelWeights& weights, int layer) {
  for (const ExpertWeightsF32& w : weights.layers[layer].ffn.experts) {
    if (Loaded(w)) return &w;
  }
  return nullptr;
}

DenseWeight ShapedLike(const DenseWeight& like) {
  DenseWeight w;
  w.out = like.out;
  w.in = like.in;
  w.fp8_activation = like.fp8_activation;
  w.w.resize(static_cast<size_t>(like.out * like.in));
  return w;
}

}  // namespace

std::vector<ExpertMove> PlanExpertMoves(const ExpertPlacement& current,
                                        const ExpertPlacement& next) {
  std::vector<ExpertMove> moves;
  for (int dst = 0; dst < next.world_size; ++dst) {
    for (int l = 0; l < next.num_layers; ++l) {
      const std::set<int32_t> had = HeldBy(current, l, dst);
      for (int32_t e : HeldBy(next, l, dst)) {
        if (had.contains(e)) continue;
        std::set<int> holders;  // ranks holding e now
        for (int s = 0; s < current.num_physical(); ++s) {
          if (current.logical(l, s) == e) holders.insert(current.owner(s));
        }
        std::vector<int> sorted(holders.begin(), holders.end());
        const size_t pick = static_cast<size_t>(l + e + dst) % sorted.size();
        moves.push_back({.layer = l, .expert = e, .src = sorted[pick], .dst = dst});
      }
    }
  }
  return moves;
}

absl::StatusOr<StagedExperts> ExchangeExperts(parallel::Communicator& comm,
                                              std::span<const ExpertMove> moves,
                                              const ModelWeights& weights, int num_layers) {
  const int rank = comm.rank().value();
  const int world = comm.world_size();
  if (num_layers < 0 || num_layers > static_cast<int>(weights.layers.size())) {
    return absl::InvalidArgumentError(absl::StrCat("expert moves over ", num_layers,
                                                   " layers, the model has ",
                                                   weights.layers.size()));
  }
  std::vector<int64_t> send_counts(world, 0), recv_counts(world, 0);
  for (const ExpertMove& m : moves) {
    if (m.layer < 0 || m.layer >= num_layers || m.src < 0 || m.src >= world || m.dst < 0 ||
        m.dst >= world || m.expert < 0 ||
        m.expert >= static_cast<int32_t>(weights.layers[m.layer].ffn.experts.size())) {
      return absl::InvalidArgumentError(absl::StrCat("expert move of layer ", m.layer, " expert ",
                                                     m.expert, " from rank ", m.src, " to ",
                                                     m.dst, " is out of range"));
    }
    if (m.src == rank) {
      const ExpertWeightsF32& w = weights.layers[m.layer].ffn.experts[m.expert];
      if (!Loaded(w)) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " must send layer ",
                                                       m.layer, " expert ", m.expert,
                                                       " which it does not hold"));
      }
      send_counts[m.dst] += Floats(w);
    }
    if (m.dst == rank) {
      const ExpertWeightsF32* like = Template(weights, m.layer);
      if (like == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", rank, " holds no expert of layer ", m.layer,
                         " to take the shapes of a received one from"));
      }
      recv_counts[m.src] += Floats(*like);
    }
  }
  auto offsets = [](const std::vector<int64_t>& counts) {
    std::vector<int64_t> out(counts.size(), 0);
    for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
    return out;
  };
  const std::vector<int64_t> send_offsets = offsets(send_counts);
  const std::vector<int64_t> recv_offsets = offsets(recv_counts);
  std::vector<float> send(static_cast<size_t>(send_offsets.back() + send_counts.back()));
  std::vector<float> recv(static_cast<size_t>(recv_offsets.back() + recv_counts.back()));
  // Pack in plan order per destination (the receiver unpacks in the same order).
  std::vector<int64_t> cursor = send_offsets;
  for (const ExpertMove& m : moves) {
    if (m.src != rank) continue;
    const ExpertWeightsF32& w = weights.layers[m.layer].ffn.experts[m.expert];
    for (const DenseWeight* part : {&w.w1, &w.w3, &w.w2}) {
      std::memcpy(send.data() + cursor[m.dst], part->w.data(), part->w.size() * sizeof(float));
      cursor[m.dst] += static_cast<int64_t>(part->w.size());
    }
  }
  RETURN_IF_ERROR(comm.AllToAllV({.send = send.data(),
                                  .send_counts = send_counts,
                                  .send_offsets = send_offsets,
                                  .recv = recv.data(),
                                  .recv_counts = recv_counts,
                                  .recv_offsets = recv_offsets,
                                  .dtype = parallel::DataType::kFloat32}));
  StagedExperts staged;
  cursor = recv_offsets;
  for (const ExpertMove& m : moves) {
    if (m.dst != rank) continue;
    const ExpertWeightsF32& like = *Template(weights, m.layer);
    ExpertWeightsF32 w{.w1 = ShapedLike(like.w1), .w2 = ShapedLike(like.w2),
                       .w3 = ShapedLike(like.w3)};
    for (DenseWeight* part : {&w.w1, &w.w3, &w.w2}) {
      std::memcpy(part->w.data(), recv.data() + cursor[m.src], part->w.size() * sizeof(float));
      cursor[m.src] += static_cast<int64_t>(part->w.size());
    }
    // The CPU products read bf16 copies where the layer's experts have them.
    if (!like.w1.w_bf16.empty()) {
      for (DenseWeight* part : {&w.w1, &w.w3, &w.w2}) KeepBf16Form(*part);
    }
    staged.experts[{m.layer, m.expert}] = std::move(w);
  }
  staged.bytes_received = recv.size() * sizeof(float);
  staged.bytes_sent = send.size() * sizeof(float);
  return staged;
}

absl::Status InstallPlacement(Model& model, CommunicatorExpertExecutor& executor,
                              const ExpertPlacement& next, StagedExperts staged) {
  const ExpertPlacement& current = executor.placement();
  if (next.num_layers != current.num_layers || next.num_logical != current.num_logical ||
      next.world_size != current.world_size) {
    return absl::InvalidArgumentError("new expert placement has another shape");
  }
  RETURN_IF_ERROR(ValidatePlacement(next));
  const int self = executor.rank();
  // Check: every expert of this rank's new slots is held or staged.
  for (int l = 0; l < next.num_layers; ++l) {
    const std::vector<ExpertWeightsF32>& experts = model.mutable_routed_experts(l);
    for (int32_t e : HeldBy(next, l, self)) {
      if (!Loaded(experts[e]) && !staged.experts.contains({l, e})) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", l, " expert ", e, " is neither held nor staged on rank ", self));
      }
    }
  }
  std::vector<std::pair<int, int32_t>> installed;
  for (auto& [key, w] : staged.experts) {
    ExpertWeightsF32& slot = model.mutable_routed_experts(key.first)[key.second];
    if (Loaded(slot)) continue;  // already here (a staged copy is redundant)
    slot = std::move(w);
    installed.push_back(key);
  }
  if (absl::Status s = executor.SetPlacement(next); !s.ok()) {
    for (const auto& [l, e] : installed) model.mutable_routed_experts(l)[e] = ExpertWeightsF32{};
    return s;
  }
  model.WeightsChanged();  // e.g. CudaOps' device copies of freed experts
  for (int l = 0; l < next.num_layers; ++l) {
    const std::set<int32_t> keep = HeldBy(next, l, self);
    std::vector<ExpertWeightsF32>& experts = model.mutable_routed_experts(l);
    for (int32_t e = 0; e < static_cast<int32_t>(experts.size()); ++e) {
      if (!keep.contains(e) && Loaded(experts[e])) experts[e] = ExpertWeightsF32{};
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::model
