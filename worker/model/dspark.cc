#include "worker/model/dspark.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/sparse_attention.h"
#include "worker/model/attention.h"
#include "worker/model/mhc.h"
#include "worker/model/moe_layer.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;

absl::Status UpdateDsparkRings(const ModelRuntime& rt, std::span<const float> main_hidden,
                               int64_t start_pos, int64_t tokens, SequenceState& state) {
  const ModelConfig& c = rt.config;
  const DsparkWeights& dw = rt.weights.dspark;
  const int64_t d = c.dim;
  std::vector<float> main_x(tokens * d);
  RETURN_IF_ERROR(rt.ops.Matmul(dw.main_proj, main_hidden, tokens, main_x));
  rt.ops.RoundBf16(main_x);
  RETURN_IF_ERROR(
      rt.ops.RmsNorm(main_x, dw.main_norm, tokens, d, static_cast<float>(c.norm_eps), main_x));
  rt.ops.RoundBf16(main_x);
  std::vector<int64_t> positions(tokens);
  for (int64_t t = 0; t < tokens; ++t) positions[t] = start_pos + t;
  std::vector<float> kv;
  for (int stage = 0; stage < c.n_mtp_layers; ++stage) {
    const int layer = c.n_layers + stage;
    RETURN_IF_ERROR(ProjectWindowKv(rt.ops, c, rt.weights.layers[layer].attn, *rt.rope[layer],
                                    main_x, positions, kv));
    PositionRing& ring = state.window(layer);
    for (int64_t t = 0; t < tokens; ++t) {
      std::span<float> row = ring.Row(start_pos + t);
      std::copy_n(kv.data() + t * c.head_dim, c.head_dim, row.data());
    }
  }
  return absl::OkStatus();
}

namespace {

// The stage's attention: block queries over [ring slots ; block K/V] (§4.8).
absl::Status StageAttention(const ModelRuntime& rt, const SequenceState& state, int layer,
                            int64_t p, std::span<const float> x, std::span<float> out) {
  const ModelConfig& c = rt.config;
  const AttentionWeights& w = rt.weights.layers[layer].attn;
  const cpu::RopeTable& rope = *rt.rope[layer];
  const int64_t b = c.dspark_block_size, d = c.head_dim, win = c.window_size;
  std::vector<int64_t> positions(b);
  for (int64_t i = 0; i < b; ++i) positions[i] = p + 1 + i;
  std::vector<float> qr, q, kv;
  RETURN_IF_ERROR(ProjectQuery(rt.ops, c, w, rope, x, positions, qr, q));
  RETURN_IF_ERROR(ProjectWindowKv(rt.ops, c, w, rope, x, positions, kv));
  // kv table = [ring slots 0..win-1 (slot = pos % win); block rows].
  std::vector<float> table((win + b) * d, 0.0f);
  const PositionRing& ring = state.window(layer);
  for (int64_t pos = std::max<int64_t>(0, p - win + 1); pos <= p; ++pos) {
    std::span<const float> row = ring.Row(pos);
    std::copy(row.begin(), row.end(), table.begin() + (pos % win) * d);
  }
  std::copy(kv.begin(), kv.end(), table.begin() + win * d);
  const int width = static_cast<int>(std::min<int64_t>(win, p + 1) + b);
  std::vector<int32_t> index(b * width);
  RETURN_IF_ERROR(cpu::DsparkIndices(p, static_cast<int>(win), static_cast<int>(b), index));
  return AttendAndProject(rt.ops, c, w, rope, q, table, index, width, positions, out);
}

}  // namespace

absl::StatusOr<DraftResult> DsparkDraft(const ModelRuntime& rt, const SequenceState& state,
                                        int64_t next_token) {
  const ModelConfig& c = rt.config;
  const DsparkWeights& dw = rt.weights.dspark;
  const int64_t b = c.dspark_block_size, d = c.dim, n = c.hc_mult, v = c.vocab_size;
  const int64_t rank = c.dspark_markov_rank, p = state.length() - 1;
  std::vector<float> x(b * n * d);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t id = i == 0 ? next_token : c.dspark_noise_token_id;
    for (int64_t k = 0; k < n; ++k) {
      std::copy_n(rt.weights.embed.data() + id * d, d, x.data() + (i * n + k) * d);
    }
  }
  std::vector<float> pre = IdentityPreMix(b, static_cast<int>(n));
  for (int stage = 0; stage < c.n_mtp_layers; ++stage) {
    const int layer = c.n_layers + stage;
    const MoeContext mctx{rt.ops, c, rt.roles[layer], rt.weights.layers[layer].ffn,
                          rt.executor, rt.load};
    RETURN_IF_ERROR(BlockForward(
        rt.ops, c, rt.weights.layers[layer], b,
        [&](std::span<const float> in, std::span<float> out) {
          return StageAttention(rt, state, layer, p, in, out);
        },
        [&](std::span<const float> in, std::span<float> out) {
          return MoeForward(mctx, in, b, {}, out);
        },
        x, pre))
        << "DSpark stage " << stage;
  }
  std::vector<float> h(b * d), hn(b * d);
  RETURN_IF_ERROR(Collapse(rt.ops, c, x, pre, b, h));
  RETURN_IF_ERROR(rt.ops.RmsNorm(h, dw.norm, b, d, static_cast<float>(c.norm_eps), hn));
  rt.ops.RoundBf16(hn);
  DraftResult r;
  r.logits.assign(b * v, 0.0f);
  RETURN_IF_ERROR(rt.ops.Logits(rt.weights.head, hn, b, r.logits));
  // Markov head: sequential low-rank bigram bias, greedy choice; confidence from [h ; e].
  std::vector<float> bias(v), feat(d + rank);
  int64_t prev = next_token;
  for (int64_t i = 0; i < b; ++i) {
    std::span<const float> e(dw.markov_embed.data() + prev * rank, rank);
    RETURN_IF_ERROR(rt.ops.Logits(dw.markov_head, e, 1, bias));
    float* li = r.logits.data() + i * v;
    for (int64_t t = 0; t < v; ++t) li[t] += bias[t];
    prev = std::max_element(li, li + v) - li;
    r.tokens.push_back(prev);
    std::copy_n(h.data() + i * d, d, feat.data());
    std::copy(e.begin(), e.end(), feat.begin() + d);
    float conf = 0.0f;
    RETURN_IF_ERROR(rt.ops.Matmul(dw.confidence, feat, 1, std::span<float>(&conf, 1)));
    r.confidence.push_back(conf);
  }
  return r;
}

}  // namespace weir::model
