// GPU tests of Mxfp4Bf16GroupedGemm (tag gpu): every row against
// dense::Bf16Gemm's warp-specialized tile over the host-widened weight (bit
// for bit), against the exact product (Bf16Gemm's bound), row roles, empty and
// one-row experts, a weight the kernel cannot read, and the argument checks.

#include "kernels/cuda/moe/mxfp4_bf16_gemm_sm90.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/decode/swiglu.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/moe/test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::DeviceBuffer;
using moe_test::Synced;

// One grouped problem: experts' MXFP4 weights and bf16 rows grouped by expert.
struct Problem {
  int64_t n = 0, k = 0, rows = 0;  // rows: x / y rows (past the last offset: untouched)
  std::vector<int64_t> offsets;
  std::vector<uint16_t> x;                          // [rows, k] bf16 bits
  std::vector<std::vector<uint8_t>> codes, scales;  // per expert [n, k / 2], [n, k / 32]
  int experts() const { return static_cast<int>(offsets.size()) - 1; }
};

Problem MakeProblem(int64_t n, int64_t k, const std::vector<int64_t>& expert_rows, int64_t extra,
                    std::mt19937& rng, bool edge_scales) {
  Problem p{.n = n, .k = k};
  p.offsets.push_back(0);
  for (int64_t r : expert_rows) p.offsets.push_back(p.offsets.back() + r);
  p.rows = p.offsets.back() + extra;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  p.x.resize(p.rows * k);
  for (int64_t r = 0; r < p.rows; ++r) {
    const float s = std::ldexp(1.0f, exponent(rng));
    for (int64_t c = 0; c < k; ++c) p.x[r * k + c] = FloatToBf16Bits(normal(rng) * s);
  }
  for (size_t e = 0; e < expert_rows.size(); ++e) {
    std::vector<uint8_t> c(n * k / 2), s(n * k / 32);
    for (uint8_t& b : c) b = static_cast<uint8_t>(rng());
    for (uint8_t& b : s) b = static_cast<uint8_t>(118 + rng() % 8);
    if (edge_scales && e == 1) {
      // Scales 0 and 1: products below fp32's normal range, exact in fp32,
      // rounded once to bf16 (subnormal or zero). Row 3's first blocks.
      s[3 * (k / 32)] = 0;
      s[3 * (k / 32) + 1] = 1;
      s[3 * (k / 32) + 2] = 2;
    }
    p.codes.push_back(std::move(c));
    p.scales.push_back(std::move(s));
  }
  return p;
}

// Expert e's weight widened on the host: [n, k] bf16 bits.
std::vector<uint16_t> Widened(const Problem& p, int e) {
  std::vector<uint16_t> w(p.n * p.k);
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t c = 0; c < p.k; ++c) {
      const uint8_t byte = p.codes[e][(r * p.k + c) / 2];
      const uint8_t code = c % 2 == 0 ? (byte & 0xF) : (byte >> 4);
      w[r * p.k + c] = Mxfp4WeightBf16Bits(code, p.scales[e][r * (p.k / 32) + c / 32]);
    }
  }
  return w;
}

// The problem's operands on the device, the pointer arrays included.
struct DeviceProblem {
  explicit DeviceProblem(const Problem& p)
      : x(p.x), offsets(p.offsets), ptrs(p.experts()), scale_ptrs(p.experts()) {
    std::vector<const uint8_t*> cp, sp;
    for (int e = 0; e < p.experts(); ++e) {
      codes.emplace_back(std::make_unique<DeviceBuffer<uint8_t>>(p.codes[e]));
      scales.emplace_back(std::make_unique<DeviceBuffer<uint8_t>>(p.scales[e]));
      cp.push_back(codes.back()->get());
      sp.push_back(scales.back()->get());
    }
    ptrs.Upload(cp);
    scale_ptrs.Upload(sp);
  }
  Mxfp4Bf16GroupedGemmParams Params(const Problem& p, void* y) const {
    return {.x = x.get(),
            .expert_offsets = offsets.get(),
            .w = ptrs.get(),
            .w_scales = scale_ptrs.get(),
            .y = y,
            .rows = p.rows,
            .n = p.n,
            .k = p.k,
            .num_experts = p.experts()};
  }
  DeviceBuffer<uint16_t> x;
  DeviceBuffer<int64_t> offsets;
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> codes, scales;
  DeviceBuffer<const uint8_t*> ptrs, scale_ptrs;
};

