// worker/model/communicator_expert_executor.h
//
// CommunicatorExpertExecutor: the ExpertExecutor of expert parallelism. This
// rank holds only the routed experts of its physical slots (ExpertPlacement);
// each MoE step of a backbone layer is a collective over a
// parallel::Communicator that every rank of the group enters, with its own
// tokens (possibly none):
//   Dispatch:   pick a replica slot per (token, expert) (expert_placement.h),
//               all-to-all-v of the record counts, then all-to-all-v of the
//               records [x row (dim) | route weight | local slot] to the
//               slots' owners (per destination in (token, k) order);
//   RunExperts: group the received records by local slot (in source-rank,
//               then arrival order) and run each slot's expert once over them;
//   Combine:    all-to-all-v of the [dim] outputs back in record order, then
//               y[t] = sum over t's experts in ascending expert id of the bf16
//               outputs, fp32, from 0 -- the same arithmetic as
//               LocalExpertExecutor, so results are bit-identical to it
//               (experts are batch-invariant on the CPU backend).
// The contents of floats travel as bits; nothing is reduced on the wire.
//
// served() counts the (token, expert) rows this rank computed per (layer,
// logical expert); summed over ranks it equals the routed counts summed over
// ranks (Model::expert_load()).
//
// Errors: INVALID_ARGUMENT on bad shapes or expert ids (then nothing is sent:
// the caller must not let that happen on one rank only, Model never does);
// UNAVAILABLE from the communicator (timeout, dead peer); INTERNAL if a peer
// sent records that do not fit this rank's slots.
//
// Thread safety: one step at a time, on the communicator's thread.

#ifndef WEIR_WORKER_MODEL_COMMUNICATOR_EXPERT_EXECUTOR_H_
#define WEIR_WORKER_MODEL_COMMUNICATOR_EXPERT_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/communicator.h"
#include "worker/model/expert_executor.h"
#include "worker/model/expert_placement.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

class CommunicatorExpertExecutor : public ExpertExecutor {
 public:
  // INVALID_ARGUMENT if the placement is invalid, its world size differs from
  // the communicator's, it has more layers than `weights`, its logical count
  // differs from a layer's experts, or an expert of one of this rank's slots
  // is not loaded (shape [.., dim]) in `weights`. Does not take ownership:
  // `comm`, `ops` and `weights` must outlive the executor.
  static absl::StatusOr<std::unique_ptr<CommunicatorExpertExecutor>> Create(
      parallel::Communicator& comm, Ops& ops, const ModelWeights& weights,
      ExpertPlacement placement, float swiglu_limit);

  absl::Status Dispatch(int layer, std::span<const float> x, const ExpertAssignments& a) override;
  absl::Status RunExperts() override;
  absl::Status Combine(std::span<float> y) override;

  // Switches to `placement` between steps (EPLB commit). The experts of this
  // rank's new slots must already be loaded in the weights the executor
  // reads. INVALID_ARGUMENT (nothing changes) under Create's conditions or
  // for another shape (layers, logical experts, model dimension);
  // FAILED_PRECONDITION inside a step.
  absl::Status SetPlacement(ExpertPlacement placement);

  // Rows computed here per (layer, logical expert).
  ExpertLoad& served() { return served_; }
  const ExpertPlacement& placement() const { return placement_; }
  int rank() const { return comm_.rank().value(); }

 private:
  CommunicatorExpertExecutor(parallel::Communicator& comm, Ops& ops, const ModelWeights& weights,
                             ExpertPlacement placement, float swiglu_limit, int64_t dim);
  int64_t stride() const { return dim_ + 2; }  // floats per dispatched record
  absl::Status Fail(absl::Status status);      // closes the step, returns status

  parallel::Communicator& comm_;
  Ops& ops_;
  const ModelWeights& weights_;
  ExpertPlacement placement_;
  std::vector<std::vector<std::vector<int>>> replicas_;  // [layer][logical] -> slots
  const float swiglu_limit_;
  const int64_t dim_;
  ExpertLoad served_;

  // Open step (between Dispatch and Combine).
  enum class Phase { kIdle, kDispatched, kRan } phase_ = Phase::kIdle;
  int layer_ = -1;
  int64_t tokens_ = 0;
  std::vector<int32_t> experts_;  // [tokens * topk] copy of the assignment
  int topk_ = 0;
  std::vector<int64_t> record_of_;                  // [tokens * topk] -> index in the send order
  std::vector<int64_t> send_counts_, recv_counts_;  // records per peer
  std::vector<float> recv_;                         // [received, stride]
  std::vector<float> out_;                          // [received, dim] expert outputs
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_COMMUNICATOR_EXPERT_EXECUTOR_H_
