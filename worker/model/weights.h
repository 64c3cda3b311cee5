// worker/model/weights.h
//
// ModelWeights: every parameter of a V4.1 checkpoint (spec §4.10) loaded into
// per-layer structs in the form the CPU backend computes with: linear layers
// as DenseWeight (exactly dequantized fp32 values plus the FP8-activation flag
// of their stored format), norms / hc / sinks / biases as fp32 vectors. The
// Engram tables (the bulk of a real checkpoint) stay FP8 in the checkpoint's
// mapping and are dequantized row by row on lookup.
//
// Thread safety: immutable after LoadModelWeights; concurrent reads are safe.

#ifndef WEIR_WORKER_MODEL_WEIGHTS_H_
#define WEIR_WORKER_MODEL_WEIGHTS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/checkpoint.h"
#include "worker/model/config.h"
#include "worker/model/layer_roles.h"
#include "worker/model/ops.h"

namespace weir::model {

struct HcWeights {
  std::vector<float> fn;     // [(2+n)*n, n*dim]
  std::vector<float> base;   // [(2+n)*n]
  std::vector<float> scale;  // [3]
};

struct AttentionWeights {
  DenseWeight wq_a, wq_b, wkv, wo_b;
  std::vector<DenseWeight> wo_a;  // [o_groups] blocks [o_lora_rank, o_group_in_dim], bf16 values
  std::vector<float> q_norm, kv_norm, attn_sink;
  // kv sources (LayerRole::has_compressor): compressor and index-key projection.
  DenseWeight comp_wkv, comp_wgate;  // wgate only at ratio > 1
  std::vector<float> comp_norm;
  DenseWeight index_wk;
  std::vector<float> index_k_norm;
  // index sources (LayerRole::has_indexer).
  DenseWeight index_wq_b, index_weights_proj;
};

struct ExpertWeightsF32 {
  DenseWeight w1, w2, w3;  // [inter, dim], [dim, inter], [inter, dim]
};

struct MoeWeights {
  std::vector<float> gate;     // [experts, dim] fp32
  std::vector<float> bias;     // [experts]
  std::vector<float> bias_vl;  // [experts]
  std::vector<ExpertWeightsF32> experts;
  ExpertWeightsF32 shared;
};

// An Engram table, or the rows [row_begin, row_end) of it that this process
// holds (EngramRowFilter); the other rows of the mapping are never read.
struct EngramWeights {
  std::span<const uint8_t> table;   // e4m3 [row_end - row_begin, head_dim], in the mapping
  std::span<const uint8_t> scales;  // E8M0 [row_end - row_begin, head_dim/32]
  int64_t rows = 0;                 // rows of the whole table
  int64_t row_begin = 0;            // first held row (table[0] is row row_begin)
  int64_t row_end = 0;              // one past the last held row
  DenseWeight wkv;                  // [(n+1)*dim, engram_embed_dim]
  std::vector<float> gate_weight;   // [n, dim] = q_weight * k_weight
};

struct BlockWeights {
  std::vector<float> attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
  bool has_engram = false;
  EngramWeights engram;
};

struct DsparkWeights {
  DenseWeight main_proj;             // stage 0: [dim, dspark_main_dim]
  std::vector<float> main_norm;      // stage 0
  std::vector<float> norm;           // last stage
  std::vector<float> markov_embed;   // last stage: markov_w1 [vocab, rank]
  DenseWeight markov_head;           // last stage: markov_w2 [vocab, rank]
  DenseWeight confidence;            // last stage: [1, dim + rank]
};

struct ModelWeights {
  std::vector<float> embed;  // [vocab, dim]
  std::vector<float> norm;   // [dim]
  DenseWeight head;          // [vocab, dim]
  std::vector<BlockWeights> layers;  // backbone then DSpark stages
  DsparkWeights dspark;              // empty when n_mtp_layers == 0
};

// KeepBf16Form on every DenseWeight of `weights` that CpuOps::Matmul reads
// (all but the head: the CPU backend's products then read half the bytes);
// returns how many got the form.
int64_t KeepBf16Forms(ModelWeights& weights);

// Which routed experts of the backbone layers (0 <= layer < n_layers) to
// load: filter(layer, logical expert). An expert it rejects stays an empty
// ExpertWeightsF32 (out = in = 0) in MoeWeights::experts. DSpark stages always
// load every expert. Empty = load all.
using ExpertFilter = std::function<bool(int layer, int64_t expert)>;

// Rows [begin, end) of one Engram table.
struct EngramRowRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// Which rows of each Engram table to hold: filter(layer, table rows) for the
// backbone layer `layer` (one of engram_layer_ids) returns a range within
// [0, table rows) (empty allowed). Rows outside it are not referenced by
// EngramWeights, so their pages of the mapping are never touched. Empty =
// hold every row.
using EngramRowFilter = std::function<EngramRowRange(int layer, int64_t rows)>;

// Loads every parameter (routed experts of the backbone as `filter` says,
// Engram rows as `engram_filter` says).
// Errors: NOT_FOUND naming a missing tensor, INVALID_ARGUMENT naming a tensor
// whose dtype or shape does not fit, or an Engram row range outside the table.
// REQUIRES: `checkpoint` holds `config`'s layout and outlives the result
// (Engram tables are views into its mapping).
absl::StatusOr<ModelWeights> LoadModelWeights(const ModelConfig& config, const LayerRoles& roles,
                                              const Checkpoint& checkpoint,
                                              const ExpertFilter& filter = {},
                                              const EngramRowFilter& engram_filter = {});

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_WEIGHTS_H_
