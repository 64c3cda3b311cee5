// Private to the device decoder's files (device_decoder*.cc): the Impl
// struct of DeviceDecoder and the device-side types and helpers its pieces
// share. Not a public header; nothing outside the `device_decoder` target
// and the testonly `device_decoder_synthetic` (which builds on Impl)
// includes it.
//
// Thread safety: as DeviceDecoder (one thread at a time).

#ifndef WEIR_WORKER_MODEL_DEVICE_DECODER_IMPL_H_
#define WEIR_WORKER_MODEL_DEVICE_DECODER_IMPL_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/weight_quant.h"
#include "kernels/cuda/attention/indexer_score.h"
#include "kernels/cuda/attention/kv_mirror.h"
#include "kernels/cuda/attention/sparse_attention.h"
#include "kernels/cuda/attention/sparse_decode_attention_sm90.h"
#include "kernels/cuda/attention/topk.h"
#include "kernels/cuda/decode/attention_index.h"
#include "kernels/cuda/decode/compressor_decode.h"
#include "kernels/cuda/decode/dot_rows.h"
#include "kernels/cuda/decode/kv_rows.h"
#include "kernels/cuda/decode/markov.h"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/decode/swiglu.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/dense/bf16_gemm_cutlass.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/dense/fake_quant.h"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.h"
#include "kernels/cuda/dense/fp8_lt_gemm.h"
#include "kernels/cuda/dense/fp8_reblock.h"
#include "kernels/cuda/dense/fp8_reblock_ref.h"
#include "kernels/cuda/dense/gemm_handle.h"
#include "kernels/cuda/dense/grouped_row_stable_matmul.h"
#include "kernels/cuda/dense/row_stable_matmul.h"
#include "kernels/cuda/dense/sampling.h"
#include "kernels/cuda/moe/engram.h"
#include "kernels/cuda/moe/hc_mix_split.h"
#include "kernels/cuda/moe/mhc.h"
#include "kernels/cuda/moe/moe_exchange.h"
#include "kernels/cuda/moe/moe_exchange_lsa.h"
#include "kernels/cuda/moe/moe_gate.h"
#include "kernels/cuda/moe/moe_permute.h"
#include "kernels/cuda/moe/mxfp4_bf16_gemm_sm90.h"
#include "kernels/cuda/moe/mxfp4_fp8_tiles.h"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_sm90.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "parallel/nccl_communicator.h"
#include "parallel/nccl_symmetric.h"
#include "worker/model/device_decoder.h"
#include "worker/model/draft_result.h"
#include "worker/model/engram_layer.h"
#include "worker/model/layer_roles.h"
#include "worker/model/moe_layer.h"
#include "worker/model/row_spans.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;
namespace kc = ::weir::kernels::cuda;
namespace dense = ::weir::kernels::cuda::dense;
namespace dec = ::weir::kernels::cuda::decode;

namespace device_decoder_internal {

constexpr size_t kAlign = 256;

// Returns INTERNAL naming `what` and the CUDA error.
absl::Status CudaError(const char* what, cudaError_t err);

#define WEIR_DD_CUDA(what, call)                                                 \
  do {                                                                           \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) return ::weir::model::device_decoder_internal::CudaError(what, e_); \
  } while (0)

// A linear layer on the device: fp32 `w` (the reference kernel), or with
// numerics kFast its stored FP8 form (`codes` set, `w` null).
struct DevDense {
  const float* w = nullptr;  // [out, in]
  int64_t out = 0;
  int64_t in = 0;
  bool fp8 = false;                  // the reference quantizes the input to FP8 per 32
  const uint8_t* codes = nullptr;    // kFast: e4m3 [out, in]
  const uint8_t* scales = nullptr;   // kFast: UE8M0 per 32 x 32 tile [ceil(out/32), in/32]
  const uint16_t* bf16 = nullptr;    // kFast, bf16 linear: bf16 bits [out, in]
  // kFast, a bf16 linear held in its FP8 stored form instead (codes and
  // scales above, bf16 null; V4.1's wo_a): run by Bf16Gemm's w_codes, the
  // bits of the bf16 product. IsBf16 says whether a product is bf16.
  bool w8 = false;
};

// True when `w` runs as a bf16 product (bf16 bits, or FP8 codes widened).
inline bool IsBf16(const DevDense& w) { return w.bf16 != nullptr || w.w8; }

// The stored FP8 form of one dense weight (32 x 32 tiles), when the fp32
// values re-encode exactly.
struct EncodedDense {
  bool exact = false;
  std::vector<uint8_t> codes, scales;
};

// Bump allocation over one device block, run twice: the first pass (no base)
// only measures, the second hands out pointers and uploads host data.
class Region {
 public:
  void Begin(char* base) {
    base_ = base;
    used_ = 0;
  }
  size_t used() const { return used_; }
  bool live() const { return base_ != nullptr; }
  const absl::Status& status() const { return status_; }

  template <typename T>
  T* Alloc(int64_t n) {
    used_ = (used_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(T);
    return p;
  }
  // Alloc, and adds the allocation's bytes (without alignment) to *counted:
  // the KV pools' report (DeviceKvPool::bytes) is what was carved.
  template <typename T>
  T* Alloc(int64_t n, size_t* counted) {
    *counted += static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(T);
    return Alloc<T>(n);
  }
  template <typename T>
  const T* Put(std::span<const T> host) {
    T* p = Alloc<T>(static_cast<int64_t>(host.size()));
    if (p != nullptr && !host.empty() && status_.ok()) {
      if (cudaError_t e = cudaMemcpy(p, host.data(), host.size_bytes(), cudaMemcpyHostToDevice);
          e != cudaSuccess) {
        status_ = CudaError("weight upload", e);
      }
    }
    return host.empty() ? nullptr : p;
  }
  template <typename T>
  const T* Put(const std::vector<T>& host) {
    return Put(std::span<const T>(host));
  }
  DevDense Put(const DenseWeight& w) {
    return {.w = Put(w.w), .out = w.out, .in = w.in, .fp8 = w.fp8_activation};
  }

 private:
  char* base_ = nullptr;
  size_t used_ = 0;
  absl::Status status_;
};

struct HcDev {
  const float* fn = nullptr;
  const float* base = nullptr;
  const float* scale = nullptr;
};

struct LayerDev {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  HcDev hc_attn, hc_ffn;
  // Attention.
  DevDense wq_a, wq_b, wkv, wo_b;
  std::vector<DevDense> wo_a;
  const float* q_norm = nullptr;
  const float* kv_norm = nullptr;
  const float* sink = nullptr;
  DevDense comp_wkv, comp_wgate, index_wk, index_wq_b, index_weights_proj;
  const float* comp_norm = nullptr;
  const float* index_k_norm = nullptr;
  // MoE.
  const float* gate = nullptr;
  // prompt_bf16_gate: the gate's bf16 bits [logical, dim] (null: the gate
  // holds other values, or the option is off).
  const uint16_t* gate16 = nullptr;
  const float* bias = nullptr;
  const float* bias_vl = nullptr;
  const float* const* w1s = nullptr;  // device [experts] of device pointers
  const float* const* w3s = nullptr;
  const float* const* w2s = nullptr;
  // MXFP4 experts (mxfp4 true): device arrays [experts] of packed codes and scales.
  bool mxfp4 = false;
  const uint8_t* const* w1c = nullptr;
  const uint8_t* const* w1q = nullptr;
  const uint8_t* const* w3c = nullptr;
  const uint8_t* const* w3q = nullptr;
  const uint8_t* const* w2c = nullptr;
  const uint8_t* const* w2q = nullptr;
  int experts = 0;  // local expert slots (groups of the grouped products)
  int logical = 0;  // the gate's experts (MoeExperts: a DSpark stage has its own count)
  int route_topk = 0;  // experts a token (MoeTopk)
  // Host copies of the device addresses of each local slot's w1, w3, w2
  // (MXFP4: codes and scales; fp32: weights), for SetPlacement.
  std::vector<uint8_t*> slot_codes[3], slot_scales[3];
  std::vector<float*> slot_w[3];
  int64_t inter = 0;
  bool w13_fp8 = false;
  bool w2_fp8 = false;
  // expert_prefill_tiles: every local expert's w1, w3 and w2 convert to the
  // FP8 tile form exactly (Build checks it once; the weights do not change).
  bool tile_exact = false;
  // expert_tiles_resident: this layer's own tile form (TileForm's layout),
  // kept converted; null otherwise (the shared scratch, converted a step).
  uint8_t *rt13 = nullptr, *rt13_scales = nullptr, *rt2 = nullptr, *rt2_scales = nullptr;
  DevDense sw1, sw2, sw3;
  // Expert parallelism: this layer's replica table (kc::ReplicaTable):
  // offsets [logical + 1], slots [num_physical].
  const int32_t* ep_offsets = nullptr;
  const int32_t* ep_slots = nullptr;
  // Engram.
  const uint8_t* etable = nullptr;
  const uint8_t* escales = nullptr;
  int64_t erows = 0;
  DevDense ewkv;
  const float* egate = nullptr;
  // Pools (rows of the KV pool; device buffers).
  int32_t window_base = 0;  // this layer's window rings: [slots, window]
  int32_t comp_base = 0;    // kv source: compressed KV [num_blocks * entries a block]
  // kv source: index keys [num_blocks * entries a block, index_dim] fp32, or with
  // stored_kv MXFP4 codes [.., index_dim / 2] + E8M0 scales [.., index_dim / 32].
  float* index_k = nullptr;
  uint8_t* index_k_codes = nullptr;
  uint8_t* index_k_scales = nullptr;
  float* comp_kv_state = nullptr;     // kv source, ratio > 1: [slots, ratio, head_dim]
  float* comp_score_state = nullptr;
  int32_t* topk = nullptr;            // index source: [max_batch, index_topk]
  uint8_t* candidates = nullptr;      // candidate producer: [max_batch, max_entries]
};

struct Coeffs {
  float* pre = nullptr;
  float* post = nullptr;
  float* comb = nullptr;
};

// The per-step inputs: a device block and its pinned host mirror, same layout.
struct StepMeta {
  int64_t* tokens = nullptr;     // [B]
  int64_t* positions = nullptr;  // [B]
  int32_t* slot = nullptr;       // [B]
  int32_t* win_rows = nullptr;   // [B, window] rows relative to a layer's window base, -1
  int32_t* win_write = nullptr;  // [B] the ring row, or (a row of a run) its staging row
  int32_t* win_commit = nullptr;  // [B] ring row its staging row moves to after the attention, -1
  int32_t* run_length = nullptr;  // [B] rows of the run a row starts (0: inside a run)
  int32_t* head_rows = nullptr;   // [B] rows the head reads (logits of a row subset)
  // [B] 1: a prompt position run in the prompt's attention shape
  // (DeviceDecoderOptions::prompt_range_tiles), 0: the decode shape.
  int32_t* role = nullptr;
  // drafting: [B] the DSpark stage rings' row of each row's position (the
  // ring row, or for a staged run only its last `window` rows'; else -1).
  int32_t* ring_write = nullptr;
  // drafting, a draft pass: [B, window + block] each block row's attention
  // entries (the stage ring's rows in ring-slot order, then the block's own
  // staging rows; -1 past them), rows of a layer's window region.
  int32_t* draft_rows = nullptr;
  // drafting, a draft pass: [B] the Markov head's previous token of each
  // sequence (the sampled token first; MarkovArgmax updates it).
  int32_t* draft_prev = nullptr;
  // prompt_kv_mirror: [B] each prompt sequence's slot, last position of the
  // step, first staging row (or -1) and staging rows (KvMirrorParams).
  int32_t* mirror_slot = nullptr;
  int64_t* mirror_last = nullptr;
  int32_t* mirror_stage_first = nullptr;
  int32_t* mirror_stage_rows = nullptr;
  struct PerRatio {
    int64_t* visible = nullptr;      // [B] (p + 1) / r
    int64_t* entry_pos = nullptr;    // [B] position of the entry completed now (0 if none)
    int32_t* entry_write = nullptr;  // [B] row of that entry (through the table), -1 if none
  };
  std::vector<PerRatio> ratio;      // by ratio index
  std::vector<int64_t*> engram_ids;  // per Engram layer [B, cols]
  int64_t* valid = nullptr;         // [1] real rows (the rest is padding)
};

// The shapes (and small host tensors) of a synthetic decoder, which owns
// them: big matrices are DenseWeights with dimensions only (drawn on the
// device). Made by the testonly generator (device_decoder_synthetic.cc).
struct SyntheticModel {
  ModelConfig config;
  std::unique_ptr<LayerRoles> roles;
  ModelWeights weights;
};

// The MXFP4 form of one expert's w1, w3, w2 (packed codes, scales).
struct EncodedExpert {
  std::vector<uint8_t> codes[3], scales[3];
};

// Encodes `w` as MXFP4; false unless decoding gives `w` back bit for bit.
bool EncodeMxfp4Exactly(const DenseWeight& w, std::vector<uint8_t>& codes,
                        std::vector<uint8_t>& scales);

// Which routed experts a decoder holds, and where every pair's expert lives.
struct LocalExperts {
  int world = 1, rank = 0, per_rank = 0;
  std::vector<std::vector<int>> local;  // [layer][local slot] -> logical expert
  // With a communicator: each layer's replica slots (kc::ExpertSlots' table).
  std::vector<kc::ReplicaTable> replicas;
};

// The expert slots of `options` (INVALID_ARGUMENT for a placement that does
// not fit the config or the communicator).
absl::StatusOr<LocalExperts> PlanExpertSlots(const ModelConfig& c,
                                            const DeviceDecoderOptions& options);

// Positions a KV block covers: `asked` when > 0, else the smallest multiple
// of every compress ratio of `roles` (DSpark stages aside) that is >= 64.
int32_t DefaultBlockTokens(const LayerRoles& roles, int asked);

// What a decoder cannot hold (INVALID_ARGUMENT), before anything is
// allocated; otherwise the routed experts it holds. `synthetic`: the weights
// are shapes only (drawn on the device).
absl::StatusOr<LocalExperts> CheckDecodable(const ModelConfig& c, const LayerRoles& roles,
                                           const ModelWeights& w,
                                           const DeviceDecoderOptions& options,
                                           bool synthetic = false);

}  // namespace device_decoder_internal

