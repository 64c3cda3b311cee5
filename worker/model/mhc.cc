#include "worker/model/mhc.h"

#include "base/status_macros.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;
namespace {

struct Coefficients {
  std::vector<float> pre, post, comb;
};

absl::Status Mix(Ops& ops, const ModelConfig& c, const HcWeights& hc, std::span<const float> x,
                 int64_t tokens, Coefficients& out) {
  const int64_t n = c.hc_mult;
  out.pre.assign(tokens * n, 0.0f);
  out.post.assign(tokens * n, 0.0f);
  out.comb.assign(tokens * n * n, 0.0f);
  const cpu::HcParams params{.hc_mult = static_cast<int>(n),
                             .sinkhorn_iters = c.hc_sinkhorn_iters,
                             .hc_eps = static_cast<float>(c.hc_eps),
                             .norm_eps = static_cast<float>(c.norm_eps)};
  return ops.HcMix(params, {.x = x, .hc_fn = hc.fn, .scale = hc.scale, .base = hc.base,
                            .pre = out.pre, .post = out.post, .comb = out.comb,
                            .tokens = tokens, .dim = c.dim});
}

// in [tokens, dim] = bf16(norm(collapse(x, pre))): a site's sublayer input.
absl::Status NormedCollapse(Ops& ops, const ModelConfig& c, std::span<const float> norm_weight,
                            std::span<const float> x, std::span<const float> pre, int64_t tokens,
                            std::span<float> in) {
  RETURN_IF_ERROR(Collapse(ops, c, x, pre, tokens, in));
  RETURN_IF_ERROR(
      ops.RmsNorm(in, norm_weight, tokens, c.dim, static_cast<float>(c.norm_eps), in));
  ops.RoundBf16(in);
  return absl::OkStatus();
}

// One site: y = sublayer(norm(collapse(x, pre))); x <- post (x) y + comb^T x.
absl::Status Site(Ops& ops, const ModelConfig& c, std::span<const float> norm_weight,
                  const Coefficients& coeff, std::span<const float> pre, int64_t tokens,
                  const Sublayer& sublayer, std::vector<float>& x) {
  const int64_t d = c.dim;
  std::vector<float> in(tokens * d), y(tokens * d);
  RETURN_IF_ERROR(NormedCollapse(ops, c, norm_weight, x, pre, tokens, in));
  RETURN_IF_ERROR(sublayer(in, y));
  std::vector<float> next(x.size());
  RETURN_IF_ERROR(ops.HcExpand(x, y, coeff.post, coeff.comb, tokens,
                               static_cast<int>(c.hc_mult), d, next));
  x.swap(next);
  return absl::OkStatus();
}

}  // namespace

std::vector<float> IdentityPreMix(int64_t tokens, int hc_mult) {
  std::vector<float> pre(tokens * hc_mult, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) pre[t * hc_mult] = 1.0f;
  return pre;
}

absl::Status Collapse(Ops& ops, const ModelConfig& config, std::span<const float> x,
                      std::span<const float> pre, int64_t tokens, std::span<float> out) {
  return ops.HcCollapse(x, pre, tokens, static_cast<int>(config.hc_mult), config.dim, out);
}

absl::Status AttentionInput(Ops& ops, const ModelConfig& config, const BlockWeights& w,
                            std::span<const float> x, std::span<const float> pre,
                            int64_t tokens, std::span<float> out) {
  return NormedCollapse(ops, config, w.attn_norm, x, pre, tokens, out);
}

absl::Status BlockForward(Ops& ops, const ModelConfig& config, const BlockWeights& w,
                          int64_t tokens, const Sublayer& attention, const Sublayer& ffn,
                          std::vector<float>& x, std::vector<float>& pre) {
  Coefficients a, f;
  RETURN_IF_ERROR(Mix(ops, config, w.hc_attn, x, tokens, a));
  RETURN_IF_ERROR(Site(ops, config, w.attn_norm, a, pre, tokens, attention, x));
  RETURN_IF_ERROR(Mix(ops, config, w.hc_ffn, x, tokens, f));
  RETURN_IF_ERROR(Site(ops, config, w.ffn_norm, f, a.pre, tokens, ffn, x));
  pre = std::move(f.pre);
  return absl::OkStatus();
}

}  // namespace weir::model
