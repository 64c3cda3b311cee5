#include "worker/model/communicator_expert_executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/model/expert_ffn.h"

namespace weir::model {
namespace {

using parallel::AllToAllVArgs;
using parallel::DataType;

std::vector<int64_t> Scaled(std::span<const int64_t> counts, int64_t factor) {
  std::vector<int64_t> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) out[i] = counts[i] * factor;
  return out;
}

std::vector<int64_t> Offsets(std::span<const int64_t> counts) {
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

int64_t Sum(std::span<const int64_t> counts) {
  int64_t s = 0;
  for (int64_t c : counts) s += c;
  return s;
}

// Checks `placement` against the world and the weights loaded here; returns
// the experts' model dimension.
absl::StatusOr<int64_t> CheckPlacementFits(const ExpertPlacement& placement, int rank,
                                           int world_size, const ModelWeights& weights) {
  RETURN_IF_ERROR(ValidatePlacement(placement));
  if (placement.world_size != world_size) {
    return absl::InvalidArgumentError(absl::StrCat("expert placement for ", placement.world_size,
                                                   " ranks, communicator has ", world_size));
  }
  if (placement.num_layers > static_cast<int>(weights.layers.size())) {
    return absl::InvalidArgumentError(absl::StrCat("expert placement has ", placement.num_layers,
                                                   " layers, the model ", weights.layers.size()));
  }
  int64_t dim = -1;  // from this rank's first expert; all must agree
  for (int l = 0; l < placement.num_layers; ++l) {
    const std::vector<ExpertWeightsF32>& experts = weights.layers[l].ffn.experts;
    if (static_cast<int>(experts.size()) != placement.num_logical) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", l, " has ", experts.size(), " experts, the placement ", placement.num_logical));
    }
    for (int s = rank * placement.slots_per_rank; s < (rank + 1) * placement.slots_per_rank; ++s) {
      const ExpertWeightsF32& w = experts[placement.logical(l, s)];
      if (dim < 0) dim = w.w1.in;
      if (w.w1.in != dim || w.w2.out != dim || w.w1.out == 0) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", l, " expert ",
                                                       placement.logical(l, s), " of slot ", s,
                                                       " is not loaded on rank ", rank));
      }
    }
  }
  return dim;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CommunicatorExpertExecutor>> CommunicatorExpertExecutor::Create(
    parallel::Communicator& comm, Ops& ops, const ModelWeights& weights, ExpertPlacement placement,
    float swiglu_limit) {
  ASSIGN_OR_RETURN(int64_t dim, CheckPlacementFits(placement, comm.rank().value(),
                                                   comm.world_size(), weights));
  return std::unique_ptr<CommunicatorExpertExecutor>(
      new CommunicatorExpertExecutor(comm, ops, weights, std::move(placement), swiglu_limit, dim));
}

absl::Status CommunicatorExpertExecutor::SetPlacement(ExpertPlacement placement) {
  if (phase_ != Phase::kIdle) {
    return absl::FailedPreconditionError("expert placement changed inside a MoE step");
  }
  ASSIGN_OR_RETURN(int64_t dim, CheckPlacementFits(placement, comm_.rank().value(),
                                                   comm_.world_size(), weights_));
  if (placement.num_layers != placement_.num_layers ||
      placement.num_logical != placement_.num_logical || dim != dim_) {
    return absl::InvalidArgumentError("expert placement of another shape than the current one");
  }
  replicas_ = ReplicaSlots(placement);
  placement_ = std::move(placement);
  return absl::OkStatus();
}

CommunicatorExpertExecutor::CommunicatorExpertExecutor(parallel::Communicator& comm, Ops& ops,
                                                       const ModelWeights& weights,
                                                       ExpertPlacement placement,
                                                       float swiglu_limit, int64_t dim)
    : comm_(comm),
      ops_(ops),
      weights_(weights),
      placement_(std::move(placement)),
      replicas_(ReplicaSlots(placement_)),
      swiglu_limit_(swiglu_limit),
      dim_(dim),
      served_(std::vector<int64_t>(placement_.num_layers, placement_.num_logical)) {}