struct DeviceDecoder::Impl {
  using Coeffs = device_decoder_internal::Coeffs;
  using DevDense = device_decoder_internal::DevDense;
  using EncodedDense = device_decoder_internal::EncodedDense;
  using EncodedExpert = device_decoder_internal::EncodedExpert;
  using HcDev = device_decoder_internal::HcDev;
  using LayerDev = device_decoder_internal::LayerDev;
  using LocalExperts = device_decoder_internal::LocalExperts;
  using Region = device_decoder_internal::Region;
  using StepMeta = device_decoder_internal::StepMeta;
  using SyntheticModel = device_decoder_internal::SyntheticModel;

  std::unique_ptr<SyntheticModel> owned;  // the shapes of a synthetic decoder
  const ModelConfig& c;
  const LayerRoles& roles;
  const ModelWeights& wts;
  ActivationPrecision precision;
  DeviceDecoderOptions options;
  LocalExperts ex;         // the routed experts held here (local slots)
  uint64_t seed = 0;      // synthetic weights: the draw's seed (0 = real weights)
  uint64_t fills = 0;     // synthetic draws so far (each gets its own seed)
  absl::Status fill_status;
  // [layer][local slot] MXFP4 forms of the routed experts; empty for a layer held in fp32.
  std::vector<std::vector<EncodedExpert>> encoded;
  size_t expert_bytes = 0, embed_bytes = 0;
  int mxfp4_layers = 0;
  int tile_form_layers = 0;  // expert_prefill_tiles: layers whose experts convert exactly
  // Numerics kFast: host encodings of the FP8 dense weights by address (made
  // once, reused by every layout pass, dropped after the upload), and what
  // the layout put where.
  absl::flat_hash_map<const DenseWeight*, EncodedDense> fp8_dense;
  // kFast bf16 linears: whether each weight's values are all bf16 values.
  absl::flat_hash_map<const float*, bool> bf16_exact;  // by a weight's values (LayoutWeights)
  int fast_dense = 0, bf16_dense = 0, reference_dense = 0, fast_moe_layers = 0;
  int stored_wo_a = 0;    // DeviceDecoderStats::stored_wo_a
  int64_t batch_cap = 0;  // max_batch rounded up to batch_interval
  int slots = 0;          // max_sequences + 1 (the last is the padding rows' scratch slot)
  std::vector<int> ratios;  // distinct compress ratios > 0 of the backbone
  EngramHasher hasher;

  cudaStream_t stream = nullptr;
  cudaEvent_t ev_begin = nullptr, ev_end = nullptr;
  // Parallel branches (options.concurrent_branches, ForkSide): a stream
  // forked from `stream` and joined again within the step.
  cudaStream_t side = nullptr;
  cudaEvent_t fork_ev = nullptr, join_ev = nullptr;
  // MixBeside's path: the next Expand waits for mix_join_ev while
  // mix_pending.
  cudaStream_t mix_side = nullptr;
  cudaEvent_t mix_fork_ev = nullptr, mix_join_ev = nullptr;
  bool mix_pending = false;
  char* arena = nullptr;
  size_t weight_bytes = 0, pool_bytes = 0, arena_bytes = 0;
  std::vector<DeviceKvPool> kv_pools;  // filled by Layout
  std::unique_ptr<dense::GemmHandle> gemm;
  // prompt_fp8_lt: cuBLASLt's block-scaled FP8 GEMM (its algorithms chosen
  // once a shape).
  std::unique_ptr<dense::Fp8LtGemm> fp8_lt;

  // Weights.
  const float* embed = nullptr;
  const float* final_norm = nullptr;
  DevDense head;
  // drafting: the DSpark weights (DsparkWeights) and the draft's buffers:
  // targets [batch_cap, n_targets * dim] (the streams' means at the target
  // layers), main_x [batch_cap, dim], the block's pre-norm h [batch_cap,
  // dim], the Markov head's embedding rows [batch_cap, rank] and bias
  // [batch_cap, vocab], the confidence features [batch_cap, dim + rank] and
  // logits [batch_cap], the chosen tokens (int64 [batch_cap]), and the
  // pinned host copies of the tokens and confidences.
  DevDense main_proj, markov_head, confidence;
  const float *main_norm = nullptr, *dspark_norm = nullptr, *markov_embed = nullptr;
  float *targets = nullptr, *main_x = nullptr, *draft_h = nullptr, *markov_e = nullptr,
        *markov_bias = nullptr, *draft_feat = nullptr, *draft_conf = nullptr;
  int64_t* draft_tokens = nullptr;
  char* draft_host = nullptr;  // pinned: tokens [batch_cap] int64, then confidences [batch_cap]
  std::vector<LayerDev> layers;
  const float* cos_sin_swa = nullptr;         // [max_positions, rope/2, 2]
  const float* cos_sin_compressed = nullptr;
  // Pools: fp32 rows (kv_pool), or with stored_kv the stored forms, rows
  // numbered alike (the layers' window rings first, window_rows_total rows,
  // then the compressed entries): window FP8 codes [W, hd] + UE8M0
  // [W, hd / 32], compressed FP4 packed [C, hd / 2] + E4M3 [C, hd / 16] (the
  // index keys MXFP4 per layer, LayerDev::index_k_codes), and one step's
  // quantized rows before their scatter (kq_*, [batch_cap, hd] and
  // [batch_cap, hd / 16], also holding the index keys' smaller rows).
  float* kv_pool = nullptr;
  int64_t pool_rows = 0;
  bool stored_kv = false;
  int64_t window_rows_total = 0;
  uint8_t *win_codes = nullptr, *win_scales = nullptr;
  uint8_t *comp_codes = nullptr, *comp_scales = nullptr;
  uint8_t *kq_codes = nullptr, *kq_scales = nullptr;
  // prompt_kv_mirror: bf16 mirrors [rows, hd] of one layer's window region
  // and of a compressed region (the largest), rows numbered as the pools'.
  uint16_t *win_mirror = nullptr, *comp_mirror = nullptr;
  // The step's prompt sequences (PrepareMeta: meta mirror_*), the most
  // staging rows and the last position among them, and whether this step's
  // prompt launches read the mirrors (eager steps: a captured graph would
  // keep one step's grid).
  int mirror_sequences_ = 0;
  int64_t mirror_stage_max_ = 0, mirror_last_max_ = 0;
  bool mirror_step_ = false;
  int64_t kv_mirrors = 0;  // DeviceDecoderStats::kv_mirrors
  // Activations [batch_cap, ...].
  float *x = nullptr, *x2 = nullptr, *mixes = nullptr, *h = nullptr, *y = nullptr;
  float* h_head = nullptr;  // the head's input rows when logits are asked of some rows
  Coeffs ca, cf;
  float* identity_pre = nullptr;
  float* act = nullptr;  // matmul activation scratch [batch_cap * topk, max in]
  // kFast: FP8 activation codes and scales of one product's input
  // [batch_cap * topk, max in] (+ [.., / 32]), and the experts' h between
  // gate/up and w2 [batch_cap * topk, inter].
  uint8_t *fq = nullptr, *fq_scales = nullptr, *fh = nullptr, *fh_scales = nullptr;
  int64_t fq_count = 0;    // elements of fq
  // A parallel branch's own fq and split (swapped in while it is enqueued
  // on `side`: ForkSide).
  uint8_t *side_fq = nullptr, *side_fq_scales = nullptr;
  int64_t side_fq_count = 0;
  // prefill_x16_panel: the f16 panel of the codes a warp-specialized FP8
  // product reads (made by MakeX16Panel right before it), and the branch's.
  uint16_t *x16 = nullptr, *side_x16 = nullptr;
  int64_t x16_count = 0, side_x16_count = 0;
  // prompt_bf16_linears: the bf16 values of an FP8 product's X (rx16, as
  // many elements as fq) and, for steps above 256 rows, of its W (w16, the
  // largest FP8 weight), and the branch's own of each (SwapSide).
  uint16_t *rx16 = nullptr, *side_rx16 = nullptr, *w16 = nullptr, *side_w16 = nullptr;
  int64_t rx16_count = 0, side_rx16_count = 0, w16_count = 0, side_w16_count = 0;
  // prompt_fp8_lt: a weight slice's product of the last m % 4 rows
  // (lt_tail, 4 x lt_slice_width floats) and of a mixed step's every row
  // (lt_y, lt_y_rows x lt_slice_width floats), and the branch's.
  float *lt_tail = nullptr, *side_lt_tail = nullptr, *lt_y = nullptr, *side_lt_y = nullptr;
  int64_t lt_slice_width = 0, lt_y_rows = 0;
  // ... and cuBLASLt's workspace (dense::Fp8LtGemm::kWorkspaceBytes), the
  // branch's own.
  uint8_t *lt_ws = nullptr, *side_lt_ws = nullptr;
  int64_t prompt_bf16_products = 0;  // DeviceDecoderStats::prompt_bf16_products
  int64_t cutlass_products = 0;      // DeviceDecoderStats::cutlass_products
  int64_t fp8_lt_products = 0;       // DeviceDecoderStats::fp8_lt_products
  int64_t prompt_gate_products = 0;  // DeviceDecoderStats::prompt_gate_products
  int64_t prompt_gate_norm_inputs = 0;  // DeviceDecoderStats::prompt_gate_norm_inputs
  int64_t prompt_norm_dequant_inputs = 0;  // DeviceDecoderStats::prompt_norm_dequant_inputs
  int64_t prompt_tf32_mixes = 0;     // DeviceDecoderStats::prompt_tf32_mixes
  int64_t prompt_bf16_expert_layers = 0;  // DeviceDecoderStats::prompt_bf16_expert_layers
  int64_t fp8_span_products = 0;     // DeviceDecoderStats::fp8_span_products
  int64_t x16_panels = 0;  // panels made (DeviceDecoderStats::x16_panels)
  int64_t shared_key_scores = 0;  // DeviceDecoderStats::shared_key_scores
  int64_t mma_key_scores = 0;     // DeviceDecoderStats::mma_key_scores
  int64_t decode_mma_key_scores = 0;   // DeviceDecoderStats::decode_mma_key_scores
  int64_t expert_out_bf16_layers = 0;  // DeviceDecoderStats::expert_out_bf16_layers
  int64_t fused_ropes = 0;  // DeviceDecoderStats::fused_ropes
  int64_t fused_kv_rows = 0;   // DeviceDecoderStats::fused_kv_rows
  int64_t folded_row_ops = 0;  // DeviceDecoderStats::folded_row_ops
  int64_t direct_wo_a = 0;     // DeviceDecoderStats::direct_wo_a
  int64_t widened_wo_a = 0;    // DeviceDecoderStats::widened_wo_a
  int64_t fused_swiglu_fp8 = 0;  // DeviceDecoderStats::fused_swiglu_fp8
  int64_t fused_expert_swiglus = 0;  // DeviceDecoderStats::fused_expert_swiglus
  int64_t bf16_gate_up_layers = 0;   // DeviceDecoderStats::bf16_gate_up_layers
  int64_t route_x256_layers = 0;     // DeviceDecoderStats::route_x256_layers
  int64_t route_decode_mma_layers = 0;  // DeviceDecoderStats::route_decode_mma_layers
  int64_t route_h_bf16_layers = 0;      // DeviceDecoderStats::route_h_bf16_layers
  int64_t route_x_gathered_layers = 0;  // DeviceDecoderStats::route_x_gathered_layers
  int64_t route_swiglu_layers = 0;   // DeviceDecoderStats::route_swiglu_layers
  int64_t reduce_fp8_out = 0;    // DeviceDecoderStats::reduce_fp8_out
  // MmRoundRope -> Fp8Gemm: the RoPE its next product may take, and whether
  // it took it.
  const dense::Fp8BlockGemmParams::Rope* product_rope = nullptr;
  bool product_roped = false;
  float* side_split = nullptr;
  // expert_prefill_tiles: one layer's local experts in the FP8 tile form, w1
  // and w3 stacked an expert ([experts][2 inter][dim] + tile scales), w2
  // ([experts][dim][inter] + tile scales), and the conversion's inexact-tile
  // counts [3][experts].
  uint8_t *tile13 = nullptr, *tile13_scales = nullptr, *tile2 = nullptr, *tile2_scales = nullptr;
  int32_t* tile_inexact = nullptr;
  int64_t tile_resident_bytes = 0;  // expert_tiles_resident: every layer's tile form
  uint16_t* xb = nullptr;  // kFast: bf16 bits of a bf16 product's input
  int64_t xb_count = 0;
  // kFast: an activation several products read (the attention's and the
  // MoE's input h, the attention's qr) with its FP8 form (codes + scales, the
  // reference's act_quant) and its bf16 form, each made by the first product
  // that needs it and reused by the others: the same kernels on the same
  // values as one conversion per product, fewer launches (ActQuantFp8 /
  // ToBf16 once per activation instead of once per product).
  struct SharedInput {
    const float* src = nullptr;  // null: not bound (a product refuses it)
    int64_t rows = 0, cols = 0;
    uint8_t *codes = nullptr, *scales = nullptr;  // [capacity], [capacity / 32 + rows]
    uint16_t* bf16 = nullptr;                     // [capacity]
    // prompt_norm_dequant_bf16 (h_in only): the bf16 bits of the values the
    // FP8 form stands for, made by the collapse-norm beside the codes.
    uint16_t* dq16 = nullptr;  // [capacity]
    int64_t capacity = 0;      // elements of codes and of bf16
    bool has_fp8 = false, has_bf16 = false, has_dq16 = false;
  };
  SharedInput h_in, qr_in;
  // Binds `in` to src [rows, cols] with neither form made yet; call it when
  // src holds its final values, and Unbind when they may change.
  static void Bind(SharedInput& in, const float* src, int64_t rows, int64_t cols) {
    in.src = src;
    in.rows = rows;
    in.cols = cols;
    in.has_fp8 = in.has_bf16 = in.has_dq16 = false;
  }
  static void Unbind(SharedInput& in) { Bind(in, nullptr, 0, 0); }
  // True when a norm over [rows, cols] can write `in`'s FP8 form in its own
  // launch (kFast: the codes exist; the norms' fused quantizer needs cols %
  // 32 == 0).
  bool NormMakesFp8(const SharedInput& in, int64_t rows, int64_t cols) const {
    return fast() && in.codes != nullptr && cols % 32 == 0 && rows * cols <= in.capacity;
  }
  // kFast: the FP8 products' split-K partials (ChooseFp8GemmSplits per weight
  // shape; below SplitFloatsPerRow() per batch row by construction).
  float* split = nullptr;
  int64_t split_count = 0;
  // Split-K products sum their partials in their last split (no second
  // kernel) with one counter per output tile (Fp8GemmSplitCounters).
  static constexpr int64_t kSplitCounters = int64_t{1} << 16;
  uint32_t* split_counters = nullptr;
  int64_t split_counter_count = 0;
  uint32_t* side_split_counters = nullptr;  // a parallel branch's own (ForkSide)
  // bf16_branches: a parallel branch's bf16 staging (its xb while swapped in).
  uint16_t* side_xb = nullptr;
  int64_t side_xb_count = 0;
  int64_t bf16_branches = 0;  // DeviceDecoderStats::bf16_branches
  // kFast with fast_mhc: HcMixSplitK's partials and group counters (zeroed
  // once at planning; every launch leaves them zero).
  float* hc_partials = nullptr;
  uint32_t* hc_counters = nullptr;
  // Per batch row: splits x n x groups stays below 2 x target x 32 (each
  // split adds at most target CTAs of 32 rows).
  int64_t SplitTargetCtas() const {
    return options.fp8_split_target_ctas > 0 ? options.fp8_split_target_ctas
                                             : dense::kFp8GemmSplitTargetCtas;
  }
  int64_t SplitFloatsPerRow() const { return 2 * SplitTargetCtas() * 32; }
  // The split of an FP8 product of this weight shape (options' knobs).
  int FastSplits(int64_t n, int64_t k, int groups) const {
    return dense::ChooseFp8GemmSplits(n, k, groups, SplitTargetCtas(),
                                      options.fp8_split_min_stages > 0
                                          ? options.fp8_split_min_stages
                                          : dense::kFp8GemmMinSplitStages);
  }
  float* gate_logits = nullptr;  // kFast: [batch_cap, routed experts]
  float *qr = nullptr, *q = nullptr, *kvw = nullptr, *o = nullptr, *og = nullptr,
        *ug = nullptr, *u = nullptr;
  float *cpa = nullptr, *cpg = nullptr, *latent = nullptr, *ik = nullptr, *iq = nullptr,
        *iw = nullptr, *scores = nullptr;
  int32_t* index = nullptr;
  int32_t* moe_idx = nullptr;
  float* moe_w = nullptr;
  int64_t* group_offsets = nullptr;
  int32_t* pair_row = nullptr;
  // Expert parallelism: blocks [world, batch rows, ...] sent and received.
  float *ep_send_x = nullptr, *ep_recv_x = nullptr, *ep_send_w = nullptr, *ep_recv_w = nullptr;
  int32_t *ep_send_slot = nullptr, *ep_recv_slot = nullptr, *ep_return_row = nullptr;
  int32_t* ep_physical = nullptr;  // [batch rows, topk] physical slot of each pair
  // Expert load since the last TakeExpertLoad: [layers, logical experts], [layers].
  int64_t* load_routed = nullptr;
  int64_t* load_served = nullptr;
  float *ep_back = nullptr, *ep_ret = nullptr;  // [world, batch rows, topk, dim]
  // options.ep_lsa_exchange: the receive side's windows, in this order:
  // ep_recv_x, ep_recv_slot, ep_recv_w, then ep_ret as [batch rows, topk,
  // dim] (a pair's row does not depend on the rank that served it). No send
  // blocks and no ep_back then.
  std::unique_ptr<parallel::NcclSymmetricMemory> ep_sym;  // + the barrier's window (4)
  // Raised when the step's synchronisation fails (a lost peer): the
  // exchange's barriers stop waiting. Pinned host memory mapped for the device.
  int32_t* lsa_abort_host = nullptr;
  const int32_t* lsa_abort = nullptr;
  bool lsa_exchange() const { return options.communicator != nullptr && options.ep_lsa_exchange; }
  float *xg = nullptr, *wg = nullptr, *gg = nullptr, *upg = nullptr, *yg = nullptr;
  float *sg = nullptr, *su = nullptr, *sy = nullptr;
  float *emb = nullptr, *ekv = nullptr, *ekey = nullptr, *evalue = nullptr;
  float* logits = nullptr;
  int32_t* greedy_ids = nullptr;  // [batch_cap] StepRowsGreedy's picks
  // Step inputs.
  char* meta_dev = nullptr;
  char* meta_host = nullptr;  // pinned
  size_t meta_bytes = 0;
  StepMeta meta_d, meta_h;
  float* logits_host = nullptr;  // pinned [batch_cap, vocab]
  int32_t* greedy_host = nullptr;  // pinned [batch_cap]
  // options.expert_tile (checked by CheckDecodable); kAuto when empty.
  kc::Mxfp4GroupedTile expert_tile = kc::Mxfp4GroupedTile::kAuto;

