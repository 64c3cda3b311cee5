// coordinator/model_provisioning.h
//
// EnsureWeights: makes sure the model directory the workers load has
// weights. A directory with safetensors shards is used as it is; a directory
// with only config.json (the embedded tiny model) gets a deterministic random
// checkpoint generated once into a cache directory keyed by the config's
// content and the seed, so every later start reuses it.
//
// Thread safety: one caller per cache directory at a time; a generation runs
// in a temporary directory that is renamed into place, so a crashed or
// concurrent generation never leaves a half-written checkpoint behind.

#ifndef WEIR_COORDINATOR_MODEL_PROVISIONING_H_
#define WEIR_COORDINATOR_MODEL_PROVISIONING_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace weir::coordinator {

// Returns the directory to load: `model_dir` itself if it holds
// `*.safetensors` files, else `<cache_dir>/<name>-<config hash>-seed<seed>`
// (generated if missing, with config.json and the tokenizer files copied).
// NOT_FOUND if config.json is missing; the parse/generation errors otherwise.
absl::StatusOr<std::string> EnsureWeights(const std::string& model_dir,
                                          const std::string& cache_dir, uint64_t seed);

// The default cache directory: $XDG_CACHE_HOME/weir/models, else
// $HOME/.cache/weir/models, else <tmp>/weir-models.
std::string DefaultModelCacheDir();

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_MODEL_PROVISIONING_H_
