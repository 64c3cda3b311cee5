// worker/model/tiny_checkpoint.h
//
// Generates a deterministic random checkpoint of a shipped config (e.g.
// models/random/tiny/config.json) into a directory and opens it: the fixture of the
// model tests and of the CPU model benchmark.
//
// Thread safety: pure function over the filesystem.

#ifndef WEIR_WORKER_MODEL_TINY_CHECKPOINT_H_
#define WEIR_WORKER_MODEL_TINY_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/checkpoint.h"

namespace weir::model {

// Reads `config_path`, writes GenerateCheckpoint(seed) into `dir` (replacing
// it) and returns Checkpoint::Open(dir). NOT_FOUND if the config is missing;
// otherwise the errors of ParseModelConfig / GenerateCheckpoint / Open.
absl::StatusOr<std::unique_ptr<Checkpoint>> GenerateAndOpenCheckpoint(
    const std::string& config_path, const std::string& dir, uint64_t seed);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_TINY_CHECKPOINT_H_
