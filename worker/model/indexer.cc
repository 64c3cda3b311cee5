#include "worker/model/indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;

absl::Status UpdateCompressedKv(const AttentionContext& ctx, std::span<const float> x) {
  const ModelConfig& c = ctx.config;
  const AttentionWeights& w = ctx.weights;
  Ops& ops = ctx.ops;
  const int r = ctx.role.ratio;
  const int64_t s = ctx.tokens, p0 = ctx.start_pos, d = c.head_dim, di = c.index_head_dim;
  const float eps = static_cast<float>(c.norm_eps);
  KvSourceState& src = ctx.state.kv_source(ctx.role.layer);  // the compressor's partial group
  const int64_t first = p0 / r, count = (p0 + s) / r - first;

  std::vector<float> latent(count * d);
  if (r == 1) {
    RETURN_IF_ERROR(ops.Matmul(w.comp_wkv, x, s, latent));
  } else {
    std::vector<float> a(s * d), g(s * d);
    RETURN_IF_ERROR(ops.Matmul(w.comp_wkv, x, s, a));
    RETURN_IF_ERROR(ops.Matmul(w.comp_wgate, x, s, g));
    // Partial group: tokens [p0 - p0 % r, p0) at slots pos % r, from the pending ring.
    std::vector<float> kv_state(r * d, 0.0f);
    std::vector<float> score_state(r * d, -std::numeric_limits<float>::infinity());
    for (int64_t pos = p0 - p0 % r; pos < p0; ++pos) {
      std::span<const float> row = std::as_const(src.pending).Row(pos);
      std::copy_n(row.data(), d, kv_state.data() + (pos % r) * d);
      std::copy_n(row.data() + d, d, score_state.data() + (pos % r) * d);
    }
    RETURN_IF_ERROR(ops.CompressorPool({.kv = a, .score = g, .kv_state = kv_state,
                                        .score_state = score_state, .out = latent,
                                        .start_pos = p0, .tokens = s, .dim = d, .ratio = r}));
    for (int64_t t = 0; t < s; ++t) {
      std::span<float> row = src.pending.Row(p0 + t);
      std::copy_n(a.data() + t * d, d, row.data());
      std::copy_n(g.data() + t * d, d, row.data() + d);
    }
  }
  if (count == 0) return absl::OkStatus();
  ops.RoundBf16(latent);
  RETURN_IF_ERROR(ops.RmsNorm(latent, w.comp_norm, count, d, eps, latent));
  ops.RoundBf16(latent);

  std::vector<int64_t> entry_pos(count);
  for (int64_t j = 0; j < count; ++j) entry_pos[j] = (first + j) * r;
  // Index keys from the pre-RoPE latent (§4.3.2).
  std::vector<float> k(count * di);
  RETURN_IF_ERROR(ops.Matmul(w.index_wk, latent, count, k));
  ops.RoundBf16(k);
  RETURN_IF_ERROR(ops.RmsNorm(k, w.index_k_norm, count, di, eps, k));
  ops.RoundBf16(k);
  RETURN_IF_ERROR(ops.Rope(ctx.rope, {.x = k, .positions = entry_pos, .num_tokens = count,
                                      .num_heads = 1, .head_dim = static_cast<int>(di)}));
  ops.RoundBf16(k);
  RETURN_IF_ERROR(ops.FakeQuant(k, FakeQuantFormat::kMxfp4));
  // Main compressed KV: RoPE at j * r, FP4 with E4M3 scales per 16.
  RETURN_IF_ERROR(ops.Rope(ctx.rope, {.x = latent, .positions = entry_pos, .num_tokens = count,
                                      .num_heads = 1, .head_dim = static_cast<int>(d)}));
  ops.RoundBf16(latent);
  RETURN_IF_ERROR(ops.FakeQuant(latent, FakeQuantFormat::kNvfp4Kv));
  CompressedKvStore& store = ctx.state.compressed();
  if (store.entries(ctx.role.layer) != first) {
    return absl::InternalError(absl::StrCat("layer ", ctx.role.layer, ": compressed KV holds ",
                                            store.entries(ctx.role.layer), " entries, expected ",
                                            first));
  }
  return store.Append(ctx.role.layer, latent, k);
}

