// CudaOps against CpuOps: every Ops method on fresh random inputs, in both
// activation precisions where the op depends on it, plus the arena / weight
// cache contract. Every op is bit-identical to CpuOps (the kernels sum in the
// CPU kernels' orders, use kernels/common/fmath.h for exp / log1p / sigmoid
// and the CPU's rope cos/sin, and never fuse a multiply-add): Matmul, Logits
// (row-stable on both sides; against CpuOps' default OpenBLAS Logits only
// within 1e-5, max |diff| / max |ref|), RmsNorm, Rope, FakeQuant,
// SparseAttention, CompressorPool, IndexerScore, TopkPositions,
// CandidateBlocks, MoeGate, HcMix, HcCollapse, HcExpand, EngramLookup,
// EngramGate. Mismatching elements are counted and printed.
#include "worker/model/cuda_ops.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/cpu_ops.h"

namespace weir::model {
namespace {
namespace cpu = ::weir::kernels::cpu;

constexpr ActivationPrecision kBoth[] = {ActivationPrecision::kFp32, ActivationPrecision::kBf16};

std::unique_ptr<CudaOps> NewOps(ActivationPrecision precision, size_t arena = size_t{64} << 20,
                                size_t weights = size_t{256} << 20) {
  auto ops = CudaOps::Create(precision, {.arena_bytes = arena, .weight_bytes = weights,
                                         .time_ops = true});
  EXPECT_TRUE(ops.ok()) << ops.status();
  return ops.ok() ? std::move(*ops) : nullptr;
}

std::vector<float> Normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// max |a - b| / max |b| over finite b; NaN where b is NaN must be NaN in a.
double MaxRel(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(b[i]) || std::isnan(a[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
      continue;
    }
    if (std::isinf(b[i]) || std::isinf(a[i])) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return diff / scale;
}

template <typename T>
int64_t Mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
      n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
    } else {
      n += a[i] != b[i];
    }
  }
  return n + static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size()
                                                      : b.size() - a.size());
}

void Report(const char* op, const std::vector<float>& gpu, const std::vector<float>& ref) {
  std::printf("%-16s n=%-8zu max rel %.3g  bit mismatches %lld\n", op, ref.size(),
              MaxRel(gpu, ref), static_cast<long long>(Mismatches(gpu, ref)));
}

DenseWeight RandomWeight(int64_t out, int64_t in, bool fp8, uint32_t seed) {
  return DenseWeight{.out = out, .in = in, .w = Normal(out * in, seed, 0.05f),
                     .fp8_activation = fp8};
}

TEST(CudaOpsTest, CreateOnMissingDeviceIsUnavailable) {
  auto ops = CudaOps::Create(ActivationPrecision::kFp32, {.device = 1000});
  EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnavailable) << ops.status();
}

TEST(CudaOpsTest, MatmulAndLogits) {
  for (ActivationPrecision prec : kBoth) {
    auto ops = NewOps(prec);
    ASSERT_NE(ops, nullptr);
    CpuOps ref(prec);
    CpuOps ref_row_stable(prec, {.row_stable_logits = true});
    for (int64_t rows : {1, 3, 17}) {
      for (bool fp8 : {false, true}) {
        const DenseWeight w = RandomWeight(200, 1024, fp8, 7 + rows);
        const std::vector<float> x = Normal(rows * 1024, 100 + rows);
        std::vector<float> y(rows * 200, NAN), y_ref(rows * 200);
        ASSERT_TRUE(ops->Matmul(w, x, rows, y).ok());
        ASSERT_TRUE(ref.Matmul(w, x, rows, y_ref).ok());
        Report(fp8 ? "Matmul fp8" : "Matmul", y, y_ref);
        EXPECT_EQ(Mismatches(y, y_ref), 0) << "rows " << rows << " fp8 " << fp8;
        ASSERT_TRUE(ops->Logits(w, x, rows, y).ok());
        ASSERT_TRUE(ref_row_stable.Logits(w, x, rows, y_ref).ok());
        Report("Logits", y, y_ref);
        EXPECT_EQ(Mismatches(y, y_ref), 0) << "rows " << rows;
        ASSERT_TRUE(ref.Logits(w, x, rows, y_ref).ok());  // OpenBLAS: another order
        EXPECT_LT(MaxRel(y, y_ref), 1e-5) << "rows " << rows;
      }
    }
    // Batch invariance: row 2 of a 9-row product equals that row alone, bit for bit.
    const DenseWeight w = RandomWeight(64, 256, true, 3);
    const std::vector<float> x = Normal(9 * 256, 4);
    std::vector<float> all(9 * 64), one(64);
    ASSERT_TRUE(ops->Matmul(w, x, 9, all).ok());
    ASSERT_TRUE(ops->Matmul(w, std::span(x).subspan(2 * 256, 256), 1, one).ok());
    EXPECT_EQ(Mismatches(one, std::vector<float>(all.begin() + 2 * 64, all.begin() + 3 * 64)), 0);
    EXPECT_GT(ops->stats().matmul_flops, 0);
  }
}

