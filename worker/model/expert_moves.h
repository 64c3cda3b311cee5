// worker/model/expert_moves.h
//
// Moving routed experts between ranks when the load balancer changes the
// expert placement (EPLB): plan which rank sends which expert to which, run
// the exchange over a parallel::Communicator (weights travel between ranks,
// they are never read from the checkpoint again), and install the result in
// a model between two steps.
//
//   std::vector<ExpertMove> moves = PlanExpertMoves(current, next);
//   // on every rank, at about the same time (collective):
//   ASSIGN_OR_RETURN(StagedExperts staged, ExchangeExperts(comm, moves, model.weights()));
//   // later, between steps, on the step thread of every rank:
//   RETURN_IF_ERROR(InstallPlacement(model, executor, next, std::move(staged)));
//
// The plan is a pure function of the two placements, so every rank computes
// the same one without talking. A rank gains logical expert e of layer l
// when one of its slots holds e in `next` and none did in `current`; the
// sender is one of e's current holders, chosen as holders[(l + e + dst) mod
// |holders|] (ascending ranks) to spread the sending over replicas.
//
// Wire format of one expert: w1 values, w3 values, w2 values (fp32, row
// major), in plan order per destination; the receiver knows the shapes from
// an expert of the same layer it already holds (all routed experts of a
// layer share them).
//
// Thread safety: ExchangeExperts only reads the weights, so it may run on
// another thread (over another communicator) while steps run; InstallPlacement
// writes them and must run between forwards on the model's thread.

#ifndef WEIR_WORKER_MODEL_EXPERT_MOVES_H_
#define WEIR_WORKER_MODEL_EXPERT_MOVES_H_

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/communicator.h"
#include "worker/model/communicator_expert_executor.h"
#include "worker/model/expert_placement.h"
#include "worker/model/model.h"
#include "worker/model/weights.h"

namespace weir::model {

struct ExpertMove {
  int layer = 0;
  int32_t expert = 0;  // logical id
  int src = 0;         // rank that sends
  int dst = 0;         // rank that receives
  friend bool operator==(const ExpertMove&, const ExpertMove&) = default;
};

// Moves from `current` to `next`, ordered by (dst, layer, expert).
// REQUIRES: both valid (ValidatePlacement) with the same layers, logical
// experts and world size.
std::vector<ExpertMove> PlanExpertMoves(const ExpertPlacement& current,
                                        const ExpertPlacement& next);

struct StagedExperts {
  // (layer, logical expert) -> weights received for this rank.
  std::map<std::pair<int, int32_t>, ExpertWeightsF32> experts;
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
};

// Sends the experts this rank is the `src` of and receives those it is the
// `dst` of, in one all-to-all-v over `comm` (collective: every rank calls it
// with the same moves, including ranks with nothing to move).
// INVALID_ARGUMENT (before any message) if a move names a layer or expert
// out of range, this rank must send an expert it does not hold, or it
// receives into a layer where it holds no expert (shapes unknown); the
// communicator's errors otherwise (UNAVAILABLE on a dead peer).
absl::StatusOr<StagedExperts> ExchangeExperts(parallel::Communicator& comm,
                                              std::span<const ExpertMove> moves,
                                              const ModelWeights& weights, int num_layers);

// Switches `model` (whose backbone runs on `executor`) to `next`: moves the
// staged experts in, frees the experts no slot of this rank holds any more,
// and sets the executor's placement. Checks first and changes nothing on
// error: INVALID_ARGUMENT if an expert of this rank's new slots is neither
// held nor staged, or the executor refuses `next`.
absl::Status InstallPlacement(Model& model, CommunicatorExpertExecutor& executor,
                              const ExpertPlacement& next, StagedExperts staged);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_EXPERT_MOVES_H_
