// worker/model/checkpoint_layout.h
//
// The tensors an official-layout V4.1 checkpoint holds for a ModelConfig
// (spec §4.10), with their storage formats (spec §4.9):
//   kFp8Block  <name>.weight F8_E4M3 [rows, cols] + <name>.scale F8_E8M0
//              [ceil(rows/b), ceil(cols/b)], b = fp8_block_size (32)
//   kMxfp4     <name>.weight I8 [rows, cols/2] (e2m1 pairs, element 2k in the
//              low nibble) + <name>.scale F8_E8M0 [rows, cols/32]
//   kFp8Rows   <name>.weight F8_E4M3 [rows, cols] + <name>.scale F8_E8M0
//              [rows, cols/32] (Engram tables)
//   kBf16/kF32 <name> as is.
// Which layers own which tensors follows LayerRoles.
//
// Thread safety: pure functions.

#ifndef WEIR_WORKER_MODEL_CHECKPOINT_LAYOUT_H_
#define WEIR_WORKER_MODEL_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "worker/model/config.h"
#include "worker/model/safetensors.h"
#include "worker/model/safetensors_writer.h"

namespace weir::model {

enum class ParamFormat { kBf16, kF32, kFp8Block, kMxfp4, kFp8Rows };

// How gen_model draws a parameter's values (uniform, fixed-seed).
enum class ParamInit {
  kLinear,    // U(+-sqrt(3/cols)): unit-variance outputs for unit-variance inputs
  kNorm,      // 1 + U(+-0.1)
  kUnit,      // U(+-sqrt(3)): embeddings, Engram rows
  kSmall,     // U(+-0.05): router biases
  kSigned,    // U(+-1): attention sinks, hc base
  kPositive,  // U(0.1, 1): hc scales
};

struct ParamSpec {
  // Full tensor name for kBf16/kF32; the prefix before ".weight"/".scale"
  // for the quantized formats (e.g. "layers.0.attn.wq_a").
  std::string name;
  ParamFormat format = ParamFormat::kBf16;
  std::vector<int64_t> shape;  // logical shape, [rows, cols] for matrices
  ParamInit init = ParamInit::kLinear;
};

// Every parameter of the model: top level, backbone layers, DSpark stages.
// REQUIRES: ValidateModelConfig(config).ok().
std::vector<ParamSpec> ModelParams(const ModelConfig& config);

// The stored tensors of `param` (one, or weight + scale).
std::vector<TensorDecl> StoredTensors(const ParamSpec& param, const ModelConfig& config);

// The stored tensors of the whole model, in ModelParams order.
std::vector<TensorDecl> ExpectedTensors(const ModelConfig& config);

// Sum of the byte sizes of ExpectedTensors(config).
int64_t ExpectedCheckpointBytes(const ModelConfig& config);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_CHECKPOINT_LAYOUT_H_