// What the product must equal row for row: Bf16Gemm's warp-specialized tile
// over each expert's rows and its host-widened weight, into a poisoned y of
// `rows` x n floats (bf16 output: packed in the first half).
std::vector<float> BySeparateBf16Gemms(const Problem& p, dense::Fp8GemmOutput output) {
  DeviceBuffer<float> y(p.rows * p.n);
  y.Poison(0xFF);
  DeviceBuffer<uint16_t> x(p.x);
  for (int e = 0; e < p.experts(); ++e) {
    const int64_t m = p.offsets[e + 1] - p.offsets[e];
    if (m == 0) continue;
    DeviceBuffer<uint16_t> w(Widened(p, e));
    const int64_t elem = output == dense::Fp8GemmOutput::kBf16 ? 2 : 4;
    const absl::Status st =
        dense::Bf16Gemm({.x = x.get() + p.offsets[e] * p.k,
                         .w = w.get(),
                         .y = reinterpret_cast<uint8_t*>(y.get()) + p.offsets[e] * p.n * elem,
                         .m = m,
                         .n = p.n,
                         .k = p.k,
                         .output = output,
                         .tile = dense::Fp8GemmTile::kN128M128Ws},
                        nullptr);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Synced());
  }
  return y.Download();
}

// One of the kernel's forms (the same bits each): widener warps, or the
// register form over 128, 80 or 256 X rows a CTA (and the decode tiles),
// its producer waiting for its copies or completing them on the ring's
// barriers. The 256-row tile runs wgmma N 256 on the experts' tiles of more
// than 128 rows (130, 200, 300 below) and N 128 on the rest; with its tail
// (tail_rows) an expert's last tile takes up to 32 rows past 256 (270, 288
// and 530 below: a tail of 14, 32 and 18 rows; 289 two tiles, the second
// of 33 rows). With x_multicast pairs of CTAs share each X stage (n 320's
// three W tiles get a fourth CTA past n). The decode form (decode_mma) runs
// mma.sync over 8 or 16 X rows a CTA, its W through each warp's own ring.
struct RouteForm {
  const char* name = "defaults";
  int widener_warps = 0;
  bool register_a = false;
  int x_rows = 0;
  bool deep_ring = false;
  bool stage_scale_test = false;
  bool fit_tile_rows = false;
  int warpgroups = 0;
  bool ballot_search = false;  // ballot_group_search
  bool tail_rows = false;
  bool x_multicast = false;
  bool decode_mma = false;
};
const RouteForm kRouteForms[] = {
    {"4 widener warps", 4},
    {"8 widener warps", 8},
    {"register A", 0, true},
    {"register A over 80 X rows", 0, true, 80},
    {"register A, deep ring", 0, true, 0, true},
    {"register A over 80 X rows, deep ring", 0, true, 80, true},
    {"register A over 8 X rows (decode), deep ring", 0, true, 8, true},
    {"register A over 16 X rows, deep ring", 0, true, 16, true},
    {"register A over 32 X rows", 0, true, 32},
    {"register A over 64 X rows, deep ring", 0, true, 64, true},
    {"register A, one scale test a stage", 0, true, 0, false, true},
    {"register A over 80 X rows, one scale test a stage", 0, true, 80, false, true},
    {"register A over 16 X rows, one scale test a stage", 0, true, 16, false, true},
    {"register A, one scale test a stage, wgmma N fit to the rows", 0, true, 0, false, true, true},
    {"register A, one scale test a stage, three warpgroups", 0, true, 0, false, true, false, 3},
    {"register A, one scale test a stage, fitted N, three warpgroups", 0, true, 0, false, true,
     true, 3},
    {"8 widener warps, ballot group search", 8, false, 0, false, false, false, 0, true},
    {"register A, one scale test a stage, three warpgroups, ballot group search", 0, true, 0, false,
     true, false, 3, true},
    {"register A over 16 X rows, one scale test a stage, ballot group search", 0, true, 16, false,
     true, false, 0, true},
    {"register A, deep ring, one scale test a stage, three warpgroups", 0, true, 0, true, true,
     false, 3},
    {"register A, deep ring, one scale test a stage, three warpgroups, ballot group search", 0,
     true, 0, true, true, false, 3, true},
    {"register A over 256 X rows, deep ring, one scale test a stage", 0, true, 256, true, true},
    {"register A over 256 X rows, deep ring, one scale test a stage, ballot group search", 0, true,
     256, true, true, false, 0, true},
    {"register A over 256 X rows and a 32-row tail, deep ring, one scale test a stage", 0, true,
     256, true, true, false, 0, false, true},
    {"register A over 256 X rows and a 32-row tail, deep ring, one scale test a stage, ballot "
     "group search",
     0, true, 256, true, true, false, 0, true, true},
    {"register A over 256 X rows by CTA pairs, deep ring, one scale test a stage", 0, true, 256,
     true, true, false, 0, false, false, true},
    {"register A over 256 X rows and a 32-row tail by CTA pairs, deep ring, one scale test a "
     "stage, ballot group search",
     0, true, 256, true, true, false, 0, true, true, true},
    {"decode form over 8 X rows", 0, false, 8, false, false, false, 0, false, false, false, true},
    {"decode form over 16 X rows", 0, false, 16, false, false, false, 0, false, false, false, true},
    {"decode form over 16 X rows, ballot group search", 0, false, 0, false, false, false, 0, true,
     false, false, true},
};

