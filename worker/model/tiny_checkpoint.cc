#include "worker/model/tiny_checkpoint.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/read_file.h"
#include "base/status_macros.h"
#include "worker/model/checkpoint_writer.h"

namespace weir::model {

absl::StatusOr<std::unique_ptr<Checkpoint>> GenerateAndOpenCheckpoint(
    const std::string& config_path, const std::string& dir, uint64_t seed) {
  ASSIGN_OR_RETURN(const std::string json, ReadFile(config_path));
  ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(json));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  GenerateOptions options;
  options.seed = seed;
  RETURN_IF_ERROR(GenerateCheckpoint(config, json, dir, options));
  return Checkpoint::Open(dir);
}

}  // namespace weir::model
