// kernels/cuda/dense/fp8_gemm_bench.cc
//
// Times Fp8BlockGemm (fp8_block_gemm_sm90.h) on the GPU machine:
//   * decode (m = 1, 8, 32, 64) on V4.1-Flash's FP8 dense shapes: time per
//     call as CUDA-graph replays of back-to-back launches, "cold" with inputs
//     rotated over buffers larger than L2 (60 MB) and "hot" on one buffer;
//     bytes read in stored form (W codes + W scales + X codes + X scales),
//     GB/s, and the ratio to the device-copy rate measured in the same run;
//     also the fastest tile of the table (every tile gives the same bits, so
//     the choice is free);
//   * prefill (m = 4096): TFLOP/s against cuBLASLt's own FP8 GEMM (e4m3 x e4m3,
//     per-tensor scales 1.0, fp32 compute) on the same shapes, bf16 and fp32 out;
//     then the same shapes on the prompt's bf16 route (the decoder's
//     prompt_bf16_linears: Fp8ActBf16 and Fp8WeightBf16, then Bf16Gemm), the
//     product alone and with both conversions, against cuBLASLt's bf16-out time;
//     and cuBLASLt's block-scaled FP8 GEMM (Fp8LtGemm) on re-blocked operands,
//     both weight scale forms, with the re-blocking kernels' times;
//   * ActQuantFp8 on the activation sizes.
//
//   fp8_gemm_bench                   (on the GPU machine)
//   fp8_gemm_bench one M N K [TILE]  (two calls of one shape, e.g. under ncu;
//                                     TILE as printed, default auto)

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/cublaslt_fp8.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/dense/bf16_gemm_cutlass.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.h"
#include "kernels/cuda/dense/fp8_lt_gemm.h"
#include "kernels/cuda/dense/fp8_reblock.h"
#include "kernels/cuda/dense/fp8_reblock_ref.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr int64_t kL2Bytes = 60ll << 20;

// A device buffer of `bytes` holding random e4m3 codes (no NaN codes) or
// UE8M0 scales in [120, 131] (so products stay far from fp32 limits).
uint8_t* DeviceBytes(int64_t bytes, bool scales, uint32_t seed) {
  static std::vector<uint8_t> codes_pattern, scales_pattern;
  std::vector<uint8_t>& pattern = scales ? scales_pattern : codes_pattern;
  if (pattern.empty()) {
    pattern.resize(16 << 20);
    std::mt19937 rng(seed);
    // Scales 2^-11 .. 2^0, an activation quantizer's for amax 0.1 - 448 (all
    // in the scaled panel's range, Fp8PanelScaleInRange).
    std::uniform_int_distribution<int> byte(0, 255), scale(116, 127);
    for (auto& b : pattern) {
      int v = scales ? scale(rng) : byte(rng);
      if (!scales && (v & 0x7F) == 0x7F) v = 0x3E;
      b = static_cast<uint8_t>(v);
    }
  }
  uint8_t* d = nullptr;
  WEIR_BENCH_CHECK(cudaMalloc(&d, std::max<int64_t>(bytes, 16)));
  const int64_t shift = (static_cast<int64_t>(seed) * 4099) % 4096;  // copies differ
  for (int64_t off = 0; off < bytes;) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(pattern.size()) - shift, bytes - off);
    WEIR_BENCH_CHECK(cudaMemcpy(d + off, pattern.data() + shift, n, cudaMemcpyHostToDevice));
    off += n;
  }
  return d;
}

// The operands of one shape, `copies` times (rotation against L2).
struct Problem {
  int64_t m, n, k;
  std::vector<uint8_t*> x, xs, w, ws;
  float* y = nullptr;
  float* scratch = nullptr;      // split-K partials at the split the shape gets
  uint32_t* counters = nullptr;  // zeroed; passed with argv "fused" (g_fused) only
  static constexpr int64_t kCounters = int64_t{1} << 16;
  Problem(int64_t m_, int64_t n_, int64_t k_, int copies) : m(m_), n(n_), k(k_) {
    for (int c = 0; c < copies; ++c) {
      x.push_back(DeviceBytes(m * k, false, 1 + c));
      xs.push_back(DeviceBytes(m * k / 32, true, 2 + c));
      w.push_back(DeviceBytes(n * k, false, 3 + c));
      ws.push_back(DeviceBytes((n + 31) / 32 * (k / 32), true, 4 + c));
    }
    WEIR_BENCH_CHECK(cudaMalloc(&y, m * n * sizeof(float)));
    WEIR_BENCH_CHECK(cudaMalloc(&scratch, ChooseFp8GemmSplits(n, k) * m * n * sizeof(float)));
    WEIR_BENCH_CHECK(cudaMalloc(&counters, kCounters * sizeof(uint32_t)));
    WEIR_BENCH_CHECK(cudaMemset(counters, 0, kCounters * sizeof(uint32_t)));
  }
  ~Problem() {
    for (auto* v : {&x, &xs, &w, &ws}) {
      for (uint8_t* p : *v) cudaFree(p);
    }
    cudaFree(y);
    cudaFree(scratch);
    cudaFree(counters);
  }
  int64_t ReadBytes() const { return n * k + (n + 31) / 32 * (k / 32) + m * k + m * k / 32; }
  Fp8BlockGemmParams Params(int c, Fp8GemmTile tile, int splits = 1) const;
};

