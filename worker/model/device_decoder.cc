#include "worker/model/device_decoder.h"

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
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/rope.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/weight_quant.h"
#include "kernels/cuda/attention/indexer_score.h"
#include "kernels/cuda/attention/sparse_attention.h"
#include "kernels/cuda/attention/topk.h"
#include "kernels/cuda/decode/attention_index.h"
#include "kernels/cuda/decode/compressor_decode.h"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/decode/swiglu.h"
#include "kernels/cuda/dense/fake_quant.h"
#include "kernels/cuda/dense/gemm_handle.h"
#include "kernels/cuda/dense/grouped_row_stable_matmul.h"
#include "kernels/cuda/dense/row_stable_matmul.h"
#include "kernels/cuda/moe/engram.h"
#include "kernels/cuda/moe/mhc.h"
#include "kernels/cuda/moe/moe_exchange.h"
#include "kernels/cuda/moe/moe_gate.h"
#include "kernels/cuda/moe/moe_permute.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "parallel/nccl_communicator.h"
#include "worker/model/engram_layer.h"
#include "worker/model/layer_roles.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;
namespace kc = ::weir::kernels::cuda;
namespace dense = ::weir::kernels::cuda::dense;
namespace dec = ::weir::kernels::cuda::decode;
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kAlign = 256;

absl::Status CudaError(const char* what, cudaError_t err) {
  return absl::InternalError(absl::StrCat("DeviceDecoder: ", what, ": ", cudaGetErrorString(err)));
}

#define WEIR_DD_CUDA(what, call)                                                 \
  do {                                                                           \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) return CudaError(what, e_); \
  } while (0)

// A linear layer on the device.
struct DevDense {
  const float* w = nullptr;  // [out, in]
  int64_t out = 0;
  int64_t in = 0;
  bool fp8 = false;
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
  // Host copies of the device addresses of each local slot's w1, w3, w2
  // (MXFP4: codes and scales; fp32: weights), for SetPlacement.
  std::vector<uint8_t*> slot_codes[3], slot_scales[3];
  std::vector<float*> slot_w[3];
  int64_t inter = 0;
  bool w13_fp8 = false;
  bool w2_fp8 = false;
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
  int32_t comp_base = 0;    // kv source: compressed KV [slots, max_entries]
  float* index_k = nullptr;           // kv source: [slots * max_entries, index_dim]
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
  int32_t* win_write = nullptr;  // [B]
  struct PerRatio {
    int64_t* visible = nullptr;      // [B] (p + 1) / r
    int64_t* key_offset = nullptr;   // [B] slot * max_entries
    int64_t* entry_pos = nullptr;    // [B] position of the entry completed now (0 if none)
    int32_t* entry_write = nullptr;  // [B] row of that entry, -1 if none
    int32_t* row_base = nullptr;     // [B] slot * max_entries
  };
  std::vector<PerRatio> ratio;      // by ratio index
  std::vector<int64_t*> engram_ids;  // per Engram layer [B, cols]
  int64_t* valid = nullptr;         // [1] real rows (the rest is padding)
};

// The shapes (and small host tensors) of a synthetic decoder: big matrices
// are DenseWeights with dimensions only (drawn on the device).
struct SyntheticModel {
  ModelConfig config;
  std::unique_ptr<LayerRoles> roles;
  ModelWeights weights;
};

std::unique_ptr<SyntheticModel> MakeSynthetic(const ModelConfig& config, uint64_t seed) {
  auto m = std::make_unique<SyntheticModel>();
  m->config = config;
  m->roles = std::make_unique<LayerRoles>(m->config);
  const ModelConfig& c = m->config;
  std::mt19937_64 rng(seed);
  auto vec = [&](int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = kernels::RoundToBf16(u(rng));
    return v;
  };
  auto dense = [](int64_t out, int64_t in, bool fp8 = true) {
    return DenseWeight{.out = out, .in = in, .fp8_activation = fp8};
  };
  const int64_t d = c.dim, hd = c.head_dim, nd = c.hc_mult * d, mix = c.hc_mix_dim();
  ModelWeights& w = m->weights;
  w.norm = vec(d, 0.9f, 1.1f);
  w.head = dense(c.vocab_size, d, false);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = (*m->roles)[l];
    BlockWeights b;
    b.attn_norm = vec(d, 0.9f, 1.1f);
    b.ffn_norm = vec(d, 0.9f, 1.1f);
    for (HcWeights* hc : {&b.hc_attn, &b.hc_ffn}) {
      const float s = 1.0f / std::sqrt(static_cast<float>(nd));
      hc->fn = vec(mix * nd, -s, s);
      hc->base = vec(mix, -0.1f, 0.1f);
      hc->scale = vec(3, 0.5f, 1.5f);
    }
    AttentionWeights& a = b.attn;
    a.wq_a = dense(c.q_lora_rank, d);
    a.q_norm = vec(c.q_lora_rank, 0.9f, 1.1f);
    a.wq_b = dense(c.n_heads * hd, c.q_lora_rank);
    a.wkv = dense(hd, d);
    a.kv_norm = vec(hd, 0.9f, 1.1f);
    a.attn_sink = vec(c.n_heads, -0.5f, 0.5f);
    a.wo_b = dense(d, c.o_groups * c.o_lora_rank);
    for (int64_t g = 0; g < c.o_groups; ++g) {
      a.wo_a.push_back(dense(c.o_lora_rank, c.o_group_in_dim()));
    }
    if (role.has_compressor) {
      a.comp_wkv = dense(hd, d);
      if (role.ratio > 1) a.comp_wgate = dense(hd, d, false);
      a.comp_norm = vec(hd, 0.9f, 1.1f);
      a.index_wk = dense(c.index_head_dim, hd);
      a.index_k_norm = vec(c.index_head_dim, 0.9f, 1.1f);
    }
    if (role.has_indexer) {
      a.index_wq_b = dense(c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      a.index_weights_proj = dense(c.index_n_heads, d);
    }
    MoeWeights& f = b.ffn;
    const float gs = 1.0f / std::sqrt(static_cast<float>(d));
    f.gate = vec(c.n_routed_experts * d, -gs, gs);
    f.bias = vec(c.n_routed_experts, -0.01f, 0.01f);
    for (int64_t e = 0; e < c.n_routed_experts; ++e) {
      f.experts.push_back({.w1 = dense(c.moe_inter_dim, d), .w2 = dense(d, c.moe_inter_dim),
                           .w3 = dense(c.moe_inter_dim, d)});
    }
    const int64_t inter_s = c.n_shared_experts * c.moe_inter_dim;
    f.shared = {.w1 = dense(inter_s, d), .w2 = dense(d, inter_s), .w3 = dense(inter_s, d)};
    w.layers.push_back(std::move(b));
  }
  return m;
}

// The MXFP4 form of one expert's w1, w3, w2 (packed codes, scales).
struct EncodedExpert {
  std::vector<uint8_t> codes[3], scales[3];
};

// Encodes `w` as MXFP4; false unless decoding gives `w` back bit for bit.
bool EncodeMxfp4Exactly(const DenseWeight& w, std::vector<uint8_t>& codes,
                        std::vector<uint8_t>& scales) {
  if (w.in % 32 != 0 || w.out <= 0 || static_cast<int64_t>(w.w.size()) != w.out * w.in) {
    return false;
  }
  codes.assign(w.out * w.in / 2, 0);
  scales.assign(w.out * w.in / 32, 0);
  std::vector<float> back(w.w.size());
  return kernels::cpu::QuantizeMxfp4Weight(w.w, w.out, w.in, codes, scales).ok() &&
         kernels::cpu::DequantizeMxfp4Weight(codes, scales, w.out, w.in, back).ok() &&
         std::memcmp(back.data(), w.w.data(), back.size() * sizeof(float)) == 0;
}

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
                                            const DeviceDecoderOptions& options) {
  LocalExperts x;
  const int logical = static_cast<int>(c.n_routed_experts);
  if (options.communicator == nullptr) {
    x.per_rank = logical;
    std::vector<int> identity(logical);
    for (int e = 0; e < logical; ++e) identity[e] = e;
    x.local.assign(c.n_layers, identity);
    return x;
  }
  x.world = options.communicator->world_size();
  x.rank = options.communicator->rank().value();
  const ExpertPlacement pl = options.placement.num_layers == 0
                                 ? IdentityPlacement(c.n_layers, logical, x.world)
                                 : options.placement;
  if (pl.world_size != x.world || pl.num_layers != c.n_layers || pl.num_logical != logical) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceDecoder: the expert placement is for ", pl.world_size, " ranks, ", pl.num_layers,
        " layers, ", pl.num_logical, " experts; the communicator has ", x.world,
        " ranks and the model ", c.n_layers, " layers of ", logical, " experts"));
  }
  RETURN_IF_ERROR(ValidatePlacement(pl));
  x.per_rank = pl.slots_per_rank;
  x.local.assign(c.n_layers, std::vector<int>(x.per_rank));
  x.replicas.assign(c.n_layers, {});
  const size_t physical = pl.num_physical();
  for (int l = 0; l < c.n_layers; ++l) {
    for (int s = 0; s < x.per_rank; ++s) x.local[l][s] = pl.logical(l, x.rank * x.per_rank + s);
    RETURN_IF_ERROR(kc::BuildReplicaTable(
        std::span<const int32_t>(pl.physical_to_logical).subspan(l * physical, physical), logical,
        &x.replicas[l]));
  }
  return x;
}

}  // namespace

struct DeviceDecoder::Impl {
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
  int64_t batch_cap = 0;  // max_batch rounded up to batch_interval
  int slots = 0;          // max_sequences + 1 (the last is the padding rows' scratch slot)
  std::vector<int> ratios;  // distinct compress ratios > 0 of the backbone
  EngramHasher hasher;

  cudaStream_t stream = nullptr;
  cudaEvent_t ev_begin = nullptr, ev_end = nullptr;
  char* arena = nullptr;
  size_t weight_bytes = 0, pool_bytes = 0, arena_bytes = 0;
  std::unique_ptr<dense::GemmHandle> gemm;

  // Weights.
  const float* embed = nullptr;
  const float* final_norm = nullptr;
  DevDense head;
  std::vector<LayerDev> layers;
  const float* cos_sin_swa = nullptr;         // [max_positions, rope/2, 2]
  const float* cos_sin_compressed = nullptr;
  // Pools.
  float* kv_pool = nullptr;
  int64_t pool_rows = 0;
  // Activations [batch_cap, ...].
  float *x = nullptr, *x2 = nullptr, *mixes = nullptr, *h = nullptr, *y = nullptr;
  Coeffs ca, cf;
  float* identity_pre = nullptr;
  float* act = nullptr;  // matmul activation scratch [batch_cap * topk, max in]
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
  float *xg = nullptr, *wg = nullptr, *gg = nullptr, *upg = nullptr, *yg = nullptr;
  float *sg = nullptr, *su = nullptr, *sy = nullptr;
  float *emb = nullptr, *ekv = nullptr, *ekey = nullptr, *evalue = nullptr;
  float* logits = nullptr;
  // Step inputs.
  char* meta_dev = nullptr;
  char* meta_host = nullptr;  // pinned
  size_t meta_bytes = 0;
  StepMeta meta_d, meta_h;
  float* logits_host = nullptr;  // pinned [batch_cap, vocab]