std::vector<float> RunGrouped(const Problem& p, const DeviceProblem& d, dense::Fp8GemmOutput output,
                              const int32_t* roles = nullptr, int role = 0,
                              const std::vector<float>* initial = nullptr,
                              const RouteForm& form = {}) {
  DeviceBuffer<float> y(p.rows * p.n);
  if (initial != nullptr) {
    y.Upload(*initial);
  } else {
    y.Poison(0xFF);
  }
  Mxfp4Bf16GroupedGemmParams params = d.Params(p, y.get());
  params.output = output;
  params.row_role = roles;
  params.role = role;
  params.widener_warps = form.widener_warps;
  params.register_a = form.register_a;
  params.x_rows = form.x_rows;
  params.deep_ring = form.deep_ring;
  params.stage_scale_test = form.stage_scale_test;
  params.fit_tile_rows = form.fit_tile_rows;
  params.consumer_warpgroups = form.warpgroups;
  params.ballot_group_search = form.ballot_search;
  params.tail_rows = form.tail_rows;
  params.x_multicast = form.x_multicast;
  params.decode_mma = form.decode_mma;
  const absl::Status st = Mxfp4Bf16GroupedGemm(params, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(Synced());
  return y.Download();
}

// Bytes of y a product writes: fp32 or packed bf16.
int64_t OutputBytes(const Problem& p, dense::Fp8GemmOutput output) {
  return p.rows * p.n * (output == dense::Fp8GemmOutput::kBf16 ? 2 : 4);
}

// Every row has the bits of Bf16Gemm's warp-specialized tile over its own
// expert's widened weight, for the three outputs: experts of 0, 1, 130, 37
// and 300 rows (row tiles that straddle experts, a partial last tile), rows
// past the last expert left as they were, n not a multiple of 128 (a partial
// W tile) and k long enough that the ring and the copies wrap (12 stages), a
// V4.1-sized K (4,096) beside it, and scales 0 - 2 on one row; and 70
// experts of 0 - 40 rows (the ballot group search over three chunks of 32
// groups, empty groups in each); experts of 270, 0, 288, 289, 530 and 20
// rows (the 256-row tile's tails); and V4.1's down K (2,304: the decode
// form's X in two whole chunks of 1,024 and a last of 256) over decode-sized
// experts of 0 - 17 rows, n 144 (a W tile of one warp's rows).
TEST(Mxfp4Bf16GroupedGemmTest, EveryRowHasTheBf16GemmBitsOfItsExpert) {
  std::mt19937 rng(2026);
  struct Case {
    int64_t n, k;
    std::vector<int64_t> rows;
  };
  std::vector<int64_t> many(70);
  for (int e = 0; e < 70; ++e) many[e] = e % 7 == 3 ? 0 : (e * 13) % 41;
  for (const Case& c :
       {Case{320, 768, {0, 1, 130, 37, 300}}, Case{256, 4096, {129, 0, 64}},
        Case{72, 128, {5, 200}}, Case{136, 256, many}, Case{192, 512, {270, 0, 288, 289, 530, 20}},
        Case{144, 2304, {9, 17, 3, 0, 8, 16}}}) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " k " << c.k);
    const Problem p = MakeProblem(c.n, c.k, c.rows, 11, rng, /*edge_scales=*/true);
    const DeviceProblem d(p);
    for (dense::Fp8GemmOutput output :
         {dense::Fp8GemmOutput::kF32, dense::Fp8GemmOutput::kF32RoundedBf16,
          dense::Fp8GemmOutput::kBf16}) {
      SCOPED_TRACE(::testing::Message() << "output " << static_cast<int>(output));
      const std::vector<float> want = BySeparateBf16Gemms(p, output);
      for (const RouteForm& form : kRouteForms) {
        const std::vector<float> got = RunGrouped(p, d, output, nullptr, 0, nullptr, form);
        ASSERT_EQ(got.size(), want.size());
        // Both poisoned alike, so the rows past the experts compare too.
        int64_t first = -1;
        for (int64_t i = 0; i < OutputBytes(p, output) / 4 && first < 0; ++i) {
          if (std::memcmp(&got[i], &want[i], 4) != 0) first = i;
        }
        EXPECT_EQ(first, -1) << "the first differing 4 bytes, " << form.name;
      }
    }
  }
}