// The block-sum math of every call (argv[1] "wgmma": Fp8GemmMath::kWgmma;
// "wgmma_f16": kWgmmaF16, the mma pair's bits).
Fp8GemmMath g_math = Fp8GemmMath::kMmaF16;
// argv[1] "fused": split calls of at most kFp8GemmFusedReduceMaxM rows sum in
// their last split CTA (split_counters). Off by default, as in the decoder
// (DeviceDecoderOptions::fused_split_reduce): the split columns then time the
// second kernel the decoder runs.
bool g_fused = false;

// True when `tile` runs under g_math.
bool Runs(Fp8GemmTile tile) {
  if (tile == Fp8GemmTile::kN128M128Ws) return true;
  const Fp8GemmTileShape shape = ShapeOfFp8GemmTile(tile);
  if (!Fp8GemmMathIsWgmma(g_math)) return !Fp8GemmTileIsWgmmaOnly(shape.block_m, shape.warps_m);
  return Fp8GemmTileRunsWgmma(shape);
}

Fp8BlockGemmParams Problem::Params(int c, Fp8GemmTile tile, int splits) const {
  return {.x = x[c],
          .x_scales = xs[c],
          .w = w[c],
          .w_scales = ws[c],
          .y = y,
          .m = m,
          .n = n,
          .k = k,
          .tile = tile,
          .k_splits = splits,
          .split_scratch = splits > 1 ? scratch : nullptr,
          .split_counters = g_fused ? counters : nullptr,
          .split_counter_count = g_fused ? kCounters : 0,
          .math = g_math};
}

// Per-call time (us) of `launches` back-to-back Fp8BlockGemm calls captured
// in one CUDA graph, cycling over copies [0, copies).
double GraphUs(const Problem& p, Fp8GemmTile tile, int copies, cudaStream_t stream,
               int splits = 1) {
  constexpr int kLaunches = 32;
  const double ms = GraphMedianMs(
      [&](int i, cudaStream_t st) {
        if (absl::Status s = Fp8BlockGemm(p.Params(i % copies, tile, splits), st); !s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          std::exit(1);
        }
      },
      kLaunches, stream, 7, 2);
  return ms * 1e3 / kLaunches;
}

const char* TileName(Fp8GemmTile t) {
  switch (t) {
    case Fp8GemmTile::kN16M8:
      return "n16m8";
    case Fp8GemmTile::kN16M16:
      return "n16m16";
    case Fp8GemmTile::kN16M32:
      return "n16m32";
    case Fp8GemmTile::kN16M64:
      return "n16m64";
    case Fp8GemmTile::kN16M32W2:
      return "n16m32w2";
    case Fp8GemmTile::kN16M64W4:
      return "n16m64w4";
    case Fp8GemmTile::kN32M64W4:
      return "n32m64w4";
    case Fp8GemmTile::kN64M64W4:
      return "n64m64w4";
    case Fp8GemmTile::kN32M8:
      return "n32m8";
    case Fp8GemmTile::kN32M16:
      return "n32m16";
    case Fp8GemmTile::kN32M32:
      return "n32m32";
    case Fp8GemmTile::kN32M64:
      return "n32m64";
    case Fp8GemmTile::kN64M64:
      return "n64m64";
    case Fp8GemmTile::kN128M64:
      return "n128m64";
    case Fp8GemmTile::kN128M128:
      return "n128m128";
    case Fp8GemmTile::kN64M8:
      return "n64m8";
    case Fp8GemmTile::kN64M16:
      return "n64m16";
    case Fp8GemmTile::kN64M32:
      return "n64m32";
    case Fp8GemmTile::kN128M128Wg:
      return "n128m128wg";
    case Fp8GemmTile::kN64M8S4:
      return "n64m8s4";
    case Fp8GemmTile::kN64M8S3:
      return "n64m8s3";
    case Fp8GemmTile::kN128M128Ws:
      return "n128m128ws";
    case Fp8GemmTile::kAuto:
      return "auto";
  }
  return "?";
}

const auto& kTiles = kFp8GemmTiles;

struct Linear {
  const char* name;
  int64_t n, k;
};
// The prefill tables' shapes: V4.1-Flash's dense products and a large square.
constexpr Linear kPrefillLinears[] = {{"wq_a", 1280, 5120},      {"wq_b", 32768, 1280},
                                      {"wo_b", 5120, 8192},      {"shared.w13", 4608, 5120},
                                      {"shared.w2", 5120, 2304}, {"square8k", 8192, 8192}};

// V4.1-Flash FP8 dense linears (spec §4.1, §4.3, §4.5, §4.7, §4.8, §4.9).
constexpr Linear kDecodeShapes[] = {
    {"wq_a", 1280, 5120},          {"wkv", 512, 5120},          {"wq_b", 32768, 1280},
    {"index.wq_b", 4096, 1280},    {"wo_b", 5120, 8192},        {"shared.w13", 4608, 5120},
    {"shared.w2", 5120, 2304},     {"engram.wkv", 25600, 6144}, {"main_proj", 5120, 15360},
    {"head-sized*", 129280, 5120},
};

