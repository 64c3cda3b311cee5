// worker/step_executor_test_util.h
//
// What the step executor tests share: the tiny model to run plans on (the
// checkpoint generated once per test binary and seed, model/
// tiny_model_test_util.h), the first error of an executed plan, and the
// ranks of an expert-parallel group on threads.
//
// Thread safety: as the model tests' fixtures (one test thread);
// OnExpertParallelRanks runs its body on one thread a rank.

#ifndef WEIR_WORKER_STEP_EXECUTOR_TEST_UTIL_H_
#define WEIR_WORKER_STEP_EXECUTOR_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/fake_communicator.h"
#include "worker/model/expert_parallel_model.h"
#include "worker/model/expert_placement.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"
#include "worker/sampling/sampling_params.h"
#include "worker/step_executor.h"

namespace weir::worker {

// The plan's error, else the first row's error (OK when every row ran).
inline absl::Status FirstError(const absl::StatusOr<std::vector<RowOutcome>>& r) {
  if (!r.ok()) return r.status();
  for (const RowOutcome& o : *r) {
    if (!o.status.ok()) return o.status;
  }
  return absl::OkStatus();
}

// The two samplings of the speculative tests' rows: greedy, and seeded
// nucleus sampling with a repetition penalty.
inline sampling::SamplingParams GreedySampling() {
  sampling::SamplingParams p;
  p.temperature = 0.0f;
  return p;
}
inline sampling::SamplingParams SeededSampling() {
  sampling::SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.1f;
  p.seed = 7;
  return p;
}

// The tiny model with weights generated from `seed` (a failure is a test
// failure; `model` is null then).
struct TinyModelFixture {
  explicit TinyModelFixture(uint64_t seed)
      : checkpoint(&model::TinyCheckpoint(seed)), model(model::NewModelOrFail(*checkpoint)) {}

  const model::Checkpoint* checkpoint;
  std::unique_ptr<model::Model> model;
};

// Runs `body(rank, model)` for every rank of a `world`-rank expert-parallel
// group, each on a thread of its own with its rank's model of `checkpoint`
// (identity placement) over a FakeCommunicator world (a collective not
// entered by every rank times out after 30 s). Returns each rank's status.
inline std::vector<absl::Status> OnExpertParallelRanks(
    const model::Checkpoint& checkpoint, int world,
    const std::function<absl::Status(int rank, model::Model& model)>& body) {
  const model::ModelConfig& config = checkpoint.config();
  const model::ExpertPlacement placement =
      model::IdentityPlacement(config.n_layers, config.n_routed_experts, world);
  auto comms = parallel::FakeCommunicator::CreateWorld(world, {.timeout = absl::Seconds(30)});
  return parallel::RunOnRankThreads(comms, [&](parallel::Communicator& c) -> absl::Status {
    absl::StatusOr<model::ExpertParallelModel> ep =
        model::CreateExpertParallelModel(config, checkpoint, placement, c);
    if (!ep.ok()) return ep.status();
    return body(c.rank().value(), *ep->model);
  });
}

}  // namespace weir::worker

#endif  // WEIR_WORKER_STEP_EXECUTOR_TEST_UTIL_H_