// The gate / up / SwiGLU form (swiglu): h's FP8 codes and scales are those
// Swiglu's FP8 form makes of the two products' fp32 outputs (the 256-row
// tile's own), with route weights, with and without the clamp, rounding to
// bf16 or not; experts of 0, 300, 130, 40 and 280 rows (tiles of N 256 and
// N 128, and with tail_rows 280's tail of 24), rows past the last expert
// left as they were, n 320 and 288 (a part of a 64-column tile) and 256,
// with and without the ballot search, and X by CTA pairs (x_multicast); and
// the decode form's gated launch (decode_mma with swiglu) over 8 and 16 X
// rows a CTA, there and at k 1,152 over experts of 0 - 17 rows.
TEST(Mxfp4Bf16GroupedGemmTest, FusedSwigluGivesTheSeparateLaunchesBits) {
  std::mt19937 rng(53);
  struct Case {
    int64_t n, k;
    std::vector<int64_t> rows_of;
  };
  // 256: CTA pairs with no CTA past n; k 1,152: the decode form's gated X
  // in chunks of 512, 512 and 128, over decode-sized experts.
  for (const Case& c :
       {Case{320, 512, {0, 300, 130, 40, 280}}, Case{288, 512, {0, 300, 130, 40, 280}},
        Case{256, 512, {0, 300, 130, 40, 280}}, Case{256, 1152, {9, 17, 0, 3, 16}}}) {
    const int64_t n = c.n;
    const std::vector<int64_t>& rows_of = c.rows_of;
    SCOPED_TRACE(::testing::Message() << "n " << n << " k " << c.k);
    const Problem gate = MakeProblem(n, c.k, rows_of, 3, rng, /*edge_scales=*/true);
    Problem up = MakeProblem(n, c.k, rows_of, 3, rng, /*edge_scales=*/false);
    up.x = gate.x;  // the same rows
    const DeviceProblem dg(gate), du(up);
    const RouteForm x256{"register A over 256 X rows", 0, true, 256, true, true};
    const dense::Fp8GemmOutput f32 = dense::Fp8GemmOutput::kF32;
    DeviceBuffer<float> g(RunGrouped(gate, dg, f32, nullptr, 0, nullptr, x256));
    DeviceBuffer<float> u(RunGrouped(up, du, f32, nullptr, 0, nullptr, x256));
    std::vector<float> weights(gate.rows);
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    for (float& v : weights) v = weight(rng);
    const DeviceBuffer<float> route_weight(weights);
    const int64_t* used = dg.offsets.get() + gate.experts();
    for (bool round : {true, false}) {
      for (float limit : {0.0f, 7.0f}) {
        SCOPED_TRACE(::testing::Message() << "round " << round << " limit " << limit);
        DeviceBuffer<uint8_t> want_codes(gate.rows * n), want_scales(gate.rows * n / 32);
        want_codes.Poison(0xAB);
        want_scales.Poison(0xAB);
        const absl::Status ws = decode::Swiglu({.gate = g.get(),
                                                .up = u.get(),
                                                .route_weight = route_weight.get(),
                                                .rows = gate.rows,
                                                .inter = n,
                                                .limit = limit,
                                                .round_bf16 = round,
                                                .codes = want_codes.get(),
                                                .scales = want_scales.get(),
                                                .row_count = used},
                                               nullptr);
        ASSERT_TRUE(ws.ok()) << ws;
        // 3, 4: X by CTA pairs; 5 - 7: the decode form over 8 and 16 X rows.
        for (int form = 0; form < 8; ++form) {
          const bool decode = form >= 5;
          const bool ballot = form == 1 || form == 7, tail = form == 2 || form == 4;
          const bool pairs = form == 3 || form == 4;
          DeviceBuffer<uint8_t> codes(gate.rows * n), scales(gate.rows * n / 32);
          codes.Poison(0xAB);
          scales.Poison(0xAB);
          Mxfp4Bf16GroupedGemmParams p = dg.Params(gate, nullptr);
          p.register_a = !decode;
          p.x_rows = decode ? (form == 5 ? 8 : 16) : 256;
          p.deep_ring = !decode;
          p.stage_scale_test = !decode;
          p.decode_mma = decode;
          p.ballot_group_search = ballot;
          p.tail_rows = tail;
          p.x_multicast = pairs;
          p.swiglu = true;
          p.w_up = du.ptrs.get();
          p.w_up_scales = du.scale_ptrs.get();
          p.swiglu_route_weight = route_weight.get();
          p.swiglu_limit = limit;
          p.swiglu_round_bf16 = round;
          p.h_codes = codes.get();
          p.h_scales = scales.get();
          // The decode form's launch: h's bf16 values too (form 6 without).
          DeviceBuffer<uint16_t> h16(gate.rows * n);
          h16.Poison(0xAB);
          if (decode && form != 6) p.h_bf16 = h16.get();
          const absl::Status st = Mxfp4Bf16GroupedGemm(p, nullptr);
          ASSERT_TRUE(st.ok()) << st;
          EXPECT_EQ(codes.Download(), want_codes.Download()) << "codes, form " << form;
          EXPECT_EQ(scales.Download(), want_scales.Download()) << "scales, form " << form;
          if (p.h_bf16 != nullptr) {  // Fp8ActBf16's bits of the codes, the groups' rows only
            DeviceBuffer<uint16_t> want16(gate.rows * n);
            want16.Poison(0xAB);
            const absl::Status wb = dense::Fp8ActBf16({.codes = want_codes.get(),
                                                       .scales = want_scales.get(),
                                                       .out = want16.get(),
                                                       .rows = gate.rows,
                                                       .cols = n,
                                                       .row_count = used},
                                                      nullptr);
            ASSERT_TRUE(wb.ok()) << wb;
            EXPECT_EQ(h16.Download(), want16.Download()) << "h's bf16 values, form " << form;
          }
        }
      }
    }
  }
}

