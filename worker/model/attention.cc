#include "worker/model/attention.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/model/indexer.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;

absl::Status ProjectQuery(Ops& ops, const ModelConfig& config, const AttentionWeights& w,
                          const cpu::RopeTable& rope, std::span<const float> x,
                          std::span<const int64_t> positions, std::vector<float>& qr,
                          std::vector<float>& q) {
  const int64_t s = static_cast<int64_t>(positions.size());
  const float eps = static_cast<float>(config.norm_eps);
  qr.assign(s * config.q_lora_rank, 0.0f);
  RETURN_IF_ERROR(ops.Matmul(w.wq_a, x, s, qr));
  ops.RoundBf16(qr);
  RETURN_IF_ERROR(ops.RmsNorm(qr, w.q_norm, s, config.q_lora_rank, eps, qr));
  ops.RoundBf16(qr);
  q.assign(s * config.n_heads * config.head_dim, 0.0f);
  RETURN_IF_ERROR(ops.Matmul(w.wq_b, qr, s, q));
  ops.RoundBf16(q);
  RETURN_IF_ERROR(ops.Rope(rope, {.x = q, .positions = positions, .num_tokens = s,
                                  .num_heads = static_cast<int>(config.n_heads),
                                  .head_dim = static_cast<int>(config.head_dim)}));
  ops.RoundBf16(q);
  return absl::OkStatus();
}

absl::Status ProjectWindowKv(Ops& ops, const ModelConfig& config, const AttentionWeights& w,
                             const cpu::RopeTable& rope, std::span<const float> x,
                             std::span<const int64_t> positions, std::vector<float>& kv) {
  const int64_t s = static_cast<int64_t>(positions.size()), d = config.head_dim;
  kv.assign(s * d, 0.0f);
  RETURN_IF_ERROR(ops.Matmul(w.wkv, x, s, kv));
  ops.RoundBf16(kv);
  RETURN_IF_ERROR(ops.RmsNorm(kv, w.kv_norm, s, d, static_cast<float>(config.norm_eps), kv));
  ops.RoundBf16(kv);
  RETURN_IF_ERROR(ops.Rope(rope, {.x = kv, .positions = positions, .num_tokens = s,
                                  .num_heads = 1, .head_dim = static_cast<int>(d)}));
  ops.RoundBf16(kv);
  return ops.FakeQuant(kv, FakeQuantFormat::kFp8);
}

absl::Status AttendAndProject(Ops& ops, const ModelConfig& config, const AttentionWeights& w,
                              const cpu::RopeTable& rope, std::span<const float> q,
                              std::span<const float> table, std::span<const int32_t> index,
                              int width, std::span<const int64_t> positions,
                              std::span<float> out) {
  const int64_t s = static_cast<int64_t>(positions.size());
  const int64_t h = config.n_heads, d = config.head_dim;
  std::vector<float> o(s * h * d);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  RETURN_IF_ERROR(ops.SparseAttention({.q = q, .kv = table, .sink = w.attn_sink, .index = index,
                                       .out = o, .queries = s, .heads = static_cast<int>(h),
                                       .head_dim = static_cast<int>(d),
                                       .kv_len = static_cast<int64_t>(table.size()) / d,
                                       .topk = width,
                                       .scale = scale}));
  ops.RoundBf16(o);
  RETURN_IF_ERROR(ops.Rope(rope, {.x = o, .positions = positions, .num_tokens = s,
                                  .num_heads = static_cast<int>(h),
                                  .head_dim = static_cast<int>(d),
                                  .direction = cpu::RopeDirection::kInverse}));
  ops.RoundBf16(o);
  // Grouped low-rank output (§4.3 step 8): group g of o [S, G, gin] through wo_a block g.
  const int64_t groups = config.o_groups, gin = config.o_group_in_dim(), r = config.o_lora_rank;
  std::vector<float> og(s * gin), ug(s * r), u(s * groups * r);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < s; ++t) {
      std::copy_n(o.data() + (t * groups + g) * gin, gin, og.data() + t * gin);
    }
    RETURN_IF_ERROR(ops.Matmul(w.wo_a[g], og, s, ug));
    for (int64_t t = 0; t < s; ++t) {
      std::copy_n(ug.data() + t * r, r, u.data() + (t * groups + g) * r);
    }
  }
  ops.RoundBf16(u);
  RETURN_IF_ERROR(ops.Matmul(w.wo_b, u, s, out));
  ops.RoundBf16(out);
  return absl::OkStatus();
}

