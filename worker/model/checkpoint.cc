#include "worker/model/checkpoint.h"

#include <filesystem>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/model/checkpoint_layout.h"

namespace weir::model {
namespace {

constexpr size_t kListed = 8;  // names shown per category in an error

bool IsFloat(DType d) { return d == DType::kBF16 || d == DType::kF32; }

std::string Describe(DType dtype, const std::vector<int64_t>& shape) {
  const std::string_view name = DTypeName(dtype);
  return absl::StrCat(absl::string_view(name.data(), name.size()), " ", ShapeString(shape));
}

std::string FirstFew(const std::vector<std::string>& names) {
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), kListed));
  std::string out = absl::StrJoin(shown, "; ");
  if (names.size() > kListed) absl::StrAppend(&out, "; ... (", names.size() - kListed, " more)");
  return out;
}

}  // namespace

absl::Status CheckpointReport::ToStatus() const {
  if (missing.empty() && mismatched.empty()) return absl::OkStatus();
  std::string msg = absl::StrCat("checkpoint: ", missing.size(), " missing and ",
                                 mismatched.size(), " mismatched tensors");
  if (!missing.empty()) absl::StrAppend(&msg, "; missing: ", FirstFew(missing));
  if (!mismatched.empty()) absl::StrAppend(&msg, "; mismatched: ", FirstFew(mismatched));
  return absl::InvalidArgumentError(msg);
}

CheckpointReport CheckCheckpoint(const ModelConfig& config, const SafetensorsSet& tensors) {
  CheckpointReport report;
  absl::flat_hash_set<std::string> expected;
  for (const TensorDecl& want : ExpectedTensors(config)) {
    expected.insert(want.name);
    const SafetensorsSet::Entry* e = tensors.Find(want.name);
    if (e == nullptr) {
      report.missing.push_back(want.name);
      continue;
    }
    const TensorInfo& got = *e->info;
    const bool dtype_ok =
        got.dtype == want.dtype || (IsFloat(want.dtype) && IsFloat(got.dtype));
    if (!dtype_ok || got.shape != want.shape) {
      report.mismatched.push_back(absl::StrCat(want.name, ": expected ",
                                               Describe(want.dtype, want.shape), ", found ",
                                               Describe(got.dtype, got.shape)));
    }
  }
  for (const std::string& name : tensors.Names()) {
    if (!expected.contains(name)) report.unexpected.push_back(name);
  }
  return report;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  absl::StatusOr<ModelConfig> config =
      LoadModelConfig((std::filesystem::path(dir) / "config.json").string());
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(dir);
  if (!set.ok()) return set.status();
  CheckpointReport report = CheckCheckpoint(*config, **set);
  if (absl::Status s = report.ToStatus(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(dir, ": ", s.message()));
  }
  return std::unique_ptr<Checkpoint>(
      new Checkpoint(*std::move(config), *std::move(set), std::move(report.unexpected)));
}

absl::StatusOr<std::span<const uint8_t>> Checkpoint::Bytes(std::string_view name) const {
  const SafetensorsSet::Entry* e = tensors_->Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint has no tensor '", absl::string_view(name.data(), name.size()), "'"));
  }
  return tensors_->Data(*e);
}

const TensorInfo* Checkpoint::Info(std::string_view name) const {
  const SafetensorsSet::Entry* e = tensors_->Find(name);
  return e == nullptr ? nullptr : e->info;
}

}  // namespace weir::model