// Against the exact product of the operands' values (the widened weight is
// exact for these scales): Bf16Gemm's bound, row by row.
TEST(Mxfp4Bf16GroupedGemmTest, IsCloseToTheExactProduct) {
  std::mt19937 rng(7);
  const Problem p = MakeProblem(192, 1024, {3, 150, 70}, 0, rng, /*edge_scales=*/false);
  const DeviceProblem d(p);
  const std::vector<float> got = RunGrouped(p, d, dense::Fp8GemmOutput::kF32);
  for (int e = 0; e < p.experts(); ++e) {
    const std::vector<uint16_t> w = Widened(p, e);
    for (int64_t r = p.offsets[e]; r < p.offsets[e + 1]; ++r) {
      for (int64_t j = 0; j < p.n; ++j) {
        double exact = 0.0, mag = 0.0;
        for (int64_t c = 0; c < p.k; ++c) {
          const double v = static_cast<double>(Bf16BitsToFloat(p.x[r * p.k + c])) *
                           Bf16BitsToFloat(w[j * p.k + c]);
          exact += v;
          mag += std::fabs(v);
        }
        const double bound = (1e-6 + (p.k / 16) * std::ldexp(1.0, -22)) * mag;
        ASSERT_LE(std::fabs(got[r * p.n + j] - exact), bound) << "row " << r << " col " << j;
      }
    }
  }
}

