#include "worker/model/expert_parallel_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::model {

absl::StatusOr<ExpertParallelModel> CreateExpertParallelModel(
    const ModelConfig& config, const Checkpoint& checkpoint, const ExpertPlacement& placement,
    parallel::Communicator& comm, ModelOptions options, ExpertParallelOptions ep_options) {
  RETURN_IF_ERROR(ValidatePlacement(placement));
  if (placement.num_layers != config.n_layers || placement.num_logical != config.n_routed_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert placement covers ", placement.num_layers, " layers x ", placement.num_logical,
        " experts, the model has ", config.n_layers, " x ", config.n_routed_experts));
  }
  if (placement.world_size != comm.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("expert placement for ", placement.world_size,
                                                   " ranks, communicator has ", comm.world_size()));
  }
  const int rank = comm.rank().value();
  options.expert_filter = OwnedExpertFilter(placement, rank);
  absl::Status executor_status;
  CommunicatorExpertExecutor* executor = nullptr;
  const float limit = static_cast<float>(config.swiglu_limit);
  options.make_executor = [&](Ops& ops,
                              const ModelWeights& weights) -> std::unique_ptr<ExpertExecutor> {
    absl::StatusOr<std::unique_ptr<CommunicatorExpertExecutor>> e =
        CommunicatorExpertExecutor::Create(comm, ops, weights, placement, limit);
    if (!e.ok()) {
      executor_status = e.status();
      return nullptr;
    }
    executor = e->get();
    return std::move(*e);
  };
  CommunicatorEngramGather* engram = nullptr;
  if (ep_options.shard_engram) {
    options.engram_row_filter = ShardedEngramRowFilter(rank, comm.world_size());
    options.make_engram_gather =
        [&](const ModelConfig& c, Ops& ops,
            const ModelWeights& weights) -> absl::StatusOr<std::unique_ptr<EngramGather>> {
      ASSIGN_OR_RETURN(std::unique_ptr<CommunicatorEngramGather> g,
                       CommunicatorEngramGather::Create(comm, c, ops, weights));
      engram = g.get();
      return std::unique_ptr<EngramGather>(std::move(g));
    };
  } else {
    options.engram_row_filter = nullptr;
    options.make_engram_gather = nullptr;
  }
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(config, checkpoint, std::move(options));
  RETURN_IF_ERROR(executor_status);
  if (!model.ok()) return model.status();
  return ExpertParallelModel{.model = std::move(*model), .executor = executor, .engram = engram};
}

}  // namespace weir::model
