#include "coordinator/model_provisioning.h"

#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "worker/model/checkpoint_writer.h"
#include "worker/model/config.h"

namespace weir::coordinator {
namespace fs = std::filesystem;

namespace {

bool HasShards(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors") return true;
  }
  return false;
}

}  // namespace

std::string DefaultModelCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/weir/models";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/weir/models";
  }
  return (fs::temp_directory_path() / "weir-models").string();
}

absl::StatusOr<std::string> EnsureWeights(const std::string& model_dir,
                                          const std::string& cache_dir, uint64_t seed) {
  const fs::path source(model_dir);
  if (HasShards(source)) return model_dir;
  std::ifstream in(source / "config.json", std::ios::binary);
  if (!in) return absl::NotFoundError("no config.json in " + model_dir);
  const std::string config_json((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  absl::StatusOr<model::ModelConfig> config = model::ParseModelConfig(config_json);
  if (!config.ok()) return config.status();

  const std::string name = source.filename().string();
  const fs::path target = fs::path(cache_dir) / absl::StrFormat(
      "%s-%016x-seed%d", name, XXH64(config_json.data(), config_json.size(), 0), seed);
  auto copy_tokenizer = [&source](const fs::path& dir) {
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      std::error_code ignored;
      if (fs::exists(source / file) && !fs::exists(dir / file)) {
        fs::copy_file(source / file, dir / file, ignored);
      }
    }
  };
  if (HasShards(target)) {
    copy_tokenizer(target);  // A cache made from a config without tokenizer files.
    return target.string();
  }

  WEIR_LOG(INFO) << "generating random weights for " << name << " (seed " << seed << ") in "
                 << target.string();
  const fs::path staging = target.string() + absl::StrCat(".tmp", getpid());
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  if (ec) return absl::InternalError("cannot create " + staging.string() + ": " + ec.message());
  if (absl::Status s = model::GenerateCheckpoint(*config, config_json, staging.string(),
                                                 model::GenerateOptions{.seed = seed});
      !s.ok()) {
    fs::remove_all(staging, ec);
    return s;
  }
  copy_tokenizer(staging);
  fs::rename(staging, target, ec);
  if (ec) {
    fs::remove_all(staging);
    // Another coordinator may have won the race; its result is as good.
    if (HasShards(target)) return target.string();
    return absl::InternalError("cannot move the checkpoint to " + target.string());
  }
  return target.string();
}

}  // namespace weir::coordinator