  // Host state per slot.
  struct Slot {
    bool used = false;
    int64_t length = 0;
    std::vector<int64_t> history;  // Engram compressed ids
    int64_t blocks = 0;            // entries of its block table
    int64_t prompt_end = 0;        // positions below: the prompt's (SetPromptEnd)
  };
  std::vector<Slot> slot_state;
  // Paged compressed pools (DeviceDecoderOptions::kv_block_tokens): a
  // kv-source layer's compressed KV and index keys are [num_blocks, e] rows
  // (e = block_tokens / ratio entries a block); entry j of slot s is row
  // table[s][j / e] * e + j % e. The padding slot (slots - 1, which padded
  // rows use at position 0) holds the last block for good.
  int32_t block_tokens = 0;
  int64_t table_width = 0;           // blocks a table holds at most
  int64_t num_blocks = 0;            // options' blocks + the padding slot's
  int32_t* tables_dev = nullptr;     // [slots, table_width], -1 past a table
  int32_t* tables_host = nullptr;    // pinned mirror
  std::vector<int32_t> block_owner;  // [num_blocks] the slot holding it, or -1
  std::vector<int32_t> free_blocks;  // own tables: the free blocks (a stack)
  std::vector<uint8_t> table_dirty;  // [slots] rows the device has not got yet
  absl::flat_hash_map<int64_t, cudaGraphExec_t> graphs;
  // Profiling (eager steps): an event per section boundary, and its name.
  bool profiling = false;
  std::vector<cudaEvent_t> prof_events;
  std::vector<const char*> prof_names;
  size_t prof_used = 0;

  // Starts section `name` (null: the end of the step) when profiling.
  void Mark(const char* name) {
    if (!profiling) return;
    if (prof_used == prof_events.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      prof_events.push_back(e);
      prof_names.push_back(nullptr);
    }
    prof_names[prof_used] = name;
    cudaEventRecord(prof_events[prof_used++], stream);
  }

  Impl(std::unique_ptr<SyntheticModel> own, const ModelConfig& config, const LayerRoles& r,
       const ModelWeights& w, ActivationPrecision p, const DeviceDecoderOptions& o,
       EngramHasher hs)
      : owned(std::move(own)), c(config), roles(r), wts(w), precision(p), options(o),
        hasher(std::move(hs)) {}

  // Draws `n` synthetic weights at `p` (uniform in +-scale, bf16), when live.
  void Fill(float* p, int64_t n, float scale) {
    ++fills;
    if (p == nullptr || !fill_status.ok()) return;
    fill_status = dec::RandomFill({.x = p, .n = n, .seed = seed * 1000003 + fills,
                                   .scale = scale},
                                  stream);
  }
  // Encodes the routed experts as MXFP4 where every expert of a layer
  // re-encodes exactly (real weights only).
  void EncodeExperts();
  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (auto& [b, exec] : graphs) cudaGraphExecDestroy(exec);
    for (cudaEvent_t e : prof_events) cudaEventDestroy(e);
    gemm.reset();
    ep_sym.reset();
    if (lsa_abort_host != nullptr) cudaFreeHost(lsa_abort_host);
    if (arena != nullptr && options.memory == nullptr) cudaFree(arena);
    if (meta_host != nullptr) cudaFreeHost(meta_host);
    if (tables_host != nullptr) cudaFreeHost(tables_host);
    if (logits_host != nullptr) cudaFreeHost(logits_host);
    if (greedy_host != nullptr) cudaFreeHost(greedy_host);
    if (draft_host != nullptr) cudaFreeHost(draft_host);
    if (ev_begin != nullptr) cudaEventDestroy(ev_begin);
    if (ev_end != nullptr) cudaEventDestroy(ev_end);
    if (fork_ev != nullptr) cudaEventDestroy(fork_ev);
    if (join_ev != nullptr) cudaEventDestroy(join_ev);
    if (side != nullptr) cudaStreamDestroy(side);
    if (mix_fork_ev != nullptr) cudaEventDestroy(mix_fork_ev);
    if (mix_join_ev != nullptr) cudaEventDestroy(mix_join_ev);
    if (mix_side != nullptr) cudaStreamDestroy(mix_side);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  bool bf16() const { return precision == ActivationPrecision::kBf16; }
  // Layers held: the backbone's, and with options.drafting the DSpark stages.
  int held_layers() const { return c.n_layers + (options.drafting ? c.n_mtp_layers : 0); }
  int64_t draft_block() const { return c.dspark_block_size; }
  bool fast() const { return options.numerics == DecodeNumerics::kFast; }
  // Whether the pools take the stored form (options.stored_kv, kFast, the
  // head_dim SparseDecodeAttention takes, and index keys whose MXFP4 codes
  // and scales are whole words a row, as ScatterStored copies them).
  bool StoredKv() const {
    return fast() && options.stored_kv && c.head_dim == kc::kSparseDecodeHeadDim &&
           c.index_head_dim % 128 == 0;
  }
  // Stored pools: scatters `b` quantized rows of kq_codes / kq_scales
  // (`code_bytes` / `scale_bytes` a row) to rows `dst_rows` (-1: none) of
  // the pool at `codes` / `scales`.
  absl::Status ScatterStored(uint8_t* codes, uint8_t* scales, int64_t code_bytes,
                             int64_t scale_bytes, const int32_t* dst_rows, int64_t b) {
    RETURN_IF_ERROR(dec::CopyRows({.src = reinterpret_cast<const float*>(kq_codes),
                                   .dst = reinterpret_cast<float*>(codes), .dst_rows = dst_rows,
                                   .rows = b, .width = code_bytes / 4},
                                  stream));
    return dec::CopyRows({.src = reinterpret_cast<const float*>(kq_scales),
                          .dst = reinterpret_cast<float*>(scales), .dst_rows = dst_rows,
                          .rows = b, .width = scale_bytes / 4},
                         stream);
  }
  // Copies the staging rows of a step's `b` rows (`row_bytes` a row, whole
  // words) of the window region at `region` to their ring rows
  // (win_commit; -1: none).
  absl::Status MoveStaged(void* region, int64_t row_bytes, int64_t b) {
    float* base = static_cast<float*>(region);
    return dec::CopyRows({.src = base + staging_row(0) * row_bytes / 4,
                          .dst = base,
                          .dst_rows = meta_d.win_commit,
                          .rows = b,
                          .width = row_bytes / 4},
                         stream);
  }
  // Rows an expert (the host estimate, as rows_per_expert_hint) from which a
  // step takes the tile form (expert_prefill_tiles).
  static constexpr int64_t kExpertTileFormRows = 96;
  // kFast: whether layer `L`'s routed experts run on Mxfp4ExpertFfn (MXFP4
  // weights, FP8 inputs of both products as the reference, shapes it takes).
  bool FastExperts(const LayerDev& L) const {
    return fast() && options.fast_experts && L.mxfp4 && L.w13_fp8 && L.w2_fp8 && c.dim % 256 == 0 &&
           L.inter % 256 == 0;
  }
  // kFast: the stored FP8 form of `w` (encoded on first use), or null when
  // it has none (bf16 linear, shape, or values that do not re-encode).
  // `any_activation`: also a weight whose product reads bf16 activations
  // (wo_a's stored form); otherwise only an FP8 linear.
  const EncodedDense* Fp8Form(const DenseWeight& w, bool any_activation = false);
  int64_t window() const { return c.window_size; }
  // A layer's window region: a ring of `ring()` rows a slot, then one
  // staging row a step row (the window KV of rows in runs of several
  // positions, which their run's later rows read; the last `window` of a
  // run are copied into the ring after the attention).
  int64_t window_region_rows() const { return slots * ring() + batch_cap; }
  int64_t staging_row(int64_t step_row) const { return slots * ring() + step_row; }
  // A slot's window ring: window + max_rollback rows (position p at p % ring).
  int64_t ring() const { return window() + options.max_rollback; }
  // Rows of a run that write the ring directly (a verification: at most
  // max_rollback + 1); longer runs (prefill chunks) go through staging rows.
  int64_t direct_run_rows() const { return options.max_rollback + 1; }
  // Rows of a slot's compressor state for ratio r (position p at p % rows).
  int64_t state_rows(int r) const { return r + options.max_rollback; }
  int64_t max_entries(int ratio) const { return options.max_positions / ratio; }
  int64_t entries_per_block(int ratio) const { return block_tokens / ratio; }
  // Blocks a sequence of `positions` positions needs (DeviceDecoder::BlocksFor).
  int64_t BlocksFor(int64_t positions) const {
    int64_t blocks = 0;
    for (int r : ratios) {
      const int64_t e = entries_per_block(r);
      blocks = std::max(blocks, (std::max<int64_t>(positions, 0) / r + e - 1) / e);
    }
    return blocks;
  }
  int32_t* table_row(int s) const { return tables_host + int64_t{s} * table_width; }
  // Row of entry j of slot s in a ratio-r kv-source layer's region.
  int64_t EntryRow(int s, int r, int64_t j) const {
    const int64_t e = entries_per_block(r);
    return int64_t{table_row(s)[j / e]} * e + j % e;
  }
  // Own tables: extends slot s's table to `blocks` blocks from the free list
  // (false, nothing taken, when too few are free).
  bool GrowTable(int s, int64_t blocks);
  // Empties slot s's table (own blocks back to the free list).
  void DropTable(int s);
  // Copies the changed table rows to the device (on the stream).
  absl::Status UploadTables();
  int ratio_index(int ratio) const {
    return static_cast<int>(std::find(ratios.begin(), ratios.end(), ratio) - ratios.begin());
  }
  const float* cos_sin(int layer) const {
    return roles[layer].ratio > 0 ? cos_sin_compressed : cos_sin_swa;
  }

