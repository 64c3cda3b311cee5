#include "worker/model/weights.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/weight_quant.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;
namespace {

class Loader {
 public:
  Loader(const ModelConfig& config, const Checkpoint& ckpt, const ExpertFilter& filter,
         const EngramRowFilter& engram_filter)
      : config_(config), ckpt_(ckpt), filter_(filter), engram_filter_(engram_filter) {}

  // fp32 values of a BF16 or F32 tensor, optionally checking its element count.
  absl::StatusOr<std::vector<float>> Floats(const std::string& name, int64_t numel = -1) const {
    const TensorInfo* info = ckpt_.Info(name);
    if (info == nullptr) return absl::NotFoundError(absl::StrCat("tensor ", name, " is missing"));
    if (numel >= 0 && info->num_elements() != numel) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has ",
                                                     info->num_elements(), " elements, expected ",
                                                     numel));
    }
    ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, ckpt_.Bytes(name));
    std::vector<float> out(info->num_elements());
    if (info->dtype == DType::kBF16) {
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes.data() + 2 * i, 2);
        out[i] = kernels::Bf16BitsToFloat(bits);
      }
    } else if (info->dtype == DType::kF32) {
      std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
    } else {
      const std::string dtype(DTypeName(info->dtype));
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, " is ", dtype, ", not BF16/F32"));
    }
    return out;
  }

  // A linear layer `prefix`.weight [out, in] in any stored format.
  absl::StatusOr<DenseWeight> Dense(const std::string& prefix, int64_t out, int64_t in) const {
    const std::string wname = prefix + ".weight";
    const TensorInfo* info = ckpt_.Info(wname);
    if (info == nullptr) return absl::NotFoundError(absl::StrCat("tensor ", wname, " is missing"));
    DenseWeight w{.out = out, .in = in, .w = std::vector<float>(out * in)};
    if (info->dtype == DType::kF8E4M3 || info->dtype == DType::kI8) {
      ASSIGN_OR_RETURN(std::span<const uint8_t> codes, ckpt_.Bytes(wname));
      ASSIGN_OR_RETURN(std::span<const uint8_t> scales, ckpt_.Bytes(prefix + ".scale"));
      w.fp8_activation = true;
      absl::Status st =
          info->dtype == DType::kF8E4M3
              ? cpu::DequantizeFp8Weight(codes, scales, out, in,
                                         static_cast<int>(config_.fp8_block_size), w.w)
              : cpu::DequantizeMxfp4Weight(codes, scales, out, in, w.w);
      if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(wname, ": ", st.message()));
      return w;
    }
    ASSIGN_OR_RETURN(w.w, Floats(wname, out * in));
    return w;
  }

  absl::StatusOr<ExpertWeightsF32> Expert(const std::string& p, int64_t inter) const {
    const int64_t d = config_.dim;
    ExpertWeightsF32 e;
    ASSIGN_OR_RETURN(e.w1, Dense(p + "w1", inter, d));
    ASSIGN_OR_RETURN(e.w2, Dense(p + "w2", d, inter));
    ASSIGN_OR_RETURN(e.w3, Dense(p + "w3", inter, d));
    return e;
  }

  absl::StatusOr<HcWeights> Hc(const std::string& p, const std::string& site) const {
    const int64_t mix = config_.hc_mix_dim(), nd = config_.hc_mult * config_.dim;
    HcWeights hc;
    ASSIGN_OR_RETURN(hc.fn, Floats(absl::StrCat(p, "hc_", site, "_fn"), mix * nd));
    ASSIGN_OR_RETURN(hc.base, Floats(absl::StrCat(p, "hc_", site, "_base"), mix));
    ASSIGN_OR_RETURN(hc.scale, Floats(absl::StrCat(p, "hc_", site, "_scale"), 3));
    return hc;
  }

  absl::StatusOr<AttentionWeights> Attention(const std::string& p, const LayerRole& role) const {
    const ModelConfig& c = config_;
    const int64_t d = c.dim, hd = c.head_dim;
    AttentionWeights a;
    const std::string s = p + "attn.";
    ASSIGN_OR_RETURN(a.wq_a, Dense(s + "wq_a", c.q_lora_rank, d));
    ASSIGN_OR_RETURN(a.q_norm, Floats(s + "q_norm.weight", c.q_lora_rank));
    ASSIGN_OR_RETURN(a.wq_b, Dense(s + "wq_b", c.n_heads * hd, c.q_lora_rank));
    ASSIGN_OR_RETURN(a.wkv, Dense(s + "wkv", hd, d));
    ASSIGN_OR_RETURN(a.kv_norm, Floats(s + "kv_norm.weight", hd));
    ASSIGN_OR_RETURN(a.attn_sink, Floats(s + "attn_sink", c.n_heads));
    ASSIGN_OR_RETURN(a.wo_b, Dense(s + "wo_b", d, c.o_groups * c.o_lora_rank));
    // wo_a: the official conversion stores it bf16; split into its diagonal blocks.
    const int64_t gin = c.o_group_in_dim(), r = c.o_lora_rank;
    ASSIGN_OR_RETURN(DenseWeight wo_a, Dense(s + "wo_a", c.o_groups * r, gin));
    for (float& v : wo_a.w) v = kernels::RoundToBf16(v);
    for (int64_t g = 0; g < c.o_groups; ++g) {
      DenseWeight block{.out = r, .in = gin};
      block.w.assign(wo_a.w.begin() + g * r * gin, wo_a.w.begin() + (g + 1) * r * gin);
      a.wo_a.push_back(std::move(block));
    }
    if (role.has_compressor) {
      ASSIGN_OR_RETURN(a.comp_wkv, Dense(s + "compressor.wkv", hd, d));
      if (role.ratio > 1) {
        ASSIGN_OR_RETURN(a.comp_wgate, Dense(s + "compressor.wgate", hd, d));
      }
      ASSIGN_OR_RETURN(a.comp_norm, Floats(s + "compressor.norm.weight", hd));
      ASSIGN_OR_RETURN(a.index_wk, Dense(s + "indexer.wk", c.index_head_dim, hd));
      ASSIGN_OR_RETURN(a.index_k_norm, Floats(s + "indexer.k_norm.weight", c.index_head_dim));
    }
    if (role.has_indexer) {
      ASSIGN_OR_RETURN(a.index_wq_b, Dense(s + "indexer.wq_b", c.index_n_heads * c.index_head_dim,
                                           c.q_lora_rank));
      ASSIGN_OR_RETURN(a.index_weights_proj,
                       Dense(s + "indexer.weights_proj", c.index_n_heads, d));
    }
    return a;
  }

  absl::StatusOr<MoeWeights> Moe(const std::string& p, const LayerRole& role) const {
    const ModelConfig& c = config_;
    int64_t n_experts = c.n_routed_experts;
    if (role.is_dspark_stage && c.dspark_n_routed_experts > 0) {
      n_experts = c.dspark_n_routed_experts;
    }
    MoeWeights m;
    const std::string f = p + "ffn.";
    ASSIGN_OR_RETURN(m.gate, Floats(f + "gate.weight", n_experts * c.dim));
    ASSIGN_OR_RETURN(m.bias, Floats(f + "gate.bias", n_experts));
    if (ckpt_.Info(f + "gate.bias_vl") != nullptr) {
      ASSIGN_OR_RETURN(m.bias_vl, Floats(f + "gate.bias_vl", n_experts));
    }
    for (int64_t e = 0; e < n_experts; ++e) {
      if (!role.is_dspark_stage && filter_ && !filter_(role.layer, e)) {
        m.experts.emplace_back();  // not held by this process
        continue;
      }
      ASSIGN_OR_RETURN(ExpertWeightsF32 w,
                       Expert(absl::StrCat(f, "experts.", e, "."), c.moe_inter_dim));
      m.experts.push_back(std::move(w));
    }
    ASSIGN_OR_RETURN(m.shared,
                     Expert(f + "shared_experts.", c.n_shared_experts * c.moe_inter_dim));
    return m;
  }

  absl::StatusOr<BlockWeights> Block(const std::string& p, const LayerRole& role) const {
    const ModelConfig& c = config_;
    BlockWeights b;
    ASSIGN_OR_RETURN(b.attn_norm, Floats(p + "attn_norm.weight", c.dim));
    ASSIGN_OR_RETURN(b.ffn_norm, Floats(p + "ffn_norm.weight", c.dim));
    ASSIGN_OR_RETURN(b.hc_attn, Hc(p, "attn"));
    ASSIGN_OR_RETURN(b.hc_ffn, Hc(p, "ffn"));
    ASSIGN_OR_RETURN(b.attn, Attention(p, role));
    ASSIGN_OR_RETURN(b.ffn, Moe(p, role));
    if (role.has_engram) {
      b.has_engram = true;
      EngramWeights& e = b.engram;
      const std::string en = p + "engram.";
      const TensorInfo* info = ckpt_.Info(en + "embed.weight");
      if (info == nullptr || info->shape.size() != 2 || info->shape[1] != c.engram_head_dim) {
        return absl::InvalidArgumentError(absl::StrCat(en, "embed.weight: missing or bad shape"));
      }
      e.rows = info->shape[0];
      const EngramRowRange range =
          engram_filter_ ? engram_filter_(role.layer, e.rows) : EngramRowRange{0, e.rows};
      if (range.begin < 0 || range.begin > range.end || range.end > e.rows) {
        return absl::InvalidArgumentError(absl::StrCat(en, "embed: row range [", range.begin, ", ",
                                                       range.end, ") of ", e.rows, " rows"));
      }
      e.row_begin = range.begin;
      e.row_end = range.end;
      const int64_t hd = c.engram_head_dim, blocks = hd / 32;
      ASSIGN_OR_RETURN(std::span<const uint8_t> table, ckpt_.Bytes(en + "embed.weight"));
      ASSIGN_OR_RETURN(std::span<const uint8_t> scales, ckpt_.Bytes(en + "embed.scale"));
      if (hd % 32 != 0 || static_cast<int64_t>(table.size()) != e.rows * hd ||
          static_cast<int64_t>(scales.size()) != e.rows * blocks) {
        return absl::InvalidArgumentError(absl::StrCat(en, "embed: table or scales size"));
      }
      e.table = table.subspan(range.begin * hd, (range.end - range.begin) * hd);
      e.scales = scales.subspan(range.begin * blocks, (range.end - range.begin) * blocks);
      ASSIGN_OR_RETURN(e.wkv, Dense(en + "wkv", (c.hc_mult + 1) * c.dim, c.engram_embed_dim()));
      ASSIGN_OR_RETURN(std::vector<float> q, Floats(en + "q_weight", c.hc_mult * c.dim));
      ASSIGN_OR_RETURN(std::vector<float> k, Floats(en + "k_weight", c.hc_mult * c.dim));
      e.gate_weight.resize(q.size());
      for (size_t i = 0; i < q.size(); ++i) e.gate_weight[i] = q[i] * k[i];
    }
    return b;
  }

  absl::StatusOr<DsparkWeights> Dspark() const {
    const ModelConfig& c = config_;
    DsparkWeights w;
    if (c.n_mtp_layers == 0) return w;
    const std::string first = "mtp.0.";
    const std::string last = absl::StrCat("mtp.", c.n_mtp_layers - 1, ".");
    ASSIGN_OR_RETURN(w.main_proj, Dense(first + "main_proj", c.dim, c.dspark_main_dim()));
    ASSIGN_OR_RETURN(w.main_norm, Floats(first + "main_norm.weight", c.dim));
    ASSIGN_OR_RETURN(w.norm, Floats(last + "norm.weight", c.dim));
    const int64_t v = c.vocab_size, r = c.dspark_markov_rank;
    ASSIGN_OR_RETURN(w.markov_embed, Floats(last + "markov_head.markov_w1.weight", v * r));
    ASSIGN_OR_RETURN(w.markov_head, Dense(last + "markov_head.markov_w2", v, r));
    ASSIGN_OR_RETURN(w.confidence, Dense(last + "confidence_head.proj", 1, c.dim + r));
    return w;
  }

 private:
  const ModelConfig& config_;
  const Checkpoint& ckpt_;
  const ExpertFilter& filter_;
  const EngramRowFilter& engram_filter_;
};

}  // namespace

