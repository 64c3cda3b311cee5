#include "worker/model/config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/read_file.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/config_json.h"

namespace weir::model {
namespace {

using internal::ConfigObject;
using internal::Key;

constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int kMaxLayers = 4096;

absl::Status ReadShape(const ConfigObject& t, ModelConfig& c) {
  RETURN_IF_ERROR(t.Int({"vocab_size", "vocab_size"}, &c.vocab_size, true, 1, int64_t{1} << 31));
  RETURN_IF_ERROR(t.Int({"dim", "hidden_size"}, &c.dim, true, 1, kMaxDim));
  RETURN_IF_ERROR(t.Int({"moe_inter_dim", "moe_intermediate_size"}, &c.moe_inter_dim, true, 1,
                        kMaxDim));
  RETURN_IF_ERROR(t.Int({"n_layers", "num_hidden_layers"}, &c.n_layers, true, 1, kMaxLayers));
  RETURN_IF_ERROR(t.Int({"n_mtp_layers", "num_nextn_predict_layers"}, &c.n_mtp_layers, false, 0,
                        kMaxLayers));
  RETURN_IF_ERROR(t.Int({"n_heads", "num_attention_heads"}, &c.n_heads, true, 1, 4096));
  int64_t kv_heads = 1;
  RETURN_IF_ERROR(t.Int({"n_kv_heads", "num_key_value_heads"}, &kv_heads, false, 1, 1));
  RETURN_IF_ERROR(t.Int({"head_dim", "head_dim"}, &c.head_dim, true, 1, kMaxDim));
  RETURN_IF_ERROR(t.Int({"rope_head_dim", "qk_rope_head_dim"}, &c.rope_head_dim, true, 0,
                        kMaxDim));
  RETURN_IF_ERROR(t.Int({"q_lora_rank", "q_lora_rank"}, &c.q_lora_rank, true, 1, kMaxDim));
  RETURN_IF_ERROR(t.Int({"o_groups", "o_groups"}, &c.o_groups, true, 1, 4096));
  RETURN_IF_ERROR(t.Int({"o_lora_rank", "o_lora_rank"}, &c.o_lora_rank, true, 1, kMaxDim));
  RETURN_IF_ERROR(t.Float({"norm_eps", "rms_norm_eps"}, &c.norm_eps, true));
  return absl::OkStatus();
}

absl::Status ReadMoe(const ConfigObject& t, ModelConfig& c) {
  RETURN_IF_ERROR(t.Int({"n_routed_experts", "n_routed_experts"}, &c.n_routed_experts, true, 1,
                        65536));
  c.n_shared_experts = 1;
  RETURN_IF_ERROR(t.Int({"n_shared_experts", "n_shared_experts"}, &c.n_shared_experts, false, 0,
                        1));
  RETURN_IF_ERROR(t.Int({"n_activated_experts", "num_experts_per_tok"}, &c.n_activated_experts,
                        true, 1, 65536));
  std::string score = "sqrtsoftplus";
  const Key score_key{"score_func", "scoring_func"};
  RETURN_IF_ERROR(t.String(score_key, &score, false));
  if (score == "sqrtsoftplus") {
    c.score_func = ScoreFunc::kSqrtSoftplus;
  } else if (score == "sigmoid") {
    c.score_func = ScoreFunc::kSigmoid;
  } else if (score == "softmax") {
    c.score_func = ScoreFunc::kSoftmax;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("config: key '", t.Name(score_key), "' has unknown value '", score, "'"));
  }
  RETURN_IF_ERROR(t.Float({"gate_temp", "gate_temp"}, &c.gate_temp, false));
  RETURN_IF_ERROR(t.Bool({"norm_topk_prob", "norm_topk_prob"}, &c.norm_topk_prob, false));
  RETURN_IF_ERROR(t.Float({"route_scale", "routed_scaling_factor"}, &c.route_scale, true));
  RETURN_IF_ERROR(t.Float({"swiglu_limit", "swiglu_limit"}, &c.swiglu_limit, true));
  return absl::OkStatus();
}

absl::Status ReadAttention(const ConfigObject& t, ModelConfig& c) {
  RETURN_IF_ERROR(t.Int({"window_size", "sliding_window"}, &c.window_size, true, 1, 1 << 20));
  RETURN_IF_ERROR(t.IntList({"compress_ratios", "compress_ratios"}, &c.compress_ratios, true, 0,
                            1 << 16));
  RETURN_IF_ERROR(t.IntList({"kv_source_layers", "kv_source_layer_ids"}, &c.kv_source_layers,
                            true, 0, kMaxLayers));
  RETURN_IF_ERROR(t.IntList({"index_source_layers", "index_source_layer_ids"},
                            &c.index_source_layers, true, 0, kMaxLayers));
  RETURN_IF_ERROR(t.Int({"candidate_source_layer", "candidate_source_layer_id"},
                        &c.candidate_source_layer, false, -1, kMaxLayers));
  const bool pool = c.candidate_source_layer >= 0;
  RETURN_IF_ERROR(t.Int({"candidate_topk_blocks", "candidate_topk_blocks"},
                        &c.candidate_topk_blocks, pool, 0, int64_t{1} << 30));
  RETURN_IF_ERROR(t.Int({"candidate_block_size", "candidate_block_size"},
                        &c.candidate_block_size, pool, 0, int64_t{1} << 20));
  RETURN_IF_ERROR(t.Int({"index_n_heads", "index_n_heads"}, &c.index_n_heads, true, 1, 4096));
  RETURN_IF_ERROR(t.Int({"index_head_dim", "index_head_dim"}, &c.index_head_dim, true, 1, kMaxDim));
  RETURN_IF_ERROR(t.Int({"index_topk", "index_topk"}, &c.index_topk, true, 1, int64_t{1} << 30));
  RETURN_IF_ERROR(t.Float({"rope_theta", "rope_theta"}, &c.rope_theta, false));
  RETURN_IF_ERROR(t.Float({"compress_rope_theta", "compress_rope_theta"}, &c.compress_rope_theta,
                          true));
  RETURN_IF_ERROR(t.Int({"hc_mult", "hc_mult"}, &c.hc_mult, true, 1, 64));
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  RETURN_IF_ERROR(t.Int({"hc_sinkhorn_iters", "hc_sinkhorn_iters"}, &c.hc_sinkhorn_iters, false, 1,
                        1000));
  RETURN_IF_ERROR(t.Float({"hc_eps", "hc_eps"}, &c.hc_eps, false));
  return absl::OkStatus();
}

// YaRN keys: `rope_scaling{...}` (HF) or flat `rope_factor`, `original_seq_len`, ... (inference).
absl::Status ReadRope(const nlohmann::json& text, bool hf, const std::string& prefix,
                      ModelConfig& c) {
  c.rope_factor = 1;
  c.original_seq_len = 0;
  c.beta_fast = 32;
  c.beta_slow = 1;
  auto it = text.find("rope_scaling");
  if (it != text.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: key '", prefix, "rope_scaling' must be an object"));
    }
    ConfigObject s(*it, true, absl::StrCat(prefix, "rope_scaling."));
    RETURN_IF_ERROR(s.Float({"rope_factor", "factor"}, &c.rope_factor, true));
    RETURN_IF_ERROR(s.Int({"original_seq_len", "original_max_position_embeddings"},
                          &c.original_seq_len, true, 0, int64_t{1} << 40));
    RETURN_IF_ERROR(s.Float({"beta_fast", "beta_fast"}, &c.beta_fast, false));
    RETURN_IF_ERROR(s.Float({"beta_slow", "beta_slow"}, &c.beta_slow, false));
    return absl::OkStatus();
  }
  ConfigObject t(text, hf, prefix);
  RETURN_IF_ERROR(t.Float({"rope_factor", "rope_factor"}, &c.rope_factor, false));
  RETURN_IF_ERROR(t.Int({"original_seq_len", "original_seq_len"}, &c.original_seq_len, false, 0,
                        int64_t{1} << 40));
  RETURN_IF_ERROR(t.Float({"beta_fast", "beta_fast"}, &c.beta_fast, false));
  RETURN_IF_ERROR(t.Float({"beta_slow", "beta_slow"}, &c.beta_slow, false));
  return absl::OkStatus();
}

