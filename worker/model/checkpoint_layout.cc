#include "worker/model/checkpoint_layout.h"

#include "absl/strings/str_cat.h"
#include "worker/model/layer_roles.h"

namespace weir::model {
namespace {

class ParamList {
 public:
  explicit ParamList(std::vector<ParamSpec>& out) : out_(out) {}
  void Add(std::string name, ParamFormat format, std::vector<int64_t> shape, ParamInit init) {
    out_.push_back({std::move(name), format, std::move(shape), init});
  }
  void Fp8(const std::string& name, int64_t rows, int64_t cols) {
    Add(name, ParamFormat::kFp8Block, {rows, cols}, ParamInit::kLinear);
  }
  void Bf16(const std::string& name, std::vector<int64_t> shape, ParamInit init) {
    Add(name, ParamFormat::kBf16, std::move(shape), init);
  }
  void F32(const std::string& name, std::vector<int64_t> shape, ParamInit init) {
    Add(name, ParamFormat::kF32, std::move(shape), init);
  }

 private:
  std::vector<ParamSpec>& out_;
};

// One Block: mHC, attention (per role), MoE, optional Engram.
void AddBlock(const ModelConfig& c, const LayerRole& role, const std::string& p, ParamList& l) {
  const int64_t d = c.dim;
  const int64_t n = c.hc_mult;
  for (const char* site : {"attn", "ffn"}) {
    l.Bf16(absl::StrCat(p, site, "_norm.weight"), {d}, ParamInit::kNorm);
    l.F32(absl::StrCat(p, "hc_", site, "_fn"), {c.hc_mix_dim(), n * d}, ParamInit::kLinear);
    l.F32(absl::StrCat(p, "hc_", site, "_base"), {c.hc_mix_dim()}, ParamInit::kSigned);
    l.F32(absl::StrCat(p, "hc_", site, "_scale"), {3}, ParamInit::kPositive);
  }
  const std::string a = p + "attn.";
  l.Fp8(a + "wq_a", c.q_lora_rank, d);
  l.Bf16(a + "q_norm.weight", {c.q_lora_rank}, ParamInit::kNorm);
  l.Fp8(a + "wq_b", c.n_heads * c.head_dim, c.q_lora_rank);
  l.Fp8(a + "wkv", c.head_dim, d);
  l.Bf16(a + "kv_norm.weight", {c.head_dim}, ParamInit::kNorm);
  l.Fp8(a + "wo_a", c.o_groups * c.o_lora_rank, c.o_group_in_dim());
  l.Fp8(a + "wo_b", d, c.o_groups * c.o_lora_rank);
  l.F32(a + "attn_sink", {c.n_heads}, ParamInit::kSigned);
  if (role.has_compressor) {
    l.Bf16(a + "compressor.wkv.weight", {c.head_dim, d}, ParamInit::kLinear);
    if (role.ratio > 1) l.Bf16(a + "compressor.wgate.weight", {c.head_dim, d}, ParamInit::kLinear);
    l.Bf16(a + "compressor.norm.weight", {c.head_dim}, ParamInit::kNorm);
    l.Bf16(a + "indexer.wk.weight", {c.index_head_dim, c.head_dim}, ParamInit::kLinear);
    l.Bf16(a + "indexer.k_norm.weight", {c.index_head_dim}, ParamInit::kNorm);
  }
  if (role.has_indexer) {
    l.Fp8(a + "indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
    l.Bf16(a + "indexer.weights_proj.weight", {c.index_n_heads, d}, ParamInit::kLinear);
  }
  const std::string f = p + "ffn.";
  const int64_t experts = role.is_dspark_stage ? c.dspark_n_routed_experts : c.n_routed_experts;
  l.Bf16(f + "gate.weight", {experts, d}, ParamInit::kLinear);
  l.F32(f + "gate.bias", {experts}, ParamInit::kSmall);
  l.F32(f + "gate.bias_vl", {experts}, ParamInit::kSmall);
  for (int64_t e = 0; e < experts; ++e) {
    const std::string x = absl::StrCat(f, "experts.", e, ".");
    l.Add(x + "w1", ParamFormat::kMxfp4, {c.moe_inter_dim, d}, ParamInit::kLinear);
    l.Add(x + "w2", ParamFormat::kMxfp4, {d, c.moe_inter_dim}, ParamInit::kLinear);
    l.Add(x + "w3", ParamFormat::kMxfp4, {c.moe_inter_dim, d}, ParamInit::kLinear);
  }
  if (c.n_shared_experts > 0) {
    const int64_t inter = c.n_shared_experts * c.moe_inter_dim;
    l.Fp8(f + "shared_experts.w1", inter, d);
    l.Fp8(f + "shared_experts.w2", d, inter);
    l.Fp8(f + "shared_experts.w3", inter, d);
  }
  if (role.has_engram) {
    const int64_t rows = c.engram_num_embeddings[c.engram_index(role.layer)];
    l.Add(p + "engram.embed", ParamFormat::kFp8Rows, {rows, c.engram_head_dim}, ParamInit::kUnit);
    l.Fp8(p + "engram.wkv", (n + 1) * d, c.engram_embed_dim());
    l.Bf16(p + "engram.q_weight", {n, d}, ParamInit::kNorm);
    l.Bf16(p + "engram.k_weight", {n, d}, ParamInit::kNorm);
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<ParamSpec> ModelParams(const ModelConfig& c) {
  std::vector<ParamSpec> out;
  ParamList l(out);
  const LayerRoles roles(c);
  l.Bf16("embed.weight", {c.vocab_size, c.dim}, ParamInit::kUnit);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    AddBlock(c, roles[layer], absl::StrCat("layers.", layer, "."), l);
  }
  for (int s = 0; s < c.n_mtp_layers; ++s) {
    const std::string p = absl::StrCat("mtp.", s, ".");
    AddBlock(c, roles[c.n_layers + s], p, l);
    if (s == 0) {
      l.Fp8(p + "main_proj", c.dim, c.dspark_main_dim());
      l.Bf16(p + "main_norm.weight", {c.dim}, ParamInit::kNorm);
    }
    if (s == c.n_mtp_layers - 1) {
      l.Bf16(p + "norm.weight", {c.dim}, ParamInit::kNorm);
      l.Bf16(p + "markov_head.markov_w1.weight", {c.vocab_size, c.dspark_markov_rank},
             ParamInit::kUnit);
      l.Bf16(p + "markov_head.markov_w2.weight", {c.vocab_size, c.dspark_markov_rank},
             ParamInit::kLinear);
      l.F32(p + "confidence_head.proj.weight", {1, c.dim + c.dspark_markov_rank},
            ParamInit::kLinear);
    }
  }
  l.Bf16("norm.weight", {c.dim}, ParamInit::kNorm);
  l.Bf16("head.weight", {c.vocab_size, c.dim}, ParamInit::kLinear);
  return out;
}

std::vector<TensorDecl> StoredTensors(const ParamSpec& p, const ModelConfig& c) {
  const int64_t rows = p.shape.empty() ? 0 : p.shape[0];
  const int64_t cols = p.shape.size() < 2 ? 0 : p.shape[1];
  switch (p.format) {
    case ParamFormat::kBf16:
      return {{p.name, DType::kBF16, p.shape}};
    case ParamFormat::kF32:
      return {{p.name, DType::kF32, p.shape}};
    case ParamFormat::kFp8Block: {
      const int64_t b = c.fp8_block_size;
      return {{p.name + ".weight", DType::kF8E4M3, p.shape},
              {p.name + ".scale", DType::kF8E8M0, {CeilDiv(rows, b), CeilDiv(cols, b)}}};
    }
    case ParamFormat::kMxfp4:
      return {{p.name + ".weight", DType::kI8, {rows, cols / 2}},
              {p.name + ".scale", DType::kF8E8M0, {rows, cols / c.fp4_block_size}}};
    case ParamFormat::kFp8Rows:
      return {{p.name + ".weight", DType::kF8E4M3, p.shape},
              {p.name + ".scale", DType::kF8E8M0, {rows, cols / 32}}};
  }
  return {};
}

std::vector<TensorDecl> ExpectedTensors(const ModelConfig& c) {
  std::vector<TensorDecl> out;
  for (const ParamSpec& p : ModelParams(c)) {
    for (TensorDecl& t : StoredTensors(p, c)) out.push_back(std::move(t));
  }
  return out;
}

int64_t ExpectedCheckpointBytes(const ModelConfig& c) {
  int64_t total = 0;
  for (const TensorDecl& t : ExpectedTensors(c)) total += t.num_bytes();
  return total;
}

}  // namespace weir::model