absl::StatusOr<ModelWeights> LoadModelWeights(const ModelConfig& config, const LayerRoles& roles,
                                              const Checkpoint& checkpoint,
                                              const ExpertFilter& filter,
                                              const EngramRowFilter& engram_filter) {
  Loader load(config, checkpoint, filter, engram_filter);
  ModelWeights w;
  ASSIGN_OR_RETURN(w.embed, load.Floats("embed.weight", config.vocab_size * config.dim));
  ASSIGN_OR_RETURN(w.norm, load.Floats("norm.weight", config.dim));
  ASSIGN_OR_RETURN(w.head, load.Dense("head", config.vocab_size, config.dim));
  for (const LayerRole& role : roles.layers()) {
    const std::string prefix =
        role.is_dspark_stage ? absl::StrCat("mtp.", role.layer - config.n_layers, ".")
                             : absl::StrCat("layers.", role.layer, ".");
    ASSIGN_OR_RETURN(BlockWeights b, load.Block(prefix, role));
    w.layers.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(w.dspark, load.Dspark());
  return w;
}

int64_t KeepBf16Forms(ModelWeights& weights) {
  int64_t kept = 0;
  auto keep = [&kept](DenseWeight& w) { kept += KeepBf16Form(w) ? 1 : 0; };
  auto expert = [&keep](ExpertWeightsF32& e) {
    keep(e.w1);
    keep(e.w2);
    keep(e.w3);
  };
  // (Not the head: CpuOps::Logits takes sgemm, or RowStableGemm on fp32.)
  for (BlockWeights& b : weights.layers) {
    AttentionWeights& a = b.attn;
    for (DenseWeight* w : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b, &a.comp_wkv, &a.comp_wgate,
                           &a.index_wk, &a.index_wq_b, &a.index_weights_proj}) {
      keep(*w);
    }
    for (DenseWeight& w : a.wo_a) keep(w);
    for (ExpertWeightsF32& e : b.ffn.experts) expert(e);
    expert(b.ffn.shared);
    keep(b.engram.wkv);
  }
  keep(weights.dspark.main_proj);
  keep(weights.dspark.markov_head);
  keep(weights.dspark.confidence);
  return kept;
}

}  // namespace weir::model