  // Host state per slot.
  struct Slot {
    bool used = false;
    int64_t length = 0;
    std::vector<int64_t> history;  // Engram compressed ids
  };
  std::vector<Slot> slot_state;
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
  void EncodeExperts() {
    encoded.assign(c.n_layers, {});
    if (!options.mxfp4_experts || seed != 0) return;
    for (int l = 0; l < c.n_layers; ++l) {
      std::vector<EncodedExpert> layer;
      bool exact = true;
      for (int slot : ex.local[l]) {
        const ExpertWeightsF32& e = wts.layers[l].ffn.experts[slot];
        EncodedExpert enc;
        const DenseWeight* m[3] = {&e.w1, &e.w3, &e.w2};
        for (int k = 0; k < 3 && exact; ++k) {
          exact = EncodeMxfp4Exactly(*m[k], enc.codes[k], enc.scales[k]);
        }
        if (!exact) break;
        layer.push_back(std::move(enc));
      }
      if (exact && !layer.empty()) encoded[l] = std::move(layer);
    }
  }
  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (auto& [b, exec] : graphs) cudaGraphExecDestroy(exec);
    for (cudaEvent_t e : prof_events) cudaEventDestroy(e);
    gemm.reset();
    if (arena != nullptr && options.memory == nullptr) cudaFree(arena);
    if (meta_host != nullptr) cudaFreeHost(meta_host);
    if (logits_host != nullptr) cudaFreeHost(logits_host);
    if (ev_begin != nullptr) cudaEventDestroy(ev_begin);
    if (ev_end != nullptr) cudaEventDestroy(ev_end);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  bool bf16() const { return precision == ActivationPrecision::kBf16; }
  int64_t window() const { return c.window_size; }
  int64_t max_entries(int ratio) const { return options.max_positions / ratio; }
  int ratio_index(int ratio) const {
    return static_cast<int>(std::find(ratios.begin(), ratios.end(), ratio) - ratios.begin());
  }
  const float* cos_sin(int layer) const {
    return roles[layer].ratio > 0 ? cos_sin_compressed : cos_sin_swa;
  }

