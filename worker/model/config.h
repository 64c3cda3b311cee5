// worker/model/config.h
//
// ModelConfig: the DeepSeek-V4.1 text-model hyper-parameters, parsed from the
// official config.json (spec §4.1). Both key sets are accepted: the HF layout
// (`text_config` nested object, `rope_scaling`, top-level `quantization_config`)
// and the flat inference `config.json` (`dim`, `n_layers`, `kv_source_layers`,
// ...). Field names below follow the inference keys.
//
// Thread safety: ModelConfig is a value type; const access is thread-safe.

#ifndef WEIR_WORKER_MODEL_CONFIG_H_
#define WEIR_WORKER_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::model {

enum class ScoreFunc { kSqrtSoftplus, kSigmoid, kSoftmax };

struct ModelConfig {
  // --- shape
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t moe_inter_dim = 0;
  int n_layers = 0;      // backbone layers (40 for V4.1-Flash)
  int n_mtp_layers = 0;  // DSpark stages, layer ids n_layers .. n_layers+n_mtp_layers-1
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t rope_head_dim = 0;  // RoPE on the last rope_head_dim dims
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  double norm_eps = 0;
  // --- MoE
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t n_activated_experts = 0;
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
  double gate_temp = 1.0;
  bool norm_topk_prob = true;
  double route_scale = 1.0;
  double swiglu_limit = 0;
  // --- attention topology (CSA2)
  int64_t window_size = 0;
  std::vector<int> compress_ratios;  // [n_layers + n_mtp_layers]; 0 = SWA only
  std::vector<int> kv_source_layers;
  std::vector<int> index_source_layers;
  int candidate_source_layer = -1;  // -1 disables the candidate pool
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  // --- RoPE / YaRN
  double rope_theta = 10000;           // ratio-0 layers, no YaRN
  double compress_rope_theta = 10000;  // ratio>0 layers, with YaRN
  int64_t original_seq_len = 0;
  double rope_factor = 1;
  double beta_fast = 32;
  double beta_slow = 1;
  // --- mHC
  int64_t hc_mult = 0;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 0;
  // --- Engram
  std::vector<int> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;  // table rows per engram layer
  int engram_max_ngram_size = 0;
  int64_t engram_n_heads = 0;
  int64_t engram_head_dim = 0;
  int64_t engram_vocab_size = 0;
  int64_t engram_pad_id = 0;
  int64_t engram_compressed_vocab_size = 0;
  // --- DSpark
  int64_t dspark_block_size = 0;
  int64_t dspark_noise_token_id = 0;
  std::vector<int> dspark_target_layer_ids;
  int64_t dspark_markov_rank = 0;
  int64_t dspark_n_routed_experts = 0;
  int64_t dspark_n_activated_experts = 0;
  // --- special tokens (HF top level); -1 when absent
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  int64_t pad_token_id = -1;
  int64_t image_token_id = -1;
  // --- storage formats (quantization_config / dtype, expert_dtype, scale_fmt)
  std::string weight_dtype = "fp8";  // only "fp8" is supported
  std::string expert_dtype = "fp4";  // only "fp4" is supported
  std::string scale_fmt = "ue8m0";   // only "ue8m0" is supported
  int64_t fp8_block_size = 32;       // weight blocks are fp8_block_size^2
  int64_t fp4_block_size = 32;       // expert scales per fp4_block_size along K

  // --- derived quantities
  int num_total_layers() const { return n_layers + n_mtp_layers; }
  int64_t nope_head_dim() const { return head_dim - rope_head_dim; }
  // Rows of hc_*_fn / entries of hc_*_base: (2 + n) * n.
  int64_t hc_mix_dim() const { return (2 + hc_mult) * hc_mult; }
  // Input width of one grouped wo_a block: n_heads * head_dim / o_groups.
  int64_t o_group_in_dim() const { return n_heads * head_dim / o_groups; }
  // First CED decoder layer (encoder = [0, decoder_start)).
  int decoder_start() const { return n_layers / 2; }
  // Hash columns per Engram layer: (max_ngram - 1) * n_heads.
  int64_t engram_hash_cols() const { return (engram_max_ngram_size - 1) * engram_n_heads; }
  // Width of one flattened Engram lookup: hash_cols * head_dim.
  int64_t engram_embed_dim() const { return engram_hash_cols() * engram_head_dim; }
  // Width of DSpark main_hidden: dim * |dspark_target_layer_ids|.
  int64_t dspark_main_dim() const {
    return dim * static_cast<int64_t>(dspark_target_layer_ids.size());
  }
  // Compression ratio of layer `layer` (DSpark stages included).
  // REQUIRES: 0 <= layer < num_total_layers().
  int compress_ratio(int layer) const { return compress_ratios[layer]; }
  bool is_dspark_stage(int layer) const { return layer >= n_layers; }
  // Index into engram_layer_ids, or -1 if `layer` has no Engram module.
  int engram_index(int layer) const;
};

// Parses and validates a config.json text. Returns INVALID_ARGUMENT naming the
// key when the JSON is malformed, a required key is missing, a value has the
// wrong type or range, or the layer topology is inconsistent (spec §4.2 rules).
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text);

// Reads and parses `path`. NOT_FOUND if the file cannot be read.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Checks the invariants ParseModelConfig enforces; exposed for configs built in
// code. INVALID_ARGUMENT naming the offending key.
absl::Status ValidateModelConfig(const ModelConfig& config);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_CONFIG_H_
