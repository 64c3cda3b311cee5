// gen_model: writes a deterministic random checkpoint of a model config in the
// official V4.1 layout (config.json + safetensors shards + index), then opens
// it again through the checkpoint checker.
//
//   tools/bazel run //tools:gen_model -- --config=models/tiny/config.json \
//       --out=/tmp/tiny --seed=1

#include <chrono>
#include <string>

#include "absl/flags/flag.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/read_file.h"
#include "worker/model/checkpoint.h"
#include "worker/model/checkpoint_writer.h"
#include "worker/model/config.h"

ABSL_FLAG(std::string, config, "", "path of the model config.json");
ABSL_FLAG(std::string, out, "", "output directory (created if missing)");
ABSL_FLAG(uint64_t, seed, 0, "seed of the value generator");
ABSL_FLAG(int64_t, max_shard_mb, 2048, "largest shard size in MiB");
ABSL_FLAG(float, gate_bias_skew, 0,
          "added to the routing bias of the first quarter of each MoE layer's experts "
          "(a skewed router for load-balancing tests)");

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "gen_model --config=FILE --out=DIR [--seed=N]", "gen_model");
  const std::string config_path = absl::GetFlag(FLAGS_config);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (config_path.empty() || out.empty()) {
    WEIR_LOG(ERROR) << "--config and --out are required";
    return 2;
  }
  const absl::StatusOr<std::string> text = weir::ReadFile(config_path);
  if (!text.ok()) {
    WEIR_LOG(ERROR) << text.status();
    return 1;
  }
  absl::StatusOr<weir::model::ModelConfig> config = weir::model::ParseModelConfig(*text);
  if (!config.ok()) {
    WEIR_LOG(ERROR) << config_path << ": " << config.status();
    return 1;
  }
  weir::model::GenerateOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.gate_bias_skew = absl::GetFlag(FLAGS_gate_bias_skew);
  options.max_shard_bytes = absl::GetFlag(FLAGS_max_shard_mb) << 20;
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = weir::model::GenerateCheckpoint(*config, *text, out, options); !s.ok()) {
    WEIR_LOG(ERROR) << s;
    return 1;
  }
  absl::StatusOr<std::unique_ptr<weir::model::Checkpoint>> ckpt = weir::model::Checkpoint::Open(out);
  if (!ckpt.ok()) {
    WEIR_LOG(ERROR) << "written checkpoint does not check: " << ckpt.status();
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WEIR_LOG(INFO) << "wrote " << out << ": " << (*ckpt)->tensors().size() << " tensors, "
                 << (*ckpt)->tensors().files().size() << " shards, "
                 << weir::model::ExpectedCheckpointBytes(*config) / (1 << 20) << " MiB in "
                 << seconds << " s";
  return 0;
}
