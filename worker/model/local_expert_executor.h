// worker/model/local_expert_executor.h
//
// LocalExpertExecutor: the ExpertExecutor with every routed expert of every
// layer in this process. Dispatch groups token rows per expert (in token
// order), RunExperts runs each expert once over its rows (expert ascending),
// Combine adds the bf16 outputs per token in ascending expert id.
//
// Thread safety: one step at a time; not thread-safe.

#ifndef WEIR_WORKER_MODEL_LOCAL_EXPERT_EXECUTOR_H_
#define WEIR_WORKER_MODEL_LOCAL_EXPERT_EXECUTOR_H_

#include <cstdint>
#include <span>
#include <vector>

#include "worker/model/expert_executor.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

class LocalExpertExecutor : public ExpertExecutor {
 public:
  // Does not take ownership: `ops` and `weights` must outlive this.
  LocalExpertExecutor(Ops& ops, const ModelWeights& weights, float swiglu_limit)
      : ops_(ops), weights_(weights), swiglu_limit_(swiglu_limit) {}

  absl::Status Dispatch(int layer, std::span<const float> x,
                        const ExpertAssignments& a) override;
  absl::Status RunExperts() override;
  absl::Status Combine(std::span<float> y) override;

 private:
  struct Work {
    std::vector<int64_t> rows;   // token rows routed to this expert, ascending
    std::vector<float> weights;  // their route weights
    std::vector<float> out;      // [rows, dim] expert outputs
  };

  Ops& ops_;
  const ModelWeights& weights_;
  float swiglu_limit_;
  // Open step (between Dispatch and Combine).
  enum class Phase { kIdle, kDispatched, kRan } phase_ = Phase::kIdle;
  int layer_ = -1;
  std::span<const float> x_;
  int64_t tokens_ = 0;
  std::vector<Work> work_;  // [experts of layer_]
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_LOCAL_EXPERT_EXECUTOR_H_
