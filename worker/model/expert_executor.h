// worker/model/expert_executor.h
//
// ExpertExecutor: how a MoE layer's routed experts run, separated from
// routing so that experts can live in other processes (expert parallelism).
// Per MoE layer and forward the model calls, in order:
//   Dispatch(layer, x, assignments)  hand each token row to its experts' owners
//   RunExperts()                     run every expert held here on its rows
//   Combine(y)                       y[t] = sum over t's experts, ascending
//                                    expert id, of bf16 expert outputs (fp32 sum)
// The combine order is part of the contract: it makes results independent of
// where experts run. LocalExpertExecutor (all experts in-process) is the
// reference implementation.
//
// ExpertLoad counts routed (token, expert) pairs per (layer, logical expert),
// for the load balancer.
//
// Thread safety: an executor serves one forward at a time.

#ifndef WEIR_WORKER_MODEL_EXPERT_EXECUTOR_H_
#define WEIR_WORKER_MODEL_EXPERT_EXECUTOR_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace weir::model {

// The gate's choice for a batch of tokens: [tokens, topk] each.
struct ExpertAssignments {
  std::span<const int32_t> experts;  // logical expert ids
  std::span<const float> weights;    // route weights (already normalized and scaled)
  int64_t tokens = 0;
  int topk = 0;
};

class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;

  // Starts a MoE step of `layer` for x [tokens, dim]. `x` and `a` must stay
  // valid until Combine returns. INVALID_ARGUMENT on an expert id outside the
  // layer's experts or bad shapes; FAILED_PRECONDITION if a step is open.
  virtual absl::Status Dispatch(int layer, std::span<const float> x,
                                const ExpertAssignments& a) = 0;
  // Runs the dispatched rows. FAILED_PRECONDITION without a Dispatch.
  virtual absl::Status RunExperts() = 0;
  // Writes y [tokens, dim] and closes the step. FAILED_PRECONDITION out of order.
  virtual absl::Status Combine(std::span<float> y) = 0;
};

// Routed-token counters [layers][experts]; layers of different widths allowed.
class ExpertLoad {
 public:
  // experts_per_layer[l] = number of logical experts of layer l.
  explicit ExpertLoad(std::vector<int64_t> experts_per_layer);

  // Adds one count per (token, k) of `a` to `layer`. Ids are assumed valid
  // (checked by the executor).
  void Record(int layer, const ExpertAssignments& a);
  // Count of `expert` in `layer`. REQUIRES: both in range.
  int64_t count(int layer, int expert) const { return counts_[layer][expert]; }
  const std::vector<int64_t>& layer_counts(int layer) const { return counts_[layer]; }
  int num_layers() const { return static_cast<int>(counts_.size()); }
  void Reset();

 private:
  std::vector<std::vector<int64_t>> counts_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_EXPERT_EXECUTOR_H_
