#include "worker/model/layer_roles.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weir::model {
namespace {

bool Contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

int LatestAtOrBefore(const std::vector<int>& sources, int layer) {
  int found = -1;
  for (int s : sources) {
    if (s <= layer) found = s;
  }
  return found;
}

}  // namespace

const char* AttentionRoleName(AttentionRole role) {
  switch (role) {
    case AttentionRole::kSwaOnly:
      return "swa";
    case AttentionRole::kFull:
      return "full";
    case AttentionRole::kReuse:
      return "reuse";
    case AttentionRole::kReindex:
      return "reindex";
  }
  return "?";
}

LayerRoles::LayerRoles(const ModelConfig& c) {
  layers_.resize(c.num_total_layers());
  for (int layer = 0; layer < c.num_total_layers(); ++layer) {
    LayerRole& r = layers_[layer];
    r.layer = layer;
    r.ratio = c.compress_ratio(layer);
    r.is_dspark_stage = c.is_dspark_stage(layer);
    r.is_decoder = !r.is_dspark_stage && layer >= c.decoder_start();
    r.has_engram = c.engram_index(layer) >= 0;
    r.is_dspark_target = c.n_mtp_layers > 0 && Contains(c.dspark_target_layer_ids, layer);
    if (r.ratio == 0 || r.is_dspark_stage) continue;
    r.kv_source = LatestAtOrBefore(c.kv_source_layers, layer);
    r.index_source = LatestAtOrBefore(c.index_source_layers, layer);
    const bool kv = r.kv_source == layer;
    const bool idx = r.index_source == layer;
    r.has_compressor = kv;
    r.has_indexer = idx;
    r.attention = kv ? AttentionRole::kFull : idx ? AttentionRole::kReindex : AttentionRole::kReuse;
    r.produces_candidates = layer == c.candidate_source_layer;
    if (r.attention == AttentionRole::kReindex && c.candidate_source_layer >= 0 &&
        c.candidate_source_layer < layer) {
      r.candidate_source = c.candidate_source_layer;
    }
  }
}

std::string LayerRoles::DebugString() const {
  std::string out;
  for (const LayerRole& r : layers_) {
    absl::StrAppend(&out, r.layer, " r=", r.ratio, " ", AttentionRoleName(r.attention));
    if (r.kv_source >= 0) absl::StrAppend(&out, " kv=", r.kv_source, " idx=", r.index_source);
    if (r.candidate_source >= 0) absl::StrAppend(&out, " pool=", r.candidate_source);
    if (r.produces_candidates) absl::StrAppend(&out, " pool-producer");
    if (r.is_decoder) absl::StrAppend(&out, " decoder");
    if (r.has_engram) absl::StrAppend(&out, " engram");
    if (r.is_dspark_target) absl::StrAppend(&out, " dspark-target");
    if (r.is_dspark_stage) absl::StrAppend(&out, " dspark-stage");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace weir::model