absl::Status CommunicatorExpertExecutor::Fail(absl::Status status) {
  phase_ = Phase::kIdle;
  recv_.clear();
  out_.clear();
  return status;
}

absl::Status CommunicatorExpertExecutor::Dispatch(int layer, std::span<const float> x,
                                                  const ExpertAssignments& a) {
  if (phase_ != Phase::kIdle) return absl::FailedPreconditionError("Dispatch: step open");
  if (layer < 0 || layer >= placement_.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dispatch: layer ", layer, " of ", placement_.num_layers));
  }
  if (a.tokens < 0 || a.topk <= 0 || static_cast<int64_t>(a.experts.size()) != a.tokens * a.topk ||
      a.weights.size() != a.experts.size() || static_cast<int64_t>(x.size()) != a.tokens * dim_) {
    return absl::InvalidArgumentError("Dispatch: bad shapes");
  }
  for (int32_t e : a.experts) {
    if (e < 0 || e >= placement_.num_logical) {
      return absl::InvalidArgumentError(
          absl::StrCat("Dispatch: expert ", e, " of ", placement_.num_logical));
    }
  }
  const int world = comm_.world_size(), rank = comm_.rank().value();
  const int64_t pairs = a.tokens * a.topk, st = stride();
  std::vector<int> slot(pairs);
  send_counts_.assign(world, 0);
  for (int64_t i = 0; i < pairs; ++i) {
    const std::vector<int>& reps = replicas_[layer][a.experts[i]];
    slot[i] = reps[(i / a.topk + rank) % static_cast<int64_t>(reps.size())];
    ++send_counts_[placement_.owner(slot[i])];
  }
  std::vector<int64_t> next = Offsets(send_counts_);
  std::vector<float> send(pairs * st);
  record_of_.resize(pairs);
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t r = next[placement_.owner(slot[i])]++;
    record_of_[i] = r;
    float* rec = send.data() + r * st;
    std::copy_n(x.data() + (i / a.topk) * dim_, dim_, rec);
    rec[dim_] = a.weights[i];
    const int32_t local = slot[i] % placement_.slots_per_rank;
    std::memcpy(rec + dim_ + 1, &local, sizeof(local));
  }
  // Record counts, then the records.
  recv_counts_.assign(world, 0);
  const std::vector<int64_t> ones(world, 1), index = Offsets(ones);
  absl::Status s = comm_.AllToAllV({.send = send_counts_.data(),
                                    .send_counts = ones,
                                    .send_offsets = index,
                                    .recv = recv_counts_.data(),
                                    .recv_counts = ones,
                                    .recv_offsets = index,
                                    .dtype = DataType::kInt64});
  if (!s.ok()) return Fail(s);
  for (int64_t c : recv_counts_) {
    if (c < 0) return Fail(absl::InternalError("Dispatch: a peer sent a negative count"));
  }
  const std::vector<int64_t> sc = Scaled(send_counts_, st), rc = Scaled(recv_counts_, st);
  const std::vector<int64_t> so = Offsets(sc), ro = Offsets(rc);
  recv_.assign(Sum(rc), 0.0f);
  s = comm_.AllToAllV({.send = send.data(),
                       .send_counts = sc,
                       .send_offsets = so,
                       .recv = recv_.data(),
                       .recv_counts = rc,
                       .recv_offsets = ro,
                       .dtype = DataType::kFloat32});
  if (!s.ok()) return Fail(s);
  layer_ = layer;
  tokens_ = a.tokens;
  topk_ = a.topk;
  experts_.assign(a.experts.begin(), a.experts.end());
  phase_ = Phase::kDispatched;
  return absl::OkStatus();
}