  // Derives the batch capacity, the slot count and the ratios from options.
  void Plan() {
    batch_cap = (options.max_batch + options.batch_interval - 1) / options.batch_interval *
                options.batch_interval;
    slots = options.max_sequences + 1;
    ratios.clear();
    for (const LayerRole& role : roles.layers()) {
      if (role.is_dspark_stage || role.ratio <= 0) continue;
      if (std::find(ratios.begin(), ratios.end(), role.ratio) == ratios.end()) {
        ratios.push_back(role.ratio);
      }
    }
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
  absl::Status Layout(Region& r);
  absl::StatusOr<std::unique_ptr<DeviceDecoder>> Build(std::unique_ptr<Impl> self);
  void LayoutMeta(char* base, StepMeta& m, size_t& bytes) const;
  absl::Status PrepareMeta(std::span<const int> slot_ids, std::span<const int64_t> tokens,
                           int64_t padded);
  absl::Status Enqueue(int64_t b);

  // --- one-op wrappers (device pointers, `b` rows)
  absl::Status Mm(const DevDense& w, const float* in, int64_t rows, float* out) {
    const dense::MatmulParams p{.x = in, .w = w.w, .y = out, .rows = rows, .out = w.out,
                                .in = w.in, .fp8_activation = w.fp8,
                                .act_scratch = w.fp8 ? act : nullptr};
    return dense::RowStableMatmul(p, stream);
  }
  absl::Status Round(float* v, int64_t n) {
    if (!bf16()) return absl::OkStatus();
    return dec::RoundBf16({.x = v, .n = n}, stream);
  }
  absl::Status Norm(float* v, const float* weight, int64_t rows, int64_t dim) {
    return kc::RmsNorm({.x = v, .weight = weight, .out = v, .rows = rows, .dim = dim,
                        .eps = static_cast<float>(c.norm_eps)},
                       stream);
  }
  absl::Status Rope(float* v, const int64_t* positions, int64_t rows, int heads, int64_t dim,
                    int layer, bool inverse = false) {
    kc::RopeParams p{.x = v, .positions = positions, .cos_sin = cos_sin(layer),
                     .num_tokens = rows, .num_heads = heads, .head_dim = static_cast<int>(dim),
                     .rope_dim = static_cast<int>(c.rope_head_dim), .inverse = inverse};
    p.cos_sin_by_position = true;
    p.cos_sin_rows = options.max_positions;
    return kc::ApplyRope(p, stream);
  }
  absl::Status Quant(float* v, int64_t n, dense::FakeQuantFormat f) {
    return dense::FakeQuant({.x = v, .out = v, .n = n, .format = f}, stream);
  }
  absl::Status Mix(const HcDev& hc, int64_t b, const Coeffs& out) {
    const int64_t n = c.hc_mult, n_mix = c.hc_mix_dim();
    RETURN_IF_ERROR(dense::RowStableMatmul(
        {.x = x, .w = hc.fn, .y = mixes, .rows = b, .out = n_mix, .in = n * c.dim}, stream));
    return kc::HcMix({.x = x, .hc_fn = hc.fn, .mixes = mixes, .scale = hc.scale,
                      .base = hc.base, .pre = out.pre, .post = out.post, .comb = out.comb,
                      .tokens = b, .dim = c.dim, .hc_mult = static_cast<int>(n),
                      .sinkhorn_iters = c.hc_sinkhorn_iters,
                      .hc_eps = static_cast<float>(c.hc_eps),
                      .norm_eps = static_cast<float>(c.norm_eps)},
                     stream);
  }
  absl::Status Collapse(const float* pre, int64_t b, const float* norm_weight) {
    RETURN_IF_ERROR(kc::HcCollapse({.x = x, .pre = pre, .out = h, .tokens = b, .dim = c.dim,
                                    .hc_mult = static_cast<int>(c.hc_mult),
                                    .round_bf16 = bf16()},
                                   stream));
    RETURN_IF_ERROR(Norm(h, norm_weight, b, c.dim));
    return Round(h, b * c.dim);
  }
  absl::Status Expand(const Coeffs& coeff, int64_t b) {
    RETURN_IF_ERROR(kc::HcExpand({.x = x, .y = y, .post = coeff.post, .comb = coeff.comb,
                                  .out = x2, .tokens = b, .dim = c.dim,
                                  .hc_mult = static_cast<int>(c.hc_mult), .round_bf16 = bf16()},
                                 stream));
    std::swap(x, x2);
    return absl::OkStatus();
  }

  absl::Status Engram(int layer, int64_t b);
  absl::Status Attention(int layer, int64_t b);
  absl::Status UpdateCompressed(int layer, int64_t b);
  absl::Status SelectCompressed(int layer, int64_t b);
  absl::Status Moe(int layer, int64_t b);
  // Expert parallelism: the dispatch blocks (x rows, local slots, route
  // weights) to and from every rank, and the expert outputs back.
  absl::Status Dispatch(int64_t b);
  absl::Status Return(int64_t b);
};

absl::Status DeviceDecoder::Impl::Layout(Region& r) {
  const ModelWeights& w = wts;
  const int64_t d = c.dim, n = c.hc_mult, hd = c.head_dim, di = c.index_head_dim;
  const int64_t bc = batch_cap, win = window();
  const bool live = r.live();
  fills = 0;
  expert_bytes = 0;
  mxfp4_layers = 0;
  // --- weights
  if (w.embed.empty() && seed != 0) {
    float* e = r.Alloc<float>(c.vocab_size * d);
    if (live) Fill(e, c.vocab_size * d, 1.0f);
    embed = e;
  } else {
    embed = r.Put(w.embed);
  }
  embed_bytes = static_cast<size_t>(c.vocab_size * d) * sizeof(float);
  final_norm = r.Put(w.norm);
  layers.assign(c.n_layers, LayerDev{});
  int64_t max_in = std::max<int64_t>(w.head.in, 1);
  auto dense = [&](const DenseWeight& dw) {
    max_in = std::max(max_in, dw.in);
    if (!dw.w.empty() || seed == 0 || dw.out * dw.in == 0) return r.Put(dw);
    float* p = r.Alloc<float>(dw.out * dw.in);
    if (live) Fill(p, dw.out * dw.in, 1.0f / std::sqrt(static_cast<float>(dw.in)));
    return DevDense{.w = p, .out = dw.out, .in = dw.in, .fp8 = dw.fp8_activation};
  };
  head = dense(w.head);
  for (int l = 0; l < c.n_layers; ++l) {
    const BlockWeights& bw = w.layers[l];
    const LayerRole& role = roles[l];
    LayerDev& L = layers[l];
    L.attn_norm = r.Put(bw.attn_norm);
    L.ffn_norm = r.Put(bw.ffn_norm);
    L.hc_attn = {r.Put(bw.hc_attn.fn), r.Put(bw.hc_attn.base), r.Put(bw.hc_attn.scale)};
    L.hc_ffn = {r.Put(bw.hc_ffn.fn), r.Put(bw.hc_ffn.base), r.Put(bw.hc_ffn.scale)};
    const AttentionWeights& a = bw.attn;
    L.wq_a = dense(a.wq_a);
    L.wq_b = dense(a.wq_b);
    L.wkv = dense(a.wkv);
    L.wo_b = dense(a.wo_b);
    L.wo_a.clear();
    for (const DenseWeight& g : a.wo_a) L.wo_a.push_back(dense(g));
    L.q_norm = r.Put(a.q_norm);
    L.kv_norm = r.Put(a.kv_norm);
    L.sink = r.Put(a.attn_sink);
    if (role.has_compressor) {
      L.comp_wkv = dense(a.comp_wkv);
      if (role.ratio > 1) L.comp_wgate = dense(a.comp_wgate);
      L.comp_norm = r.Put(a.comp_norm);
      L.index_wk = dense(a.index_wk);
      L.index_k_norm = r.Put(a.index_k_norm);
    }
    if (role.has_indexer) {
      L.index_wq_b = dense(a.index_wq_b);
      L.index_weights_proj = dense(a.index_weights_proj);
    }
    const MoeWeights& f = bw.ffn;
    L.gate = r.Put(f.gate);
    L.bias = r.Put(f.bias);
    L.bias_vl = r.Put(f.bias_vl);
    const std::vector<int>& local = ex.local[l];
    L.experts = static_cast<int>(local.size());
    if (!local.empty()) {
      const ExpertWeightsF32& first = f.experts[local[0]];
      L.inter = first.w1.out;
      L.w13_fp8 = first.w1.fp8_activation;
      L.w2_fp8 = first.w2.fp8_activation;
    }
    if (options.communicator != nullptr) {
      L.ep_offsets = r.Put(ex.replicas[l].offsets);
      L.ep_slots = r.Put(ex.replicas[l].slots);
    }
    const size_t before_experts = r.used();
    L.mxfp4 = !encoded[l].empty() ||
              (seed != 0 && options.mxfp4_experts && d % 32 == 0 && L.inter % 32 == 0);
    if (L.mxfp4) {
      ++mxfp4_layers;
      std::vector<const uint8_t*> codes[3], scales[3];
      for (int k = 0; k < 3; ++k) {
        L.slot_codes[k].clear();
        L.slot_scales[k].clear();
      }
      for (size_t e = 0; e < local.size(); ++e) {
        const ExpertWeightsF32& ew = f.experts[local[e]];
        const DenseWeight* m[3] = {&ew.w1, &ew.w3, &ew.w2};
        for (int k = 0; k < 3; ++k) {
          max_in = std::max(max_in, m[k]->in);
          if (!encoded[l].empty()) {
            codes[k].push_back(r.Put(encoded[l][e].codes[k]));
            scales[k].push_back(r.Put(encoded[l][e].scales[k]));
            continue;
          }
          // Synthetic: random codes, one scale so values reach about 3 / sqrt(in).
          const int64_t count = m[k]->out * m[k]->in;
          uint8_t* cp = r.Alloc<uint8_t>(count / 2);
          uint8_t* sp = r.Alloc<uint8_t>(count / 32);
          if (live && fill_status.ok()) {
            ++fills;
            fill_status = dec::RandomBytes({.x = cp, .n = count / 2, .seed = seed * 7919 + fills},
                                           stream);
            const int exponent = static_cast<int>(
                std::lround(std::log2(3.0 / std::sqrt(static_cast<double>(m[k]->in)) / 6.0)));
            if (cudaError_t e2 = cudaMemsetAsync(sp, 127 + exponent, count / 32, stream);
                e2 != cudaSuccess && fill_status.ok()) {
              fill_status = CudaError("synthetic scales", e2);
            }
          }
          codes[k].push_back(cp);
          scales[k].push_back(sp);
        }
      }
      for (int k = 0; k < 3; ++k) {
        for (const uint8_t* p : codes[k]) L.slot_codes[k].push_back(const_cast<uint8_t*>(p));
        for (const uint8_t* p : scales[k]) L.slot_scales[k].push_back(const_cast<uint8_t*>(p));
      }
      L.w1c = r.Put(std::span<const uint8_t* const>(codes[0]));
      L.w1q = r.Put(std::span<const uint8_t* const>(scales[0]));
      L.w3c = r.Put(std::span<const uint8_t* const>(codes[1]));
      L.w3q = r.Put(std::span<const uint8_t* const>(scales[1]));
      L.w2c = r.Put(std::span<const uint8_t* const>(codes[2]));
      L.w2q = r.Put(std::span<const uint8_t* const>(scales[2]));
    } else {
      std::vector<const float*> p1, p2, p3;
      for (int slot : local) {
        const ExpertWeightsF32& e = f.experts[slot];
        p1.push_back(dense(e.w1).w);
        p3.push_back(dense(e.w3).w);
        p2.push_back(dense(e.w2).w);
      }
      L.slot_w[0].clear();
      L.slot_w[1].clear();
      L.slot_w[2].clear();
      for (size_t e = 0; e < p1.size(); ++e) {
        L.slot_w[0].push_back(const_cast<float*>(p1[e]));
        L.slot_w[1].push_back(const_cast<float*>(p3[e]));
        L.slot_w[2].push_back(const_cast<float*>(p2[e]));
      }
      L.w1s = r.Put(std::span<const float* const>(p1));
      L.w3s = r.Put(std::span<const float* const>(p3));
      L.w2s = r.Put(std::span<const float* const>(p2));
    }
    expert_bytes += r.used() - before_experts;
    L.sw1 = dense(f.shared.w1);
    L.sw2 = dense(f.shared.w2);
    L.sw3 = dense(f.shared.w3);
    if (role.has_engram) {
      const EngramWeights& e = bw.engram;
      L.etable = r.Put(e.table);
      L.escales = r.Put(e.scales);
      L.erows = e.rows;
      L.ewkv = dense(e.wkv);
      L.egate = r.Put(e.gate_weight);
    }
  }
  // RoPE cos/sin for every position a slot can hold, the CPU's values.
  {
    std::vector<int64_t> positions(options.max_positions);
    for (int64_t p = 0; p < options.max_positions; ++p) positions[p] = p;
    const int64_t half = c.rope_head_dim / 2;
    std::vector<float> table(options.max_positions * half * 2);
    auto make = [&](int ratio) -> absl::StatusOr<const float*> {
      ASSIGN_OR_RETURN(cpu::RopeTable t,
                       cpu::RopeTable::Create(cpu::LayerRopeConfig(
                           ratio, static_cast<int>(c.rope_head_dim),
                           static_cast<float>(c.rope_theta),
                           static_cast<float>(c.compress_rope_theta), c.original_seq_len,
                           static_cast<float>(c.rope_factor), static_cast<float>(c.beta_fast),
                           static_cast<float>(c.beta_slow))));
      RETURN_IF_ERROR(cpu::RopeCosSin(t, positions, table));
      return r.Put(table);
    };
    ASSIGN_OR_RETURN(cos_sin_swa, make(0));
    ASSIGN_OR_RETURN(cos_sin_compressed, make(1));
  }
  weight_bytes = r.used();
  // --- pools
  int64_t rows = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    layers[l].window_base = static_cast<int32_t>(rows);
    rows += slots * win;
  }
  int64_t max_width = 1;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = roles[l];
    LayerDev& L = layers[l];
    if (role.ratio > 0) max_width = std::max(max_width, max_entries(role.ratio));
    if (role.attention != AttentionRole::kFull) continue;
    const int64_t me = max_entries(role.ratio);
    L.comp_base = static_cast<int32_t>(rows);
    rows += slots * me;
    L.index_k = r.Alloc<float>(slots * me * di);
    if (role.ratio > 1) {
      L.comp_kv_state = r.Alloc<float>(slots * role.ratio * hd);
      L.comp_score_state = r.Alloc<float>(slots * role.ratio * hd);
    }
  }
  if (rows >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: the KV pool would hold ", rows,
                                                   " rows; int32 indices need < 2^31"));
  }
  pool_rows = rows;
  kv_pool = r.Alloc<float>(rows * hd);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = roles[l];
    if (role.ratio > 0 && role.index_source == l) {
      layers[l].topk = r.Alloc<int32_t>(bc * c.index_topk);
    }
    if (role.produces_candidates) {
      layers[l].candidates = r.Alloc<uint8_t>(bc * max_entries(role.ratio));
    }
  }
  load_routed = r.Alloc<int64_t>(c.n_layers * c.n_routed_experts);
  load_served = r.Alloc<int64_t>(c.n_layers);
  pool_bytes = r.used() - weight_bytes;
  // --- activations
  const int64_t nmix = c.hc_mix_dim(), k = c.n_activated_experts;
  int64_t inter = 1, inter_s = std::max<int64_t>(w.layers[0].ffn.shared.w1.out, 1);
  for (const LayerDev& L : layers) inter = std::max(inter, L.inter);
  x = r.Alloc<float>(bc * n * d);
  x2 = r.Alloc<float>(bc * n * d);
  mixes = r.Alloc<float>(bc * nmix);
  for (Coeffs* cc : {&ca, &cf}) {
    cc->pre = r.Alloc<float>(bc * n);
    cc->post = r.Alloc<float>(bc * n);
    cc->comb = r.Alloc<float>(bc * n * n);
  }
  {
    std::vector<float> ident(bc * n, 0.0f);
    for (int64_t t = 0; t < bc; ++t) ident[t * n] = 1.0f;
    identity_pre = const_cast<float*>(r.Put(ident));
  }
  h = r.Alloc<float>(bc * d);
  y = r.Alloc<float>(bc * d);
  // Expert pairs handled here: this rank's own, or every rank's with a communicator.
  const int64_t pairs = ex.world * bc * std::max<int64_t>(k, 1);
  act = r.Alloc<float>(pairs * std::max(max_in, inter));
  qr = r.Alloc<float>(bc * c.q_lora_rank);
  q = r.Alloc<float>(bc * c.n_heads * hd);
  kvw = r.Alloc<float>(bc * hd);
  o = r.Alloc<float>(bc * c.n_heads * hd);
  og = r.Alloc<float>(bc * c.n_heads * hd);
  ug = r.Alloc<float>(bc * c.o_groups * c.o_lora_rank);
  u = r.Alloc<float>(bc * c.o_groups * c.o_lora_rank);
  cpa = r.Alloc<float>(bc * hd);
  cpg = r.Alloc<float>(bc * hd);
  latent = r.Alloc<float>(bc * hd);
  ik = r.Alloc<float>(bc * di);
  iq = r.Alloc<float>(bc * c.index_n_heads * di);
  iw = r.Alloc<float>(bc * c.index_n_heads);
  scores = r.Alloc<float>(bc * max_width);
  index = r.Alloc<int32_t>(bc * (win + c.index_topk));
  moe_idx = r.Alloc<int32_t>(bc * k);
  moe_w = r.Alloc<float>(bc * k);
  group_offsets = r.Alloc<int64_t>(std::max<int64_t>(c.n_routed_experts, ex.per_rank) + 1);
  pair_row = r.Alloc<int32_t>(pairs);
  xg = r.Alloc<float>(pairs * d);
  wg = r.Alloc<float>(pairs);
  gg = r.Alloc<float>(pairs * inter);
  upg = r.Alloc<float>(pairs * inter);
  yg = r.Alloc<float>(pairs * d);
  if (options.communicator != nullptr) {
    const int64_t rows_all = ex.world * bc;
    ep_send_x = r.Alloc<float>(rows_all * d);
    ep_recv_x = r.Alloc<float>(rows_all * d);
    ep_send_w = r.Alloc<float>(rows_all * k);
    ep_recv_w = r.Alloc<float>(rows_all * k);
    ep_send_slot = r.Alloc<int32_t>(rows_all * k);
    ep_recv_slot = r.Alloc<int32_t>(rows_all * k);
    ep_return_row = r.Alloc<int32_t>(bc * k);
    ep_physical = r.Alloc<int32_t>(bc * k);
    ep_back = r.Alloc<float>(pairs * d);
    ep_ret = r.Alloc<float>(pairs * d);
  }
  sg = r.Alloc<float>(bc * inter_s);
  su = r.Alloc<float>(bc * inter_s);
  sy = r.Alloc<float>(bc * d);
  const int64_t cols = c.engram_hash_cols();
  emb = r.Alloc<float>(bc * std::max<int64_t>(cols, 1) * c.engram_head_dim);
  ekv = r.Alloc<float>(bc * (n + 1) * d);
  ekey = r.Alloc<float>(bc * n * d);
  evalue = r.Alloc<float>(bc * d);
  logits = r.Alloc<float>(bc * c.vocab_size);
  // --- step inputs
  size_t mb = 0;
  LayoutMeta(nullptr, meta_d, mb);
  meta_bytes = mb;
  meta_dev = r.Alloc<char>(static_cast<int64_t>(mb));
  if (meta_dev != nullptr) LayoutMeta(meta_dev, meta_d, mb);
  RETURN_IF_ERROR(fill_status);
  return r.status();
}

