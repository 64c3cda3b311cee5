#include "worker/model/tiny_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/model/checkpoint_writer.h"

namespace weir::model {

absl::StatusOr<std::unique_ptr<Checkpoint>> GenerateAndOpenCheckpoint(
    const std::string& config_path, const std::string& dir, uint64_t seed) {
  std::ifstream in(config_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", config_path));
  std::ostringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(json));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  GenerateOptions options;
  options.seed = seed;
  RETURN_IF_ERROR(GenerateCheckpoint(config, json, dir, options));
  return Checkpoint::Open(dir);
}

}  // namespace weir::model