absl::Status AttentionForward(const AttentionContext& ctx, std::span<const float> x,
                              std::span<float> out) {
  const ModelConfig& c = ctx.config;
  const int64_t s = ctx.tokens, p0 = ctx.start_pos, d = c.head_dim, win = c.window_size;
  std::vector<int64_t> positions(s);
  for (int64_t t = 0; t < s; ++t) positions[t] = p0 + t;

  std::vector<float> qr, q, kv;
  RETURN_IF_ERROR(ProjectQuery(ctx.ops, c, ctx.weights, ctx.rope, x, positions, qr, q));
  RETURN_IF_ERROR(ProjectWindowKv(ctx.ops, c, ctx.weights, ctx.rope, x, positions, kv));

  // CED bounded replay (§4.4): a decoder layer's SWA starts at the replay
  // start (it holds no rows before it); 0 elsewhere.
  const int64_t floor = ctx.role.is_decoder ? ctx.state.replay_start() : 0;
  if (p0 < floor) {
    return absl::InternalError(absl::StrCat("layer ", ctx.role.layer, ": decoder forward at ", p0,
                                            " before the replay start ", floor));
  }
  // Window table: positions [lo, p0 + s) in order, older ones from the ring.
  PositionRing& ring = ctx.state.window(ctx.role.layer);
  const int64_t lo = std::max<int64_t>(floor, p0 - (win - 1));
  const int64_t n_window = p0 + s - lo;
  std::vector<float> table(n_window * d);
  for (int64_t pos = lo; pos < p0; ++pos) {
    std::span<const float> row = std::as_const(ring).Row(pos);
    std::copy(row.begin(), row.end(), table.begin() + (pos - lo) * d);
  }
  std::copy(kv.begin(), kv.end(), table.begin() + (p0 - lo) * d);
  for (int64_t t = 0; t < s; ++t) {
    std::span<float> row = ring.Row(p0 + t);
    std::copy_n(kv.data() + t * d, d, row.data());
  }

  // Compressed part (ratio > 0): entries of the kv source, top-k of the index source.
  std::vector<int32_t> topk;
  int topk_width = 0;
  if (ctx.role.ratio > 0) {
    if (ctx.role.attention == AttentionRole::kFull) {
      RETURN_IF_ERROR(UpdateCompressedKv(ctx, x));
    }
    RETURN_IF_ERROR(SelectCompressed(ctx, x, qr, topk, topk_width));
    const CompressedKvStore& store = ctx.state.compressed();
    const int64_t entries = (p0 + s) / ctx.role.ratio;
    if (store.entries(ctx.role.kv_source) < entries) {
      return absl::InternalError(absl::StrCat("layer ", ctx.role.layer, ": kv source ",
                                              ctx.role.kv_source, " holds too few entries"));
    }
    // [n_window + entries, head_dim]: the compressed entries follow the window rows.
    table.resize((n_window + entries) * d);
    store.ReadKv(ctx.role.kv_source, 0, std::span<float>(table).subspan(n_window * d));
  }

  // Index rows: window positions max(floor, p - win + 1) .. p ascending, then the top-k.
  const int width = static_cast<int>(win) + topk_width;
  std::vector<int32_t> index(s * width, -1);
  for (int64_t t = 0; t < s; ++t) {
    const int64_t p = p0 + t;
    int32_t* row = index.data() + t * width;
    int col = 0;
    for (int64_t pos = std::max<int64_t>(floor, p - win + 1); pos <= p; ++pos) {
      row[col++] = static_cast<int32_t>(pos - lo);
    }
    for (int k = 0; k < topk_width; ++k) {
      const int32_t e = topk[t * topk_width + k];
      row[win + k] = e < 0 ? -1 : static_cast<int32_t>(e + n_window);
    }
  }
  return AttendAndProject(ctx.ops, c, ctx.weights, ctx.rope, q, table, index, width, positions,
                          out);
}

}  // namespace weir::model