void DeviceDecoder::Impl::LayoutMeta(char* base, StepMeta& m, size_t& bytes) const {
  size_t used = 0;
  auto take = [&](auto*& p, int64_t n) {
    using T = std::remove_reference_t<decltype(*p)>;
    used = (used + 15) / 16 * 16;
    p = base != nullptr ? reinterpret_cast<T*>(base + used) : nullptr;
    used += n * sizeof(T);
  };
  const int64_t bc = batch_cap;
  take(m.tokens, bc);
  take(m.positions, bc);
  take(m.slot, bc);
  take(m.win_rows, bc * window());
  take(m.win_write, bc);
  m.ratio.assign(ratios.size(), {});
  for (StepMeta::PerRatio& pr : m.ratio) {
    take(pr.visible, bc);
    take(pr.key_offset, bc);
    take(pr.entry_pos, bc);
    take(pr.entry_write, bc);
    take(pr.row_base, bc);
  }
  m.engram_ids.assign(c.engram_layer_ids.size(), nullptr);
  for (int64_t*& ids : m.engram_ids) take(ids, bc * c.engram_hash_cols());
  take(m.valid, 1);
  bytes = used;
}

absl::Status DeviceDecoder::Impl::PrepareMeta(std::span<const int> slot_ids,
                                               std::span<const int64_t> tokens, int64_t padded) {
  const int64_t win = window(), cols = c.engram_hash_cols();
  const int layers_e = hasher.num_layers();
  std::vector<int64_t> rows(std::max<int64_t>(layers_e * cols, 1));
  meta_h.valid[0] = static_cast<int64_t>(slot_ids.size());
  for (int64_t i = 0; i < padded; ++i) {
    const bool real = i < static_cast<int64_t>(slot_ids.size());
    const int s = real ? slot_ids[i] : slots - 1;
    const int64_t p = real ? slot_state[s].length : 0;
    meta_h.tokens[i] = real ? tokens[i] : 0;
    meta_h.positions[i] = p;
    meta_h.slot[i] = s;
    const int64_t lo = std::max<int64_t>(0, p - win + 1);
    for (int64_t j = 0; j < win; ++j) {
      const int64_t pos = lo + j;
      meta_h.win_rows[i * win + j] = pos <= p ? static_cast<int32_t>(s * win + pos % win) : -1;
    }
    meta_h.win_write[i] = static_cast<int32_t>(s * win + p % win);
    for (size_t ri = 0; ri < ratios.size(); ++ri) {
      const int r = ratios[ri];
      const int64_t me = max_entries(r);
      const bool emit = (p + 1) % r == 0;
      StepMeta::PerRatio& pr = meta_h.ratio[ri];
      pr.visible[i] = (p + 1) / r;
      pr.key_offset[i] = s * me;
      pr.entry_pos[i] = emit ? p + 1 - r : 0;
      pr.entry_write[i] = emit ? static_cast<int32_t>(s * me + (p + 1) / r - 1) : -1;
      pr.row_base[i] = static_cast<int32_t>(s * me);
    }
    if (layers_e > 0) {
      if (real) {
        std::vector<int64_t>& history = slot_state[s].history;
        history.push_back(hasher.Compress(tokens[i]));
        absl::Status st = hasher.Hash(history, p, rows);
        history.pop_back();
        RETURN_IF_ERROR(st);
      } else {
        std::fill(rows.begin(), rows.end(), 0);
      }
      for (int e = 0; e < layers_e; ++e) {
        std::copy_n(rows.data() + e * cols, cols, meta_h.engram_ids[e] + i * cols);
      }
    }
  }
  WEIR_DD_CUDA("step inputs", cudaMemcpyAsync(meta_dev, meta_host, meta_bytes,
                                              cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Impl::Engram(int layer, int64_t b) {
  const LayerDev& L = layers[layer];
  const int e = c.engram_index(layer);
  const int64_t cols = c.engram_hash_cols(), ehd = c.engram_head_dim, d = c.dim, n = c.hc_mult;
  RETURN_IF_ERROR(kc::EngramLookup({.table = L.etable, .scales = L.escales,
                                    .ids = meta_d.engram_ids[e], .out = emb,
                                    .table_rows = L.erows, .dim = ehd, .num_ids = b * cols},
                                   stream));
  RETURN_IF_ERROR(Round(emb, b * cols * ehd));
  RETURN_IF_ERROR(Mm(L.ewkv, emb, b, ekv));
  RETURN_IF_ERROR(Round(ekv, b * (n + 1) * d));
  RETURN_IF_ERROR(dec::CopyRows({.src = ekv, .dst = ekey, .rows = b, .width = n * d,
                                 .src_stride = (n + 1) * d},
                                stream));
  RETURN_IF_ERROR(dec::CopyRows({.src = ekv + n * d, .dst = evalue, .rows = b, .width = d,
                                 .src_stride = (n + 1) * d},
                                stream));
  return kc::EngramGate({.x = x, .key = ekey, .value = evalue, .weight = L.egate,
                         .tokens = b, .hc_mult = static_cast<int>(n), .dim = d,
                         .eps = static_cast<float>(c.norm_eps), .round_bf16 = bf16()},
                        stream);
}

absl::Status DeviceDecoder::Impl::UpdateCompressed(int layer, int64_t b) {
  const LayerDev& L = layers[layer];
  const int r = roles[layer].ratio;
  const StepMeta::PerRatio& pr = meta_d.ratio[ratio_index(r)];
  const int64_t hd = c.head_dim, di = c.index_head_dim;
  if (r == 1) {
    RETURN_IF_ERROR(Mm(L.comp_wkv, h, b, latent));
  } else {
    RETURN_IF_ERROR(Mm(L.comp_wkv, h, b, cpa));
    RETURN_IF_ERROR(Mm(L.comp_wgate, h, b, cpg));
    RETURN_IF_ERROR(dec::CompressorDecode(
        {.kv = cpa, .score = cpg, .kv_state = L.comp_kv_state,
         .score_state = L.comp_score_state, .state_slot = meta_d.slot,
         .positions = meta_d.positions, .out = latent, .rows = b, .dim = hd, .ratio = r},
        stream));
  }
  RETURN_IF_ERROR(Round(latent, b * hd));
  RETURN_IF_ERROR(Norm(latent, L.comp_norm, b, hd));
  RETURN_IF_ERROR(Round(latent, b * hd));
  // Index keys from the pre-RoPE latent.
  RETURN_IF_ERROR(Mm(L.index_wk, latent, b, ik));
  RETURN_IF_ERROR(Round(ik, b * di));
  RETURN_IF_ERROR(Norm(ik, L.index_k_norm, b, di));
  RETURN_IF_ERROR(Round(ik, b * di));
  RETURN_IF_ERROR(Rope(ik, pr.entry_pos, b, 1, di, layer));
  RETURN_IF_ERROR(Round(ik, b * di));
  RETURN_IF_ERROR(Quant(ik, b * di, dense::FakeQuantFormat::kMxfp4));
  RETURN_IF_ERROR(Rope(latent, pr.entry_pos, b, 1, hd, layer));
  RETURN_IF_ERROR(Round(latent, b * hd));
  RETURN_IF_ERROR(Quant(latent, b * hd, dense::FakeQuantFormat::kNvfp4Kv));
  RETURN_IF_ERROR(dec::CopyRows({.src = latent, .dst = kv_pool + int64_t{L.comp_base} * hd,
                                 .dst_rows = pr.entry_write, .rows = b, .width = hd},
                                stream));
  return dec::CopyRows(
      {.src = ik, .dst = L.index_k, .dst_rows = pr.entry_write, .rows = b, .width = di}, stream);
}

absl::Status DeviceDecoder::Impl::SelectCompressed(int layer, int64_t b) {
  const LayerRole& role = roles[layer];
  const LayerDev& L = layers[layer];
  const LayerDev& src = layers[role.kv_source];
  const StepMeta::PerRatio& pr = meta_d.ratio[ratio_index(role.ratio)];
  const int64_t nh = c.index_n_heads, di = c.index_head_dim, me = max_entries(role.ratio);
  RETURN_IF_ERROR(Mm(L.index_wq_b, qr, b, iq));
  RETURN_IF_ERROR(Round(iq, b * nh * di));
  RETURN_IF_ERROR(Rope(iq, meta_d.positions, b, static_cast<int>(nh), di, layer));
  RETURN_IF_ERROR(Round(iq, b * nh * di));
  RETURN_IF_ERROR(Quant(iq, b * nh * di, dense::FakeQuantFormat::kMxfp4));
  RETURN_IF_ERROR(Mm(L.index_weights_proj, h, b, iw));
  RETURN_IF_ERROR(Round(iw, b * nh));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(di)) /
                                         std::sqrt(static_cast<double>(nh)));
  RETURN_IF_ERROR(dec::Scale({.x = iw, .n = b * nh, .factor = scale}, stream));
  RETURN_IF_ERROR(Round(iw, b * nh));
  kc::IndexerScoreParams sp{.q = iq, .k = src.index_k, .weights = iw,
                            .visible_len = pr.visible, .out = scores, .queries = b,
                            .heads = static_cast<int>(nh), .dim = static_cast<int>(di),
                            .keys = me, .round_bf16 = bf16()};
  sp.key_offset = pr.key_offset;
  RETURN_IF_ERROR(kc::IndexerScore(sp, stream));
  if (role.produces_candidates) {
    RETURN_IF_ERROR(kc::CandidateBlocks(
        {.scores = scores, .visible_len = pr.visible, .pool = L.candidates, .rows = b,
         .width = me, .topk_blocks = static_cast<int>(c.candidate_topk_blocks),
         .block_size = static_cast<int>(c.candidate_block_size)},
        stream));
  } else if (role.candidate_source >= 0) {
    RETURN_IF_ERROR(dec::MaskScores(
        {.scores = scores, .keep = layers[role.candidate_source].candidates, .n = b * me},
        stream));
  }
  return kc::TopkPositions({.scores = scores, .visible_len = pr.visible, .out = L.topk,
                            .rows = b, .width = me, .k = static_cast<int>(c.index_topk)},
                           stream);
}

absl::Status DeviceDecoder::Impl::Attention(int layer, int64_t b) {
  const LayerRole& role = roles[layer];
  const LayerDev& L = layers[layer];
  const int64_t hd = c.head_dim, heads = c.n_heads, ql = c.q_lora_rank, win = window();
  const int64_t* pos = meta_d.positions;
  Mark("attn.qkv");
  RETURN_IF_ERROR(Mm(L.wq_a, h, b, qr));
  RETURN_IF_ERROR(Round(qr, b * ql));
  RETURN_IF_ERROR(Norm(qr, L.q_norm, b, ql));
  RETURN_IF_ERROR(Round(qr, b * ql));
  RETURN_IF_ERROR(Mm(L.wq_b, qr, b, q));
  RETURN_IF_ERROR(Round(q, b * heads * hd));
  RETURN_IF_ERROR(Rope(q, pos, b, static_cast<int>(heads), hd, layer));
  RETURN_IF_ERROR(Round(q, b * heads * hd));
  // Window KV, written into the slot's ring before the attention reads it.
  RETURN_IF_ERROR(Mm(L.wkv, h, b, kvw));
  RETURN_IF_ERROR(Round(kvw, b * hd));
  RETURN_IF_ERROR(Norm(kvw, L.kv_norm, b, hd));
  RETURN_IF_ERROR(Round(kvw, b * hd));
  RETURN_IF_ERROR(Rope(kvw, pos, b, 1, hd, layer));
  RETURN_IF_ERROR(Round(kvw, b * hd));
  RETURN_IF_ERROR(Quant(kvw, b * hd, dense::FakeQuantFormat::kFp8));
  RETURN_IF_ERROR(dec::CopyRows({.src = kvw, .dst = kv_pool + int64_t{L.window_base} * hd,
                                 .dst_rows = meta_d.win_write, .rows = b, .width = hd},
                                stream));
  // Compressed part.
  dec::AssembleIndexParams ip{.window = meta_d.win_rows, .out = index, .rows = b,
                              .window_width = static_cast<int>(win),
                              .window_base = L.window_base};
  if (role.ratio > 0) {
    if (role.attention == AttentionRole::kFull) {
      Mark("attn.compressor");
      RETURN_IF_ERROR(UpdateCompressed(layer, b));
    }
    if (role.attention == AttentionRole::kFull || role.attention == AttentionRole::kReindex) {
      Mark("attn.indexer");
      RETURN_IF_ERROR(SelectCompressed(layer, b));
    }
    ip.topk = layers[role.index_source].topk;
    ip.topk_row_base = meta_d.ratio[ratio_index(role.ratio)].row_base;
    ip.k_width = static_cast<int>(c.index_topk);
    ip.topk_base = layers[role.kv_source].comp_base;
  }
  Mark("attn.sparse");
  RETURN_IF_ERROR(dec::AssembleIndex(ip, stream));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  RETURN_IF_ERROR(kc::SparseAttention(
      {.q = q, .kv = kv_pool, .sink = L.sink, .index = index, .out = o, .queries = b,
       .heads = static_cast<int>(heads), .head_dim = static_cast<int>(hd),
       .kv_len = pool_rows, .topk = ip.window_width + ip.k_width, .scale = scale},
      stream));
  Mark("attn.out");
  RETURN_IF_ERROR(Round(o, b * heads * hd));
  RETURN_IF_ERROR(Rope(o, pos, b, static_cast<int>(heads), hd, layer, /*inverse=*/true));
  RETURN_IF_ERROR(Round(o, b * heads * hd));
  // Grouped low-rank output: o [B, G, gin] -> og [G, B, gin] -> ug [G, B, r] -> u [B, G, r].
  const int64_t groups = c.o_groups, gin = c.o_group_in_dim(), rank = c.o_lora_rank;
  RETURN_IF_ERROR(dec::SwapAxes({.src = o, .dst = og, .a = b, .b = groups, .width = gin}, stream));
  for (int64_t g = 0; g < groups; ++g) {
    RETURN_IF_ERROR(Mm(L.wo_a[g], og + g * b * gin, b, ug + g * b * rank));
  }
  RETURN_IF_ERROR(dec::SwapAxes({.src = ug, .dst = u, .a = groups, .b = b, .width = rank}, stream));
  RETURN_IF_ERROR(Round(u, b * groups * rank));
  RETURN_IF_ERROR(Mm(L.wo_b, u, b, y));
  return Round(y, b * c.dim);
}

absl::Status DeviceDecoder::Impl::Moe(int layer, int64_t b) {
  const LayerDev& L = layers[layer];
  const int k = static_cast<int>(c.n_activated_experts);
  const int64_t d = c.dim;
  kc::GateScore score = kc::GateScore::kSqrtSoftplus;
  if (c.score_func == ScoreFunc::kSigmoid) score = kc::GateScore::kSigmoid;
  if (c.score_func == ScoreFunc::kSoftmax) score = kc::GateScore::kSoftmax;
  Mark("moe.gate");
  RETURN_IF_ERROR(kc::MoeGate({.x = h, .weight = L.gate, .bias = L.bias, .bias_vl = L.bias_vl,
                               .indices = moe_idx, .weights = moe_w, .tokens = b, .dim = d,
                               .num_experts = static_cast<int>(c.n_routed_experts), .topk = k,
                               .gate_temp = static_cast<float>(c.gate_temp),
                               .route_scale = static_cast<float>(c.route_scale),
                               .norm_topk_prob = c.norm_topk_prob, .score = score},
                              stream));
  // The pairs this rank computes: its own (groups = logical experts), or with
  // a communicator every rank's pairs routed here (groups = local slots).
  const bool ep = options.communicator != nullptr;
  const float* in_x = h;
  const int32_t* in_groups = moe_idx;
  const float* in_weight = moe_w;
  int64_t in_tokens = b;
  if (ep) {
    Mark("moe.dispatch");
    RETURN_IF_ERROR(kc::ExpertSlots({.indices = moe_idx, .replica_offsets = L.ep_offsets,
                                     .replica_slots = L.ep_slots, .slots = ep_physical,
                                     .tokens = b, .topk = k,
                                     .num_logical = static_cast<int>(c.n_routed_experts),
                                     .rank = ex.rank},
                                    stream));
    RETURN_IF_ERROR(kc::MoeDispatchPack(
        {.slots = ep_physical, .route_weight = moe_w, .x = h, .valid_tokens = meta_d.valid,
         .send_x = ep_send_x, .send_slot = ep_send_slot, .send_weight = ep_send_w,
         .return_row = ep_return_row, .tokens = b, .dim = d, .topk = k, .world = ex.world,
         .slots_per_rank = ex.per_rank},
        stream));
    RETURN_IF_ERROR(Dispatch(b));
    in_x = ep_recv_x;
    in_groups = ep_recv_slot;
    in_weight = ep_recv_w;
    in_tokens = ex.world * b;
  }
  const int64_t rows = in_tokens * k;
  Mark("moe.experts");
  RETURN_IF_ERROR(kc::MoeGroupRows({.groups = in_groups, .x = in_x, .route_weight = in_weight,
                                    .group_offsets = group_offsets, .pair_row = pair_row,
                                    .x_grouped = xg, .weight_grouped = wg, .tokens = in_tokens,
                                    .dim = d, .topk = k, .num_groups = L.experts},
                                   stream));
  RETURN_IF_ERROR(kc::AccumulateExpertLoad(
      {.experts = moe_idx, .valid_tokens = meta_d.valid,
       .group_offsets = ep ? group_offsets : nullptr,
       .routed = load_routed + int64_t{layer} * c.n_routed_experts,
       .served = load_served + layer, .tokens = b, .topk = k,
       .num_experts = static_cast<int>(c.n_routed_experts), .num_groups = L.experts},
      stream));
  const float limit = static_cast<float>(c.swiglu_limit);
  auto grouped = [&](const float* in, const float* const* w, const uint8_t* const* codes,
                     const uint8_t* const* scales, int64_t out_dim, int64_t in_dim, bool fp8,
                     float* out) {
    dense::GroupedMatmulParams p{.x = in, .group_offsets = group_offsets, .w = w, .y = out,
                                 .rows = rows, .out = out_dim, .in = in_dim,
                                 .num_groups = L.experts, .fp8_activation = fp8,
                                 .act_scratch = fp8 ? act : nullptr,
                                 .max_group_rows = in_tokens};
    if (L.mxfp4) {
      p.w = nullptr;
      p.w_mxfp4 = codes;
      p.w_mxfp4_scales = scales;
    }
    return dense::RowStableGroupedMatmul(p, stream);
  };
  RETURN_IF_ERROR(grouped(xg, L.w1s, L.w1c, L.w1q, L.inter, d, L.w13_fp8, gg));
  RETURN_IF_ERROR(grouped(xg, L.w3s, L.w3c, L.w3q, L.inter, d, L.w13_fp8, upg));
  RETURN_IF_ERROR(dec::Swiglu({.gate = gg, .up = upg, .route_weight = wg, .out = gg,
                               .rows = rows, .inter = L.inter, .limit = limit,
                               .round_bf16 = bf16()},
                              stream));
  RETURN_IF_ERROR(grouped(gg, L.w2s, L.w2c, L.w2q, d, L.inter, L.w2_fp8, yg));
  RETURN_IF_ERROR(Round(yg, rows * d));
  if (ep) {
    // Each received pair's output into the block of the rank it came from
    // (pairs served elsewhere: zeros), then back.
    Mark("moe.return");
    RETURN_IF_ERROR(dec::CopyRows({.src = yg, .dst = ep_back, .src_rows = pair_row,
                                   .rows = rows, .width = d},
                                  stream));
    RETURN_IF_ERROR(Return(b));
  }
  Mark("moe.shared");
  RETURN_IF_ERROR(Mm(L.sw1, h, b, sg));
  RETURN_IF_ERROR(Mm(L.sw3, h, b, su));
  RETURN_IF_ERROR(dec::Swiglu({.gate = sg, .up = su, .out = sg, .rows = b, .inter = L.sw1.out,
                               .limit = limit, .round_bf16 = bf16()},
                              stream));
  RETURN_IF_ERROR(Mm(L.sw2, sg, b, sy));
  RETURN_IF_ERROR(Round(sy, b * d));
  Mark("moe.combine");
  return kc::MoeCombine({.y_grouped = ep ? ep_ret : yg, .pair_row = ep ? ep_return_row : pair_row,
                         .experts = moe_idx, .shared = sy, .out = y, .tokens = b, .dim = d,
                         .topk = k, .round_bf16 = bf16()},
                        stream);
}

absl::Status DeviceDecoder::Impl::Dispatch(int64_t b) {
  using parallel::DataType;
  using parallel::P2POp;
  const int64_t d = c.dim, k = c.n_activated_experts;
  // The three blocks per peer (4-byte elements), sent and received in this order.
  struct Block {
    void* send;
    void* recv;
    int64_t count;
    DataType dtype;
  };
  const Block blocks[] = {{ep_send_x, ep_recv_x, b * d, DataType::kFloat32},
                          {ep_send_slot, ep_recv_slot, b * k, DataType::kInt32},
                          {ep_send_w, ep_recv_w, b * k, DataType::kFloat32}};
  std::vector<P2POp> ops;
  ops.reserve(6 * ex.world);
  for (int p = 0; p < ex.world; ++p) {
    for (P2POp::Kind kind : {P2POp::Kind::kSend, P2POp::Kind::kRecv}) {
      for (const Block& blk : blocks) {
        char* base = static_cast<char*>(kind == P2POp::Kind::kSend ? blk.send : blk.recv);
        ops.push_back({.kind = kind, .peer = Rank(p), .data = base + p * blk.count * 4,
                       .count = blk.count, .dtype = blk.dtype});
      }
    }
  }
  return options.communicator->GroupSendRecv(
      ops, {.memory = parallel::MemoryKind::kDevice, .stream = stream});
}

absl::Status DeviceDecoder::Impl::Return(int64_t b) {
  const int64_t block = b * c.n_activated_experts * c.dim;
  std::vector<int64_t> counts(ex.world, block), offsets(ex.world);
  for (int p = 0; p < ex.world; ++p) offsets[p] = p * block;
  return options.communicator->AllToAllV(
      {.send = ep_back, .send_counts = counts, .send_offsets = offsets, .recv = ep_ret,
       .recv_counts = counts, .recv_offsets = offsets, .dtype = parallel::DataType::kFloat32},
      {.memory = parallel::MemoryKind::kDevice, .stream = stream});
}

absl::Status DeviceDecoder::Impl::Enqueue(int64_t b) {
  float* const x0 = x;
  float* const x20 = x2;
  absl::Status st = [&]() -> absl::Status {
    Mark("embed");
    RETURN_IF_ERROR(dec::EmbedStreams({.embed = embed, .token_ids = meta_d.tokens, .out = x,
                                       .tokens = b, .vocab = c.vocab_size, .dim = c.dim,
                                       .copies = static_cast<int>(c.hc_mult)},
                                      stream));
    const float* pre = identity_pre;
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerDev& L = layers[l];
      if (roles[l].has_engram) {
        Mark("engram");
        RETURN_IF_ERROR(Engram(l, b)) << "layer " << l;
      }
      Mark("mhc");
      RETURN_IF_ERROR(Mix(L.hc_attn, b, ca));
      RETURN_IF_ERROR(Collapse(pre, b, L.attn_norm));
      RETURN_IF_ERROR(Attention(l, b)) << "layer " << l;
      Mark("mhc");
      RETURN_IF_ERROR(Expand(ca, b));
      RETURN_IF_ERROR(Mix(L.hc_ffn, b, cf));
      RETURN_IF_ERROR(Collapse(ca.pre, b, L.ffn_norm));
      RETURN_IF_ERROR(Moe(l, b)) << "layer " << l;
      Mark("mhc");
      RETURN_IF_ERROR(Expand(cf, b));
      pre = cf.pre;
    }
    Mark("head");
    RETURN_IF_ERROR(Collapse(pre, b, final_norm));
    const dense::MatmulParams p{.x = h, .w = head.w, .y = logits, .rows = b, .out = head.out,
                                .in = head.in};
    return options.row_stable_logits ? dense::RowStableMatmul(p, stream)
                                     : gemm->Matmul(p, stream);
  }();
  x = x0;  // the same buffers start every step (graphs bake the pointers in)
  x2 = x20;
  return st;
}