namespace {

// Indexer scores I [S, entries] of an index-source layer (§4.3.3).
absl::Status IndexScores(const AttentionContext& ctx, std::span<const float> x,
                         std::span<const float> qr, int64_t entries, std::vector<float>& scores) {
  const ModelConfig& c = ctx.config;
  Ops& ops = ctx.ops;
  const int64_t s = ctx.tokens, p0 = ctx.start_pos, nh = c.index_n_heads, di = c.index_head_dim;
  std::vector<int64_t> positions(s), visible(s);
  for (int64_t t = 0; t < s; ++t) {
    positions[t] = p0 + t;
    visible[t] = (p0 + t + 1) / ctx.role.ratio;
  }
  std::vector<float> q(s * nh * di), weights(s * nh);
  RETURN_IF_ERROR(ops.Matmul(ctx.weights.index_wq_b, qr, s, q));
  ops.RoundBf16(q);
  RETURN_IF_ERROR(ops.Rope(ctx.rope, {.x = q, .positions = positions, .num_tokens = s,
                                      .num_heads = static_cast<int>(nh),
                                      .head_dim = static_cast<int>(di)}));
  ops.RoundBf16(q);
  RETURN_IF_ERROR(ops.FakeQuant(q, FakeQuantFormat::kMxfp4));
  RETURN_IF_ERROR(ops.Matmul(ctx.weights.index_weights_proj, x, s, weights));
  ops.RoundBf16(weights);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(di)) /
                                         std::sqrt(static_cast<double>(nh)));
  for (float& v : weights) v *= scale;
  ops.RoundBf16(weights);
  const CompressedKvStore& store = ctx.state.compressed();
  if (store.entries(ctx.role.kv_source) < entries) {
    return absl::InternalError(absl::StrCat("layer ", ctx.role.layer, ": kv source ",
                                            ctx.role.kv_source, " holds too few index keys"));
  }
  std::vector<float> keys(entries * di);  // [entries, index_head_dim]
  store.ReadIndexK(ctx.role.kv_source, 0, keys);
  scores.assign(s * entries, 0.0f);
  RETURN_IF_ERROR(ops.IndexerScore(
      {.q = q, .k = keys, .weights = weights,
       .visible_len = visible, .out = scores, .queries = s, .heads = static_cast<int>(nh),
       .dim = static_cast<int>(di), .keys = entries}));
  return absl::OkStatus();
}

}  // namespace

absl::Status SelectCompressed(const AttentionContext& ctx, std::span<const float> x,
                              std::span<const float> qr, std::vector<int32_t>& topk, int& width) {
  const LayerRole& role = ctx.role;
  const int64_t s = ctx.tokens, p0 = ctx.start_pos, entries = (p0 + s) / role.ratio;
  if (role.attention == AttentionRole::kReuse) {
    auto it = ctx.shared.topk.find(role.index_source);
    if (it == ctx.shared.topk.end()) {
      return absl::InternalError(absl::StrCat("layer ", role.layer, ": index source ",
                                              role.index_source, " published no top-k"));
    }
    topk = it->second;
    width = ctx.shared.topk_width[role.index_source];
    return absl::OkStatus();
  }
  width = static_cast<int>(std::min<int64_t>(ctx.config.index_topk, entries));
  topk.assign(s * width, -1);
  if (width > 0) {
    std::vector<float> scores;
    RETURN_IF_ERROR(IndexScores(ctx, x, qr, entries, scores));
    std::vector<int64_t> visible(s);
    for (int64_t t = 0; t < s; ++t) visible[t] = (p0 + t + 1) / role.ratio;
    if (role.produces_candidates) {
      ctx.shared.candidates.assign(s * entries, 0);
      ctx.shared.pool_width = entries;
      RETURN_IF_ERROR(ctx.ops.CandidateBlocks(
          {.scores = scores, .visible_len = visible, .pool = ctx.shared.candidates, .rows = s,
           .width = entries, .topk_blocks = static_cast<int>(ctx.config.candidate_topk_blocks),
           .block_size = static_cast<int>(ctx.config.candidate_block_size)}));
    } else if (role.candidate_source >= 0) {
      if (ctx.shared.pool_width != entries) {
        return absl::InternalError(absl::StrCat("layer ", role.layer, ": candidate pool width ",
                                                ctx.shared.pool_width, " != ", entries));
      }
      for (int64_t i = 0; i < s * entries; ++i) {
        if (!ctx.shared.candidates[i]) scores[i] = -std::numeric_limits<float>::infinity();
      }
    }
    RETURN_IF_ERROR(ctx.ops.TopkPositions({.scores = scores, .visible_len = visible, .out = topk,
                                           .rows = s, .width = entries, .k = width}));
  }
  ctx.shared.topk[role.layer] = topk;
  ctx.shared.topk_width[role.layer] = width;
  return absl::OkStatus();
}

}  // namespace weir::model
