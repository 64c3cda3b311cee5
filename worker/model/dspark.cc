#include "worker/model/dspark.h"

#include <algorithm>
#include <utility>

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

absl::StatusOr<std::vector<DraftResult>> DsparkDraftBatch(
    const ModelRuntime& rt, std::span<const SequenceState* const> states,
    std::span<const int64_t> next_tokens) {
  const ModelConfig& c = rt.config;
  const DsparkWeights& dw = rt.weights.dspark;
  const int64_t b = c.dspark_block_size, d = c.dim, n = c.hc_mult, v = c.vocab_size;
  const int64_t rank = c.dspark_markov_rank, rows = static_cast<int64_t>(states.size());
  if (rows == 0) return std::vector<DraftResult>();
  // Sequence r's block is rows [r * b, (r + 1) * b) of every stacked tensor.
  std::vector<float> x(rows * b * n * d);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < b; ++i) {
      const int64_t id = i == 0 ? next_tokens[r] : c.dspark_noise_token_id;
      for (int64_t k = 0; k < n; ++k) {
        std::copy_n(rt.weights.embed.data() + id * d, d, x.data() + ((r * b + i) * n + k) * d);
      }
    }
  }
  std::vector<float> pre = IdentityPreMix(rows * b, static_cast<int>(n));
  for (int stage = 0; stage < c.n_mtp_layers; ++stage) {
    const int layer = c.n_layers + stage;
    const MoeContext mctx{rt.ops, c, rt.roles[layer], rt.weights.layers[layer].ffn,
                          rt.executor, rt.load};
    RETURN_IF_ERROR(BlockForward(
        rt.ops, c, rt.weights.layers[layer], rows * b,
        [&](std::span<const float> in, std::span<float> out) -> absl::Status {
          // Each block attends to its own ring and itself only.
          for (int64_t r = 0; r < rows; ++r) {
            RETURN_IF_ERROR(StageAttention(rt, *states[r], layer, states[r]->length() - 1,
                                           in.subspan(r * b * d, b * d),
                                           out.subspan(r * b * d, b * d)))
                << "sequence " << r;
          }
          return absl::OkStatus();
        },
        [&](std::span<const float> in, std::span<float> out) {
          return MoeForward(mctx, in, rows * b, {}, out);
        },
        x, pre))
        << "DSpark stage " << stage;
  }
  std::vector<float> h(rows * b * d), hn(rows * b * d);
  RETURN_IF_ERROR(Collapse(rt.ops, c, x, pre, rows * b, h));
  RETURN_IF_ERROR(rt.ops.RmsNorm(h, dw.norm, rows * b, d, static_cast<float>(c.norm_eps), hn));
  rt.ops.RoundBf16(hn);
  std::vector<DraftResult> results(rows);
  // Markov head: sequential low-rank bigram bias, greedy choice. The head and
  // the Markov head run per sequence with one sequence's shapes: Ops::Logits
  // may sum in an order that depends on its row count (OpenBLAS sgemm).
  std::vector<float> bias(v), feat(rows * b * (d + rank));
  for (int64_t r = 0; r < rows; ++r) {
    DraftResult& dr = results[r];
    dr.logits.assign(b * v, 0.0f);
    RETURN_IF_ERROR(rt.ops.Logits(
        rt.weights.head, std::span<const float>(hn).subspan(r * b * d, b * d), b, dr.logits));
    int64_t prev = next_tokens[r];
    for (int64_t i = 0; i < b; ++i) {
      std::span<const float> e(dw.markov_embed.data() + prev * rank, rank);
      RETURN_IF_ERROR(rt.ops.Logits(dw.markov_head, e, 1, bias));
      float* li = dr.logits.data() + i * v;
      for (int64_t t = 0; t < v; ++t) li[t] += bias[t];
      prev = std::max_element(li, li + v) - li;
      dr.tokens.push_back(prev);
      // Confidence features [h ; e], projected below for every row at once.
      float* f = feat.data() + (r * b + i) * (d + rank);
      std::copy_n(h.data() + (r * b + i) * d, d, f);
      std::copy(e.begin(), e.end(), f + d);
    }
  }
  // Matmul is row-stable (ops.h), so one product equals one per row.
  std::vector<float> conf(rows * b);
  RETURN_IF_ERROR(rt.ops.Matmul(dw.confidence, feat, rows * b, conf));
  for (int64_t r = 0; r < rows; ++r) {
    results[r].confidence.assign(conf.begin() + r * b, conf.begin() + (r + 1) * b);
  }
  return results;
}

}  // namespace weir::model