DeviceDecoder::DeviceDecoder(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), options_(impl_->options) {}

DeviceDecoder::~DeviceDecoder() = default;

namespace {

// What a decoder cannot hold (INVALID_ARGUMENT), before anything is
// allocated; otherwise the routed experts it holds. `synthetic`: the weights
// are shapes only (drawn on the device).
absl::StatusOr<LocalExperts> CheckDecodable(const ModelConfig& c, const LayerRoles& roles,
                                           const ModelWeights& w,
                                           const DeviceDecoderOptions& options,
                                           bool synthetic = false) {
  if (options.max_sequences < 1 || options.max_positions < 2 || options.max_batch < 1 ||
      options.batch_interval < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceDecoder: max_sequences ", options.max_sequences, ", max_positions ",
        options.max_positions, ", max_batch ", options.max_batch, ", batch_interval ",
        options.batch_interval, " (each must be >= 1, max_positions >= 2)"));
  }
  if (static_cast<int>(w.layers.size()) < c.n_layers) {
    return absl::InvalidArgumentError("DeviceDecoder: weights of fewer layers than the config");
  }
  if (options.communicator != nullptr &&
      options.communicator->device().value() != options.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceDecoder: the communicator is on device ", options.communicator->device().value(),
        ", the decoder on ", options.device));
  }
  ASSIGN_OR_RETURN(LocalExperts slots, PlanExpertSlots(c, options));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = roles[l];
    const std::vector<ExpertWeightsF32>& experts = w.layers[l].ffn.experts;
    if (static_cast<int64_t>(experts.size()) != c.n_routed_experts) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: layer ", l, " has ",
                                                     experts.size(), " routed experts, not ",
                                                     c.n_routed_experts));
    }
    for (size_t s = 0; s < slots.local[l].size() && !synthetic; ++s) {
      if (experts[slots.local[l][s]].w1.w.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DeviceDecoder: layer ", l, " expert ", slots.local[l][s], " (local slot ", s,
            " of rank ", slots.rank, ") is not loaded"));
      }
    }
    if (role.has_engram) {
      const EngramWeights& e = w.layers[l].engram;
      if (e.row_begin != 0 || e.row_end != e.rows) {
        return absl::InvalidArgumentError("DeviceDecoder: sharded Engram tables are not supported");
      }
    }
    if (role.candidate_source >= 0 && roles[role.candidate_source].ratio != role.ratio) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DeviceDecoder: layer ", l, " is restricted by a candidate pool of another ratio"));
    }
    const ExpertWeightsF32& first = experts[slots.local[l][0]];
    for (int slot : slots.local[l]) {
      const ExpertWeightsF32& e = experts[slot];
      if (e.w1.fp8_activation != first.w1.fp8_activation ||
          e.w2.fp8_activation != first.w2.fp8_activation || e.w1.out != first.w1.out) {
        return absl::InvalidArgumentError(
            absl::StrCat("DeviceDecoder: layer ", l, " mixes expert formats"));
      }
    }
  }
  if (c.n_routed_experts > kc::kMoeGroupRowsMaxGroups ||
      slots.per_rank > kc::kMoeGroupRowsMaxGroups) {
    return absl::InvalidArgumentError("DeviceDecoder: too many routed experts");
  }
  if (slots.world * c.n_activated_experts > kc::kMoeDispatchMaxPairs) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: ", slots.world, " ranks x top-",
                                                   c.n_activated_experts,
                                                   " pairs per token exceed the dispatch"));
  }
  return slots;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceDecoder>> DeviceDecoder::Create(
    const Model& model, ActivationPrecision precision, const DeviceDecoderOptions& options) {
  ASSIGN_OR_RETURN(LocalExperts slots,
                   CheckDecodable(model.config(), model.roles(), model.weights(), options));
  ASSIGN_OR_RETURN(EngramHasher hasher,
                   EngramHasher::Create(model.config(), options.engram_token_map));
  auto impl = std::make_unique<Impl>(nullptr, model.config(), model.roles(), model.weights(),
                                     precision, options, std::move(hasher));
  impl->ex = std::move(slots);
  impl->EncodeExperts();
  size_t budget = options.arena_budget_bytes;
  if (budget == 0 && options.memory != nullptr) budget = options.memory->available();
  if (budget > 0) RETURN_IF_ERROR(impl->FitPositions(budget).status());
  Impl* raw = impl.get();
  return raw->Build(std::move(impl));
}