absl::Status ReadEngramAndDspark(const ConfigObject& t, ModelConfig& c) {
  RETURN_IF_ERROR(t.IntList({"engram_layer_ids", "engram_layer_ids"}, &c.engram_layer_ids, false,
                            0, kMaxLayers));
  const bool engram = !c.engram_layer_ids.empty();
  RETURN_IF_ERROR(t.IntList({"engram_num_embeddings", "engram_num_embeddings"},
                            &c.engram_num_embeddings, engram, 1, int64_t{1} << 40));
  RETURN_IF_ERROR(t.Int({"engram_max_ngram_size", "engram_max_ngram_size"},
                        &c.engram_max_ngram_size, engram, 2, 64));
  RETURN_IF_ERROR(t.Int({"engram_n_heads", "engram_n_heads"}, &c.engram_n_heads, engram, 1, 4096));
  RETURN_IF_ERROR(t.Int({"engram_head_dim", "engram_head_dim"}, &c.engram_head_dim, engram, 1,
                        kMaxDim));
  RETURN_IF_ERROR(t.Int({"engram_vocab_size", "engram_vocab_size"}, &c.engram_vocab_size, engram,
                        2, int64_t{1} << 40));
  RETURN_IF_ERROR(t.Int({"engram_pad_id", "engram_pad_token_id"}, &c.engram_pad_id, engram, 0,
                        int64_t{1} << 31));
  RETURN_IF_ERROR(t.Int({"engram_compressed_vocab_size", "engram_compressed_vocab_size"},
                        &c.engram_compressed_vocab_size, engram, 1, int64_t{1} << 31));
  const bool dspark = c.n_mtp_layers > 0;
  RETURN_IF_ERROR(t.Int({"dspark_block_size", "dspark_block_size"}, &c.dspark_block_size, dspark,
                        1, 1024));
  RETURN_IF_ERROR(t.Int({"dspark_noise_token_id", "dspark_noise_token_id"},
                        &c.dspark_noise_token_id, dspark, 0, int64_t{1} << 31));
  RETURN_IF_ERROR(t.IntList({"dspark_target_layer_ids", "dspark_target_layer_ids"},
                            &c.dspark_target_layer_ids, dspark, 0, kMaxLayers));
  RETURN_IF_ERROR(t.Int({"dspark_markov_rank", "dspark_markov_rank"}, &c.dspark_markov_rank,
                        dspark, 1, kMaxDim));
  RETURN_IF_ERROR(t.Int({"dspark_n_routed_experts", "dspark_n_routed_experts"},
                        &c.dspark_n_routed_experts, dspark, 1, 65536));
  RETURN_IF_ERROR(t.Int({"dspark_n_activated_experts", "dspark_num_experts_per_tok"},
                        &c.dspark_n_activated_experts, dspark, 1, 65536));
  return absl::OkStatus();
}

