#include "kernels/cuda/moe/mhc.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/mhc.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/moe/test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::BitMismatches;
using moe_test::DeviceBuffer;
using moe_test::MaxAbsError;
using moe_test::NormalVector;
using moe_test::RelativeError;
using moe_test::Synced;

struct HcCase {
  int64_t tokens, dim;
  int n;
};

TEST(HcMixCudaTest, MatchesTheCpuReference) {
  for (const HcCase& c : {HcCase{1, 64, 4}, HcCase{7, 1000, 4}, HcCase{33, 256, 1},
                          HcCase{3, 4096, 4}, HcCase{5, 96, 8}}) {
    std::mt19937 rng(c.tokens * 1000 + c.dim + c.n);
    const int64_t n = c.n, n_mix = (2 + n) * n;
    const std::vector<float> x = NormalVector(c.tokens * n * c.dim, 1.0f, rng);
    const std::vector<float> fn = NormalVector(n_mix * n * c.dim, 0.05f, rng);
    const std::vector<float> scale = {0.8f, 1.2f, 2.0f};
    const std::vector<float> base = NormalVector(n_mix, 0.5f, rng);
    const cpu::HcParams params{.hc_mult = c.n, .sinkhorn_iters = 20, .hc_eps = 1e-6f,
                               .norm_eps = 1e-20f};
    std::vector<float> pre(c.tokens * n), post(c.tokens * n), comb(c.tokens * n * n);
    const absl::Status cpu_status =
        cpu::HcMix(params, {.x = x, .hc_fn = fn, .scale = scale, .base = base, .pre = pre,
                            .post = post, .comb = comb, .tokens = c.tokens, .dim = c.dim});
    ASSERT_TRUE(cpu_status.ok()) << cpu_status;

    DeviceBuffer<float> dx(x), dfn(fn), dscale(scale), dbase(base);
    DeviceBuffer<float> dpre(pre.size()), dpost(post.size()), dcomb(comb.size());
    dpre.Poison();
    dpost.Poison();
    dcomb.Poison();
    ASSERT_TRUE(HcMix({.x = dx.get(), .hc_fn = dfn.get(), .scale = dscale.get(),
                       .base = dbase.get(), .pre = dpre.get(), .post = dpost.get(),
                       .comb = dcomb.get(), .tokens = c.tokens, .dim = c.dim, .hc_mult = c.n,
                       .sinkhorn_iters = 20, .hc_eps = 1e-6f, .norm_eps = 1e-20f},
                      nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    // The mixing products differ from the CPU's sgemm by fp32 reduction order
    // (~1e-7 relative); sigmoid, softmax and Sinkhorn carry that smoothly
    // (values in [0, 2]), so 1e-5 absolute / relative is several times margin.
    const std::vector<float> gpre = dpre.Download(), gpost = dpost.Download(),
                             gcomb = dcomb.Download();
    const double err = std::max({MaxAbsError(gpre, pre), MaxAbsError(gpost, post),
                                 MaxAbsError(gcomb, comb)});
    const double rel = std::max({RelativeError(gpre, pre), RelativeError(gpost, post),
                                 RelativeError(gcomb, comb)});
    EXPECT_LT(err, 1e-5) << c.tokens << "x" << c.n << "x" << c.dim;
    EXPECT_LT(rel, 1e-5) << c.tokens << "x" << c.n << "x" << c.dim;
    std::printf("HcMix %lldx%dx%lld: max abs err %.3g, rel err %.3g\n",
                static_cast<long long>(c.tokens), c.n, static_cast<long long>(c.dim), err, rel);

    // Given the products (any order; here a plain loop), the rest is the
    // CPU's HcMixFromProducts exactly: bit-identical.
    std::vector<float> mixes(c.tokens * n_mix);
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t m = 0; m < n_mix; ++m) {
        float acc = 0.0f;
        for (int64_t k = 0; k < n * c.dim; ++k) {
          acc += x[t * n * c.dim + k] * fn[m * n * c.dim + k];
        }
        mixes[t * n_mix + m] = acc;
      }
    }
    DeviceBuffer<float> dmixes(mixes);
    std::vector<float> mixes_cpu = mixes;  // scaled in place by the CPU
    ASSERT_TRUE(cpu::HcMixFromProducts(params,
                                       {.x = x, .hc_fn = fn, .scale = scale, .base = base,
                                        .pre = pre, .post = post, .comb = comb,
                                        .tokens = c.tokens, .dim = c.dim},
                                       mixes_cpu)
                    .ok());
    dpre.Poison();
    dpost.Poison();
    dcomb.Poison();
    ASSERT_TRUE(HcMix({.x = dx.get(), .mixes = dmixes.get(), .scale = dscale.get(),
                       .base = dbase.get(), .pre = dpre.get(), .post = dpost.get(),
                       .comb = dcomb.get(), .tokens = c.tokens, .dim = c.dim, .hc_mult = c.n,
                       .sinkhorn_iters = 20, .hc_eps = 1e-6f, .norm_eps = 1e-20f},
                      nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    EXPECT_EQ(BitMismatches(dpre.Download(), pre), 0) << "pre, given products";
    EXPECT_EQ(BitMismatches(dpost.Download(), post), 0) << "post, given products";
    EXPECT_EQ(BitMismatches(dcomb.Download(), comb), 0) << "comb, given products";
  }
}

// Collapse and expand use the CPU's operation order exactly: bit-identical.
TEST(HcCollapseExpandCudaTest, BitIdenticalToTheCpu) {
  for (const HcCase& c : {HcCase{1, 7, 4}, HcCase{5, 5120, 4}, HcCase{3, 33, 1},
                          HcCase{2, 100, 8}}) {
    for (bool bf16 : {false, true}) {
      std::mt19937 rng(c.tokens * 77 + c.dim + c.n + bf16);
      const int64_t n = c.n;
      const std::vector<float> x = NormalVector(c.tokens * n * c.dim, 1.0f, rng);
      const std::vector<float> y = NormalVector(c.tokens * c.dim, 1.0f, rng);
      const std::vector<float> pre = NormalVector(c.tokens * n, 0.5f, rng);
      const std::vector<float> post = NormalVector(c.tokens * n, 0.5f, rng);
      const std::vector<float> comb = NormalVector(c.tokens * n * n, 0.3f, rng);
      std::vector<float> want_in(c.tokens * c.dim), want_out(x.size());
      ASSERT_TRUE(cpu::HcCollapse(x, pre, c.tokens, c.n, c.dim, bf16, want_in).ok());
      ASSERT_TRUE(cpu::HcExpand(x, y, post, comb, c.tokens, c.n, c.dim, bf16, want_out).ok());

      DeviceBuffer<float> dx(x), dy(y), dpre(pre), dpost(post), dcomb(comb);
      DeviceBuffer<float> din(want_in.size()), dout(want_out.size());
      din.Poison();
      dout.Poison();
      ASSERT_TRUE(HcCollapse({.x = dx.get(), .pre = dpre.get(), .out = din.get(),
                              .tokens = c.tokens, .dim = c.dim, .hc_mult = c.n,
                              .round_bf16 = bf16},
                             nullptr)
                      .ok());
      ASSERT_TRUE(HcExpand({.x = dx.get(), .y = dy.get(), .post = dpost.get(),
                            .comb = dcomb.get(), .out = dout.get(), .tokens = c.tokens,
                            .dim = c.dim, .hc_mult = c.n, .round_bf16 = bf16},
                           nullptr)
                      .ok());
      ASSERT_TRUE(Synced());
      const std::vector<float> got_in = din.Download(), got_out = dout.Download();
      EXPECT_EQ(BitMismatches(got_in, want_in), 0)
          << "collapse " << c.tokens << "x" << c.n << "x" << c.dim << " bf16 " << bf16
          << ", max abs err " << MaxAbsError(got_in, want_in);
      EXPECT_EQ(BitMismatches(got_out, want_out), 0)
          << "expand " << c.tokens << "x" << c.n << "x" << c.dim << " bf16 " << bf16
          << ", max abs err " << MaxAbsError(got_out, want_out);
      std::printf("HcCollapse/HcExpand %lldx%dx%lld bf16 %d: max abs err %.3g / %.3g\n",
                  static_cast<long long>(c.tokens), c.n, static_cast<long long>(c.dim), bf16,
                  MaxAbsError(got_in, want_in), MaxAbsError(got_out, want_out));
    }
  }
}

// The fused collapse + norm: the CPU's HcCollapse, then its RmsNorm (which
// the CUDA RmsNorm matches bit for bit), then the output rounding.
TEST(HcCollapseNormCudaTest, IsCollapseThenRmsNormBitForBit) {
  for (const HcCase& c : {HcCase{1, 8, 4}, HcCase{5, 5120, 4}, HcCase{3, 1024, 1},
                          HcCase{2, 12256, 4}, HcCase{64, 256, 4}, HcCase{17, 1000, 4}}) {
    for (bool bf16 : {false, true}) {
      std::mt19937 rng(c.tokens * 31 + c.dim + c.n + bf16);
      const std::vector<float> x = NormalVector(c.tokens * c.n * c.dim, 1.0f, rng);
      const std::vector<float> pre = NormalVector(c.tokens * c.n, 0.5f, rng);
      const std::vector<float> weight = NormalVector(c.dim, 1.0f, rng);
      std::vector<float> want(c.tokens * c.dim);
      ASSERT_TRUE(cpu::HcCollapse(x, pre, c.tokens, c.n, c.dim, bf16, want).ok());
      ASSERT_TRUE(cpu::RmsNorm({.x = want,
                                .weight = weight,
                                .out = want,
                                .rows = c.tokens,
                                .dim = c.dim,
                                .eps = 1e-6f})
                      .ok());
      if (bf16) {
        for (float& v : want) v = kernels::RoundToBf16(v);
      }
      DeviceBuffer<float> dx(x), dpre(pre), dw(weight), dout(want.size());
      dout.Poison();
      HcCollapseNormParams params{.x = dx.get(),
                                  .pre = dpre.get(),
                                  .weight = dw.get(),
                                  .out = dout.get(),
                                  .tokens = c.tokens,
                                  .dim = c.dim,
                                  .hc_mult = c.n,
                                  .eps = 1e-6f,
                                  .round_collapse = bf16,
                                  .round_out = bf16};
      // One block a token (1,024 threads, then 256: ranks -1), each cluster
      // size, and the automatic choice: the same bits.
      for (int ranks : {1, -1, 2, 4, 8, 0}) {
        params.cluster_ranks = ranks < 0 ? 1 : ranks;
        params.block_threads = ranks < 0 ? 256 : 0;
        dout.Poison();
        ASSERT_TRUE(HcCollapseNorm(params, nullptr).ok());
        ASSERT_TRUE(Synced());
        EXPECT_EQ(BitMismatches(dout.Download(), want), 0)
            << c.tokens << "x" << c.n << "x" << c.dim << " bf16 " << bf16 << " ranks " << ranks;
      }
      if (c.dim % 32 != 0) continue;
      // With codes: also the output's FP8 form, byte for byte ActQuantFp8's.
      DeviceBuffer<float> fused(want.size());
      DeviceBuffer<uint8_t> codes(want.size()), scales(want.size() / 32), want_codes(want.size()),
          want_scales(want.size() / 32);
      fused.Poison();
      codes.Poison();
      scales.Poison();
      ASSERT_TRUE(dense::ActQuantFp8({.x = dout.get(),
                                      .codes = want_codes.get(),
                                      .scales = want_scales.get(),
                                      .rows = c.tokens,
                                      .cols = c.dim},
                                     nullptr)
                      .ok());
      // And its bf16 bits (ToBf16's of each value).
      std::vector<uint16_t> want16(want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        const float r = kernels::RoundToBf16(want[i]);
        uint32_t u;
        std::memcpy(&u, &r, 4);
        want16[i] = static_cast<uint16_t>(u >> 16);
      }
      DeviceBuffer<uint16_t> bits16(want.size());
      // And the bf16 bits of the values the FP8 form stands for (dq16):
      // Fp8ActBf16's of ActQuantFp8's codes and scales.
      DeviceBuffer<uint16_t> dq16(want.size()), want_dq16(want.size());
      ASSERT_TRUE(dense::Fp8ActBf16({.codes = want_codes.get(),
                                     .scales = want_scales.get(),
                                     .out = want_dq16.get(),
                                     .rows = c.tokens,
                                     .cols = c.dim},
                                    nullptr)
                      .ok());
      params.out = fused.get();
      params.codes = codes.get();
      params.scales = scales.get();
      params.bf16 = bits16.get();
      params.dq16 = dq16.get();
      for (int ranks : {1, -1, 2, 4, 8}) {  // -1: one block a token of 256 threads
        params.cluster_ranks = ranks < 0 ? 1 : ranks;
        params.block_threads = ranks < 0 ? 256 : 0;
        fused.Poison();
        codes.Poison();
        scales.Poison();
        bits16.Poison();
        dq16.Poison();
        ASSERT_TRUE(HcCollapseNorm(params, nullptr).ok());
        const std::string what = std::to_string(c.tokens) + "x" + std::to_string(c.n) + "x" +
                                 std::to_string(c.dim) + " bf16 " + std::to_string(bf16) +
                                 " ranks " + std::to_string(ranks);
        EXPECT_EQ(BitMismatches(fused.Download(), want), 0) << "with codes, " << what;
        EXPECT_TRUE(codes.Download() == want_codes.Download()) << what;
        EXPECT_TRUE(scales.Download() == want_scales.Download()) << what;
        EXPECT_TRUE(bits16.Download() == want16) << "bf16 bits, " << what;
        EXPECT_TRUE(dq16.Download() == want_dq16.Download()) << "dequantized bf16, " << what;
      }
    }
  }
  const float* p = reinterpret_cast<const float*>(16);
  float* o = reinterpret_cast<float*>(16);
  EXPECT_EQ(HcCollapseNorm({.x = p, .pre = p, .out = o, .tokens = 1, .dim = 12288}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // a row past the default shared memory
  EXPECT_EQ(HcCollapseNorm({.x = p, .pre = p, .out = o, .tokens = 1, .dim = 6}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // not a multiple of 4
  EXPECT_EQ(HcCollapseNorm({.x = p, .pre = p, .out = o, .tokens = 1, .dim = 8, .cluster_ranks = 3},
                           nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // not a cluster size the kernels have
  EXPECT_EQ(HcCollapseNorm(
                {.x = p, .pre = p, .out = o, .tokens = 1, .dim = 8, .block_threads = 512}, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // not a block size the kernels have
  EXPECT_EQ(
      HcCollapseNorm(
          {.x = p, .pre = p, .out = o, .tokens = int64_t{1} << 30, .dim = 8, .cluster_ranks = 2},
          nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);  // tokens x ranks past the grid
}

// HcExpandCollapseNorm against HcExpand then HcCollapseNorm: the new
// streams, the collapse-norm and its FP8 form bit for bit, with and without
// the bf16 roundings.
TEST(HcExpandCollapseNormCudaTest, IsExpandThenCollapseNormBitForBit) {
  for (const HcCase& c : {HcCase{1, 1024, 4}, HcCase{8, 5120, 4}, HcCase{3, 256, 1},
                          HcCase{5, 2048, 2}, HcCase{64, 1024, 4}, HcCase{40, 1056, 3}}) {
    for (bool bf16 : {false, true}) {
      std::mt19937 rng(c.tokens * 17 + c.dim + c.n + bf16);
      const std::vector<float> x = NormalVector(c.tokens * c.n * c.dim, 1.0f, rng);
      const std::vector<float> y = NormalVector(c.tokens * c.dim, 1.0f, rng);
      const std::vector<float> post = NormalVector(c.tokens * c.n, 1.0f, rng);
      const std::vector<float> comb = NormalVector(c.tokens * c.n * c.n, 0.5f, rng);
      const std::vector<float> pre = NormalVector(c.tokens * c.n, 0.5f, rng);
      const std::vector<float> weight = NormalVector(c.dim, 1.0f, rng);
      DeviceBuffer<float> dx(x), dy(y), dpost(post), dcomb(comb), dpre(pre), dw(weight);
      // Run 0: the two launches, one block a token; runs 1 - 6: the fused
      // launch with one block a token, clusters of 2, 4 and 8, the
      // automatic choice, and one block a token of 256 threads (ranks -1).
      constexpr int kRuns = 7;
      constexpr int kRanks[kRuns] = {1, 1, 2, 4, 8, 0, -1};
      std::vector<float> streams[kRuns], out[kRuns];
      std::vector<uint8_t> codes[kRuns], scales[kRuns];
      std::vector<uint16_t> bits16[kRuns], dequant16[kRuns];
      for (int fused = 0; fused < kRuns; ++fused) {
        DeviceBuffer<float> dnew(x.size()), dout(c.tokens * c.dim);
        DeviceBuffer<uint8_t> dcodes(c.tokens * c.dim), dscales(c.tokens * c.dim / 32);
        DeviceBuffer<uint16_t> dbf16(c.tokens * c.dim), ddq16(c.tokens * c.dim);
        dnew.Poison();
        dout.Poison();
        dbf16.Poison();
        ddq16.Poison();
        const HcExpandParams e{.x = dx.get(),
                               .y = dy.get(),
                               .post = dpost.get(),
                               .comb = dcomb.get(),
                               .out = dnew.get(),
                               .tokens = c.tokens,
                               .dim = c.dim,
                               .hc_mult = c.n,
                               .round_bf16 = bf16};
        const HcCollapseNormParams n{.x = dnew.get(),
                                     .pre = dpre.get(),
                                     .weight = dw.get(),
                                     .out = dout.get(),
                                     .tokens = c.tokens,
                                     .dim = c.dim,
                                     .hc_mult = c.n,
                                     .eps = 1e-6f,
                                     .round_collapse = bf16,
                                     .round_out = bf16,
                                     .codes = dcodes.get(),
                                     .scales = dscales.get(),
                                     .bf16 = dbf16.get(),
                                     .dq16 = ddq16.get(),
                                     .cluster_ranks = kRanks[fused] < 0 ? 1 : kRanks[fused],
                                     .block_threads = kRanks[fused] < 0 ? 256 : 0};
        if (fused >= 1) {
          ASSERT_TRUE(SupportsHcExpandCollapseNorm(e, n));
          ASSERT_TRUE(HcExpandCollapseNorm(e, n, nullptr).ok());
        } else {
          ASSERT_TRUE(HcExpand(e, nullptr).ok());
          ASSERT_TRUE(HcCollapseNorm(n, nullptr).ok());
        }
        ASSERT_TRUE(Synced());
        streams[fused] = dnew.Download();
        out[fused] = dout.Download();
        codes[fused] = dcodes.Download();
        scales[fused] = dscales.Download();
        bits16[fused] = dbf16.Download();
        dequant16[fused] = ddq16.Download();
      }
      // The dequantized form: Fp8ActBf16's bits of the FP8 form.
      {
        DeviceBuffer<uint8_t> dcodes(codes[0]), dscales(scales[0]);
        DeviceBuffer<uint16_t> want_dq(c.tokens * c.dim);
        ASSERT_TRUE(dense::Fp8ActBf16({.codes = dcodes.get(),
                                       .scales = dscales.get(),
                                       .out = want_dq.get(),
                                       .rows = c.tokens,
                                       .cols = c.dim},
                                      nullptr)
                        .ok());
        EXPECT_TRUE(dequant16[0] == want_dq.Download()) << c.tokens << "x" << c.n << "x" << c.dim;
      }
      // The bf16 form: ToBf16's bits of the output.
      int64_t bits_differ = 0;
      for (size_t i = 0; i < out[0].size(); ++i) {
        const float r = kernels::RoundToBf16(out[0][i]);
        uint32_t u;
        std::memcpy(&u, &r, 4);
        bits_differ += bits16[0][i] != static_cast<uint16_t>(u >> 16);
      }
      EXPECT_EQ(bits_differ, 0) << c.tokens << "x" << c.n << "x" << c.dim;
      for (int run = 1; run < kRuns; ++run) {
        const std::string what = std::to_string(c.tokens) + "x" + std::to_string(c.n) + "x" +
                                 std::to_string(c.dim) + (bf16 ? " bf16" : " fp32") + " ranks " +
                                 std::to_string(kRanks[run]);
        EXPECT_EQ(BitMismatches(streams[run], streams[0]), 0) << what;
        EXPECT_EQ(BitMismatches(out[run], out[0]), 0) << what;
        EXPECT_TRUE(codes[run] == codes[0]) << what;
        EXPECT_TRUE(scales[run] == scales[0]) << what;
        EXPECT_TRUE(bits16[run] == bits16[0]) << what;
        EXPECT_TRUE(dequant16[run] == dequant16[0]) << what;
      }
    }
  }
  float* p = reinterpret_cast<float*>(256);
  const HcExpandParams e{
      .x = p, .y = p, .post = p, .comb = p, .out = p + 64, .tokens = 1, .dim = 8, .hc_mult = 4};
  HcCollapseNormParams n{.x = p + 64, .pre = p, .out = p + 128, .tokens = 1, .dim = 8};
  EXPECT_TRUE(SupportsHcExpandCollapseNorm(e, n));
  n.x = p + 192;  // not what the expand writes
  EXPECT_FALSE(SupportsHcExpandCollapseNorm(e, n));
  EXPECT_EQ(HcExpandCollapseNorm(e, n, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(HcCudaTest, RefusesBadArguments) {
  float* p = reinterpret_cast<float*>(256);
  HcMixParams mix{.x = p, .hc_fn = p, .scale = p, .base = p, .pre = p, .post = p, .comb = p,
                  .tokens = 1, .dim = 8};
  EXPECT_TRUE(SupportsHcMix(mix));
  mix.hc_mult = kHcMaxMult + 1;
  EXPECT_EQ(HcMix(mix, nullptr).code(), absl::StatusCode::kInvalidArgument);
  mix.hc_mult = 4;
  mix.sinkhorn_iters = 0;
  EXPECT_EQ(HcMix(mix, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HcCollapse({.x = p, .pre = p, .out = p, .tokens = 0, .dim = 8}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HcExpand({.x = p, .y = nullptr, .post = p, .comb = p, .out = p, .tokens = 1,
                      .dim = 8},
                     nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