absl::StatusOr<std::unique_ptr<DeviceDecoder>> DeviceDecoder::CreateSynthetic(
    const ModelConfig& config, ActivationPrecision precision, const DeviceDecoderOptions& options,
    uint64_t seed) {
  RETURN_IF_ERROR(ValidateModelConfig(config));
  if (!config.engram_layer_ids.empty()) {
    return absl::InvalidArgumentError(
        "DeviceDecoder::CreateSynthetic: Engram tables are not synthesized; drop the Engram "
        "layers from the config");
  }
  std::unique_ptr<SyntheticModel> model = MakeSynthetic(config, seed);
  ASSIGN_OR_RETURN(LocalExperts slots, CheckDecodable(model->config, *model->roles,
                                                     model->weights, options, /*synthetic=*/true));
  ASSIGN_OR_RETURN(EngramHasher hasher, EngramHasher::Create(model->config, {}));
  const ModelConfig& c = model->config;
  const LayerRoles& roles = *model->roles;
  const ModelWeights& w = model->weights;
  auto impl = std::make_unique<Impl>(std::move(model), c, roles, w, precision, options,
                                     std::move(hasher));
  impl->seed = seed == 0 ? 1 : seed;
  impl->ex = std::move(slots);
  impl->encoded.assign(c.n_layers, {});
  Impl* raw = impl.get();
  return raw->Build(std::move(impl));
}

absl::StatusOr<std::unique_ptr<DeviceDecoder>> DeviceDecoder::Impl::Build(
    std::unique_ptr<Impl> self) {
  Impl& m = *this;
  const DeviceDecoderOptions& options = m.options;
  m.Plan();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return absl::UnavailableError("DeviceDecoder: no CUDA device");
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::UnavailableError(absl::StrCat("DeviceDecoder: device ", options.device,
                                               " of ", devices));
  }
  WEIR_DD_CUDA("set device", cudaSetDevice(options.device));
  WEIR_DD_CUDA("stream", cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  WEIR_DD_CUDA("event", cudaEventCreate(&m.ev_begin));
  WEIR_DD_CUDA("event", cudaEventCreate(&m.ev_end));
  Region measure;
  measure.Begin(nullptr);
  RETURN_IF_ERROR(m.Layout(measure));
  m.arena_bytes = measure.used();
  if (options.memory != nullptr) {
    if (options.memory->device() != options.device) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: the memory is on device ",
                                                     options.memory->device()));
    }
    ASSIGN_OR_RETURN(m.arena, options.memory->Take(m.arena_bytes, "device decoder"));
  } else if (cudaError_t e = cudaMalloc(&m.arena, m.arena_bytes); e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("DeviceDecoder: arena of ", m.arena_bytes,
                                                     " bytes: ", cudaGetErrorString(e)));
  }
  Region region;
  region.Begin(m.arena);
  RETURN_IF_ERROR(m.Layout(region));
  WEIR_DD_CUDA("pool clear", cudaMemset(m.kv_pool, 0, m.pool_rows * c.head_dim * sizeof(float)));
  WEIR_DD_CUDA("load clear", cudaMemset(m.load_routed, 0,
                                        c.n_layers * c.n_routed_experts * sizeof(int64_t)));
  WEIR_DD_CUDA("load clear", cudaMemset(m.load_served, 0, c.n_layers * sizeof(int64_t)));
  WEIR_DD_CUDA("pinned inputs", cudaMallocHost(&m.meta_host, m.meta_bytes));
  std::memset(m.meta_host, 0, m.meta_bytes);
  size_t bytes = 0;
  m.LayoutMeta(m.meta_host, m.meta_h, bytes);
  WEIR_DD_CUDA("pinned logits",
               cudaMallocHost(&m.logits_host, m.batch_cap * c.vocab_size * sizeof(float)));
  if (!options.row_stable_logits) {
    ASSIGN_OR_RETURN(m.gemm, dense::GemmHandle::Create());
  }
  m.slot_state.assign(m.slots, {});
  WEIR_DD_CUDA("upload", cudaStreamSynchronize(m.stream));
  WEIR_DD_CUDA("upload", cudaDeviceSynchronize());
  m.encoded.clear();  // the host copies are on the device now
  std::unique_ptr<DeviceDecoder> dd(new DeviceDecoder(std::move(self)));
  DeviceDecoderStats& st = dd->stats_;
  st.arena_bytes = m.arena_bytes;
  st.weight_bytes = m.weight_bytes;
  st.pool_bytes = m.pool_bytes;
  st.expert_bytes = m.expert_bytes;
  st.embed_bytes = m.embed_bytes;
  st.mxfp4_layers = m.mxfp4_layers;
  return dd;
}

