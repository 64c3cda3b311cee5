// worker/model/checkpoint.h
//
// Checkpoint: a model directory (config.json + safetensors shards in the
// official layout) opened and checked against the tensor list that its config
// implies (checkpoint_layout.h). After Open succeeds every expected tensor is
// present with the expected dtype and shape, so consumers can fetch bytes
// without re-checking.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir));
//   ASSIGN_OR_RETURN(std::span<const uint8_t> w, ckpt->Bytes("layers.0.attn.wq_a.weight"));
//
// Thread safety: immutable after Open; concurrent const access is safe.

#ifndef WEIR_WORKER_MODEL_CHECKPOINT_H_
#define WEIR_WORKER_MODEL_CHECKPOINT_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/safetensors_set.h"

namespace weir::model {

struct CheckpointReport {
  std::vector<std::string> missing;     // expected tensor names absent from the set
  std::vector<std::string> mismatched;  // "name: expected F8_E4M3 [4, 8], found BF16 [4, 8]"
  std::vector<std::string> unexpected;  // present but not expected (e.g. a vision tower)

  // OK when nothing is missing or mismatched; otherwise INVALID_ARGUMENT
  // whose message counts both and names the first few of each.
  absl::Status ToStatus() const;
};

// Compares `tensors` with ExpectedTensors(config). Unquantized float tensors
// (stored BF16 or F32 in the layout) are accepted in either of those dtypes;
// every other dtype and every shape must match exactly.
// REQUIRES: ValidateModelConfig(config).ok().
CheckpointReport CheckCheckpoint(const ModelConfig& config, const SafetensorsSet& tensors);

class Checkpoint {
 public:
  // Opens `dir`/config.json and the shards of `dir` (SafetensorsSet::Open),
  // then checks them. Errors: those of LoadModelConfig and SafetensorsSet::Open,
  // or INVALID_ARGUMENT from CheckCheckpoint naming missing/mismatched tensors.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const SafetensorsSet& tensors() const { return *tensors_; }
  // Tensors present that the layout does not expect.
  const std::vector<std::string>& unexpected() const { return unexpected_; }

  // Returns the bytes of tensor `name`, valid while this lives. NOT_FOUND if absent.
  absl::StatusOr<std::span<const uint8_t>> Bytes(std::string_view name) const;
  // Returns the header entry of `name`, or nullptr.
  const TensorInfo* Info(std::string_view name) const;

 private:
  Checkpoint(ModelConfig config, std::unique_ptr<SafetensorsSet> tensors,
             std::vector<std::string> unexpected)
      : config_(std::move(config)), tensors_(std::move(tensors)),
        unexpected_(std::move(unexpected)) {}

  ModelConfig config_;
  std::unique_ptr<SafetensorsSet> tensors_;
  std::vector<std::string> unexpected_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_CHECKPOINT_H_
