#include "tools/bench/decode_floor.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "worker/model/checkpoint_layout.h"
#include "worker/model/layer_roles.h"

namespace weir::bench {
namespace {

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

StoredWeightBytes CountStoredWeights(const model::ModelConfig& config) {
  StoredWeightBytes out;
  double experts = 0;
  for (const model::ParamSpec& param : model::ModelParams(config)) {
    if (StartsWith(param.name, "mtp.")) continue;  // DSpark stages: not run here
    double bytes = 0;
    for (const model::TensorDecl& t : model::StoredTensors(param, config)) {
      bytes += static_cast<double>(t.num_bytes());
    }
    if (param.name == "embed.weight") {
      out.embed_row = bytes / static_cast<double>(config.vocab_size);
    } else if (param.name.find(".engram.embed") != std::string::npos) {
      continue;  // table rows: only the hashed rows are read (not counted)
    } else if (param.name.find(".experts.") != std::string::npos &&
               param.name.find("shared_experts") == std::string::npos) {
      experts += bytes;
    } else {
      out.dense += bytes;
    }
  }
  const double count = static_cast<double>(config.n_layers) *
                       static_cast<double>(config.n_routed_experts);
  out.per_expert = count > 0 ? experts / count : 0;
  return out;
}

double StoredKvBytes(const model::ModelConfig& c, int64_t position) {
  const model::LayerRoles roles(c);
  const double window_row = static_cast<double>(c.head_dim) * (1.0 + 1.0 / 32);
  const double compressed_row = static_cast<double>(c.head_dim) * (0.5 + 1.0 / 16);
  const double index_row = static_cast<double>(c.index_head_dim) * (0.5 + 1.0 / 32);
  double bytes = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerRole& role = roles[l];
    bytes += static_cast<double>(std::min<int64_t>(position + 1, c.window_size)) * window_row;
    if (role.ratio > 0) {
      const int64_t visible = (position + 1) / role.ratio;
      bytes += static_cast<double>(std::min<int64_t>(visible, c.index_topk)) * compressed_row;
      if (role.index_source == l) bytes += static_cast<double>(visible) * index_row;
    }
  }
  return bytes;
}

double PrefillFlopsPerToken(const model::ModelConfig& c, int64_t position) {
  double matrix = 0, experts = 0;
  for (const model::ParamSpec& param : model::ModelParams(c)) {
    if (!StartsWith(param.name, "layers.") || param.shape.size() != 2) continue;
    if (param.name.find(".engram.") != std::string::npos) continue;
    const double elements = static_cast<double>(param.shape[0] * param.shape[1]);
    if (param.name.find(".experts.") != std::string::npos &&
        param.name.find("shared_experts") == std::string::npos) {
      experts += elements;
    } else {
      matrix += elements;
    }
  }
  const double per_expert =
      experts / static_cast<double>(c.n_layers) / static_cast<double>(c.n_routed_experts);
  double flops = 2 * matrix + 2 * per_expert * c.n_layers * c.n_activated_experts;
  const model::LayerRoles roles(c);
  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerRole& role = roles[l];
    double keys = static_cast<double>(std::min<int64_t>(position + 1, c.window_size));
    if (role.ratio > 0) {
      const int64_t visible = (position + 1) / role.ratio;
      keys += static_cast<double>(std::min<int64_t>(visible, c.index_topk));
      if (role.index_source == l) {
        flops += 2.0 * c.index_n_heads * c.index_head_dim * static_cast<double>(visible);
      }
    }
    flops += 2 * 2.0 * c.n_heads * c.head_dim * keys;  // QK^T and PV
  }
  return flops;
}

double ExpectedExpertsHit(int64_t experts, int64_t per_token, int64_t tokens) {
  if (experts <= 0 || per_token <= 0 || tokens <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(std::min(per_token, experts)) /
                                static_cast<double>(experts);
  return static_cast<double>(experts) * (1.0 - std::pow(miss, static_cast<double>(tokens)));
}

double StoredStepBytes(const model::ModelConfig& c, int batch, int64_t position) {
  const StoredWeightBytes w = CountStoredWeights(c);
  return w.dense +
         w.per_expert * c.n_layers *
             ExpectedExpertsHit(c.n_routed_experts, c.n_activated_experts, batch) +
         batch * (w.embed_row + StoredKvBytes(c, position));
}

}  // namespace weir::bench
