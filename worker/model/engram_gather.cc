#include "worker/model/engram_gather.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::model {
namespace {

int64_t ShardRows(int64_t rows, int world) { return (rows + world - 1) / world; }

}  // namespace

EngramRowRange EngramShardRange(int64_t rows, int rank, int world) {
  const int64_t per = ShardRows(rows, world);
  const int64_t begin = std::min(rows, rank * per);
  return {.begin = begin, .end = std::min(rows, begin + per)};
}

int EngramShardOwner(int64_t row, int64_t rows, int world) {
  return static_cast<int>(row / ShardRows(rows, world));
}

EngramRowFilter ShardedEngramRowFilter(int rank, int world) {
  return [rank, world](int /*layer*/, int64_t rows) { return EngramShardRange(rows, rank, world); };
}

absl::StatusOr<std::unique_ptr<LocalEngramGather>> LocalEngramGather::Create(
    const ModelConfig& config, Ops& ops, const ModelWeights& weights) {
  for (int layer : config.engram_layer_ids) {
    if (layer < 0 || layer >= static_cast<int>(weights.layers.size())) {
      return absl::InvalidArgumentError(absl::StrCat("Engram layer ", layer, " not in weights"));
    }
    const EngramWeights& e = weights.layers[layer].engram;
    if (e.row_begin != 0 || e.row_end != e.rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("Engram table of layer ", layer, " holds rows [", e.row_begin, ", ",
                       e.row_end, ") of ", e.rows, "; a local gather needs all"));
    }
  }
  return std::unique_ptr<LocalEngramGather>(
      new LocalEngramGather(ops, weights, config.engram_head_dim));
}

absl::Status LocalEngramGather::Gather(int layer, std::span<const int64_t> ids,
                                       std::span<float> out) {
  if (layer < 0 || layer >= static_cast<int>(weights_.layers.size()) ||
      !weights_.layers[layer].has_engram) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngramGather: layer ", layer, " has no Engram"));
  }
  if (out.size() != ids.size() * head_dim_) {
    return absl::InvalidArgumentError("EngramGather: output size");
  }
  if (ids.empty()) return absl::OkStatus();
  const EngramWeights& e = weights_.layers[layer].engram;
  return ops_.EngramLookup(e.table, e.scales, e.rows, head_dim_, ids, out);
}

}  // namespace weir::model
