// worker/model/checkpoint_writer.h
//
// Writes a deterministic random checkpoint of any ModelConfig in the official
// layout (checkpoint_layout.h): values are drawn per tensor from a fixed-seed
// generator keyed by (seed, parameter name), so a tensor's bytes do not depend
// on sharding or on the other tensors, then stored with the official rules
// (FP8 e4m3 + UE8M0 per 32x32 tile, MXFP4 experts, FP8 Engram rows + E8M0 per
// 32, bf16 / fp32 otherwise; kernels/cpu/weight_quant.h).
//
// Thread safety: pure functions over the filesystem.

#ifndef WEIR_WORKER_MODEL_CHECKPOINT_WRITER_H_
#define WEIR_WORKER_MODEL_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/checkpoint_layout.h"
#include "worker/model/config.h"

namespace weir::model {

struct GenerateOptions {
  uint64_t seed = 0;
  // Shards are cut before a tensor that would push one past this size (a
  // single larger tensor gets a shard of its own).
  int64_t max_shard_bytes = int64_t{2} << 30;
  // Added to the routing bias (gate.bias) of the first quarter (at least one)
  // of every backbone MoE layer's experts: a skewed router, for
  // load-balancing tests. 0 = the plain generated values.
  float gate_bias_skew = 0;
};

// Returns the fp32 values gen_model draws for `param` [prod(shape)] (before
// quantization). Deterministic in (seed, param.name, shape, init).
std::vector<float> GenerateParamValues(const ParamSpec& param, uint64_t seed);

// Writes into `out_dir` (created if needed): config.json (= `config_json`
// verbatim), model-0000k-of-0000n.safetensors shards and
// model.safetensors.index.json. REQUIRES: `config` is ParseModelConfig(config_json).
// Errors: INTERNAL on I/O failure; INVALID_ARGUMENT from the quantizers.
absl::Status GenerateCheckpoint(const ModelConfig& config, std::string_view config_json,
                                const std::string& out_dir, const GenerateOptions& options);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_CHECKPOINT_WRITER_H_