absl::Status CommunicatorExpertExecutor::RunExperts() {
  if (phase_ != Phase::kDispatched) return absl::FailedPreconditionError("RunExperts: no step");
  const int spr = placement_.slots_per_rank, rank = comm_.rank().value();
  const int64_t st = stride(), n = static_cast<int64_t>(recv_.size()) / st;
  std::vector<std::vector<int64_t>> by_slot(spr);
  for (int64_t j = 0; j < n; ++j) {
    int32_t local = -1;
    std::memcpy(&local, recv_.data() + j * st + dim_ + 1, sizeof(local));
    if (local < 0 || local >= spr) {
      return Fail(absl::InternalError(absl::StrCat("RunExperts: record for slot ", local)));
    }
    by_slot[local].push_back(j);
  }
  out_.assign(n * dim_, 0.0f);
  std::vector<float> xs, ws, ys;
  std::vector<int32_t> served;
  for (int s = 0; s < spr; ++s) {
    const std::vector<int64_t>& recs = by_slot[s];
    if (recs.empty()) continue;
    const int32_t logical = placement_.logical(layer_, rank * spr + s);
    const int64_t m = static_cast<int64_t>(recs.size());
    xs.resize(m * dim_);
    ws.resize(m);
    ys.resize(m * dim_);
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(recv_.data() + recs[r] * st, dim_, xs.data() + r * dim_);
      ws[r] = recv_[recs[r] * st + dim_];
    }
    absl::Status status = SwigluExpertForward(ops_, weights_.layers[layer_].ffn.experts[logical],
                                              xs, m, ws, swiglu_limit_, ys);
    if (!status.ok()) {
      return Fail(absl::Status(status.code(), absl::StrCat("layer ", layer_, " expert ", logical,
                                                           ": ", status.message())));
    }
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(ys.data() + r * dim_, dim_, out_.data() + recs[r] * dim_);
    }
    served.insert(served.end(), m, logical);
  }
  std::vector<float> unit(served.size(), 1.0f);
  served_.Record(layer_, {.experts = served,
                          .weights = unit,
                          .tokens = static_cast<int64_t>(served.size()),
                          .topk = 1});
  phase_ = Phase::kRan;
  return absl::OkStatus();
}

absl::Status CommunicatorExpertExecutor::Combine(std::span<float> y) {
  if (phase_ != Phase::kRan) return absl::FailedPreconditionError("Combine: experts not run");
  if (static_cast<int64_t>(y.size()) != tokens_ * dim_) {
    return Fail(absl::InvalidArgumentError("Combine: y size"));
  }
  const std::vector<int64_t> sc = Scaled(recv_counts_, dim_), rc = Scaled(send_counts_, dim_);
  const std::vector<int64_t> so = Offsets(sc), ro = Offsets(rc);
  std::vector<float> back(Sum(rc));
  absl::Status s = comm_.AllToAllV({.send = out_.data(),
                                    .send_counts = sc,
                                    .send_offsets = so,
                                    .recv = back.data(),
                                    .recv_counts = rc,
                                    .recv_offsets = ro,
                                    .dtype = DataType::kFloat32});
  if (!s.ok()) return Fail(s);
  std::fill(y.begin(), y.end(), 0.0f);
  std::vector<int> order(topk_);
  for (int64_t t = 0; t < tokens_; ++t) {
    const int32_t* e = experts_.data() + t * topk_;
    for (int k = 0; k < topk_; ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](int p, int q) { return e[p] < e[q]; });
    float* dst = y.data() + t * dim_;
    for (int k : order) {  // ascending expert id, as LocalExpertExecutor
      const float* src = back.data() + record_of_[t * topk_ + k] * dim_;
      for (int64_t c = 0; c < dim_; ++c) dst[c] += src[c];
    }
  }
  phase_ = Phase::kIdle;
  recv_.clear();
  out_.clear();
  return absl::OkStatus();
}

}  // namespace weir::model