  // Derives the batch capacity, the slot count and the ratios from options.
  void Plan() {
    expert_tile =
        kc::Mxfp4GroupedTileByName(options.expert_tile).value_or(kc::Mxfp4GroupedTile::kAuto);
    batch_cap = (options.max_batch + options.batch_interval - 1) / options.batch_interval *
                options.batch_interval;
    stored_kv = StoredKv();
    slots = options.max_sequences + 1;
    ratios.clear();
    for (const LayerRole& role : roles.layers()) {
      if (role.is_dspark_stage || role.ratio <= 0) continue;
      if (std::find(ratios.begin(), ratios.end(), role.ratio) == ratios.end()) {
        ratios.push_back(role.ratio);
      }
    }
    block_tokens = device_decoder_internal::DefaultBlockTokens(roles, options.kv_block_tokens);
    table_width = ratios.empty() ? 0 : BlocksFor(options.max_positions);
    num_blocks =
        (options.kv_blocks > 0 ? options.kv_blocks : int64_t{options.max_sequences} * table_width) +
        1;
  }
  // The arena bytes of the current options (a dry run of Layout; no device).
  absl::StatusOr<size_t> MeasureArena() {
    Plan();
    Region measure;
    measure.Begin(nullptr);
    RETURN_IF_ERROR(Layout(measure));
    return measure.used();
  }
  // Lowers options.max_positions to the largest whose arena fits (dry runs).
  absl::StatusOr<int64_t> FitPositions(size_t budget_bytes);
  // An Impl for dry runs of the layout over `model` (no device): the checks
  // of Create, then the routed experts' encoding.
  static absl::StatusOr<std::unique_ptr<Impl>> DryRun(const Model& model,
                                                      ActivationPrecision precision,
                                                      const DeviceDecoderOptions& options);
  absl::Status Layout(Region& r);
  // The weights part of Layout (and the RoPE tables); `max_in` receives the
  // widest matmul input seen.
  absl::Status LayoutWeights(Region& r, int64_t& max_in);
  absl::StatusOr<std::unique_ptr<DeviceDecoder>> Build(std::unique_ptr<Impl> self);
  void LayoutMeta(char* base, StepMeta& m, size_t& bytes) const;
  // Rows of one slot are adjacent (a run, consecutive positions from the
  // slot's length); `head_rows` (head_padded entries, padded with row 0)
  // when the head reads a subset (head_padded >= 0), ignored otherwise.
  // Returns whether some slot has several rows (runs: staging rows used).
  absl::StatusOr<bool> PrepareMeta(std::span<const int> slot_ids, std::span<const int64_t> tokens,
                                   int64_t padded, std::span<const int> head_rows,
                                   int64_t head_padded);
  // The backbone over b rows; the head over all of them (head_b < 0) or over
  // the head_b rows meta head_rows names (0: no head).
  // `runs`: some slot has several rows (the staging rows move to the rings).
  absl::Status Enqueue(int64_t b, int64_t head_b, bool runs);
  bool runs_ = false;  // the step being enqueued has runs
  // The attention shapes the step's real rows take (PrepareMeta, meta role):
  // bit 0 the decode shape, bit 1 the prompt's (prompt_range_tiles). A draft
  // pass: 1.
  int roles_ = 1;
  int64_t prompt_shape_rows_ = 0;  // of the step's real rows (PrepareMeta)
  // The FP8 linears' maths the step's real rows take (prompt_bf16_linears,
  // meta role): bit 0 the FP8 product's, bit 1 the prompt's bf16 one. A
  // draft pass: 1.
  int linear_roles_ = 1;
  // Of the step's real rows, the generated ones (meta role 0; PrepareMeta):
  // with prompt_bf16_experts in a step of both roles, the rows the FP8
  // experts get, which pick their tile form and tiles by it.
  int64_t generated_rows_ = 0;
  bool PromptLinears() const { return options.prompt_bf16_linears && fast(); }
  // bf16_experts_every_row: every row's routed experts on the bf16 route.
  bool RouteEveryRow() const { return options.bf16_experts_every_row && fast(); }
  // A step with both linear roles: the rows the FP8 products must reach (the
  // generated positions' and padding, meta role 0) as ranges of whole
  // kFp8SpanAlign rows, over span_rows_ rows (PrepareMeta), and whether this
  // step runs the FP8 products over them alone (fp8_span_step_: eager steps
  // only, since a captured graph would replay one step's ranges for another).
  static constexpr int64_t kFp8SpanAlign = 16;
  static constexpr size_t kMaxFp8Spans = 4;
  std::vector<RowSpan> fp8_spans_;
  int64_t span_rows_ = 0;
  bool fp8_span_step_ = false;
  // The prompt's attention shape is on (prompt_range_tiles, stored-form
  // pools of SparseDecodeAttention's head_dim).
  bool PromptShape() const {
    return options.prompt_range_tiles > 0 && stored_kv &&
           c.head_dim == kernels::cuda::kSparseDecodeHeadDim;
  }
  // prompt_kv_mirror applies: the prompt launches are kWgmma64 on stored pools.
  bool MirrorsPrompts() const { return options.prompt_kv_mirror && PromptShape(); }
  // Enqueues the mirror rows of the step's prompt sequences for `layer`
  // (kv_mirror.h), before its prompt attention.
  absl::Status MirrorPromptKv(int layer);
  // The window attention's entries: meta win_rows of `window` a row in a
  // step, meta draft_rows of window + block in a draft pass.
  const int32_t* attn_rows_ = nullptr;
  int64_t attn_width_ = 0;
  // drafting: the stage rings' rows of the step's b rows (meta ring_write)
  // from the targets: main_proj, main_norm, each stage's window KV.
  absl::Status UpdateStageRings(int64_t b);
  // Window KV of the bound input `in` [b, dim] for `layer` (the CPU's
  // ProjectWindowKv: wkv, kv_norm, RoPE at meta positions, bf16 boundaries
  // after each, the FP8 form) into its window region's rows `dst_rows` (-1:
  // none): a step's own rows (Attention) or the DSpark stage rings.
  absl::Status WindowKv(int layer, SharedInput& in, int64_t b, const int32_t* dst_rows);
  // drafting: the draft pass over `sequences` sequences (meta prepared by
  // DraftBatch: sequences * block rows, padded to `padded`): the stages,
  // the heads, the Markov loop and the confidences, then the logits,
  // tokens and confidences to the pinned host buffers.
  absl::Status EnqueueDraft(int64_t sequences, int64_t padded, bool with_logits);
  // The head's product of `rows` rows of `in` by `w` (the decoder's head:
  // row-stable, cuBLASLt, DotRows or Bf16Gemm).
  absl::Status HeadProduct(const DevDense& w, const float* in, int64_t rows, float* out);
  // Host <-> device copies of KV rows [n, head_dim] starting at pool row
  // `first_row` (window ring or compressed entries, in kv_pool's numbering),
  // through the stored form when the pools hold it (UploadKv: INTERNAL when
  // the rows do not re-encode exactly).
  absl::Status UploadKv(std::span<const float> rows, bool window, int64_t first_row);
  absl::Status DownloadKv(std::span<float> rows, bool window, int64_t first_row);
  // The same for index keys [n, index_dim] of kv-source layer `L` from its
  // entry row `first_entry` (EntryRow): fp32, or MXFP4 when the
  // pools hold the stored form.
  absl::Status UploadIndexKeys(const LayerDev& L, std::span<const float> keys, int64_t first_entry);
  absl::Status DownloadIndexKeys(const LayerDev& L, std::span<float> keys, int64_t first_entry);