TEST(CudaOpsTest, MatmulRejectsBadShapes) {
  auto ops = NewOps(ActivationPrecision::kFp32);
  ASSERT_NE(ops, nullptr);
  const DenseWeight w = RandomWeight(8, 32, false, 1);
  std::vector<float> x(2 * 32), y(2 * 8 + 1);
  EXPECT_EQ(ops->Matmul(w, x, 2, y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ops->Matmul(w, x, 0, std::span<float>()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaOpsTest, RmsNormRopeFakeQuant) {
  auto ops = NewOps(ActivationPrecision::kBf16);
  ASSERT_NE(ops, nullptr);
  CpuOps ref(ActivationPrecision::kBf16);
  for (int64_t rows : {1, 5}) {
    const std::vector<float> x = Normal(rows * 512, 11 + rows, 3.0f), w = Normal(512, 12);
    for (bool weighted : {true, false}) {
      std::span<const float> ws = weighted ? std::span<const float>(w) : std::span<const float>();
      std::vector<float> y(x.size()), y_ref(x.size());
      ASSERT_TRUE(ops->RmsNorm(x, ws, rows, 512, 1e-6f, y).ok());
      ASSERT_TRUE(ref.RmsNorm(x, ws, rows, 512, 1e-6f, y_ref).ok());
      Report("RmsNorm", y, y_ref);
      EXPECT_EQ(Mismatches(y, y_ref), 0);
    }
    std::vector<float> inplace = x, inplace_ref = x;  // out aliases x
    ASSERT_TRUE(ops->RmsNorm(inplace, w, rows, 512, 1e-6f, inplace).ok());
    ASSERT_TRUE(ref.RmsNorm(inplace_ref, w, rows, 512, 1e-6f, inplace_ref).ok());
    EXPECT_EQ(Mismatches(inplace, inplace_ref), 0);
  }
  std::vector<float> bad(10);
  EXPECT_EQ(ops->RmsNorm(bad, {}, 2, 4, 1e-6f, bad).code(), absl::StatusCode::kInvalidArgument);

  auto table = cpu::RopeTable::Create({.rope_dim = 64, .theta = 160000.0f,
                                       .original_seq_len = 65536, .factor = 16.0f});
  ASSERT_TRUE(table.ok()) << table.status();
  for (auto dir : {cpu::RopeDirection::kForward, cpu::RopeDirection::kInverse}) {
    const int64_t tokens = 6;
    std::vector<float> x = Normal(tokens * 4 * 256, 21), x_ref = x;
    const std::vector<int64_t> pos = {0, 1, 7, 100, 4095, 70000};
    ASSERT_TRUE(ops->Rope(*table, {.x = x, .positions = pos, .num_tokens = tokens,
                                   .num_heads = 4, .head_dim = 256, .direction = dir})
                    .ok());
    ASSERT_TRUE(ref.Rope(*table, {.x = x_ref, .positions = pos, .num_tokens = tokens,
                                  .num_heads = 4, .head_dim = 256, .direction = dir})
                    .ok());
    Report("Rope", x, x_ref);
    EXPECT_EQ(Mismatches(x, x_ref), 0);
  }
  std::vector<float> x1(256);
  const std::vector<int64_t> negative = {-1};
  EXPECT_EQ(ops->Rope(*table, {.x = x1, .positions = negative, .num_tokens = 1, .num_heads = 1,
                               .head_dim = 256})
                .code(),
            absl::StatusCode::kInvalidArgument);

  for (FakeQuantFormat f :
       {FakeQuantFormat::kFp8, FakeQuantFormat::kMxfp4, FakeQuantFormat::kNvfp4Kv}) {
    std::vector<float> x = Normal(3 * 512, 31, 2.0f);
    x[5] = 0.0f;
    std::vector<float> x_ref = x;
    ASSERT_TRUE(ops->FakeQuant(x, f).ok());
    ASSERT_TRUE(ref.FakeQuant(x_ref, f).ok());
    Report("FakeQuant", x, x_ref);
    EXPECT_EQ(Mismatches(x, x_ref), 0);
  }
  // A length that is not a multiple of the block: the CPU kernel's answer.
  std::vector<float> odd(33), odd_ref(33);
  EXPECT_EQ(ops->FakeQuant(odd, FakeQuantFormat::kFp8).code(),
            ref.FakeQuant(odd_ref, FakeQuantFormat::kFp8).code());

  std::vector<float> r = Normal(100, 41), r_ref = r;
  ops->RoundBf16(r);
  ref.RoundBf16(r_ref);
  EXPECT_EQ(Mismatches(r, r_ref), 0);
  EXPECT_GT(Mismatches(r, Normal(100, 41)), 0);  // kBf16 does round
}

TEST(CudaOpsTest, SparseAttentionAndCompressorPool) {
  auto ops = NewOps(ActivationPrecision::kBf16);
  ASSERT_NE(ops, nullptr);
  CpuOps ref(ActivationPrecision::kBf16);
  std::mt19937 gen(5);
  for (int64_t queries : {1, 4}) {
    const int heads = 8, d = 256, topk = 96;
    const int64_t kv_len = 150;
    const std::vector<float> q = Normal(queries * heads * d, 51), kv = Normal(kv_len * d, 52);
    const std::vector<float> sink = Normal(heads, 53);
    std::vector<int32_t> index(queries * topk);
    std::uniform_int_distribution<int32_t> pick(-1, kv_len - 1);
    for (int32_t& i : index) i = pick(gen);
    std::fill(index.begin(), index.begin() + topk, -1);  // a row with no valid slot
    std::vector<float> out(q.size(), NAN), out_ref(q.size());
    const cpu::SparseAttentionArgs args{.q = q, .kv = kv, .sink = sink, .index = index,
                                        .out = out, .queries = queries, .heads = heads,
                                        .head_dim = d, .kv_len = kv_len, .topk = topk,
                                        .scale = 0.0625f};
    ASSERT_TRUE(ops->SparseAttention(args).ok());
    cpu::SparseAttentionArgs cargs = args;
    cargs.out = out_ref;
    ASSERT_TRUE(ref.SparseAttention(cargs).ok());
    Report("SparseAttention", out, out_ref);
    EXPECT_EQ(Mismatches(out, out_ref), 0);
    index[1] = static_cast<int32_t>(kv_len);  // out of range: INVALID_ARGUMENT, as on the CPU
    EXPECT_EQ(ops->SparseAttention(args).code(), absl::StatusCode::kInvalidArgument);
  }
  for (int ratio : {1, 4}) {
    for (int64_t start : {0, 5}) {
      const int64_t tokens = 7, d = 128;
      const std::vector<float> kv = Normal(tokens * d, 61), score = Normal(tokens * d, 62);
      std::vector<float> kv_state = Normal(ratio * d, 63), score_state = Normal(ratio * d, 64);
      std::vector<float> kv_state_ref = kv_state, score_state_ref = score_state;
      const int64_t count = cpu::CompressedCount(start, tokens, ratio);
      std::vector<float> out(count * d, NAN), out_ref(count * d);
      ASSERT_TRUE(ops->CompressorPool({.kv = kv, .score = score, .kv_state = kv_state,
                                       .score_state = score_state, .out = out,
                                       .start_pos = start, .tokens = tokens, .dim = d,
                                       .ratio = ratio})
                      .ok());
      ASSERT_TRUE(ref.CompressorPool({.kv = kv, .score = score, .kv_state = kv_state_ref,
                                      .score_state = score_state_ref, .out = out_ref,
                                      .start_pos = start, .tokens = tokens, .dim = d,
                                      .ratio = ratio})
                      .ok());
      Report("CompressorPool", out, out_ref);
      EXPECT_EQ(Mismatches(out, out_ref), 0);
      EXPECT_EQ(Mismatches(kv_state, kv_state_ref), 0);
      EXPECT_EQ(Mismatches(score_state, score_state_ref), 0);
    }
  }
  EXPECT_GT(ops->cuda_stats().kv_bytes_read, 0);
}

TEST(CudaOpsTest, IndexerScoreTopkCandidateBlocks) {
  for (ActivationPrecision prec : kBoth) {
    auto ops = NewOps(prec);
    ASSERT_NE(ops, nullptr);
    CpuOps ref(prec);
    const int64_t queries = 5, keys = 300;
    const int heads = 8, d = 128;
    const std::vector<float> q = Normal(queries * heads * d, 71), k = Normal(keys * d, 72);
    const std::vector<float> w = Normal(queries * heads, 73);
    const std::vector<int64_t> visible = {0, 1, 150, 299, 300};
    std::vector<float> s(queries * keys, NAN), s_ref(queries * keys);
    cpu::IndexerScoreArgs args{.q = q, .k = k, .weights = w, .visible_len = visible, .out = s,
                               .queries = queries, .heads = heads, .dim = d, .keys = keys};
    ASSERT_TRUE(ops->IndexerScore(args).ok());
    args.out = s_ref;
    ASSERT_TRUE(ref.IndexerScore(args).ok());
    Report("IndexerScore", s, s_ref);
    EXPECT_EQ(Mismatches(s, s_ref), 0);

    // Scores with ties (rounded to 1/4) for the selections.
    std::vector<float> tied = s_ref;
    for (float& v : tied) v = std::isfinite(v) ? std::round(v * 4.0f) / 4.0f : v;
    for (int kk : {1, 16, 64, 512}) {
      std::vector<int32_t> out(queries * kk, 7), out_ref(queries * kk);
      const cpu::TopkArgs targs{.scores = tied, .visible_len = visible, .out = out,
                                .rows = queries, .width = keys, .k = kk, .offset = 32};
      ASSERT_TRUE(ops->TopkPositions(targs).ok());
      cpu::TopkArgs rargs = targs;
      rargs.out = out_ref;
      ASSERT_TRUE(ref.TopkPositions(rargs).ok());
      EXPECT_EQ(out, out_ref) << "k " << kk;
    }
    for (int blocks : {1, 4, 64}) {
      std::vector<uint8_t> pool(queries * keys, 9), pool_ref(queries * keys);
      const cpu::CandidateBlocksArgs cargs{.scores = tied, .visible_len = visible, .pool = pool,
                                           .rows = queries, .width = keys,
                                           .topk_blocks = blocks, .block_size = 8};
      ASSERT_TRUE(ops->CandidateBlocks(cargs).ok());
      cpu::CandidateBlocksArgs rargs = cargs;
      rargs.pool = pool_ref;
      ASSERT_TRUE(ref.CandidateBlocks(rargs).ok());
      EXPECT_EQ(pool, pool_ref) << "blocks " << blocks;
    }
    const std::vector<int64_t> too_long = {0, 0, 0, 0, keys + 1};
    args.visible_len = too_long;
    EXPECT_EQ(ops->IndexerScore(args).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(CudaOpsTest, MoeGate) {
  auto ops = NewOps(ActivationPrecision::kBf16);
  ASSERT_NE(ops, nullptr);
  CpuOps ref(ActivationPrecision::kBf16);
  const int64_t tokens = 9, d = 1024;
  const int experts = 16;
  const std::vector<float> x = Normal(tokens * d, 81), weight = Normal(experts * d, 82, 0.03f);
  const std::vector<float> bias = Normal(experts, 83, 0.1f), bias_vl = Normal(experts, 84, 0.1f);
  const std::vector<uint8_t> mask = {0, 1, 0, 0, 1, 1, 0, 0, 0};
  for (auto score : {cpu::ScoreFunc::kSqrtSoftplus, cpu::ScoreFunc::kSigmoid,
                     cpu::ScoreFunc::kSoftmax}) {
    for (bool image : {false, true}) {
      const cpu::MoeGateParams params{.num_experts = experts, .topk = 4, .gate_temp = 1.0f,
                                      .route_scale = 1.5f, .norm_topk_prob = true,
                                      .score_func = score};
      std::vector<int32_t> idx(tokens * 4, -5), idx_ref(tokens * 4);
      std::vector<float> w(tokens * 4, NAN), w_ref(tokens * 4);
      cpu::MoeGateArgs args{.x = x, .weight = weight, .bias = bias,
                            .bias_vl = image ? std::span<const float>(bias_vl)
                                             : std::span<const float>(),
                            .image_mask = image ? std::span<const uint8_t>(mask)
                                                : std::span<const uint8_t>(),
                            .indices = idx, .weights = w, .tokens = tokens, .dim = d};
      ASSERT_TRUE(ops->MoeGate(params, args).ok());
      args.indices = idx_ref;
      args.weights = w_ref;
      ASSERT_TRUE(ref.MoeGate(params, args).ok());
      EXPECT_EQ(idx, idx_ref);
      Report("MoeGate", w, w_ref);
      EXPECT_EQ(Mismatches(w, w_ref), 0);
    }
  }
}

TEST(CudaOpsTest, HcMixCollapseExpand) {
  for (ActivationPrecision prec : kBoth) {
    auto ops = NewOps(prec);
    ASSERT_NE(ops, nullptr);
    CpuOps ref(prec);
    const int n = 4;
    const int64_t tokens = 3, d = 1024, n_mix = (2 + n) * n;
    const std::vector<float> x = Normal(tokens * n * d, 91);
    const std::vector<float> fn = Normal(n_mix * n * d, 92, 0.02f);
    const std::vector<float> scale = {0.5f, 1.0f, 2.0f}, base = Normal(n_mix, 93, 0.5f);
    const cpu::HcParams params{.hc_mult = n, .sinkhorn_iters = 20, .hc_eps = 1e-6f,
                               .norm_eps = 1e-20f};
    std::vector<float> pre(tokens * n, NAN), post(tokens * n, NAN), comb(tokens * n * n, NAN);
    std::vector<float> pre_r(tokens * n), post_r(tokens * n), comb_r(tokens * n * n);
    ASSERT_TRUE(ops->HcMix(params, {.x = x, .hc_fn = fn, .scale = scale, .base = base,
                                    .pre = pre, .post = post, .comb = comb, .tokens = tokens,
                                    .dim = d})
                    .ok());
    ASSERT_TRUE(ref.HcMix(params, {.x = x, .hc_fn = fn, .scale = scale, .base = base,
                                   .pre = pre_r, .post = post_r, .comb = comb_r,
                                   .tokens = tokens, .dim = d})
                    .ok());
    Report("HcMix pre", pre, pre_r);
    Report("HcMix comb", comb, comb_r);
    EXPECT_EQ(Mismatches(pre, pre_r), 0);
    EXPECT_EQ(Mismatches(post, post_r), 0);
    EXPECT_EQ(Mismatches(comb, comb_r), 0);

    std::vector<float> c(tokens * d, NAN), c_r(tokens * d);
    ASSERT_TRUE(ops->HcCollapse(x, pre_r, tokens, n, d, c).ok());
    ASSERT_TRUE(ref.HcCollapse(x, pre_r, tokens, n, d, c_r).ok());
    Report("HcCollapse", c, c_r);
    EXPECT_EQ(Mismatches(c, c_r), 0);

    const std::vector<float> y = Normal(tokens * d, 94);
    std::vector<float> e(x.size(), NAN), e_r(x.size());
    ASSERT_TRUE(ops->HcExpand(x, y, post_r, comb_r, tokens, n, d, e).ok());
    ASSERT_TRUE(ref.HcExpand(x, y, post_r, comb_r, tokens, n, d, e_r).ok());
    Report("HcExpand", e, e_r);
    EXPECT_EQ(Mismatches(e, e_r), 0);
    EXPECT_EQ(ops->HcCollapse(x, pre_r, tokens, n, d + 1, c).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(CudaOpsTest, EngramLookupAndGate) {
  for (ActivationPrecision prec : kBoth) {
    auto ops = NewOps(prec);
    ASSERT_NE(ops, nullptr);
    CpuOps ref(prec);
    const int64_t rows = 1000, dim = 128;
    std::mt19937 gen(101);
    std::uniform_int_distribution<int> byte(0, 255), exp(120, 134);
    std::vector<uint8_t> table(rows * dim), scales(rows * dim / 32);
    for (uint8_t& b : table) {
      do b = static_cast<uint8_t>(byte(gen));
      while ((b & 0x7F) == 0x7F);  // no NaN codes
    }
    for (uint8_t& s : scales) s = static_cast<uint8_t>(exp(gen));
    const std::vector<int64_t> ids = {0, 999, 5, 5, 512};
    std::vector<float> out(ids.size() * dim, NAN), out_ref(ids.size() * dim);
    ASSERT_TRUE(ops->EngramLookup(table, scales, rows, dim, ids, out).ok());
    ASSERT_TRUE(ref.EngramLookup(table, scales, rows, dim, ids, out_ref).ok());
    Report("EngramLookup", out, out_ref);
    EXPECT_EQ(Mismatches(out, out_ref), 0);
    const std::vector<int64_t> bad_ids = {rows};
    std::vector<float> one(dim);
    EXPECT_EQ(ops->EngramLookup(table, scales, rows, dim, bad_ids, one).code(),
              absl::StatusCode::kInvalidArgument);

    const int n = 4;
    const int64_t tokens = 4, d = 1024;
    std::vector<float> x = Normal(tokens * n * d, 111), x_ref = x;
    const std::vector<float> key = Normal(tokens * n * d, 112), value = Normal(tokens * d, 113);
    const std::vector<float> weight = Normal(n * d, 114);
    const std::vector<uint8_t> mask = {1, 0, 1, 1};
    cpu::EngramGateArgs args{.x = x, .key = key, .value = value, .weight = weight,
                             .token_mask = mask, .tokens = tokens, .hc_mult = n, .dim = d,
                             .eps = 1e-20f, .bf16_boundaries = true};
    ASSERT_TRUE(ops->EngramGate(args).ok());
    args.x = x_ref;
    ASSERT_TRUE(ref.EngramGate(args).ok());
    Report("EngramGate", x, x_ref);
    EXPECT_EQ(Mismatches(x, x_ref), 0);
  }
}

TEST(CudaOpsTest, WeightCacheUploadsOnceAndNoticesChanges) {
  auto ops = NewOps(ActivationPrecision::kFp32);
  ASSERT_NE(ops, nullptr);
  DenseWeight w = RandomWeight(32, 64, false, 121);
  const std::vector<float> x = Normal(2 * 64, 122);
  std::vector<float> y1(2 * 32), y2(2 * 32), y_ref(2 * 32);
  ASSERT_TRUE(ops->Matmul(w, x, 2, y1).ok());
  ASSERT_TRUE(ops->Matmul(w, x, 2, y2).ok());
  EXPECT_EQ(ops->cuda_stats().weight_uploads, 1);
  EXPECT_EQ(ops->weight_bytes_used(), 32 * 64 * sizeof(float));
  EXPECT_EQ(y1, y2);
  // Rewritten in place (the same pointer): the sampled words differ, so it is uploaded again.
  for (float& v : w.w) v = -v;
  ASSERT_TRUE(ops->Matmul(w, x, 2, y2).ok());
  EXPECT_EQ(ops->cuda_stats().weight_uploads, 2);
  CpuOps ref(ActivationPrecision::kFp32);
  ASSERT_TRUE(ref.Matmul(w, x, 2, y_ref).ok());
  EXPECT_EQ(Mismatches(y2, y_ref), 0);
  ops->ForgetWeights();
  EXPECT_EQ(ops->weight_bytes_used(), 0u);
  ASSERT_TRUE(ops->Matmul(w, x, 2, y2).ok());
  EXPECT_EQ(ops->cuda_stats().weight_uploads, 3);
  EXPECT_EQ(ops->cuda_stats().cpu_fallbacks, 0);
  const CudaOpsStats& s = ops->cuda_stats();
  std::printf("calls %lld host %.3g s, upload %.3g s, kernels %.3g s, download %.3g s\n",
              static_cast<long long>(s.calls), s.host_seconds, s.upload_seconds,
              s.kernel_seconds, s.download_seconds);
  EXPECT_GT(s.kernel_seconds, 0.0);
}

TEST(CudaOpsTest, ArenaAndWeightRegionLimits) {
  // Arena of 64 KiB: a 128 KiB activation does not fit.
  auto ops = NewOps(ActivationPrecision::kFp32, size_t{64} << 10, size_t{64} << 10);
  ASSERT_NE(ops, nullptr);
  const DenseWeight small = RandomWeight(16, 64, false, 131);
  const std::vector<float> big_x = Normal(512 * 64, 132);
  std::vector<float> y(512 * 16, -1.0f);
  EXPECT_EQ(ops->Matmul(small, big_x, 512, y).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(y[0], -1.0f);  // nothing written
  // A 128 KiB weight does not fit the 64 KiB weight region.
  const DenseWeight big_w = RandomWeight(512, 64, false, 133);
  std::vector<float> y2(512);
  EXPECT_EQ(ops->Matmul(big_w, std::span(big_x).first(64), 1, y2).code(),
            absl::StatusCode::kResourceExhausted);
  // The instance stays usable.
  std::vector<float> y3(16), y3_ref(16);
  ASSERT_TRUE(ops->Matmul(small, std::span(big_x).first(64), 1, y3).ok());
  CpuOps ref(ActivationPrecision::kFp32);
  ASSERT_TRUE(ref.Matmul(small, std::span(big_x).first(64), 1, y3_ref).ok());
  EXPECT_EQ(Mismatches(y3, y3_ref), 0);
}

}  // namespace
}  // namespace weir::model
