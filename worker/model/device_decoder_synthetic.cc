// The synthetic slice generator (device_decoder_synthetic.h): the shapes and
// small host tensors of a V4.1 config, and a DeviceDecoder that draws the
// big matrices on the device.

#include "worker/model/device_decoder_synthetic.h"

#include "worker/model/device_decoder_impl.h"

namespace weir::model {
namespace {

using device_decoder_internal::CheckDecodable;
using device_decoder_internal::LocalExperts;
using device_decoder_internal::SyntheticModel;

// The shapes (and small host tensors) of a synthetic decoder of `config`,
// drawn from `seed`.
std::unique_ptr<SyntheticModel> MakeSynthetic(const ModelConfig& config, uint64_t seed,
                                              bool bf16_wo_a) {
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
      a.wo_a.push_back(dense(c.o_lora_rank, c.o_group_in_dim(), !bf16_wo_a));
    }
    if (role.has_compressor) {
      // The checkpoint's dtypes (checkpoint_layout.cc): the compressor and
      // the indexer's key and head-weight projections are bf16.
      a.comp_wkv = dense(hd, d, false);
      if (role.ratio > 1) a.comp_wgate = dense(hd, d, false);
      a.comp_norm = vec(hd, 0.9f, 1.1f);
      a.index_wk = dense(c.index_head_dim, hd, false);
      a.index_k_norm = vec(c.index_head_dim, 0.9f, 1.1f);
    }
    if (role.has_indexer) {
      a.index_wq_b = dense(c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      a.index_weights_proj = dense(c.index_n_heads, d, false);
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

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceDecoder>> CreateSyntheticDeviceDecoder(
    const ModelConfig& config, ActivationPrecision precision, const DeviceDecoderOptions& options,
    uint64_t seed, bool bf16_wo_a) {
  using Impl = DeviceDecoder::Impl;
  RETURN_IF_ERROR(ValidateModelConfig(config));
  if (!config.engram_layer_ids.empty()) {
    return absl::InvalidArgumentError(
        "CreateSyntheticDeviceDecoder: Engram tables are not synthesized; drop the Engram "
        "layers from the config");
  }
  std::unique_ptr<SyntheticModel> model = MakeSynthetic(config, seed, bf16_wo_a);
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

}  // namespace weir::model