void Decode(double copy_gbps, cudaStream_t stream) {
  std::printf("\nDecode (graph replays of 32 calls; cold = inputs rotated over > %lld MB)\n",
              static_cast<long long>(3 * kL2Bytes >> 20));
  std::printf(
      "%-12s %-3s %-6s %-6s %9s | %-8s %8s %7s %6s | %8s %7s | %-9s %8s | %5s %8s %6s | %-9s "
      "%8s\n",
      "linear", "m", "n", "k", "MB read", "tile", "cold us", "GB/s", "/copy", "hot us", "GB/s",
      "best tile", "cold us", "split", "cold us", "/copy", "split best", "cold us");
  for (const Linear& l : kDecodeShapes) {
    for (int64_t m : {1, 8, 32, 64}) {
      const int64_t per_copy = l.n * l.k + m * l.k;
      const int copies =
          static_cast<int>(std::clamp<int64_t>((3 * kL2Bytes + per_copy - 1) / per_copy, 1, 64));
      Problem p(m, l.n, l.k, copies);
      const double bytes = static_cast<double>(p.ReadBytes());
      const double cold = GraphUs(p, Fp8GemmTile::kAuto, copies, stream);
      const double hot = GraphUs(p, Fp8GemmTile::kAuto, 1, stream);
      // The split the decoder runs this weight with (ChooseFp8GemmSplits),
      // partial sums and their reduction included; the best tile alone and
      // with that split.
      const int splits = ChooseFp8GemmSplits(l.n, l.k);
      Fp8GemmTile best = Fp8GemmTile::kAuto, split_best = Fp8GemmTile::kAuto;
      double best_us = 1e30, split_best_us = 1e30;
      for (Fp8GemmTile t : kTiles) {
        if (m <= 64 && ShapeOfFp8GemmTile(t).block_m < m) continue;  // would re-read W
        if (!Runs(t)) continue;
        const double us = GraphUs(p, t, copies, stream);
        if (us < best_us) best_us = us, best = t;
        const double split_tile_us = splits > 1 ? GraphUs(p, t, copies, stream, splits) : us;
        if (split_tile_us < split_best_us) split_best_us = split_tile_us, split_best = t;
      }
      const double gbps = bytes / cold / 1e3;
      const double split_us = GraphUs(p, Fp8GemmTile::kAuto, copies, stream, splits);
      std::printf(
          "%-12s %-3lld %-6lld %-6lld %9.2f | %-8s %8.2f %7.0f %6.2f | %8.2f %7.0f | "
          "%-9s %8.2f | %5d %8.2f %6.2f | %-9s %8.2f\n",
          l.name, static_cast<long long>(m), static_cast<long long>(l.n),
          static_cast<long long>(l.k), bytes / 1e6, TileName(ChooseFp8GemmTile(m, l.n, g_math)),
          cold, gbps, gbps / copy_gbps, hot, bytes / hot / 1e3, TileName(best), best_us, splits,
          split_us, bytes / split_us / 1e3 / copy_gbps, TileName(split_best), split_best_us);
    }
  }
  std::printf("* head-sized: V4.1's head is bf16/fp32; the shape only stands for a large n.\n");
}

