// checkpoint_check: opens a model directory the way the worker does
// (Checkpoint::Open: config, shards, index, the tensor list of spec §4.10) and
// then scans the stored values: no NaN E8M0 scale (0xFF), no NaN e4m3 code
// (0x7F / 0xFF), no non-finite BF16 / F32 value. For checkpoints written by
// other tools (tools/train/export.py).
//
//   tools/bazel run //tools:checkpoint_check -- --dir=/tmp/tiny_trained
//
// Exit status 0 when the checkpoint checks, 1 otherwise.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/flags/flag.h"
#include "base/init.h"
#include "base/logging.h"
#include "worker/model/checkpoint.h"

ABSL_FLAG(std::string, dir, "", "checkpoint directory (config.json + safetensors shards)");

namespace {

using weir::model::DType;

// Returns the number of invalid elements of one tensor.
int64_t CountInvalid(DType dtype, std::span<const uint8_t> bytes) {
  int64_t bad = 0;
  switch (dtype) {
    case DType::kF8E8M0:
      for (uint8_t b : bytes) bad += (b == 0xFF);
      break;
    case DType::kF8E4M3:
      for (uint8_t b : bytes) bad += ((b & 0x7F) == 0x7F);
      break;
    case DType::kBF16:
      for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
        const uint32_t bits = (static_cast<uint32_t>(bytes[i]) | bytes[i + 1] << 8) << 16;
        float v;
        std::memcpy(&v, &bits, 4);
        bad += !std::isfinite(v);
      }
      break;
    case DType::kF32:
      for (size_t i = 0; i + 3 < bytes.size(); i += 4) {
        float v;
        std::memcpy(&v, bytes.data() + i, 4);
        bad += !std::isfinite(v);
      }
      break;
    default:
      break;
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "checkpoint_check --dir=DIR", "checkpoint_check");
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    WEIR_LOG(ERROR) << "--dir is required";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<weir::model::Checkpoint>> ckpt = weir::model::Checkpoint::Open(dir);
  if (!ckpt.ok()) {
    WEIR_LOG(ERROR) << dir << ": " << ckpt.status();
    return 1;
  }
  const weir::model::SafetensorsSet& set = (*ckpt)->tensors();
  int64_t bad_tensors = 0;
  for (const std::string& name : set.Names()) {
    const weir::model::SafetensorsSet::Entry* e = set.Find(name);
    const int64_t bad = CountInvalid(e->info->dtype, set.Data(*e));
    if (bad > 0) {
      ++bad_tensors;
      WEIR_LOG(ERROR) << name << ": " << bad << " NaN/Inf values or codes";
    }
  }
  if (bad_tensors > 0) return 1;
  WEIR_LOG(INFO) << dir << ": OK, " << set.size() << " tensors in " << set.files().size()
                 << " shards, " << (*ckpt)->unexpected().size() << " unexpected";
  return 0;
}