// Storage formats: HF `quantization_config` or inference `dtype`/`expert_dtype`/`scale_fmt`.
absl::Status ReadQuantization(const nlohmann::json& root, bool hf, ModelConfig& c) {
  auto q = root.find("quantization_config");
  if (hf && q != root.end() && !q->is_null()) {
    ConfigObject s(*q, true, "quantization_config.");
    if (!q->is_object()) {
      return absl::InvalidArgumentError("config: key 'quantization_config' must be an object");
    }
    std::string method = "fp8";
    RETURN_IF_ERROR(s.String({"quant_method", "quant_method"}, &method, true));
    if (method != "fp8") {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: key 'quantization_config.quant_method' = '", method, "' is unsupported"));
    }
    std::vector<int64_t> block;
    RETURN_IF_ERROR(s.IntList({"weight_block_size", "weight_block_size"}, &block, false, 1, 4096));
    if (s.Has({"weight_block_size", "weight_block_size"})) {
      if (block.size() != 2 || block[0] != block[1]) {
        return absl::InvalidArgumentError(
            "config: key 'quantization_config.weight_block_size' must be [b, b]");
      }
      c.fp8_block_size = block[0];
    }
    RETURN_IF_ERROR(s.String({"scale_fmt", "scale_fmt"}, &c.scale_fmt, false));
    RETURN_IF_ERROR(s.String({"expert_dtype", "expert_dtype"}, &c.expert_dtype, false));
    return absl::OkStatus();
  }
  ConfigObject t(root, false, "");
  RETURN_IF_ERROR(t.String({"dtype", "dtype"}, &c.weight_dtype, false));
  if (hf) c.weight_dtype = "fp8";  // HF `dtype` names the activation dtype, not storage.
  RETURN_IF_ERROR(t.String({"expert_dtype", "expert_dtype"}, &c.expert_dtype, false));
  RETURN_IF_ERROR(t.String({"scale_fmt", "scale_fmt"}, &c.scale_fmt, false));
  RETURN_IF_ERROR(t.Int({"fp8_block_size", "fp8_block_size"}, &c.fp8_block_size, false, 1, 4096));
  RETURN_IF_ERROR(t.Int({"fp4_block_size", "fp4_block_size"}, &c.fp4_block_size, false, 1, 4096));
  return absl::OkStatus();
}