  // --- one-op wrappers (device pointers, `b` rows)
  // kFast bf16 linears: `groups` products of the same shape, inputs and
  // outputs packed group after group, weights `w_stride` elements apart.
  absl::Status MmBf16(const DevDense& w, const float* in, int64_t rows, float* out, int groups = 1,
                      int64_t w_stride = 0,
                      dense::Fp8GemmOutput output = dense::Fp8GemmOutput::kF32,
                      int64_t w_scale_stride = 0) {
    const int64_t n_in = rows * w.in * groups;
    if (n_in > xb_count) {
      return absl::InternalError(absl::StrCat("DeviceDecoder: bf16 input of ", n_in,
                                              " elements exceeds its scratch of ", xb_count));
    }
    RETURN_IF_ERROR(dec::ToBf16({.x = in, .out = xb, .n = n_in}, stream));
    return Bf16GemmOf(w, xb, rows, out, groups, w_stride, output, 0, 0, nullptr, nullptr, nullptr,
                      w_scale_stride);
  }
  // Bf16Gemm with the split-K its weight shape gets (ChooseBf16GemmSplits:
  // the same for every batch size, batch-invariant; V4.1's grouped wo_a runs
  // 4 splits instead of 128 CTAs walking all of its 4,096 K).
  // y_group_stride / y_row_stride: Bf16GemmParams' (0: packed).
  // y_codes / y_scales: y's FP8 form too where the split's second kernel
  // can write it (Bf16GemmMakesFp8); *made_fp8 says whether it did.
  absl::Status Bf16GemmOf(const DevDense& w, const uint16_t* x16, int64_t rows, float* out,
                          int groups, int64_t w_stride, dense::Fp8GemmOutput output,
                          int64_t y_group_stride = 0, int64_t y_row_stride = 0,
                          uint8_t* y_codes = nullptr, uint8_t* y_scales = nullptr,
                          bool* made_fp8 = nullptr, int64_t w_scale_stride = 0) {
    dense::Bf16GemmParams p{.x = x16,
                            .w = w.bf16,
                            .y = out,
                            .m = rows,
                            .n = w.out,
                            .k = w.in,
                            .groups = groups,
                            .w_group_stride = w_stride,
                            .y_group_stride = y_group_stride,
                            .y_row_stride = y_row_stride,
                            .output = output,
                            .ws_m256 = WsM256(rows, w.out, w.in),
                            .ws_persistent = options.bf16_ws_persistent};
    if (options.bf16_split_k) p.k_splits = dense::ChooseBf16GemmSplits(p.n, p.k, groups);
    if (p.k_splits > 1) {
      p.split_scratch = split;
      if (dense::Bf16GemmSplitScratchFloats(p) > split_count) {
        return absl::InternalError(absl::StrCat("DeviceDecoder: bf16 split-K partials of ",
                                                dense::Bf16GemmSplitScratchFloats(p),
                                                " floats exceed their scratch of ", split_count));
      }
    }
    if (y_codes != nullptr) {
      p.y_codes = y_codes;
      p.y_scales = y_scales;
      if (!dense::Bf16GemmMakesFp8(p)) p.y_codes = p.y_scales = nullptr;
    }
    if (made_fp8 != nullptr) *made_fp8 = p.y_codes != nullptr;
    if (w.w8) RETURN_IF_ERROR(StoredBf16Weight(w, groups, w_stride, w_scale_stride, p));
    return RunBf16Gemm(p);
  }
  // bf16_cutlass: a product on the warp-specialized prefill tile's shapes
  // that Bf16GemmCutlass takes runs there (the unsplit Bf16Gemm's bits, by
  // bf16_gemm_cutlass_test); every other on Bf16Gemm.
  absl::Status RunBf16Gemm(const dense::Bf16GemmParams& p) {
    if (options.bf16_cutlass && p.w != nullptr &&
        dense::ResolveBf16GemmTile(p) == dense::Fp8GemmTile::kN128M128Ws &&
        dense::Bf16GemmCutlassTakes(p)) {
      ++cutlass_products;
      if (options.bf16_cutlass_fit_tile) {  // the tile over W rows for the shape's waves
        dense::Bf16GemmParams fit = p;
        fit.cutlass_tile_n = -1;
        return dense::Bf16GemmCutlass(fit, stream);
      }
      return dense::Bf16GemmCutlass(p, stream);
    }
    return dense::Bf16Gemm(p, stream);
  }
  // A w8 weight's operands for `p`: its codes and scales (the mma tiles widen
  // them), or its bf16 bits in the x16 scratch where WidenForPrefillTile
  // puts them there.
  absl::Status StoredBf16Weight(const DevDense& w, int groups, int64_t w_stride,
                                int64_t w_scale_stride, dense::Bf16GemmParams& p) {
    p.w = nullptr;
    p.w_codes = w.codes;
    p.w_scales = w.scales;
    p.w_scales_group_stride = groups > 1 ? w_scale_stride : 0;
    ASSIGN_OR_RETURN(const bool widened, WidenForPrefillTile(p, x16, x16_count));
    if (widened) ++widened_wo_a;
    return absl::OkStatus();
  }
  // Where `p` (a product of w_codes) would run the warp-specialized prefill
  // tile on the weight's bf16 form and that form fits `scratch` (elements),
  // widens the codes into it first (Fp8WeightBf16: the same values, so the
  // same bits) and points `p` at it; returns whether it did.
  absl::StatusOr<bool> WidenForPrefillTile(dense::Bf16GemmParams& p, uint16_t* scratch,
                                           int64_t scratch_count) {
    dense::Bf16GemmParams bf16_form = p;
    bf16_form.w = scratch;
    bf16_form.w_codes = bf16_form.w_scales = nullptr;
    bf16_form.w_scales_group_stride = 0;
    bf16_form.w_group_stride = p.groups > 1 ? p.n * p.k : 0;
    if (scratch == nullptr || int64_t{p.groups} * p.n * p.k > scratch_count ||
        dense::ResolveBf16GemmTile(bf16_form) != dense::Fp8GemmTile::kN128M128Ws) {
      return false;
    }
    RETURN_IF_ERROR(dense::Fp8WeightBf16({.codes = p.w_codes,
                                          .scales = p.w_scales,
                                          .out = scratch,
                                          .rows = p.n,
                                          .cols = p.k,
                                          .groups = p.groups,
                                          .code_group_stride = p.groups > 1 ? p.w_group_stride : 0,
                                          .scale_group_stride = p.w_scales_group_stride},
                                         stream));
    p = bf16_form;
    return true;
  }
  // prefill_x16_panel: where `p` runs the warp-specialized prefill tile and
  // its X fits the panel scratch, widens X's codes into the panel and points
  // p.x_f16 at it (the same bits; see the option). Leaves a p.x_f16 already
  // set (a second product over the same codes) and every other call alone,
  // and kWgmma's products (its e4m3 wgmma reads the codes).
  absl::Status MakeX16Panel(dense::Fp8BlockGemmParams& p) {
    if (x16 == nullptr || p.x_f16 != nullptr || p.math == dense::Fp8GemmMath::kWgmma ||
        dense::ResolveFp8GemmTile(p) != dense::Fp8GemmTile::kN128M128Ws) {
      return absl::OkStatus();
    }
    const bool x_grouped = p.groups > 1 && !p.x_shared && p.group_offsets == nullptr;
    const int x_groups = x_grouped ? p.groups : 1;
    if (int64_t{x_groups} * p.m * p.k > x16_count) return absl::OkStatus();
    const bool scaled = options.scaled_x16_panel && !p.ws_halves;
    RETURN_IF_ERROR(dense::WidenFp8ToF16Panel(
        {.codes = p.x,
         .out = x16,
         .rows = p.m,
         .k = p.k,
         .groups = x_groups,
         .code_group_stride = x_grouped ? p.x_group_stride : 0,
         .scales = scaled ? p.x_scales : nullptr,
         .scale_group_stride = scaled && x_grouped ? p.x_scales_group_stride : 0},
        stream));
    p.x_f16 = x16;
    p.x_f16_scaled = scaled;
    ++x16_panels;
    return absl::OkStatus();
  }
  // Fp8BlockGemm with the split-K its weight shape gets (the same for every
  // batch size: batch-invariant). `split_groups`: the group count the split
  // is chosen for (a grouped weight run group by group keeps its split).
  absl::Status Fp8Gemm(dense::Fp8BlockGemmParams p, int split_groups = 0) {
    // prompt_bf16_linears: the prompt's rows on the bf16 math; with rows of
    // both roles the FP8 product writes every row first and the bf16 one
    // the prompt's after it, so neither may fuse the RoPE (MmRoundRope then
    // rotates every row after both: the same bits).
    if (linear_roles_ != 1 && p.group_offsets == nullptr) {
      if (linear_roles_ == 2) return PromptBf16Gemm(p, split_groups, nullptr);
      product_rope = nullptr;
      product_roped = false;
      RETURN_IF_ERROR(Fp8GemmGeneratedRows(p, split_groups));
      return PromptBf16Gemm(p, split_groups, meta_d.role);
    }
    return Fp8GemmAllRows(p, split_groups);
  }
  // A mixed step's FP8 product: on eager steps over fp8_spans_ alone, a call
  // a range (x, its scales and y advanced to the range's first row, the
  // group strides made explicit), so a long prompt chunk beside a few
  // generated rows no longer runs both maths over all of its rows; elsewhere
  // (graph steps, a product over other rows than the step's, an X panel
  // made by the caller, too many ranges) over every row. A row's bits are
  // the same either way: an FP8 product's row depends on its X row and W
  // alone (the split is the weight's, the tile moves time only).
  absl::Status Fp8GemmGeneratedRows(const dense::Fp8BlockGemmParams& p, int split_groups) {
    if (!fp8_span_step_ || p.m != span_rows_ || p.x_f16 != nullptr || fp8_spans_.empty() ||
        fp8_spans_.size() > kMaxFp8Spans) {
      return Fp8GemmAllRows(p, split_groups);
    }
    const int64_t k_blocks = p.k / 32;
    const int y_bytes = dense::Fp8GemmOutputBytes(p.output);
    for (const RowSpan& span : fp8_spans_) {
      dense::Fp8BlockGemmParams q = p;
      q.m = span.end - span.begin;
      q.x = p.x + span.begin * p.k;
      q.x_scales = p.x_scales + span.begin * k_blocks;
      q.y = static_cast<char*>(p.y) + span.begin * p.n * y_bytes;
      if (p.groups > 1) {
        if (!p.x_shared) {
          q.x_group_stride = p.x_group_stride != 0 ? p.x_group_stride : p.m * p.k;
          q.x_scales_group_stride =
              p.x_scales_group_stride != 0 ? p.x_scales_group_stride : p.m * k_blocks;
        }
        q.y_group_stride = p.y_group_stride != 0 ? p.y_group_stride : p.m * p.n;
      }
      RETURN_IF_ERROR(Fp8GemmAllRows(q, split_groups));
      ++fp8_span_products;
    }
    return absl::OkStatus();
  }
  // The bf16 warp-specialized tile's rows a CTA for a product of m rows and
  // an n x k weight: 256 with bf16_ws_m256, or with bf16_ws_m256_large where
  // dense::Bf16GemmWsM256Pays; else 128 (the same bits either way).
  bool WsM256(int64_t m, int64_t n, int64_t k) const {
    return options.bf16_ws_m256 ||
           (options.bf16_ws_m256_large && dense::Bf16GemmWsM256Pays(m, n, k));
  }
  // prompt_bf16_linears: `p` (an FP8 product without group offsets) as
  // Bf16Gemm over its operands' bf16 values: X's codes dequantized into
  // rx16 (Fp8ActBf16), the weight's codes widened in the product's stages
  // (w_codes) or, where the bf16 form takes the warp-specialized tile and
  // the weight fits w16, into w16 first (Fp8WeightBf16; the same bits).
  // Split by the weight's shape (ChooseBf16GemmSplits over split_groups or
  // p.groups, as Fp8Gemm's), so a row's bits depend on its X row and W
  // alone. Non-null row_role: only the rows of role 1 are written.
  absl::Status PromptBf16Gemm(const dense::Fp8BlockGemmParams& p, int split_groups,
                              const int32_t* row_role) {
    product_rope = nullptr;  // never fused here: MmRoundRope rotates after it
    product_roped = false;
    if (fp8_lt != nullptr) {
      ASSIGN_OR_RETURN(const bool ran, PromptFp8Lt(p, row_role));
      if (ran) return absl::OkStatus();
    }
    const bool x_grouped = p.groups > 1 && !p.x_shared;
    const int x_groups = x_grouped ? p.groups : 1;
    if (rx16 == nullptr || int64_t{x_groups} * p.m * p.k > rx16_count) {
      return absl::InternalError(absl::StrCat("DeviceDecoder: the bf16 X of a prompt product (",
                                              x_groups, " x ", p.m, " x ", p.k,
                                              ") exceeds its scratch of ", rx16_count));
    }
    // X's bf16 values: the collapse-norm's (prompt_norm_dequant_bf16, when X
    // is h_in's FP8 form), else widened from the codes into rx16; the same
    // bits.
    const uint16_t* x16_in = rx16;
    if (!x_grouped && h_in.has_dq16 && p.x == h_in.codes && p.x_scales == h_in.scales &&
        p.m == h_in.rows && p.k == h_in.cols) {
      x16_in = h_in.dq16;
      ++prompt_norm_dequant_inputs;
    } else {
      RETURN_IF_ERROR(
          dense::Fp8ActBf16({.codes = p.x,
                             .scales = p.x_scales,
                             .out = rx16,
                             .rows = p.m,
                             .cols = p.k,
                             .groups = x_groups,
                             .code_group_stride = x_grouped ? p.x_group_stride : 0,
                             .scale_group_stride = x_grouped ? p.x_scales_group_stride : 0},
                            stream));
    }
    // x_shared (one X, several weights): a launch a group, each over rx16.
    const int launches = p.x_shared ? p.groups : 1;
    const int groups = p.x_shared ? 1 : p.groups;
    const int64_t w_stride = p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k;
    const int64_t s_stride =
        p.w_scales_group_stride != 0 ? p.w_scales_group_stride : (p.n + 31) / 32 * (p.k / 32);
    const int64_t y_stride = p.y_group_stride != 0 ? p.y_group_stride : p.m * p.n;
    const int y_bytes = dense::Fp8GemmOutputBytes(p.output);
    for (int g = 0; g < launches; ++g) {
      dense::Bf16GemmParams b{.x = x16_in,
                              .y = static_cast<char*>(p.y) + int64_t{g} * y_stride * y_bytes,
                              .m = p.m,
                              .n = p.n,
                              .k = p.k,
                              .groups = groups,
                              .w_group_stride = groups > 1 ? w_stride : 0,
                              .y_group_stride = groups > 1 ? y_stride : 0,
                              .output = p.output,
                              .w_codes = p.w + int64_t{g} * w_stride,
                              .w_scales = p.w_scales + int64_t{g} * s_stride,
                              .w_scales_group_stride = groups > 1 ? s_stride : 0,
                              .row_role = row_role,
                              .role = 1,
                              .ws_m256 = WsM256(p.m, p.n, p.k),
                              .ws_persistent = options.bf16_ws_persistent};
      if (options.bf16_split_k && !options.prompt_bf16_unsplit) {
        b.k_splits =
            dense::ChooseBf16GemmSplits(p.n, p.k, split_groups > 0 ? split_groups : p.groups);
      }
      if (b.k_splits > 1) {
        b.split_scratch = split;
        if (dense::Bf16GemmSplitScratchFloats(b) > split_count) {
          return absl::InternalError(
              absl::StrCat("DeviceDecoder: a prompt product's split-K partials of ",
                           dense::Bf16GemmSplitScratchFloats(b), " floats exceed their scratch of ",
                           split_count));
        }
      }
      // Above 256 rows: the weight's bf16 values in w16 and the
      // warp-specialized tile (the same bits as widening in the stages).
      RETURN_IF_ERROR(WidenForPrefillTile(b, w16, w16_count).status());
      RETURN_IF_ERROR(RunBf16Gemm(b));
      ++prompt_bf16_products;
    }
    return absl::OkStatus();
  }
  // prompt_fp8_lt: the prompt rows of `p` on Fp8LtGemm where it takes the
  // shape and the re-blocked operands fit their scratch. The weight's rows
  // go in slices of kFp8LtSliceRows (the last one shorter): a slice is
  // re-blocked into w16 and multiplied as a product of its own, so a
  // slice's algorithm (one per slice shape) and a row's bits are the same
  // in every step. Without row_role (every row a prompt's): the rows below
  // m rounded down to 4 straight into y's columns of the slice (cuBLASLt
  // wants row counts in multiples of 4), the last m % 4 (padded to 4) into
  // lt_tail and copied over. With row_role (a step of both roles, after the
  // FP8 product wrote the generated rows): every row into lt_y, then the
  // prompt's rows copied into y (CopyRowsOfRole). X is re-blocked into rx16
  // once. kF32RoundedBf16 as kF32, then RoundBf16 (the fused rounding's
  // values). Returns whether it ran; false leaves `p` to the bf16 maths.
  static constexpr int64_t kFp8LtSliceRows = 4096;
  absl::StatusOr<bool> PromptFp8Lt(const dense::Fp8BlockGemmParams& p, const int32_t* row_role) {
    const bool x_grouped = p.groups > 1 && !p.x_shared;
    const dense::Fp8GemmOutput out = p.output == dense::Fp8GemmOutput::kBf16
                                         ? dense::Fp8GemmOutput::kBf16
                                         : dense::Fp8GemmOutput::kF32;
    const bool round = p.output == dense::Fp8GemmOutput::kF32RoundedBf16;
    const dense::Fp8LtWeightScales form = options.prompt_fp8_lt_blocks
                                              ? dense::Fp8LtWeightScales::kBlk128x128
                                              : dense::Fp8LtWeightScales::kVec128;
    const int64_t slice = std::min(p.n, kFp8LtSliceRows);
    const int64_t last = p.n - (p.n - 1) / kFp8LtSliceRows * kFp8LtSliceRows;  // last slice's rows
    if (x_grouped || p.group_offsets != nullptr || p.m < 1 || rx16 == nullptr || w16 == nullptr ||
        lt_tail == nullptr || lt_y == nullptr || lt_ws == nullptr || slice > lt_slice_width ||
        (row_role != nullptr && p.m > lt_y_rows) || !dense::Fp8LtGemm::Takes(slice, p.k, out) ||
        !dense::Fp8LtGemm::Takes(last, p.k, out)) {
      return false;
    }
    const auto align16 = [](int64_t bytes) { return (bytes + 15) / 16 * 16; };
    // X's rows in one or two parts (row_role: all of them, padded to 4).
    const int64_t head = row_role != nullptr ? p.m : p.m / 4 * 4;
    const int64_t tail = p.m - head;
    const int64_t head_codes = align16(dense::Fp8LtPaddedRows(head) * p.k);
    const int64_t head_scales = align16(dense::Fp8Vec128ScaleFloats(head, p.k) * 4);
    const int64_t tail_codes = align16(4 * p.k);
    const int64_t tail_scales = align16(dense::Fp8Vec128ScaleFloats(4, p.k) * 4);
    const int64_t w_codes = align16(slice * p.k);
    const int64_t w_scales = form == dense::Fp8LtWeightScales::kBlk128x128
                                 ? dense::Fp8Blk128ScaleFloats(slice, p.k) * 4
                                 : dense::Fp8Vec128ScaleFloats(slice, p.k) * 4;
    if (head_codes + head_scales + tail_codes + tail_scales > rx16_count * 2 ||
        w_codes + w_scales > w16_count * 2) {
      return false;
    }
    char* xr = reinterpret_cast<char*>(rx16);
    uint8_t* x_head = reinterpret_cast<uint8_t*>(xr);
    float* xs_head = reinterpret_cast<float*>(xr + head_codes);
    uint8_t* x_tail = reinterpret_cast<uint8_t*>(xr + head_codes + head_scales);
    float* xs_tail = reinterpret_cast<float*>(xr + head_codes + head_scales + tail_codes);
    uint8_t* wr = reinterpret_cast<uint8_t*>(w16);
    float* wrs = reinterpret_cast<float*>(reinterpret_cast<char*>(w16) + w_codes);
    if (head > 0) {
      RETURN_IF_ERROR(dense::ReblockFp8Rows({.codes = p.x,
                                             .scales = p.x_scales,
                                             .out_codes = x_head,
                                             .out_scales = xs_head,
                                             .rows = head,
                                             .k = p.k,
                                             .rows_per_scale = 1},
                                            stream));
    }
    if (tail > 0) {
      RETURN_IF_ERROR(dense::ReblockFp8Rows({.codes = p.x + head * p.k,
                                             .scales = p.x_scales + head * (p.k / 32),
                                             .out_codes = x_tail,
                                             .out_scales = xs_tail,
                                             .rows = tail,
                                             .k = p.k,
                                             .rows_per_scale = 1},
                                            stream));
    }
    const int launches = p.x_shared ? p.groups : 1;
    const int64_t w_stride = p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k;
    const int64_t s_stride =
        p.w_scales_group_stride != 0 ? p.w_scales_group_stride : (p.n + 31) / 32 * (p.k / 32);
    const int64_t y_stride = p.y_group_stride != 0 ? p.y_group_stride : p.m * p.n;
    const int y_bytes = dense::Fp8GemmOutputBytes(out);
    for (int g = 0; g < launches; ++g) {
      char* y = static_cast<char*>(p.y) + int64_t{g} * y_stride * y_bytes;
      for (int64_t n0 = 0; n0 < p.n; n0 += kFp8LtSliceRows) {
        const int64_t rows = std::min(kFp8LtSliceRows, p.n - n0);
        const uint8_t* w = p.w + int64_t{g} * w_stride + n0 * p.k;
        const uint8_t* ws = p.w_scales + int64_t{g} * s_stride + n0 / 32 * (p.k / 32);
        if (form == dense::Fp8LtWeightScales::kBlk128x128) {
          RETURN_IF_ERROR(dense::ReblockFp8Tiles(
              {.codes = w, .scales = ws, .out_codes = wr, .out_scales = wrs, .n = rows, .k = p.k},
              stream));
        } else {
          RETURN_IF_ERROR(dense::ReblockFp8Rows({.codes = w,
                                                 .scales = ws,
                                                 .out_codes = wr,
                                                 .out_scales = wrs,
                                                 .rows = rows,
                                                 .k = p.k,
                                                 .rows_per_scale = 32},
                                                stream));
        }
        char* y_slice = y + n0 * y_bytes;
        const dense::Fp8LtGemmParams lp{.x = x_head,
                                        .x_scales = xs_head,
                                        .w = wr,
                                        .w_scales = wrs,
                                        .w_scales_form = form,
                                        .y = y_slice,
                                        .y_ld = p.n,
                                        .m = head,
                                        .n = rows,
                                        .k = p.k,
                                        .output = out,
                                        .workspace = lt_ws,
                                        .workspace_bytes = dense::Fp8LtGemm::kWorkspaceBytes};
        if (row_role != nullptr) {  // every row into lt_y, the prompt's into y
          dense::Fp8LtGemmParams all = lp;
          all.y = lt_y;
          all.y_ld = rows;
          RETURN_IF_ERROR(fp8_lt->Run(all, stream));
          if (round) {
            RETURN_IF_ERROR(dec::RoundBf16({.x = lt_y, .n = p.m * rows}, stream));
          }
          RETURN_IF_ERROR(dense::CopyRowsOfRole({.src = lt_y,
                                                 .dst = y_slice,
                                                 .row_role = row_role,
                                                 .rows = p.m,
                                                 .cols = rows,
                                                 .src_ld = rows,
                                                 .dst_ld = p.n,
                                                 .elem_bytes = y_bytes,
                                                 .role = 1},
                                                stream));
          continue;
        }
        if (head > 0) RETURN_IF_ERROR(fp8_lt->Run(lp, stream));
        if (tail > 0) {
          dense::Fp8LtGemmParams tp = lp;
          tp.x = x_tail;
          tp.x_scales = xs_tail;
          tp.y = lt_tail;
          tp.y_ld = rows;
          tp.m = tail;
          RETURN_IF_ERROR(fp8_lt->Run(tp, stream));
          WEIR_DD_CUDA("the FP8 tail rows",
                       cudaMemcpy2DAsync(y_slice + head * p.n * y_bytes, p.n * y_bytes, lt_tail,
                                         rows * y_bytes, rows * y_bytes, tail,
                                         cudaMemcpyDeviceToDevice, stream));
        }
      }
      if (round && row_role == nullptr) {
        RETURN_IF_ERROR(dec::RoundBf16({.x = reinterpret_cast<float*>(y), .n = p.m * p.n}, stream));
      }
      ++fp8_lt_products;
    }
    return true;
  }
  // Fp8Gemm's FP8 product over every row of `p`.
  absl::Status Fp8GemmAllRows(dense::Fp8BlockGemmParams p, int split_groups) {
    // dense_wgmma_f16: the mma pair's bits on f16 wgmma where a call has
    // more than kDenseWgmmaF16MinRows rows (prefill chunks): a choice of speed
    // only, so a row's bits never depend on it.
    const bool f16_wgmma = (options.dense_wgmma_f16 && p.m > kDenseWgmmaF16MinRows) ||
                           (options.dense_wgmma_f16_decode && p.m <= kDenseWgmmaF16DecodeRows);
    p.math = options.dense_wgmma ? dense::Fp8GemmMath::kWgmma
             : f16_wgmma         ? dense::Fp8GemmMath::kWgmmaF16
                                 : dense::Fp8GemmMath::kMmaF16;
    p.prefetch_weights = options.weight_prefetch;
    p.ws_halves = options.fp8_ws_halves;
    p.k_splits = FastSplits(p.n, p.k, split_groups > 0 ? split_groups : p.groups);
    if (product_rope != nullptr) {  // MmRoundRope's RoPE, where the split reduce can take it
      p.rope = *product_rope;
      product_rope = nullptr;
      product_roped = dense::Fp8GemmRopeApplies(p);
      if (!product_roped) p.rope = {};
    }
    RETURN_IF_ERROR(MakeX16Panel(p));
    if (p.k_splits > 1) {
      p.split_scratch = split;
      if (options.fused_split_reduce) {
        p.split_counters = split_counters;
        p.split_counter_count = split_counter_count;
      }
      if (dense::Fp8GemmSplitScratchFloats(p) > split_count) {
        return absl::InternalError(absl::StrCat(
            "DeviceDecoder: split-K partials of ", dense::Fp8GemmSplitScratchFloats(p),
            " floats exceed their scratch of ", split_count));
      }
    }
    return dense::Fp8BlockGemm(p, stream);
  }
  absl::Status Mm(const DevDense& w, const float* in, int64_t rows, float* out,
                  int split_groups = 0, dense::Fp8GemmOutput output = dense::Fp8GemmOutput::kF32) {
    if (IsBf16(w)) return MmBf16(w, in, rows, out, 1, 0, output);
    if (w.codes != nullptr) {  // kFast: the reference's act_quant, then tensor cores
      RETURN_IF_ERROR(dense::ActQuantFp8(
          {.x = in, .codes = fq, .scales = fq_scales, .rows = rows, .cols = w.in}, stream));
      return Fp8GemmOf(w, fq, fq_scales, rows, out, split_groups, output);
    }
    const dense::MatmulParams p{.x = in, .w = w.w, .y = out, .rows = rows, .out = w.out,
                                .in = w.in, .fp8_activation = w.fp8,
                                .act_scratch = w.fp8 ? act : nullptr};
    return dense::RowStableMatmul(p, stream);
  }
  // Mm of a bound SharedInput: its bf16 or FP8 form, made here if this is
  // the first product that needs it.
  absl::Status Mm(const DevDense& w, SharedInput& in, int64_t rows, float* out,
                  int split_groups = 0, dense::Fp8GemmOutput output = dense::Fp8GemmOutput::kF32) {
    if (in.src == nullptr || rows != in.rows || w.in != in.cols) {
      return absl::InternalError(absl::StrCat("DeviceDecoder: a product of ", rows, " x ", w.in,
                                              " reads a shared input bound to ", in.rows, " x ",
                                              in.cols));
    }
    const bool fits = rows * in.cols <= in.capacity;
    if (IsBf16(w) && fits) {
      if (!in.has_bf16) {
        RETURN_IF_ERROR(dec::ToBf16({.x = in.src, .out = in.bf16, .n = rows * in.cols}, stream));
        in.has_bf16 = true;
      }
      return Bf16GemmOf(w, in.bf16, rows, out, 1, 0, output);
    }
    if (w.codes != nullptr && fits) {
      RETURN_IF_ERROR(Fp8Input(in));
      return Fp8GemmOf(w, in.codes, in.scales, rows, out, split_groups, output);
    }
    return Mm(w, in.src, rows, out, split_groups, output);
  }
  // Makes `in`'s FP8 form unless it exists (the reference's act_quant).
  absl::Status Fp8Input(SharedInput& in);
  // True when the shared expert's w1 and w3 run as one two-group FP8 launch
  // over the one input (device_decoder_moe.cc).
  bool SharedGateUp(const LayerDev& L, int64_t b) const;
  // MmRound of an FP8 weight over an input whose FP8 form is made: the bf16
  // boundary in the epilogue (FP8 products always fuse it).
  absl::Status Fp8RoundOf(const DevDense& w, const uint8_t* codes, const uint8_t* scales,
                          int64_t rows, float* out) {
    return Fp8GemmOf(w, codes, scales, rows, out, 0,
                     bf16() ? dense::Fp8GemmOutput::kF32RoundedBf16 : dense::Fp8GemmOutput::kF32);
  }
  absl::Status Fp8GemmOf(const DevDense& w, const uint8_t* codes, const uint8_t* scales,
                         int64_t rows, float* out, int split_groups, dense::Fp8GemmOutput output) {
    return Fp8Gemm({.x = codes,
                    .x_scales = scales,
                    .w = w.codes,
                    .w_scales = w.scales,
                    .y = out,
                    .m = rows,
                    .n = w.out,
                    .k = w.in,
                    .output = output},
                   split_groups);
  }
  // True when Mm of `w` runs on the tensor-core kernels (kFast), whose
  // epilogue can round to bf16 (kF32RoundedBf16).
  static bool FusesRound(const DevDense& w) { return IsBf16(w) || w.codes != nullptr; }
  // Mm, then the bf16 boundary on its [rows, w.out] output: fused into the
  // tensor-core kernels' epilogue (the bits a Round pass gives, one launch
  // fewer), a separate Round after the reference's row-stable product.
  // `In`: const float* or SharedInput&.
  template <typename In>
  absl::Status MmRound(const DevDense& w, In&& in, int64_t rows, float* out, int split_groups = 0) {
    if (bf16() && FusesRound(w)) {
      return Mm(w, in, rows, out, split_groups, dense::Fp8GemmOutput::kF32RoundedBf16);
    }
    RETURN_IF_ERROR(Mm(w, in, rows, out, split_groups));
    return Round(out, rows * w.out);
  }
  // MmRound of w into out [rows, heads * dim], then Rope (forward, rounded)
  // of its heads at `positions`: the same bits either way, the rotation in
  // the FP8 product's split-K reduce where it has one (a decode step's
  // product: one launch fewer), else a Rope launch after it.
  template <typename In>
  absl::Status MmRoundRope(const DevDense& w, In&& in, int64_t rows, float* out,
                           const int64_t* positions, int heads, int64_t dim, int layer) {
    const dense::Fp8BlockGemmParams::Rope rope{.positions = positions,
                                               .cos_sin = cos_sin(layer),
                                               .cos_sin_rows = options.max_positions,
                                               .head_dim = static_cast<int>(dim),
                                               .dim = static_cast<int>(c.rope_head_dim),
                                               .round_bf16 = bf16()};
    // The reduce rotates the product's output, so that output must be final:
    // rounded in the epilogue (or never rounded).
    product_roped = false;
    if (options.fused_rope && (!bf16() || FusesRound(w)) && w.out == heads * dim) {
      product_rope = &rope;
    }
    const absl::Status made = MmRound(w, in, rows, out);
    product_rope = nullptr;
    RETURN_IF_ERROR(made);
    if (product_roped) {
      ++fused_ropes;
      return absl::OkStatus();
    }
    return Rope(out, positions, rows, heads, dim, layer, /*inverse=*/false, /*round=*/true);
  }
  absl::Status Round(float* v, int64_t n) {
    if (!bf16()) return absl::OkStatus();
    return dec::RoundBf16({.x = v, .n = n}, stream);
  }
  // RmsNorm in place; `round`: then the bf16 boundary (Round) on its output,
  // in the same launch (the same bits). `bind`: then `bind` is bound to the
  // output, and with `fp8` (an FP8 product reads it next) its FP8 form is
  // made in the same launch where NormMakesFp8 (the bits Fp8Input gives).
  absl::Status Norm(float* v, const float* weight, int64_t rows, int64_t dim, bool round = false,
                    SharedInput* bind = nullptr, bool fp8 = false) {
    kc::RmsNormParams p{.x = v,
                        .weight = weight,
                        .out = v,
                        .rows = rows,
                        .dim = dim,
                        .eps = static_cast<float>(c.norm_eps),
                        .round_bf16 = round && bf16()};
    const bool quantize = bind != nullptr && fp8 && NormMakesFp8(*bind, rows, dim);
    if (quantize) {
      p.codes = bind->codes;
      p.scales = bind->scales;
    }
    RETURN_IF_ERROR(kc::RmsNorm(p, stream));
    if (bind != nullptr) {
      Bind(*bind, v, rows, dim);
      bind->has_fp8 = quantize;
    }
    return absl::OkStatus();
  }
  // RoPE in place; `round`: then the bf16 boundary, in the same launch. The
  // kernel rounds only the rotated elements, which is a Round pass over `v`
  // because every caller hands it values already rounded (a linear's, a
  // norm's or a Round's output).
  absl::Status Rope(float* v, const int64_t* positions, int64_t rows, int heads, int64_t dim,
                    int layer, bool inverse = false, bool round = false) {
    kc::RopeParams p{.x = v, .positions = positions, .cos_sin = cos_sin(layer),
                     .num_tokens = rows, .num_heads = heads, .head_dim = static_cast<int>(dim),
                     .rope_dim = static_cast<int>(c.rope_head_dim), .inverse = inverse};
    p.cos_sin_by_position = true;
    p.cos_sin_rows = options.max_positions;
    p.round_bf16 = round && bf16();
    return kc::ApplyRope(p, stream);
  }
  // KvRowFinish's parameters for `rows` rows of width `dim` at x: the
  // norm `weight` (bf16 boundary when bf16()), the forward RoPE of layer
  // `layer` at `positions` (bf16 boundary), stores filled in by the caller.
  dec::KvRowFinishParams KvRow(const float* x, const float* weight, int64_t rows, int64_t dim,
                               const int64_t* positions, int layer, const int32_t* dst_rows) {
    dec::KvRowFinishParams p{.x = x,
                             .norm_weight = weight,
                             .eps = static_cast<float>(c.norm_eps),
                             .round_bf16 = bf16(),
                             .positions = positions,
                             .cos_sin = cos_sin(layer),
                             .cos_sin_rows = options.max_positions,
                             .rope_dim = static_cast<int>(c.rope_head_dim)};
    p.dst_rows = dst_rows;
    p.rows = rows;
    p.dim = dim;
    return p;
  }
  absl::Status FinishKvRows(const dec::KvRowFinishParams& p) {
    ++fused_kv_rows;
    return dec::KvRowFinish(p, stream);
  }
  bool FusesKvRows() const { return fast() && options.fused_kv_rows; }
  bool FoldsRowOps() const { return fast() && options.fold_row_ops; }
  // fused_attention_out on the unstored pools: the staged attention writes
  // the grouped projection's input itself (what the inverse RoPE's SwapAxes
  // would), where that transpose carries the RoPE (whole heads a group).
  bool FusesAttentionOut() const {
    return FoldsRowOps() && options.staged_attention && options.fused_attention_out &&
           options.fused_rope && c.o_group_in_dim() % c.head_dim == 0 && !stored_kv;
  }
  // The grouped output an attention launch writes for layer `layer` instead
  // of o (og, or with `direct` xb's bf16 bits).
  kc::AttentionGroupedOut GroupedAttentionOut(int layer, bool direct) {
    return {.out = direct ? nullptr : og,
            .out_bf16 = direct ? xb : nullptr,
            .group_width = c.o_group_in_dim(),
            .positions = meta_d.positions,
            .cos_sin = cos_sin(layer),
            .cos_sin_rows = options.max_positions,
            .rope_dim = static_cast<int>(c.rope_head_dim)};
  }
  // attention_grouped_out applies: stored pools on the wgmma attention, the
  // RoPE fused into the transpose it replaces, groups of whole heads.
  bool FusesWgAttentionOut() const {
    return fast() && stored_kv && options.attention_grouped_out && options.fused_rope &&
           c.o_group_in_dim() % c.head_dim == 0 && c.head_dim == kc::kSparseDecodeHeadDim;
  }
  // Attention set it: this layer's og is written (the SwapAxes is skipped).
  bool attention_out_fused_ = false;
  // The bf16 weight stride of L's grouped wo_a when one Bf16Gemm runs every
  // group (the groups' weights evenly apart), else 0.
  int64_t GroupedWoAStride(const LayerDev& L) const;
  // The scale stride of L's grouped wo_a held as FP8 (w8; 0 otherwise).
  static int64_t WoAScaleStride(const LayerDev& L) {
    return L.wo_a.size() > 1 && L.wo_a[0].w8 ? L.wo_a[1].scales - L.wo_a[0].scales : 0;
  }
  // direct_wo_a applies to layer L: its grouped wo_a reads xb as the launch
  // before it writes it and writes u itself.
  bool DirectWoA(const LayerDev& L, int64_t b) const {
    return fast() && options.direct_wo_a && GroupedWoAStride(L) != 0 &&
           b * c.o_groups * c.o_group_in_dim() <= xb_count;
  }
  absl::Status Quant(float* v, int64_t n, dense::FakeQuantFormat f) {
    return dense::FakeQuant({.x = v, .out = v, .n = n, .format = f}, stream);
  }
  absl::Status Mix(const HcDev& hc, int64_t b, const Coeffs& out) {
    const int64_t n = c.hc_mult, n_mix = c.hc_mix_dim();
    const kc::HcMixParams mix{.x = x, .hc_fn = hc.fn, .scale = hc.scale, .base = hc.base,
                              .pre = out.pre, .post = out.post, .comb = out.comb,
                              .tokens = b, .dim = c.dim, .hc_mult = static_cast<int>(n),
                              .sinkhorn_iters = c.hc_sinkhorn_iters,
                              .hc_eps = static_cast<float>(c.hc_eps),
                              .norm_eps = static_cast<float>(c.norm_eps)};
    if (hc_partials != nullptr && kc::SupportsHcMixSplitK(mix)) {  // kFast, fast_mhc
      const kc::HcMixSplitScratch scratch{.partials = hc_partials, .counters = hc_counters};
      // prompt_tf32_mhc: the prompt rows' on HcMixTf32, after HcMixSplitK
      // wrote every row's where the step holds generated rows too.
      const bool tf32 = options.prompt_tf32_mhc && linear_roles_ != 1;
      if (!tf32 || linear_roles_ == 3) {
        RETURN_IF_ERROR(kc::HcMixSplitK(mix, scratch, stream,
                                        options.hc_mix_prefill_grid ? kc::kHcMixSplitOnYTokens : 0,
                                        options.hc_mix_transposed, options.hc_mix_token_loop));
      }
      if (!tf32) return absl::OkStatus();
      ++prompt_tf32_mixes;
      return kc::HcMixTf32(mix, scratch, stream, linear_roles_ == 3 ? meta_d.role : nullptr, 1,
                           options.prompt_tf32_mhc_promote, options.prompt_tf32_mhc_wide ? 2 : 1);
    }
    if (fast()) {  // the reference's bits, a thread quad per mix element
      RETURN_IF_ERROR(dec::RowStableDot(
          {.x = x, .w = hc.fn, .y = mixes, .rows = b, .out = n_mix, .k = n * c.dim}, stream));
    } else {
      RETURN_IF_ERROR(dense::RowStableMatmul(
          {.x = x, .w = hc.fn, .y = mixes, .rows = b, .out = n_mix, .in = n * c.dim}, stream));
    }
    kc::HcMixParams given = mix;
    given.mixes = mixes;
    return kc::HcMix(given, stream);
  }
  // h = RmsNorm(collapse of x) (bf16 boundaries after each): one
  // HcCollapseNorm launch where the row fits its shared memory, else
  // HcCollapse then RmsNorm; the same bits either way. h_in is bound to h
  // afterwards; with `fp8` (an FP8 product reads h next) h's FP8 form is
  // made in the same launch where NormMakesFp8.
  //
  // With `expand` (kFast): Expand(*expand, b) first, the streams the collapse
  // reads, in the same launch where HcExpandCollapseNorm takes both.
  absl::Status Collapse(const float* pre, int64_t b, const float* norm_weight, bool fp8 = false,
                        const Coeffs* expand = nullptr, bool bf16_form = false) {
    if (expand != nullptr) {
      const kc::HcExpandParams e = ExpandParams(*expand, b);
      kc::HcCollapseNormParams both = CollapseNormParams(x2, pre, b, norm_weight);
      if (fast() && kc::SupportsHcExpandCollapseNorm(e, both)) {
        JoinMix();
        RETURN_IF_ERROR(NormInto(
            both, b, fp8, [&] { return kc::HcExpandCollapseNorm(e, both, stream); }, bf16_form));
        std::swap(x, x2);
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(Expand(*expand, b));
    }
    kc::HcCollapseNormParams fused = CollapseNormParams(x, pre, b, norm_weight);
    if (kc::SupportsHcCollapseNorm(fused)) {
      return NormInto(
          fused, b, fp8, [&] { return kc::HcCollapseNorm(fused, stream); }, bf16_form);
    }
    RETURN_IF_ERROR(kc::HcCollapse({.x = x, .pre = pre, .out = h, .tokens = b, .dim = c.dim,
                                    .hc_mult = static_cast<int>(c.hc_mult),
                                    .round_bf16 = bf16()},
                                   stream));
    return Norm(h, norm_weight, b, c.dim, /*round=*/true, &h_in, fp8);
  }
  // The collapse-norm of `streams` into h (Collapse's launches).
  kc::HcCollapseNormParams CollapseNormParams(const float* streams, const float* pre, int64_t b,
                                              const float* norm_weight) const {
    return {.x = streams,
            .pre = pre,
            .weight = norm_weight,
            .out = h,
            .tokens = b,
            .dim = c.dim,
            .hc_mult = static_cast<int>(c.hc_mult),
            .eps = static_cast<float>(c.norm_eps),
            .round_collapse = bf16(),
            .round_out = bf16(),
            .cluster_ranks = options.norm_cluster_ranks,
            .block_threads = options.norm_block_threads};
  }
  // Enqueues `launch`, a collapse-norm `p` into h, with h's FP8 form in the
  // same launch when `fp8` and the norm can make it, and its bf16 form when
  // `bf16_form` (kFast) and it fits; binds h_in to h.
  template <typename Launch>
  absl::Status NormInto(kc::HcCollapseNormParams& p, int64_t b, bool fp8, Launch&& launch,
                        bool bf16_form = false) {
    const bool quantize = fp8 && NormMakesFp8(h_in, b, c.dim);
    if (quantize) {
      p.codes = h_in.codes;
      p.scales = h_in.scales;
    }
    const bool widen = bf16_form && fast() && h_in.bf16 != nullptr && b * c.dim <= h_in.capacity;
    if (widen) p.bf16 = h_in.bf16;
    // prompt_norm_dequant_bf16: the FP8 form's values as bf16 too, for the
    // prompt's products of it (PromptBf16Gemm), in a step with prompt rows.
    const bool dequant = quantize && h_in.dq16 != nullptr && linear_roles_ != 1;
    if (dequant) p.dq16 = h_in.dq16;
    RETURN_IF_ERROR(launch());
    Bind(h_in, h, b, c.dim);
    h_in.has_fp8 = quantize;
    h_in.has_bf16 = widen;
    h_in.has_dq16 = dequant;
    return absl::OkStatus();
  }
  // bf16_branches: the attention's collapse-norm makes h's bf16 form too
  // when a bf16 product of layer L reads h (the compressor's, the indexer's
  // weights), so no ToBf16 launch makes it and the KV branch may run them.
  bool AttentionReadsBf16(const LayerDev& L) const {
    if (!options.bf16_branches || !fast()) return false;
    for (const DevDense* w : {&L.wq_a, &L.wkv, &L.comp_wkv, &L.comp_wgate, &L.index_weights_proj}) {
      if (w->bf16 != nullptr && w->in == c.dim) return true;
    }
    return false;
  }
  // Expand's streams: x mixed by `coeff` with y, into x2.
  kc::HcExpandParams ExpandParams(const Coeffs& coeff, int64_t b) const {
    return {.x = x,
            .y = y,
            .post = coeff.post,
            .comb = coeff.comb,
            .out = x2,
            .tokens = b,
            .dim = c.dim,
            .hc_mult = static_cast<int>(c.hc_mult),
            .round_bf16 = bf16()};
  }
  // The mHC coefficients of the sublayer about to run are first read by the
  // Expand after it (its Collapse takes the previous coefficients' pre), so
  // with parallel branches (kFast) MixBeside enqueues their Mix on a path of
  // the step's graph of its own (mix_side), forked here and joined at the
  // next Expand, beside the Collapse and the sublayer instead of before them.
  // Without branches, Mix at once.
  absl::Status MixBeside(const HcDev& hc, int64_t b, const Coeffs& out) {
    if (!Branches()) return Mix(hc, b, out);
    return Beside([&] { return Mix(hc, b, out); });
  }
  // Enqueues `work` on the mix path (mix_side) after everything enqueued on
  // the step's stream so far; the next Expand waits for it. For work nothing
  // reads before that Expand: the mHC mix, the experts' load counters.
  template <typename Work>
  absl::Status Beside(Work&& work) {
    WEIR_DD_CUDA("mix fork", cudaEventRecord(mix_fork_ev, stream));
    WEIR_DD_CUDA("mix fork", cudaStreamWaitEvent(mix_side, mix_fork_ev, 0));
    std::swap(stream, mix_side);
    const absl::Status enqueued = work();
    std::swap(stream, mix_side);
    RETURN_IF_ERROR(enqueued);
    WEIR_DD_CUDA("mix join", cudaEventRecord(mix_join_ev, mix_side));
    mix_pending = true;
    return absl::OkStatus();
  }
  // The step's stream waits for MixBeside's coefficients, if any are pending.
  void JoinMix() {
    if (!mix_pending) return;
    cudaStreamWaitEvent(stream, mix_join_ev, 0);  // fails only with a capture gone bad
    mix_pending = false;
  }
  absl::Status Expand(const Coeffs& coeff, int64_t b) {
    JoinMix();
    RETURN_IF_ERROR(kc::HcExpand(ExpandParams(coeff, b), stream));
    std::swap(x, x2);
    return absl::OkStatus();
  }

  absl::Status Engram(int layer, int64_t b);
  absl::Status Attention(int layer, int64_t b);
  absl::Status UpdateCompressed(int layer, int64_t b);
  absl::Status SelectCompressed(int layer, int64_t b);
  absl::Status Moe(int layer, int64_t b);
  // prompt_bf16_gate: the gate logits of the step's prompt rows (all b rows
  // where every row is the prompt's, else the rows of meta role 1) as one
  // unsplit bf16 GEMM of h's bf16 bits (exact: the bf16 model rounds the
  // normed h to bf16) and L.gate16 into gate_logits.
  // `in`: h_in as the FFN's collapse bound it (its bf16 form, when made,
  // is the gate GEMM's input).
  absl::Status PromptGate(const LayerDev& L, int64_t b, const SharedInput& in);
  // prompt_gate_norm_bf16: the FFN's collapse-norm makes h's bf16 form for
  // the prompt's gate GEMM (PromptGate reads it).
  bool FfnNormMakesGateBf16(const LayerDev& L) const {
    return options.prompt_gate_norm_bf16 && fast() && L.gate16 != nullptr && linear_roles_ != 1;
  }
  // The shared expert of layer L over h_in into sy (Moe's last part before
  // the combine), on `stream` with fq and split as they are then bound.
  absl::Status SharedExpert(const LayerDev& L, int64_t b);
  // Parallel branches (options.concurrent_branches; kFast, no section
  // profile): ForkSide enqueues `branch` on `side`,
  // forked from `stream` at this point, with side_fq / side_split swapped in
  // for fq / split while it is enqueued; `stream` waits for it at JoinSide.
  // The branch may read what is already enqueued and must not make a shared
  // input's form (a later reader on `stream` would not wait for it). One
  // branch at a time; in a capture the two streams are two paths of the graph.
  bool Branches() const {
    return options.concurrent_branches && side_fq != nullptr && fast() && !profiling;
  }
  absl::Status ForkSide(absl::FunctionRef<absl::Status()> branch) {
    WEIR_DD_CUDA("fork", cudaEventRecord(fork_ev, stream));
    WEIR_DD_CUDA("fork", cudaStreamWaitEvent(side, fork_ev, 0));
    SwapSide();
    const absl::Status enqueued = branch();
    SwapSide();
    if (!enqueued.ok()) return enqueued;
    WEIR_DD_CUDA("join", cudaEventRecord(join_ev, side));
    return absl::OkStatus();
  }
  // A weight whose products on a branch use only the swapped scratch (its
  // FP8 form; a bf16 one would stage through the shared xb).
  static bool FastFp8(const DevDense& w) { return w.codes != nullptr && !IsBf16(w); }
  absl::Status JoinSide() {
    WEIR_DD_CUDA("join", cudaStreamWaitEvent(stream, join_ev, 0));
    return absl::OkStatus();
  }
  void SwapSide() {
    std::swap(stream, side);
    std::swap(fq, side_fq);
    std::swap(fq_scales, side_fq_scales);
    std::swap(fq_count, side_fq_count);
    std::swap(split, side_split);
    std::swap(split_counters, side_split_counters);
    if (side_xb != nullptr) {  // bf16_branches: the branch's own bf16 staging
      std::swap(xb, side_xb);
      std::swap(xb_count, side_xb_count);
    }
    std::swap(x16, side_x16);
    std::swap(x16_count, side_x16_count);
    std::swap(rx16, side_rx16);
    std::swap(rx16_count, side_rx16_count);
    std::swap(w16, side_w16);
    std::swap(w16_count, side_w16_count);
    std::swap(lt_tail, side_lt_tail);
    std::swap(lt_y, side_lt_y);
    std::swap(lt_ws, side_lt_ws);
  }
  // expert_prefill_tiles: where layer L's tile form lives: its resident
  // buffers (expert_tiles_resident) or the shared scratch.
  struct TileForm {
    uint8_t *w13, *w13_scales, *w2, *w2_scales;
  };
  TileForm TilesOf(const LayerDev& L) const {
    if (L.rt13 != nullptr) return {L.rt13, L.rt13_scales, L.rt2, L.rt2_scales};
    return {tile13, tile13_scales, tile2, tile2_scales};
  }
  // expert_prefill_tiles: layer L's local experts into TilesOf(L) (counts in
  // tile_inexact).
  absl::Status ConvertExperts(const LayerDev& L);
  // expert_prefill_tiles: which layers' local experts convert to the tile
  // form exactly (LayerDev::tile_exact, tile_form_layers); at Build and after
  // every SetPlacement (new experts in the slots). Synchronizes the stream.
  absl::Status CheckTileForm();
  // The routed experts of `rows` grouped rows (fq / fq_scales made) on the
  // tile form: w1 and w3 by rows of each expert, SwiGLU with the route
  // weight, the FP8 quantization of h, w2 into yg.
  // bf16_out (expert_out_bf16): w2's outputs into yg as bf16 bits.
  absl::Status TileFormExperts(const LayerDev& L, int64_t rows, float limit, bool bf16_out = false);
  // The experts' SwiGLU of gg and upg (route weight wg, bf16 roundings) into
  // gg, then its FP8 form into fh / fh_scales: the operations of the MXFP4
  // kernel's fused epilogue (SwigluOut, Fp8ActScaleCode / Fp8ActCode), for
  // the rows before *used_rows (null: all `rows`).
  absl::Status SwigluToFp8(const LayerDev& L, int64_t rows, float limit, const int64_t* used_rows);
  dense::Fp8GemmMath TileFormMath() const;
  // The prefill forms' w2 output into yg: bf16 bits (bf16_out,
  // expert_out_bf16), else fp32 rounded to bf16 or not as the activations.
  dense::Fp8GemmOutput ExpertsOutput(bool bf16_out) const {
    if (bf16_out) return dense::Fp8GemmOutput::kBf16;
    return bf16() ? dense::Fp8GemmOutput::kF32RoundedBf16 : dense::Fp8GemmOutput::kF32;
  }
  // prompt_bf16_experts: whether layer L's experts take the bf16 route for
  // this step's prompt rows (a step with prompt rows, no exchange, dims
  // multiples of 128, room for role-major groups).
  bool Bf16Experts(const LayerDev& L, bool ep) const;
  // Whether layer L's experts can take the bf16 route at all (fast MXFP4
  // experts, the rx16 scratch, dims of whole stages, role-major groups fit).
  bool Bf16RouteFits(const LayerDev& L) const;
  // The routed experts of the rows of L.experts groups at `offsets` (fq /
  // fq_scales made; `rows` the capacity) on the bf16 route: X's codes
  // dequantized into rx16, gate and up by Mxfp4Bf16GroupedGemm, SwiGLU with
  // the route weight and the FP8 quantization of h (the tile form's), h
  // dequantized into rx16, w2 into yg. `offsets` is group_offsets for a step
  // of prompt rows only, its second half (the prompt's groups of the
  // role-major grouping) for a step of both roles. bf16_out
  // (expert_out_bf16): w2's outputs into yg as bf16 bits. x_bf16_ready: the
  // gather wrote X's bf16 values into rx16 already (MoeGroupRowsParams::
  // bf16_grouped), so no widening launch.
  absl::Status Bf16RouteExperts(const LayerDev& L, int64_t rows, float limit,
                                const int64_t* offsets, bool bf16_out = false,
                                bool x_bf16_ready = false);
  // Expert parallelism: the dispatch blocks (x rows, local slots, route
  // weights) to and from every rank, and the expert outputs back.
  absl::Status Dispatch(int64_t b);
  absl::Status Return(int64_t b);
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_DEVICE_DECODER_IMPL_H_