// row_role: a call writes only its role's rows, each with the bits of the
// call without it; the other rows keep what y held.
TEST(Mxfp4Bf16GroupedGemmTest, RowRoleWritesOnlyItsRows) {
  std::mt19937 rng(11);
  const Problem p = MakeProblem(128, 512, {40, 260, 1}, 3, rng, /*edge_scales=*/false);
  const DeviceProblem d(p);
  std::vector<int32_t> roles(p.rows);
  for (int32_t& r : roles) r = static_cast<int32_t>(rng() % 2);
  DeviceBuffer<int32_t> droles(roles);
  const std::vector<float> initial(p.rows * p.n, -7.0f);
  for (dense::Fp8GemmOutput output : {dense::Fp8GemmOutput::kF32, dense::Fp8GemmOutput::kBf16}) {
    SCOPED_TRACE(::testing::Message() << "output " << static_cast<int>(output));
    const std::vector<float> all = RunGrouped(p, d, output);
    const std::vector<float> got = RunGrouped(p, d, output, droles.get(), 1, &initial);
    // Every form writes the same rows with the same bits.
    for (const RouteForm& form : kRouteForms) {
      const std::vector<float> again = RunGrouped(p, d, output, droles.get(), 1, &initial, form);
      ASSERT_EQ(again.size(), got.size());
      EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0) << form.name;
    }
    // An element's bytes: 4 (fp32) or 2 (bf16, packed from the start of y).
    const int bytes = output == dense::Fp8GemmOutput::kBf16 ? 2 : 4;
    const auto* all_bytes = reinterpret_cast<const uint8_t*>(all.data());
    const auto* got_bytes = reinterpret_cast<const uint8_t*>(got.data());
    const auto* initial_bytes = reinterpret_cast<const uint8_t*>(initial.data());
    for (int64_t r = 0; r < p.rows; ++r) {
      const bool written = r < p.offsets.back() && roles[r] == 1;
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t at = (r * p.n + j) * bytes;
        ASSERT_EQ(std::memcmp(got_bytes + at, (written ? all_bytes : initial_bytes) + at, bytes), 0)
            << "row " << r << " col " << j;
      }
    }
  }
}