// cuBLASLt's block-scaled FP8 GEMM (Fp8LtGemm) on the prefill shapes at m =
// 4,096: X re-blocked to 1x128 fp32 scales (ReblockFp8Rows, timed alone), W
// in both forms (1x128: ReblockFp8Rows of its tiles; 128x128:
// ReblockFp8Tiles; a load-time step, timed for reference), bf16 and fp32
// out, against cuBLASLt's per-tensor FP8 GEMM on the same codes in the same
// run (the prefill table's Lt columns).
void LtBlockScaled(const CublasLtFp8& lt, cudaStream_t stream) {
  constexpr int64_t kM = 4096;
  absl::StatusOr<std::unique_ptr<Fp8LtGemm>> gemm = Fp8LtGemm::Create();
  if (!gemm.ok()) {
    std::printf("\nFp8LtGemm: %s\n", gemm.status().ToString().c_str());
    return;
  }
  std::printf(
      "\ncuBLASLt block-scaled FP8 (Fp8LtGemm, re-blocked operands) at m = %lld: %-12s %-6s %-6s | "
      "%s | %s | %s | %s | %s\n",
      static_cast<long long>(kM), "linear", "n", "k", "1x128 W, bf16 out: us, TF/s, /Lt(bf16)",
      "128x128 W, bf16 out: us, TF/s, /Lt(bf16)", "1x128 W, f32 out: us, TF/s, /Lt(f32)",
      "128x128 W, f32 out: us, TF/s, /Lt(f32)",
      "Lt bf16 us, Lt f32 us | X re-block us | W re-block us (1x128, 128x128)");
  for (const Linear& l : kPrefillLinears) {
    Problem p(kM, l.n, l.k, 1);
    const double flops = 2.0 * kM * l.n * l.k;
    uint8_t *xr = nullptr, *w_vec = nullptr, *w_blk = nullptr;
    float *xrs = nullptr, *w_vec_s = nullptr, *w_blk_s = nullptr;
    void* y = nullptr;
    WEIR_BENCH_CHECK(cudaMalloc(&xr, Fp8LtPaddedRows(kM) * l.k));
    WEIR_BENCH_CHECK(cudaMalloc(&xrs, Fp8Vec128ScaleFloats(kM, l.k) * sizeof(float)));
    WEIR_BENCH_CHECK(cudaMalloc(&w_vec, l.n * l.k));
    WEIR_BENCH_CHECK(cudaMalloc(&w_vec_s, Fp8Vec128ScaleFloats(l.n, l.k) * sizeof(float)));
    WEIR_BENCH_CHECK(cudaMalloc(&w_blk, l.n * l.k));
    WEIR_BENCH_CHECK(cudaMalloc(&w_blk_s, Fp8Blk128ScaleFloats(l.n, l.k) * sizeof(float)));
    WEIR_BENCH_CHECK(cudaMalloc(&y, Fp8LtPaddedRows(kM) * l.n * sizeof(float)));
    const ReblockFp8RowsParams xp{.codes = p.x[0],
                                  .scales = p.xs[0],
                                  .out_codes = xr,
                                  .out_scales = xrs,
                                  .rows = kM,
                                  .k = l.k};
    const ReblockFp8RowsParams wvp{.codes = p.w[0],
                                   .scales = p.ws[0],
                                   .out_codes = w_vec,
                                   .out_scales = w_vec_s,
                                   .rows = l.n,
                                   .k = l.k,
                                   .rows_per_scale = 32};
    const ReblockFp8TilesParams wbp{.codes = p.w[0],
                                    .scales = p.ws[0],
                                    .out_codes = w_blk,
                                    .out_scales = w_blk_s,
                                    .n = l.n,
                                    .k = l.k};
    const double x_ms = MedianMs([&] { (void)ReblockFp8Rows(xp, stream); }, stream, 10);
    const double wv_ms = MedianMs([&] { (void)ReblockFp8Rows(wvp, stream); }, stream, 10);
    const double wb_ms = MedianMs([&] { (void)ReblockFp8Tiles(wbp, stream); }, stream, 10);
    double ms[2][2] = {};  // [form][output]
    std::string error;
    for (int f = 0; f < 2; ++f) {
      for (int o = 0; o < 2; ++o) {
        const Fp8LtGemmParams gp{
            .x = xr,
            .x_scales = xrs,
            .w = f == 0 ? w_vec : w_blk,
            .w_scales = f == 0 ? w_vec_s : w_blk_s,
            .w_scales_form = f == 0 ? Fp8LtWeightScales::kVec128 : Fp8LtWeightScales::kBlk128x128,
            .y = y,
            .m = kM,
            .n = l.n,
            .k = l.k,
            .output = o == 0 ? Fp8GemmOutput::kBf16 : Fp8GemmOutput::kF32};
        if (absl::Status s = (*gemm)->Run(gp, stream); !s.ok()) {
          error = s.ToString();
          ms[f][o] = -1;
          continue;
        }
        ms[f][o] = MedianMs([&] { (void)(*gemm)->Run(gp, stream); }, stream, 10);
      }
    }
    const double lt_bf16 = lt.Ms(p.w[0], p.x[0], y, kM, l.n, l.k, CUDA_R_16BF, stream);
    const double lt_f32 = lt.Ms(p.w[0], p.x[0], y, kM, l.n, l.k, CUDA_R_32F, stream);
    auto cell = [&](double t, double lt_t) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%8.1f %5.0f %.2f", t * 1e3, t > 0 ? flops / t / 1e9 : 0.0,
                    t > 0 && lt_t > 0 ? lt_t / t : 0.0);
      return std::string(buf);
    };
    std::printf("%-12s %-6lld %-6lld | %s | %s | %s | %s | %8.1f %8.1f | %7.1f | %7.1f %7.1f\n",
                l.name, static_cast<long long>(l.n), static_cast<long long>(l.k),
                cell(ms[0][0], lt_bf16).c_str(), cell(ms[1][0], lt_bf16).c_str(),
                cell(ms[0][1], lt_f32).c_str(), cell(ms[1][1], lt_f32).c_str(), lt_bf16 * 1e3,
                lt_f32 * 1e3, x_ms * 1e3, wv_ms * 1e3, wb_ms * 1e3);
    if (!error.empty()) std::printf("  Fp8LtGemm: %s\n", error.c_str());
    for (void* d :
         {static_cast<void*>(xr), static_cast<void*>(xrs), static_cast<void*>(w_vec),
          static_cast<void*>(w_vec_s), static_cast<void*>(w_blk), static_cast<void*>(w_blk_s), y}) {
      WEIR_BENCH_CHECK(cudaFree(d));
    }
  }
}