absl::StatusOr<int64_t> DeviceDecoder::Impl::FitPositions(size_t budget_bytes) {
  const int64_t most = options.max_positions;
  auto bytes_at = [&](int64_t positions) -> absl::StatusOr<size_t> {
    options.max_positions = positions;
    return MeasureArena();
  };
  // The arena grows with max_positions: the largest that fits, by bisection.
  int64_t lo = 2, hi = most;
  ASSIGN_OR_RETURN(size_t smallest, bytes_at(lo));
  if (smallest > budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "DeviceDecoder: even 2 positions per sequence need ", smallest, " bytes, ",
        budget_bytes, " available"));
  }
  ASSIGN_OR_RETURN(size_t largest, bytes_at(hi));
  if (largest <= budget_bytes) lo = hi;
  while (lo < hi) {  // bytes_at(lo) fits; the answer is in [lo, hi]
    const int64_t mid = lo + (hi - lo + 1) / 2;
    ASSIGN_OR_RETURN(size_t b, bytes_at(mid));
    if (b <= budget_bytes) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  options.max_positions = lo;
  return lo;
}

absl::StatusOr<int64_t> DeviceDecoder::MaxPositionsFor(const Model& model,
                                                       ActivationPrecision precision,
                                                       const DeviceDecoderOptions& options,
                                                       size_t budget_bytes,
                                                       size_t* arena_bytes) {
  ASSIGN_OR_RETURN(LocalExperts slots,
                   CheckDecodable(model.config(), model.roles(), model.weights(), options));
  ASSIGN_OR_RETURN(EngramHasher hasher,
                   EngramHasher::Create(model.config(), options.engram_token_map));
  Impl m(nullptr, model.config(), model.roles(), model.weights(), precision, options,
         std::move(hasher));
  m.ex = std::move(slots);
  m.EncodeExperts();
  ASSIGN_OR_RETURN(int64_t positions, m.FitPositions(budget_bytes));
  if (arena_bytes != nullptr) {
    ASSIGN_OR_RETURN(*arena_bytes, m.MeasureArena());
  }
  return positions;
}

absl::Status DeviceDecoder::Start(int slot) {
  if (slot < 0 || slot >= options_.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("Start: slot ", slot, " of ",
                                                   options_.max_sequences));
  }
  impl_->slot_state[slot] = {.used = true};
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Import(int slot, const SequenceState& state) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  if (slot < 0 || slot >= options_.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("Import: slot ", slot, " of ",
                                                   options_.max_sequences));
  }
  if (state.num_layers() != m.roles.size() || state.broken()) {
    return absl::InvalidArgumentError("Import: the state is broken or of another model");
  }
  const int64_t len = state.length();
  if (len < 1 || len >= options_.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat("Import: the state holds ", len,
                                                   " positions; the slot takes 1 to ",
                                                   options_.max_positions - 1));
  }
  if (m.hasher.num_layers() > 0 && static_cast<int64_t>(state.engram_history().size()) != len) {
    return absl::InvalidArgumentError("Import: the Engram history does not match the length");
  }
  WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
  const int64_t win = m.window(), hd = c.head_dim, di = c.index_head_dim;
  std::vector<float> block;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = m.roles[l];
    const LayerDev& L = m.layers[l];
    block.assign(win * hd, 0.0f);
    for (int64_t p = std::max<int64_t>(0, len - win); p < len; ++p) {
      std::span<const float> row = state.window(l).Row(p);
      std::copy(row.begin(), row.end(), block.begin() + (p % win) * hd);
    }
    WEIR_DD_CUDA("import window",
                 cudaMemcpy(m.kv_pool + (L.window_base + int64_t{slot} * win) * hd, block.data(),
                            block.size() * sizeof(float), cudaMemcpyHostToDevice));
    if (role.attention != AttentionRole::kFull) continue;
    const int r = role.ratio;
    const int64_t me = m.max_entries(r), entries = len / r;
    const KvSourceState& src = state.kv_source(l);
    const CompressedKvStore& store = state.compressed();
    if (store.entries(l) != entries) {
      return absl::InvalidArgumentError(absl::StrCat("Import: layer ", l, " holds ",
                                                     store.entries(l),
                                                     " compressed entries, expected ", entries));
    }
    if (entries > 0) {
      // Gathered from the state's store (paged blocks on a worker) into one copy.
      std::vector<float> kv_rows(entries * hd), key_rows(entries * di);
      store.ReadKv(l, 0, kv_rows);
      store.ReadIndexK(l, 0, key_rows);
      WEIR_DD_CUDA("import compressed",
                   cudaMemcpy(m.kv_pool + (L.comp_base + int64_t{slot} * me) * hd,
                              kv_rows.data(), entries * hd * sizeof(float),
                              cudaMemcpyHostToDevice));
      WEIR_DD_CUDA("import index keys",
                   cudaMemcpy(L.index_k + int64_t{slot} * me * di, key_rows.data(),
                              entries * di * sizeof(float), cudaMemcpyHostToDevice));
    }
    if (r > 1) {
      std::vector<float> kv(r * hd, 0.0f), score(r * hd, 0.0f);
      for (int64_t p = len - len % r; p < len; ++p) {
        std::span<const float> row = src.pending.Row(p);
        std::copy_n(row.data(), hd, kv.data() + (p % r) * hd);
        std::copy_n(row.data() + hd, hd, score.data() + (p % r) * hd);
      }
      WEIR_DD_CUDA("import compressor", cudaMemcpy(L.comp_kv_state + int64_t{slot} * r * hd,
                                                   kv.data(), kv.size() * sizeof(float),
                                                   cudaMemcpyHostToDevice));
      WEIR_DD_CUDA("import compressor", cudaMemcpy(L.comp_score_state + int64_t{slot} * r * hd,
                                                   score.data(), score.size() * sizeof(float),
                                                   cudaMemcpyHostToDevice));
    }
  }
  Impl::Slot& s = m.slot_state[slot];
  s.used = true;
  s.length = len;
  s.history = state.engram_history();
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Export(int slot, SequenceState& state) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  if (slot < 0 || slot >= options_.max_sequences || !m.slot_state[slot].used) {
    return absl::InvalidArgumentError(absl::StrCat("Export: slot ", slot, " holds no sequence"));
  }
  const Impl::Slot& s = m.slot_state[slot];
  const int64_t len = s.length;
  if (state.num_layers() != m.roles.size() || state.length() > len) {
    return absl::InvalidArgumentError(absl::StrCat("Export: the state holds ", state.length(),
                                                   " positions, the slot ", len,
                                                   ", or belongs to another model"));
  }
  WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
  const int64_t win = m.window(), hd = c.head_dim, di = c.index_head_dim;
  std::vector<float> block(win * hd);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = m.roles[l];
    const LayerDev& L = m.layers[l];
    WEIR_DD_CUDA("export window",
                 cudaMemcpy(block.data(), m.kv_pool + (L.window_base + int64_t{slot} * win) * hd,
                            block.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t p = std::max<int64_t>(0, len - win); p < len; ++p) {
      std::span<float> row = state.window(l).Row(p);
      std::copy_n(block.data() + (p % win) * hd, hd, row.data());
    }
    if (role.attention != AttentionRole::kFull) continue;
    const int r = role.ratio;
    const int64_t me = m.max_entries(r), entries = len / r;
    KvSourceState& src = state.kv_source(l);
    std::vector<float> kv_rows(entries * hd), key_rows(entries * di);
    if (entries > 0) {
      WEIR_DD_CUDA("export compressed",
                   cudaMemcpy(kv_rows.data(), m.kv_pool + (L.comp_base + int64_t{slot} * me) * hd,
                              entries * hd * sizeof(float), cudaMemcpyDeviceToHost));
      WEIR_DD_CUDA("export index keys",
                   cudaMemcpy(key_rows.data(), L.index_k + int64_t{slot} * me * di,
                              entries * di * sizeof(float), cudaMemcpyDeviceToHost));
    }
    // Into the state's own store (a worker's paged blocks, which the plans
    // kept growing while the sequence lived here).
    state.compressed().Truncate(l, 0);
    if (absl::Status st = state.compressed().Append(l, kv_rows, key_rows); !st.ok()) {
      state.MarkBroken();
      return absl::Status(st.code(), absl::StrCat("Export: layer ", l, ": ", st.message()));
    }
    if (r > 1) {
      std::vector<float> kv(r * hd), score(r * hd);
      WEIR_DD_CUDA("export compressor", cudaMemcpy(kv.data(), L.comp_kv_state + int64_t{slot} * r * hd,
                                                   kv.size() * sizeof(float),
                                                   cudaMemcpyDeviceToHost));
      WEIR_DD_CUDA("export compressor",
                   cudaMemcpy(score.data(), L.comp_score_state + int64_t{slot} * r * hd,
                              score.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (int64_t p = len - len % r; p < len; ++p) {
        std::span<float> row = src.pending.Row(p);
        std::copy_n(kv.data() + (p % r) * hd, hd, row.data());
        std::copy_n(score.data() + (p % r) * hd, hd, row.data() + hd);
      }
    }
  }
  state.engram_history() = s.history;
  state.Advance(len - state.length());
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Release(int slot) {
  if (slot < 0 || slot >= options_.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("Release: slot ", slot));
  }
  impl_->slot_state[slot] = {};
  return absl::OkStatus();
}

bool DeviceDecoder::collective() const { return impl_->ex.world > 1; }

absl::Status DeviceDecoder::SetPlacement(const ExpertPlacement& placement) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  if (options_.communicator == nullptr || m.seed != 0) {
    return absl::InvalidArgumentError(
        "SetPlacement: only a decoder with a communicator and real weights has a placement");
  }
  DeviceDecoderOptions next_options = options_;
  next_options.placement = placement;
  ASSIGN_OR_RETURN(LocalExperts next, PlanExpertSlots(c, next_options));
  if (next.per_rank != m.ex.per_rank) {
    return absl::InvalidArgumentError(absl::StrCat("SetPlacement: ", next.per_rank,
                                                   " slots per rank; the decoder holds ",
                                                   m.ex.per_rank));
  }
  // Everything is checked and encoded on the host before the first upload.
  struct Upload {
    void* dst;
    const void* src;
    size_t bytes;
  };
  std::vector<Upload> uploads;
  std::vector<EncodedExpert> encoded;  // owns the MXFP4 bytes until uploaded
  encoded.reserve(static_cast<size_t>(c.n_layers) * next.per_rank);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerDev& L = m.layers[l];
    const std::vector<ExpertWeightsF32>& experts = m.wts.layers[l].ffn.experts;
    for (int s = 0; s < next.per_rank; ++s) {
      const int e = next.local[l][s];
      if (e == m.ex.local[l][s]) continue;
      const ExpertWeightsF32& w = experts[e];
      const DenseWeight* parts[3] = {&w.w1, &w.w3, &w.w2};
      if (w.w1.w.empty() || w.w1.out != L.inter || w.w1.fp8_activation != L.w13_fp8 ||
          w.w2.fp8_activation != L.w2_fp8 || w.w1.in != c.dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SetPlacement: layer ", l, " expert ", e, " (local slot ", s,
            ") is not loaded in the model or has another format"));
      }
      if (L.mxfp4) {
        EncodedExpert& enc = encoded.emplace_back();
        for (int k = 0; k < 3; ++k) {
          if (!EncodeMxfp4Exactly(*parts[k], enc.codes[k], enc.scales[k])) {
            return absl::FailedPreconditionError(absl::StrCat(
                "SetPlacement: layer ", l, " expert ", e, " does not re-encode as MXFP4"));
          }
          uploads.push_back({L.slot_codes[k][s], enc.codes[k].data(), enc.codes[k].size()});
          uploads.push_back({L.slot_scales[k][s], enc.scales[k].data(), enc.scales[k].size()});
        }
      } else {
        for (int k = 0; k < 3; ++k) {
          uploads.push_back({L.slot_w[k][s], parts[k]->w.data(), parts[k]->w.size() * 4});
        }
      }
    }
    uploads.push_back({const_cast<int32_t*>(L.ep_offsets), next.replicas[l].offsets.data(),
                       next.replicas[l].offsets.size() * sizeof(int32_t)});
    uploads.push_back({const_cast<int32_t*>(L.ep_slots), next.replicas[l].slots.data(),
                       next.replicas[l].slots.size() * sizeof(int32_t)});
  }
  WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
  WEIR_DD_CUDA("placement", cudaStreamSynchronize(m.stream));
  for (const Upload& u : uploads) {
    WEIR_DD_CUDA("placement upload", cudaMemcpy(u.dst, u.src, u.bytes, cudaMemcpyHostToDevice));
  }
  m.ex = std::move(next);
  options_.placement = placement;
  m.options.placement = placement;
  return absl::OkStatus();
}