// An expert whose weight pointer is null gets NaN rows; the others keep
// their bits. A NaN scale (0xFF, through the fp32 widening) makes its
// output column NaN in its expert's rows only.
TEST(Mxfp4Bf16GroupedGemmTest, UnreadableWeightGivesNanRowsOnly) {
  std::mt19937 rng(5);
  Problem p = MakeProblem(128, 256, {20, 30, 40}, 0, rng, /*edge_scales=*/false);
  DeviceProblem d(p);
  const std::vector<float> before = RunGrouped(p, d, dense::Fp8GemmOutput::kF32);
  {
    Problem nan_scale = p;
    nan_scale.scales[2][5 * (p.k / 32) + 3] = 0xFF;  // expert 2, W row 5, K block 3
    const DeviceProblem dn(nan_scale);
    const std::vector<float> got = RunGrouped(nan_scale, dn, dense::Fp8GemmOutput::kF32);
    for (const RouteForm& form : kRouteForms) {
      const std::vector<float> again =
          RunGrouped(nan_scale, dn, dense::Fp8GemmOutput::kF32, nullptr, 0, nullptr, form);
      ASSERT_EQ(again.size(), got.size());
      for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {  // NaN payloads aside
        ASSERT_TRUE(std::memcmp(&again[i], &got[i], 4) == 0 ||
                    (std::isnan(again[i]) && std::isnan(got[i])))
            << "element " << i << ", " << form.name;
      }
    }
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t j = 0; j < p.n; ++j) {
        if (r >= p.offsets[2] && j == 5) {
          ASSERT_TRUE(std::isnan(got[r * p.n + j])) << "row " << r;
        } else {
          ASSERT_EQ(std::memcmp(&got[r * p.n + j], &before[r * p.n + j], 4), 0)
              << "row " << r << " col " << j;
        }
      }
    }
  }
  std::vector<const uint8_t*> ptrs = {d.codes[0]->get(), nullptr, d.codes[2]->get()};
  d.ptrs.Upload(ptrs);
  const std::vector<float> after = RunGrouped(p, d, dense::Fp8GemmOutput::kF32);
  for (int64_t r = 0; r < p.rows; ++r) {
    const bool bad = r >= p.offsets[1] && r < p.offsets[2];
    for (int64_t j = 0; j < p.n; ++j) {
      if (bad) {
        ASSERT_TRUE(std::isnan(after[r * p.n + j])) << "row " << r;
      } else {
        ASSERT_EQ(std::memcmp(&after[r * p.n + j], &before[r * p.n + j], 4), 0) << "row " << r;
      }
    }
  }
  // Every form: NaN in the same places, the same words elsewhere.
  for (const RouteForm& form : kRouteForms) {
    const std::vector<float> again =
        RunGrouped(p, d, dense::Fp8GemmOutput::kF32, nullptr, 0, nullptr, form);
    ASSERT_EQ(again.size(), after.size());
    for (int64_t i = 0; i < static_cast<int64_t>(after.size()); ++i) {
      ASSERT_TRUE(std::memcmp(&again[i], &after[i], 4) == 0 ||
                  (std::isnan(again[i]) && std::isnan(after[i])))
          << "element " << i << ", " << form.name;
    }
  }
}

// The checks run before anything is enqueued; rows == 0 enqueues nothing.
TEST(Mxfp4Bf16GroupedGemmTest, RefusesBadArguments) {
  std::mt19937 rng(3);
  const Problem p = MakeProblem(128, 256, {4}, 0, rng, /*edge_scales=*/false);
  const DeviceProblem d(p);
  DeviceBuffer<float> y(p.rows * p.n);
  Mxfp4Bf16GroupedGemmParams bad = d.Params(p, y.get());
  bad.k = 192;  // not a multiple of 128
  EXPECT_EQ(Mxfp4Bf16GroupedGemm(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = d.Params(p, y.get());
  bad.x = nullptr;
  EXPECT_EQ(Mxfp4Bf16GroupedGemm(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  Mxfp4Bf16GroupedGemmParams none = d.Params(p, y.get());
  none.rows = 0;
  EXPECT_TRUE(Mxfp4Bf16GroupedGemm(none, nullptr).ok());
  EXPECT_TRUE(Synced());
}

}  // namespace
}  // namespace weir::kernels::cuda