void Prefill(cudaStream_t stream) {
  constexpr int64_t kM = 4096;
  std::string error;
  const std::unique_ptr<CublasLtFp8> lt = CublasLtFp8::Create(&error);
  if (lt == nullptr) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  std::printf(
      "\nPrefill m = %lld (TFLOP/s = 2 m n k / time; cuBLASLt: e4m3 x e4m3, fp32 "
      "compute, per-tensor scales)\n",
      static_cast<long long>(kM));
  std::printf(
      "%-12s %-6s %-6s | %-9s %8s %7s | %-9s %8s | %9s %7s %9s %7s | %s | %s | %s | %s | %s\n",
      "linear", "n", "k", "auto", "us", "TF/s", "best tile", "TF/s", "Lt bf16us", "TF/s",
      "Lt f32 us", "TF/s", "ours/Lt(bf16)", "before (n128m128 mma / n128m128wg) TF/s",
      "x_f16 panel: us, TF/s, widen us, TF/s with it, with it/Lt(bf16)",
      "panel + ws_halves: us, TF/s, with widen/Lt(bf16)",
      "scaled panel: us, TF/s, widen us, with widen/Lt(bf16)");
  for (const Linear& l : kPrefillLinears) {
    Problem p(kM, l.n, l.k, 1);
    const double flops = 2.0 * kM * l.n * l.k;
    auto ours = [&](Fp8GemmTile t) {
      return MedianMs([&] { (void)Fp8BlockGemm(p.Params(0, t), stream); }, stream, 10);
    };
    const double auto_ms = ours(Fp8GemmTile::kAuto);
    // The tile kAuto ran before the warp-specialized one (kMmaF16: the mma
    // tile; kWgmma: the e4m3 wgmma tile of one CTA of 8 warps).
    const double mma_ms = g_math == Fp8GemmMath::kMmaF16  ? ours(Fp8GemmTile::kN128M128)
                          : g_math == Fp8GemmMath::kWgmma ? ours(Fp8GemmTile::kN128M128Wg)
                                                          : 0.0;
    double best_ms = 1e30;
    Fp8GemmTile best = Fp8GemmTile::kAuto;
    for (Fp8GemmTile t : {Fp8GemmTile::kN64M64, Fp8GemmTile::kN128M64, Fp8GemmTile::kN128M128,
                          Fp8GemmTile::kN128M128Wg, Fp8GemmTile::kN128M128Ws}) {
      if (!Runs(t)) continue;
      const double ms = ours(t);
      if (ms < best_ms) best_ms = ms, best = t;
    }
    const double lt_bf16 = lt->Ms(p.w[0], p.x[0], p.y, p.m, p.n, p.k, CUDA_R_16BF, stream);
    const double lt_f32 = lt->Ms(p.w[0], p.x[0], p.y, p.m, p.n, p.k, CUDA_R_32F, stream);
    auto tf = [&](double ms) { return ms > 0 ? flops / ms / 1e9 : 0.0; };
    // The warp-specialized tile reading X from its f16 panel (the decoder
    // widens once a product): the product alone, the widening alone.
    double panel_ms = 0.0, widen_ms = 0.0, halves_ms = 0.0, scaled_ms = 0.0, widen_scaled_ms = 0.0;
    if (g_math != Fp8GemmMath::kWgmma) {
      uint16_t* panel = nullptr;
      WEIR_BENCH_CHECK(cudaMalloc(&panel, kM * l.k * sizeof(uint16_t)));
      const Fp8F16PanelParams wp{.codes = p.x[0], .out = panel, .rows = kM, .k = l.k};
      widen_ms = MedianMs([&] { (void)WidenFp8ToF16Panel(wp, stream); }, stream, 10);
      Fp8BlockGemmParams pp = p.Params(0, Fp8GemmTile::kN128M128Ws);
      pp.x_f16 = panel;
      panel_ms = MedianMs([&] { (void)Fp8BlockGemm(pp, stream); }, stream, 10);
      pp.ws_halves = true;
      halves_ms = MedianMs([&] { (void)Fp8BlockGemm(pp, stream); }, stream, 10);
      // The scaled panel (x_f16_scaled): every stage in range, one fold
      // factor a warp.
      Fp8F16PanelParams wps = wp;
      wps.scales = p.xs[0];
      widen_scaled_ms = MedianMs([&] { (void)WidenFp8ToF16Panel(wps, stream); }, stream, 10);
      pp.ws_halves = false;
      pp.x_f16_scaled = true;
      scaled_ms = MedianMs([&] { (void)Fp8BlockGemm(pp, stream); }, stream, 10);
      WEIR_BENCH_CHECK(cudaFree(panel));
    }
    std::printf(
        "%-12s %-6lld %-6lld | %-9s %8.1f %7.0f | %-9s %8.0f | %9.1f %7.0f %9.1f %7.0f | "
        "%.2f | %.0f | %8.1f %7.0f %7.1f %7.0f %.2f | %8.1f %7.0f %.2f | %8.1f %7.0f %7.1f %.2f\n",
        l.name, static_cast<long long>(l.n), static_cast<long long>(l.k),
        TileName(ResolveFp8GemmTile(p.Params(0, Fp8GemmTile::kAuto))), auto_ms * 1e3, tf(auto_ms),
        TileName(best), tf(best_ms), lt_bf16 * 1e3, tf(lt_bf16), lt_f32 * 1e3, tf(lt_f32),
        lt_bf16 > 0 ? lt_bf16 / auto_ms : 0.0, tf(mma_ms), panel_ms * 1e3, tf(panel_ms),
        widen_ms * 1e3, tf(panel_ms + widen_ms),
        panel_ms > 0 ? lt_bf16 / (panel_ms + widen_ms) : 0.0, halves_ms * 1e3, tf(halves_ms),
        halves_ms > 0 ? lt_bf16 / (halves_ms + widen_ms) : 0.0, scaled_ms * 1e3, tf(scaled_ms),
        widen_scaled_ms * 1e3, scaled_ms > 0 ? lt_bf16 / (scaled_ms + widen_scaled_ms) : 0.0);
  }
  LtBlockScaled(*lt, stream);
  // The prompt's bf16 route (the decoder's prompt_bf16_linears): X's codes
  // to bf16 (Fp8ActBf16), W's to bf16 (Fp8WeightBf16), then Bf16Gemm's
  // warp-specialized tile at the split the decoder gives the weight
  // (ChooseBf16GemmSplits, summed in the CTA), bf16 out as cuBLASLt's
  // column above. The same operands' values as the FP8 product, other sums.
  // Then the tile over 256 X rows a CTA (ws_m256, the same bits).
  std::printf(
      "\nThe prompt's bf16 route at m = %lld: %-12s %-6s %-6s | %-9s %7s | %9s %9s | %7s | %s | "
      "%s | %s | %s | %s\n",
      static_cast<long long>(kM), "linear", "n", "k", "gemm us", "TF/s", "X cvt us", "W cvt us",
      "TF/s all", "gemm / Lt(bf16)", "all / Lt(bf16)", "ws_m256: us, TF/s, gemm / Lt(bf16)",
      "cuBLASLt bf16 x bf16: us, TF/s, ours / it, ws_m256 / it",
      "ws_persistent: us, TF/s; with ws_m256: us, TF/s");
  for (const Linear& l : kPrefillLinears) {
    Problem p(kM, l.n, l.k, 1);
    const double flops = 2.0 * kM * l.n * l.k;
    uint16_t *xb = nullptr, *wb = nullptr;
    WEIR_BENCH_CHECK(cudaMalloc(&xb, kM * l.k * sizeof(uint16_t)));
    WEIR_BENCH_CHECK(cudaMalloc(&wb, l.n * l.k * sizeof(uint16_t)));
    const Fp8ActBf16Params xp{
        .codes = p.x[0], .scales = p.xs[0], .out = xb, .rows = kM, .cols = l.k};
    const Fp8WeightBf16Params wp{
        .codes = p.w[0], .scales = p.ws[0], .out = wb, .rows = l.n, .cols = l.k};
    Bf16GemmParams bp{
        .x = xb, .w = wb, .y = p.y, .m = kM, .n = l.n, .k = l.k, .output = Fp8GemmOutput::kBf16};
    bp.k_splits = ChooseBf16GemmSplits(l.n, l.k);
    float* scratch = nullptr;
    if (bp.k_splits > 1) {
      WEIR_BENCH_CHECK(cudaMalloc(&scratch, Bf16GemmSplitScratchFloats(bp) * sizeof(float)));
      bp.split_scratch = scratch;
    }
    const double x_ms = MedianMs([&] { (void)Fp8ActBf16(xp, stream); }, stream, 10);
    const double w_ms = MedianMs([&] { (void)Fp8WeightBf16(wp, stream); }, stream, 10);
    const double g_ms = MedianMs([&] { (void)Bf16Gemm(bp, stream); }, stream, 10);
    Bf16GemmParams wide = bp;
    wide.ws_m256 = true;
    const double wide_ms = MedianMs([&] { (void)Bf16Gemm(wide, stream); }, stream, 10);
    Bf16GemmParams persistent = bp;
    persistent.ws_persistent = true;
    const double pers_ms = MedianMs([&] { (void)Bf16Gemm(persistent, stream); }, stream, 10);
    persistent.ws_m256 = true;
    const double pers_wide_ms = MedianMs([&] { (void)Bf16Gemm(persistent, stream); }, stream, 10);
    const double lt_ms = lt->Ms(p.w[0], p.x[0], p.y, p.m, p.n, p.k, CUDA_R_16BF, stream);
    // The same bf16 operands through cuBLASLt's bf16 GEMM (bf16 out).
    const double lt16_ms = lt->Ms(wb, xb, p.y, p.m, p.n, p.k, CUDA_R_16BF, stream, 10, CUDA_R_16BF);
    const double all_ms = x_ms + w_ms + g_ms;
    std::printf(
        "%-12s %-6lld %-6lld | %-9s %7.1f %7.0f | %9.1f %9.1f | %7.0f | %.2f | %.2f | %7.1f %7.0f "
        "%.2f | %7.1f %7.0f %.2f %.2f | %7.1f %7.0f %7.1f %7.0f\n",
        l.name, static_cast<long long>(l.n), static_cast<long long>(l.k),
        TileName(ResolveBf16GemmTile(bp)), g_ms * 1e3, flops / g_ms / 1e9, x_ms * 1e3, w_ms * 1e3,
        flops / all_ms / 1e9, lt_ms / g_ms, lt_ms / all_ms, wide_ms * 1e3, flops / wide_ms / 1e9,
        lt_ms / wide_ms, lt16_ms * 1e3, lt16_ms > 0 ? flops / lt16_ms / 1e9 : 0.0,
        lt16_ms > 0 ? lt16_ms / g_ms : 0.0, lt16_ms > 0 ? lt16_ms / wide_ms : 0.0, pers_ms * 1e3,
        flops / pers_ms / 1e9, pers_wide_ms * 1e3, flops / pers_wide_ms / 1e9);
    WEIR_BENCH_CHECK(cudaFree(xb));
    WEIR_BENCH_CHECK(cudaFree(wb));
    if (scratch != nullptr) WEIR_BENCH_CHECK(cudaFree(scratch));
  }
  // The same bf16 operands on CUTLASS's Hopper GEMM (Bf16GemmCutlass: 128 x
  // 256 tiles, two-CTA clusters, never split) against Bf16Gemm unsplit and
  // persistent (its bits: the elements that differ are counted) and
  // cuBLASLt's bf16 GEMM, bf16 out.
  std::printf(
      "\nCUTLASS bf16 (Bf16GemmCutlass) at m = %lld: %-12s %-6s %-6s | %9s %7s | %9s %7s | %9s "
      "%7s | %s | %s\n",
      static_cast<long long>(kM), "linear", "n", "k", "cutlass us", "TF/s", "ours us", "TF/s",
      "Lt us", "TF/s", "cutlass / Lt(bf16), ours / Lt(bf16)", "elements differing from ours");
  for (const Linear& l : kPrefillLinears) {
    const double flops = 2.0 * kM * l.n * l.k;
    Problem p(kM, l.n, l.k, 1);  // the FP8 operands, widened to bf16 as the route does
    uint16_t *xb = nullptr, *wb = nullptr, *y_ours = nullptr, *y_cut = nullptr;
    WEIR_BENCH_CHECK(cudaMalloc(&xb, kM * l.k * sizeof(uint16_t)));
    WEIR_BENCH_CHECK(cudaMalloc(&wb, l.n * l.k * sizeof(uint16_t)));
    (void)Fp8ActBf16({.codes = p.x[0], .scales = p.xs[0], .out = xb, .rows = kM, .cols = l.k},
                     stream);
    (void)Fp8WeightBf16({.codes = p.w[0], .scales = p.ws[0], .out = wb, .rows = l.n, .cols = l.k},
                        stream);
    WEIR_BENCH_CHECK(cudaMalloc(&y_ours, kM * l.n * sizeof(uint16_t)));
    WEIR_BENCH_CHECK(cudaMalloc(&y_cut, kM * l.n * sizeof(uint16_t)));
    const Bf16GemmParams ours{.x = xb,
                              .w = wb,
                              .y = y_ours,
                              .m = kM,
                              .n = l.n,
                              .k = l.k,
                              .output = Fp8GemmOutput::kBf16,
                              .ws_persistent = true};
    Bf16GemmParams cut = ours;
    cut.y = y_cut;
    const absl::Status first = Bf16GemmCutlass(cut, stream);
    if (!first.ok()) {
      std::printf("%-12s %-6lld %-6lld | %s\n", l.name, static_cast<long long>(l.n),
                  static_cast<long long>(l.k), first.ToString().c_str());
    } else {
      const double cut_ms = MedianMs([&] { (void)Bf16GemmCutlass(cut, stream); }, stream, 10);
      const double ours_ms = MedianMs([&] { (void)Bf16Gemm(ours, stream); }, stream, 10);
      const double lt_ms =
          lt->Ms(wb, xb, y_cut, kM, l.n, l.k, CUDA_R_16BF, stream, 10, CUDA_R_16BF);
      (void)Bf16Gemm(ours, stream);
      (void)Bf16GemmCutlass(cut, stream);
      WEIR_BENCH_CHECK(cudaStreamSynchronize(stream));
      std::vector<uint16_t> a(kM * l.n), b(kM * l.n);
      WEIR_BENCH_CHECK(cudaMemcpy(a.data(), y_ours, a.size() * 2, cudaMemcpyDeviceToHost));
      WEIR_BENCH_CHECK(cudaMemcpy(b.data(), y_cut, b.size() * 2, cudaMemcpyDeviceToHost));
      int64_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i] && ((a[i] | b[i]) & 0x7FFF);
      std::printf(
          "%-12s %-6lld %-6lld | %9.1f %7.0f | %9.1f %7.0f | %9.1f %7.0f | %.2f %.2f | %lld\n",
          l.name, static_cast<long long>(l.n), static_cast<long long>(l.k), cut_ms * 1e3,
          flops / cut_ms / 1e9, ours_ms * 1e3, flops / ours_ms / 1e9, lt_ms * 1e3,
          lt_ms > 0 ? flops / lt_ms / 1e9 : 0.0, lt_ms > 0 ? lt_ms / cut_ms : 0.0,
          lt_ms > 0 ? lt_ms / ours_ms : 0.0, static_cast<long long>(differ));
    }
    WEIR_BENCH_CHECK(cudaFree(xb));
    WEIR_BENCH_CHECK(cudaFree(wb));
    WEIR_BENCH_CHECK(cudaFree(y_ours));
    WEIR_BENCH_CHECK(cudaFree(y_cut));
  }
  // Bf16Gemm at V4.1's grouped wo_a (8 groups of 1,024 x 4,096 over the
  // attention output's 8 x 4,096 columns): the warp-specialized tile
  // (kAuto) against the mma tile, beside cuBLASLt FP8 of one group's shape.
  {
    constexpr int kGroups = 8;
    constexpr int64_t kN = 1024, kK = 4096;
    uint16_t* x = reinterpret_cast<uint16_t*>(DeviceBytes(kGroups * kM * kK * 2, true, 11));
    uint16_t* w = reinterpret_cast<uint16_t*>(DeviceBytes(kGroups * kN * kK * 2, true, 12));
    float* y;
    WEIR_BENCH_CHECK(cudaMalloc(&y, kGroups * kM * kN * sizeof(float)));
    auto run = [&](Fp8GemmTile t) {
      const Bf16GemmParams p{.x = x,
                             .w = w,
                             .y = y,
                             .m = kM,
                             .n = kN,
                             .k = kK,
                             .groups = kGroups,
                             .output = Fp8GemmOutput::kF32RoundedBf16,
                             .tile = t};
      return MedianMs([&] { (void)Bf16Gemm(p, stream); }, stream, 10);
    };
    const double flops = 2.0 * kGroups * kM * kN * kK;
    const double ws_ms = run(Fp8GemmTile::kAuto), mma_ms = run(Fp8GemmTile::kN128M128);
    std::printf(
        "bf16 wo_a    8x%lld 8x%lld | Bf16Gemm %-9s %8.1f us %7.0f TF/s | n128m128 (mma) %8.1f us "
        "%7.0f TF/s\n",
        static_cast<long long>(kN), static_cast<long long>(kK),
        TileName(ResolveBf16GemmTile({.x = x, .w = w, .y = y, .m = kM, .n = kN, .k = kK})),
        ws_ms * 1e3, flops / ws_ms / 1e9, mma_ms * 1e3, flops / mma_ms / 1e9);
    WEIR_BENCH_CHECK(cudaFree(x));
    WEIR_BENCH_CHECK(cudaFree(w));
    WEIR_BENCH_CHECK(cudaFree(y));
  }
}