absl::Status ReadSpecialTokens(const ConfigObject& top, const ConfigObject& text, ModelConfig& c) {
  const Key keys[] = {{"bos_token_id", "bos_token_id"},
                      {"eos_token_id", "eos_token_id"},
                      {"pad_token_id", "pad_token_id"},
                      {"image_token_id", "image_token_id"}};
  int64_t* outs[] = {&c.bos_token_id, &c.eos_token_id, &c.pad_token_id, &c.image_token_id};
  for (int i = 0; i < 4; ++i) {
    const ConfigObject& from = top.Has(keys[i]) ? top : text;
    RETURN_IF_ERROR(from.Int(keys[i], outs[i], false, -1, int64_t{1} << 31));
  }
  return absl::OkStatus();
}

}  // namespace

int ModelConfig::engram_index(int layer) const {
  auto it = std::find(engram_layer_ids.begin(), engram_layer_ids.end(), layer);
  return it == engram_layer_ids.end() ? -1 : static_cast<int>(it - engram_layer_ids.begin());
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text) {
  nlohmann::json root = nlohmann::json::parse(json_text.begin(), json_text.end(),
                                              /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("config: not valid JSON");
  if (!root.is_object()) return absl::InvalidArgumentError("config: top level is not an object");
  auto text_it = root.find("text_config");
  const bool hf = text_it != root.end();
  if (hf && !text_it->is_object()) {
    return absl::InvalidArgumentError("config: key 'text_config' must be an object");
  }
  const nlohmann::json& text = hf ? *text_it : root;
  const std::string prefix = hf ? "text_config." : "";
  ConfigObject t(text, hf, prefix);
  ModelConfig c;
  RETURN_IF_ERROR(ReadShape(t, c));
  RETURN_IF_ERROR(ReadMoe(t, c));
  RETURN_IF_ERROR(ReadAttention(t, c));
  RETURN_IF_ERROR(ReadRope(text, hf, prefix, c));
  RETURN_IF_ERROR(ReadEngramAndDspark(t, c));
  RETURN_IF_ERROR(ReadQuantization(root, hf, c));
  RETURN_IF_ERROR(ReadSpecialTokens(ConfigObject(root, hf, ""), t, c));
  // A ratio list covering only the backbone leaves the DSpark stages SWA-only.
  if (static_cast<int>(c.compress_ratios.size()) == c.n_layers) {
    c.compress_ratios.resize(c.num_total_layers(), 0);
  }
  RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(config.status().message(), " (in ", path, ")"));
  }
  return config;
}

}  // namespace weir::model
