// worker/model/model_runtime.h
//
// ModelRuntime: what one forward of the V4.1 model needs besides its inputs
// (configuration, roles, weights, RoPE tables, ops, expert executor, load
// counters), bundled so that the target forward (model.cc) and the DSpark
// draft (dspark.cc) share one view. Internal to worker/model.
//
// Thread safety: one forward at a time (ops and executor are stateful).

#ifndef WEIR_WORKER_MODEL_MODEL_RUNTIME_H_
#define WEIR_WORKER_MODEL_MODEL_RUNTIME_H_

#include <vector>

#include "kernels/cpu/rope.h"
#include "worker/model/config.h"
#include "worker/model/engram_layer.h"
#include "worker/model/expert_executor.h"
#include "worker/model/layer_roles.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

struct ModelRuntime {
  const ModelConfig& config;
  const LayerRoles& roles;
  const ModelWeights& weights;
  const std::vector<const kernels::cpu::RopeTable*>& rope;  // per layer
  Ops& ops;
  ExpertExecutor& executor;
  ExpertLoad* load;  // may be null
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_MODEL_RUNTIME_H_
