// ValidateModelConfig: the consistency rules of spec §4.1/§4.2 that the
// reference's ModelArgs enforces, plus the divisibility the storage formats need.

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/model/config.h"

namespace weir::model {
namespace {

// Inference key -> HF text_config key, where they differ (spec §4.1).
constexpr std::pair<const char*, const char*> kHfNames[] = {
    {"dim", "hidden_size"},
    {"moe_inter_dim", "moe_intermediate_size"},
    {"n_layers", "num_hidden_layers"},
    {"n_mtp_layers", "num_nextn_predict_layers"},
    {"n_heads", "num_attention_heads"},
    {"rope_head_dim", "qk_rope_head_dim"},
    {"norm_eps", "rms_norm_eps"},
    {"n_activated_experts", "num_experts_per_tok"},
    {"route_scale", "routed_scaling_factor"},
    {"window_size", "sliding_window"},
    {"kv_source_layers", "kv_source_layer_ids"},
    {"index_source_layers", "index_source_layer_ids"},
    {"candidate_source_layer", "candidate_source_layer_id"},
    {"engram_pad_id", "engram_pad_token_id"},
    {"dspark_n_activated_experts", "dspark_num_experts_per_tok"},
};

// Names the key in both layouts: "'kv_source_layers' (HF 'kv_source_layer_ids')".
absl::Status Bad(absl::string_view key, absl::string_view why) {
  for (const auto& [inference, hf] : kHfNames) {
    if (key == inference) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: key '", key, "' (HF '", hf, "') ", why));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("config: key '", key, "' ", why));
}

// Latest entry of sorted `sources` that is <= layer, or -1.
int LatestAtOrBefore(const std::vector<int>& sources, int layer) {
  int found = -1;
  for (int s : sources) {
    if (s <= layer) found = s;
  }
  return found;
}

absl::Status CheckSources(const ModelConfig& c, const std::vector<int>& sources,
                          absl::string_view key) {
  for (size_t i = 0; i < sources.size(); ++i) {
    const int s = sources[i];
    if (i > 0 && s <= sources[i - 1]) return Bad(key, "must be strictly increasing");
    if (s >= c.n_layers) return Bad(key, absl::StrCat("names layer ", s, " outside the backbone"));
    if (c.compress_ratios[s] == 0) {
      return Bad(key, absl::StrCat("names layer ", s, " whose compress ratio is 0"));
    }
  }
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const int ratio = c.compress_ratios[layer];
    if (ratio == 0) continue;
    const int src = LatestAtOrBefore(sources, layer);
    if (src < 0 || c.compress_ratios[src] != ratio) {
      return Bad(key, absl::StrCat("gives layer ", layer, " (ratio ", ratio,
                                   ") no earlier source with the same ratio"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDims(const ModelConfig& c) {
  constexpr int64_t kQuantBlock = 32;  // FP8/FP4 activation and KV blocks (spec §4.9)
  if (c.dim % c.fp4_block_size != 0 || c.dim % kQuantBlock != 0) {
    return Bad("dim", "must be a multiple of 32 and of fp4_block_size");
  }
  if (c.moe_inter_dim % c.fp4_block_size != 0 || c.moe_inter_dim % kQuantBlock != 0) {
    return Bad("moe_inter_dim", "must be a multiple of 32 and of fp4_block_size");
  }
  if (c.head_dim % kQuantBlock != 0) return Bad("head_dim", "must be a multiple of 32");
  if (c.rope_head_dim % 2 != 0 || c.rope_head_dim >= c.head_dim) {
    return Bad("rope_head_dim", "must be even and smaller than head_dim");
  }
  if (c.index_head_dim % kQuantBlock != 0 || c.rope_head_dim >= c.index_head_dim) {
    return Bad("index_head_dim", "must be a multiple of 32 and larger than rope_head_dim");
  }
  if (c.n_heads % c.o_groups != 0) return Bad("o_groups", "must divide n_heads");
  if (c.n_activated_experts > c.n_routed_experts) {
    return Bad("n_activated_experts", "must not exceed n_routed_experts");
  }
  if (!(c.norm_eps > 0)) return Bad("norm_eps", "must be positive");
  if (!(c.hc_eps > 0)) return Bad("hc_eps", "must be positive");
  if (!(c.gate_temp > 0)) return Bad("gate_temp", "must be positive");
  if (!(c.route_scale > 0)) return Bad("route_scale", "must be positive");
  if (!(c.swiglu_limit >= 0)) return Bad("swiglu_limit", "must be non-negative");
  if (!(c.rope_theta > 0)) return Bad("rope_theta", "must be positive");
  if (!(c.compress_rope_theta > 0)) return Bad("compress_rope_theta", "must be positive");
  if (!(c.rope_factor > 0)) return Bad("rope_factor", "must be positive");
  if (c.weight_dtype != "fp8") return Bad("dtype", absl::StrCat("'", c.weight_dtype, "' unsupported"));
  if (c.expert_dtype != "fp4") {
    return Bad("expert_dtype", absl::StrCat("'", c.expert_dtype, "' unsupported"));
  }
  if (c.scale_fmt != "ue8m0") {
    return Bad("scale_fmt", absl::StrCat("'", c.scale_fmt, "' unsupported"));
  }
  if (c.image_token_id >= c.vocab_size) return Bad("image_token_id", "must be < vocab_size");
  return absl::OkStatus();
}

absl::Status CheckCandidates(const ModelConfig& c) {
  const int cand = c.candidate_source_layer;
  if (cand < 0) return absl::OkStatus();
  const auto& idx = c.index_source_layers;
  if (cand >= c.n_layers || std::find(idx.begin(), idx.end(), cand) == idx.end()) {
    return Bad("candidate_source_layer", "must be an index source layer");
  }
  if (c.candidate_block_size <= 0) return Bad("candidate_block_size", "must be positive");
  if (c.candidate_topk_blocks <= 0) return Bad("candidate_topk_blocks", "must be positive");
  // A Reindex layer restricts its scores to the pool, which indexes the
  // candidate source's compressed KV: both must read the same kv source.
  const int cand_kv = LatestAtOrBefore(c.kv_source_layers, cand);
  for (int s : idx) {
    if (s > cand && LatestAtOrBefore(c.kv_source_layers, s) != cand_kv) {
      return Bad("candidate_source_layer",
                 absl::StrCat("pool of layer ", cand, " cannot serve index source ", s,
                              ", which reads another kv source"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEngramAndDspark(const ModelConfig& c) {
  if (c.engram_layer_ids.size() != c.engram_num_embeddings.size()) {
    return Bad("engram_num_embeddings", "must have one entry per engram_layer_ids entry");
  }
  std::set<int> seen;
  for (int layer : c.engram_layer_ids) {
    if (layer >= c.n_layers || !seen.insert(layer).second) {
      return Bad("engram_layer_ids", "must be distinct backbone layers");
    }
  }
  if (!c.engram_layer_ids.empty()) {
    if (c.engram_head_dim % 32 != 0) return Bad("engram_head_dim", "must be a multiple of 32");
    if (c.engram_pad_id >= c.vocab_size) return Bad("engram_pad_id", "must be < vocab_size");
  }
  for (int layer = c.n_layers; layer < c.num_total_layers(); ++layer) {
    if (c.compress_ratios[layer] != 0) {
      return Bad("compress_ratios", absl::StrCat("entry ", layer, " (a DSpark stage) must be 0"));
    }
  }
  if (c.n_mtp_layers == 0) return absl::OkStatus();
  if (c.dspark_target_layer_ids.empty()) return Bad("dspark_target_layer_ids", "is empty");
  seen.clear();
  for (int layer : c.dspark_target_layer_ids) {
    if (layer >= c.n_layers || !seen.insert(layer).second) {
      return Bad("dspark_target_layer_ids", "must be distinct backbone layers");
    }
  }
  if (c.dspark_noise_token_id >= c.vocab_size) {
    return Bad("dspark_noise_token_id", "must be < vocab_size");
  }
  if (c.dspark_n_activated_experts > c.dspark_n_routed_experts) {
    return Bad("dspark_n_activated_experts", "must not exceed dspark_n_routed_experts");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& c) {
  if (c.n_layers <= 0) return Bad("n_layers", "must be positive");
  if (c.n_mtp_layers < 0) return Bad("n_mtp_layers", "must be non-negative");
  if (static_cast<int>(c.compress_ratios.size()) != c.num_total_layers()) {
    return Bad("compress_ratios", absl::StrCat("has ", c.compress_ratios.size(),
                                               " entries, expected n_layers + n_mtp_layers = ",
                                               c.num_total_layers()));
  }
  if (absl::Status s = CheckDims(c); !s.ok()) return s;
  if (absl::Status s = CheckSources(c, c.kv_source_layers, "kv_source_layers"); !s.ok()) return s;
  if (absl::Status s = CheckSources(c, c.index_source_layers, "index_source_layers"); !s.ok()) {
    return s;
  }
  for (int s : c.kv_source_layers) {
    if (!std::binary_search(c.index_source_layers.begin(), c.index_source_layers.end(), s)) {
      return Bad("index_source_layers", absl::StrCat("must contain kv source layer ", s));
    }
  }
  if (absl::Status s = CheckCandidates(c); !s.ok()) return s;
  return CheckEngramAndDspark(c);
}

}  // namespace weir::model