void ActQuant(double copy_gbps, cudaStream_t stream) {
  std::printf("\nActQuantFp8 (bf16 in; bytes = 2 + 1 + 1/32 per element)\n");
  for (auto [m, k] : {std::pair<int64_t, int64_t>{64, 5120}, {4096, 5120}, {4096, 8192}}) {
    uint8_t* x = DeviceBytes(m * k * 2, true, 7);  // scale-range bytes: finite bf16 values
    uint8_t *codes, *scales;
    WEIR_BENCH_CHECK(cudaMalloc(&codes, m * k));
    WEIR_BENCH_CHECK(cudaMalloc(&scales, m * k / 32));
    const ActQuantFp8Params p{
        .x = x, .dtype = ActDtype::kBf16, .codes = codes, .scales = scales, .rows = m, .cols = k};
    const double ms = MedianMs([&] { (void)ActQuantFp8(p, stream); }, stream, 20);
    const double bytes = m * k * (3.0 + 1.0 / 32);
    std::printf("m %-5lld k %-5lld: %8.2f us, %6.0f GB/s (%.2f of copy)\n",
                static_cast<long long>(m), static_cast<long long>(k), ms * 1e3, bytes / ms / 1e6,
                bytes / ms / 1e6 / copy_gbps);
    WEIR_BENCH_CHECK(cudaFree(x));
    WEIR_BENCH_CHECK(cudaFree(codes));
    WEIR_BENCH_CHECK(cudaFree(scales));
  }
}