absl::Status DeviceDecoder::TakeExpertLoad(std::span<int64_t> routed, std::span<int64_t> served) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const size_t n_routed = static_cast<size_t>(c.n_layers * c.n_routed_experts);
  if (routed.size() != n_routed || served.size() != static_cast<size_t>(c.n_layers)) {
    return absl::InvalidArgumentError(absl::StrCat("TakeExpertLoad: spans of ", routed.size(),
                                                   " and ", served.size(), "; expected ",
                                                   n_routed, " and ", c.n_layers));
  }
  std::vector<int64_t> r(n_routed), s(c.n_layers);
  WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
  WEIR_DD_CUDA("load", cudaMemcpyAsync(r.data(), m.load_routed, r.size() * sizeof(int64_t),
                                       cudaMemcpyDeviceToHost, m.stream));
  WEIR_DD_CUDA("load", cudaMemcpyAsync(s.data(), m.load_served, s.size() * sizeof(int64_t),
                                       cudaMemcpyDeviceToHost, m.stream));
  WEIR_DD_CUDA("load", cudaMemsetAsync(m.load_routed, 0, r.size() * sizeof(int64_t), m.stream));
  WEIR_DD_CUDA("load", cudaMemsetAsync(m.load_served, 0, s.size() * sizeof(int64_t), m.stream));
  WEIR_DD_CUDA("load", cudaStreamSynchronize(m.stream));
  for (size_t i = 0; i < r.size(); ++i) routed[i] += r[i];
  for (size_t i = 0; i < s.size(); ++i) served[i] += s[i];
  return absl::OkStatus();
}

int64_t DeviceDecoder::length(int slot) const {
  if (slot < 0 || slot >= options_.max_sequences) return 0;
  return impl_->slot_state[slot].length;
}

absl::StatusOr<std::vector<float>> DeviceDecoder::Step(std::span<const int> slots,
                                                       std::span<const int64_t> tokens) {
  const auto t0 = Clock::now();
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const int64_t rows = static_cast<int64_t>(slots.size());
  const bool collective = m.ex.world > 1;
  absl::Status valid = [&]() -> absl::Status {
    if ((rows == 0 && !collective) || rows > options_.max_batch || tokens.size() != slots.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Step: ", rows, " slots and ", tokens.size(),
                                                     " tokens (", collective ? 0 : 1, " to ",
                                                     options_.max_batch, ")"));
    }
    absl::flat_hash_set<int> seen;
    for (int64_t i = 0; i < rows; ++i) {
      const int s = slots[i];
      if (s < 0 || s >= options_.max_sequences || !m.slot_state[s].used) {
        return absl::InvalidArgumentError(absl::StrCat("Step: row ", i, " names slot ", s,
                                                       ", which holds no sequence"));
      }
      if (!seen.insert(s).second) {
        return absl::InvalidArgumentError(absl::StrCat("Step: slot ", s, " appears twice"));
      }
      if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("Step: token ", tokens[i], " of row ", i,
                                                       ", vocabulary has ", c.vocab_size));
      }
      if (m.slot_state[s].length >= options_.max_positions) {
        return absl::OutOfRangeError(absl::StrCat("Step: slot ", s, " is full (",
                                                  options_.max_positions, " positions)"));
      }
    }
    return absl::OkStatus();
  }();
  if (!valid.ok()) {
    // The peers of a collective step wait for this rank's blocks: join with
    // no rows, then refuse.
    if (collective) {
      if (absl::Status joined = Step({}, {}).status(); !joined.ok()) return joined;
    }
    return valid;
  }
  // A collective step has the same padded size on every rank (block sizes).
  const int64_t padded = collective ? m.batch_cap
                                    : (rows + options_.batch_interval - 1) /
                                          options_.batch_interval * options_.batch_interval;
  absl::Status st = [&]() -> absl::Status {
    WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
    RETURN_IF_ERROR(m.PrepareMeta(slots, tokens, padded));
    WEIR_DD_CUDA("event", cudaEventRecord(m.ev_begin, m.stream));
    if (options_.use_graphs) {
      auto it = m.graphs.find(padded);
      if (it == m.graphs.end()) {
        WEIR_DD_CUDA("begin capture",
                     cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
        absl::Status enq = m.Enqueue(padded);
        cudaGraph_t graph = nullptr;
        const cudaError_t end = cudaStreamEndCapture(m.stream, &graph);
        if (!enq.ok()) {
          if (graph != nullptr) cudaGraphDestroy(graph);
          return enq;
        }
        if (end != cudaSuccess) return CudaError("end capture", end);
        cudaGraphExec_t exec = nullptr;
        const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        if (inst != cudaSuccess) return CudaError("instantiate", inst);
        it = m.graphs.emplace(padded, exec).first;
        ++stats_.graph_captures;
      }
      WEIR_DD_CUDA("graph launch", cudaGraphLaunch(it->second, m.stream));
      ++stats_.graph_launches;
    } else {
      m.profiling = options_.profile;
      m.prof_used = 0;
      absl::Status enq = m.Enqueue(padded);
      m.Mark(nullptr);
      m.profiling = false;
      RETURN_IF_ERROR(enq);
      ++stats_.eager_steps;
    }
    WEIR_DD_CUDA("event", cudaEventRecord(m.ev_end, m.stream));
    WEIR_DD_CUDA("logits", cudaMemcpyAsync(m.logits_host, m.logits,
                                           rows * c.vocab_size * sizeof(float),
                                           cudaMemcpyDeviceToHost, m.stream));
    if (options_.communicator != nullptr) {
      // Bounded by the communicator's timeout (a dead peer does not hang the step).
      RETURN_IF_ERROR(options_.communicator->Synchronize(
          {.memory = parallel::MemoryKind::kDevice, .stream = m.stream}));
      const int64_t k = c.n_activated_experts;
      stats_.exchange_bytes += int64_t{c.n_layers} * (m.ex.world - 1) * padded *
                               (c.dim + 2 * k + k * c.dim) * 4;
    } else {
      WEIR_DD_CUDA("step", cudaStreamSynchronize(m.stream));
    }
    float ms = 0;
    WEIR_DD_CUDA("event", cudaEventElapsedTime(&ms, m.ev_begin, m.ev_end));
    stats_.device_seconds += ms / 1e3;
    for (size_t i = 0; i + 1 < m.prof_used; ++i) {
      float section = 0;
      if (cudaEventElapsedTime(&section, m.prof_events[i], m.prof_events[i + 1]) == cudaSuccess) {
        stats_.section_seconds[m.prof_names[i]] += section / 1e3;
      }
    }
    m.prof_used = 0;
    return absl::OkStatus();
  }();
  if (!st.ok()) {
    // After an NCCL failure the communicator has aborted its kernels, so the
    // stream drains.
    cudaStreamSynchronize(m.stream);
    cudaGetLastError();
    for (int s : slots) m.slot_state[s] = {};
    return absl::Status(
        st.code() == absl::StatusCode::kUnavailable ? st.code() : absl::StatusCode::kInternal,
        absl::StrCat("DeviceDecoder step: ", st.message()));
  }
  for (int64_t i = 0; i < rows; ++i) {
    Impl::Slot& s = m.slot_state[slots[i]];
    s.history.push_back(m.hasher.Compress(tokens[i]));
    ++s.length;
  }
  ++stats_.steps;
  stats_.rows += rows;
  stats_.host_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return std::vector<float>(m.logits_host, m.logits_host + rows * c.vocab_size);
}

}  // namespace weir::model
