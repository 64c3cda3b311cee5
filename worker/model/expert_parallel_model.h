// worker/model/expert_parallel_model.h
//
// Builds a Model whose backbone MoE layers run expert-parallel over a
// parallel::Communicator (one rank of an EP group):
//
//   ExpertPlacement placement = ...;  // from the expert map (proto ExpertMap)
//   ASSIGN_OR_RETURN(ExpertParallelModel ep,
//                    CreateExpertParallelModel(config, checkpoint, placement, comm));
//   // every step, on every rank (rows may be empty):
//   ASSIGN_OR_RETURN(auto logits, ep.model->ForwardBatch(states, tokens, start_pos));
//
// The rank loads the dense / attention / shared-expert weights, the routed
// experts of its own slots (ExpertPlacement) and every DSpark-stage expert;
// the other routed experts are never read from the checkpoint. By default
// the Engram tables are row-sharded too: the rank holds its
// EngramShardRange of every table and each Engram layer of each step is a
// CommunicatorEngramGather exchange (communicator_engram_gather.h); with
// `shard_engram = false` every rank holds whole tables and looks up locally. Model::Draft
// runs the DSpark stages with local experts and takes part in no collective
// (the stages have their own expert count, outside the expert map), so ranks
// may draft independently. Model::Forward on such a model is a one-row
// ForwardBatch step.
//
// Thread safety: the model is used from the communicator's thread only.

#ifndef WEIR_WORKER_MODEL_EXPERT_PARALLEL_MODEL_H_
#define WEIR_WORKER_MODEL_EXPERT_PARALLEL_MODEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "parallel/communicator.h"
#include "worker/model/checkpoint.h"
#include "worker/model/communicator_engram_gather.h"
#include "worker/model/communicator_expert_executor.h"
#include "worker/model/config.h"
#include "worker/model/expert_placement.h"
#include "worker/model/model.h"

namespace weir::model {

struct ExpertParallelModel {
  std::unique_ptr<Model> model;
  // The model's backbone executor (owned by the model): served() counters.
  CommunicatorExpertExecutor* executor = nullptr;
  // The model's Engram gather (owned by the model) when the tables are
  // row-sharded, else null: served() / requested() counters.
  CommunicatorEngramGather* engram = nullptr;
};

struct ExpertParallelOptions {
  // Row-shard the Engram tables over the ranks (EngramShardRange) and gather
  // rows over the communicator; false = every rank holds whole tables.
  bool shard_engram = true;
};

// INVALID_ARGUMENT if the placement is invalid, covers other than
// config.n_layers layers or config.n_routed_experts experts, or was made for
// another world size than comm's; otherwise the errors of Model::Create.
// `options.expert_filter` / `make_executor` are overwritten, and with
// `ep_options.shard_engram` also `engram_row_filter` / `make_engram_gather`.
// REQUIRES: `checkpoint` and `comm` outlive the model. Not collective (no
// message is exchanged), but every rank of `comm` must build one before the
// first step.
absl::StatusOr<ExpertParallelModel> CreateExpertParallelModel(
    const ModelConfig& config, const Checkpoint& checkpoint, const ExpertPlacement& placement,
    parallel::Communicator& comm, ModelOptions options = {}, ExpertParallelOptions ep_options = {});

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_EXPERT_PARALLEL_MODEL_H_