// Two calls of one shape (the second for profilers that skip a warm-up launch).
int RunOne(int64_t m, int64_t n, int64_t k, const std::string& tile_name) {
  Fp8GemmTile tile = Fp8GemmTile::kAuto;
  for (Fp8GemmTile t : kTiles) {
    if (tile_name == TileName(t)) tile = t;
  }
  // "n128m128ws_panel": the warp-specialized tile reading X's f16 panel.
  // "n128m128ws_scaled": the same with the scaled panel (x_f16_scaled).
  const bool scaled = tile_name == std::string(TileName(Fp8GemmTile::kN128M128Ws)) + "_scaled";
  const bool panel =
      scaled || tile_name == std::string(TileName(Fp8GemmTile::kN128M128Ws)) + "_panel";
  if (tile_name == TileName(Fp8GemmTile::kN128M128Ws) || panel) {
    tile = Fp8GemmTile::kN128M128Ws;
  }
  Problem p(m, n, k, 1);
  uint16_t* x16 = nullptr;
  Fp8BlockGemmParams params = p.Params(0, tile);
  if (panel) {
    WEIR_BENCH_CHECK(cudaMalloc(&x16, m * k * sizeof(uint16_t)));
    if (absl::Status s = WidenFp8ToF16Panel(
            {.codes = p.x[0], .out = x16, .rows = m, .k = k, .scales = scaled ? p.xs[0] : nullptr},
            nullptr);
        !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    params.x_f16 = x16;
    params.x_f16_scaled = scaled;
  }
  for (int i = 0; i < 2; ++i) {
    if (absl::Status s = Fp8BlockGemm(params, nullptr); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  WEIR_BENCH_CHECK(cudaDeviceSynchronize());
  if (x16 != nullptr) WEIR_BENCH_CHECK(cudaFree(x16));
  std::printf("ran m %lld n %lld k %lld tile %s%s\n", static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k), TileName(tile),
              scaled  ? " (scaled x_f16 panel)"
              : panel ? " (x_f16 panel)"
                      : "");
  return 0;
}

// `prefill_only`: the prefill table alone (a minute instead of several).
int Run(bool prefill_only) {
  cudaStream_t stream;
  WEIR_BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (prefill_only) {
    Prefill(stream);
  } else {
    const double copy_gbps = CopyGbps(stream);
    std::printf("device copy (1 GiB, read + write): %.0f GB/s\n", copy_gbps);
    Decode(copy_gbps, stream);
    Prefill(stream);
    ActQuant(copy_gbps, stream);
  }
  WEIR_BENCH_CHECK(cudaStreamSynchronize(stream));
  WEIR_BENCH_CHECK(cudaGetLastError());
  WEIR_BENCH_CHECK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace weir::kernels::cuda::dense

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "fused") {  // fp8_gemm_bench fused [...]
    weir::kernels::cuda::dense::g_fused = true;
    std::printf("split sums: in the last split CTA up to %lld rows\n",
                static_cast<long long>(weir::kernels::cuda::dense::kFp8GemmFusedReduceMaxM));
    --argc, ++argv;
  }
  if (argc >= 2 && std::string(argv[1]) == "wgmma") {  // fp8_gemm_bench wgmma [one M N K [TILE]]
    weir::kernels::cuda::dense::g_math = weir::kernels::cuda::dense::Fp8GemmMath::kWgmma;
    std::printf("block sums: wgmma (FP8)\n");
    --argc, ++argv;
  } else if (argc >= 2 && std::string(argv[1]) == "wgmma_f16") {
    weir::kernels::cuda::dense::g_math = weir::kernels::cuda::dense::Fp8GemmMath::kWgmmaF16;
    std::printf("block sums: wgmma f16 (the mma pair's bits)\n");
    --argc, ++argv;
  }
  if (argc >= 5 && std::string(argv[1]) == "one") {
    return weir::kernels::cuda::dense::RunOne(std::atoll(argv[2]), std::atoll(argv[3]),
                                              std::atoll(argv[4]), argc > 5 ? argv[5] : "auto");
  }
  // fp8_gemm_bench [fused] [wgmma | wgmma_f16] [prefill]
  return weir::kernels::cuda::dense::Run(argc >= 2 && std::string(argv[1]) == "prefill");
}
