// kernels/cuda/moe/mxfp4_grouped_gemm_bench.cc
//
// Times the grouped MXFP4 expert GEMMs (mxfp4_grouped_gemm_sm90.h) on the GPU
// machine for the decode step of V4.1-Flash's expert-parallel slice: one rank
// of `ranks` holds experts [0, experts / ranks) of `experts` routed experts
// (spec §4.1: 384, top-6, dim 5120, moe_inter 2304); a batch of B tokens
// routes each token to 6 distinct experts uniformly at random, so about
// 6 B / ranks (token, expert) rows land on this rank. Per layer call:
//   * time (CUDA events around graph replays of 16 calls rotating over 8
//     layers' weights, > 7 GB, so every call reads its experts cold; median);
//   * bytes that must be read in stored form: the hit experts' w1, w3, w2
//     codes + scales, the X codes + scales of the local rows, and the FP8
//     intermediate the down projection reads; GB/s and the ratio to the
//     device-copy rate (read + write) measured in the same run;
//   * the FFN ("ffn us") on the tiles kAuto takes for the hint the decoder
//     would pass in this deployment (RowsPerExpertHint: B / ranks tokens on
//     every rank; before 2026-12-05 the hint was the launch's row capacity,
//     6 B over the local experts, which took the 16-row tiles at B = 64);
//   * gate/up and down alone for every tile (the bits never change with the
//     tile, so the fastest one is free to use), and the launch floor when no
//     row is local;
//   * the reference GroupedExpertFfn (CUDA-core fp32 over dequantized fp32
//     weights) on the same routing, rows and shapes.
//
//   * prefill (PREFILL_TOKENS > 0, default 4096): one layer's experts over
//     that many tokens (hundreds of rows an expert), every tile of gate/up
//     and down, as model TFLOP/s (2 x rows x 3 x dim x inter) against
//     cuBLASLt's FP8 GEMM of the same FLOPs as two dense products ([rows x
//     dim] x [2 inter x dim]^T and [rows x inter] x [dim x inter]^T, e4m3,
//     per-tensor scales, bf16 out) measured in the same run.
//
//   mxfp4_grouped_gemm_bench [EXPERTS [RANKS [mma|wgmma|wgmma_f16 [PREFILL_TOKENS]]]]
//                                                 (default 384 8 mma 4096)

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/cublaslt_fp8.h"
#include "kernels/cuda/decode/swiglu.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.h"
#include "kernels/cuda/moe/expert_ffn.h"
#include "kernels/cuda/moe/mxfp4_bf16_gemm_sm90.h"
#include "kernels/cuda/moe/mxfp4_fp8_tiles.h"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_sm90.h"

namespace weir::kernels::cuda {
namespace {

void Ok(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

constexpr int64_t kDim = 5120, kInter = 2304;
constexpr int kTopk = 6;
constexpr int kLayers = 8;  // weight sets rotated through (cold reads)
constexpr int kCallsPerGraph = 16;

template <typename T>
T* DeviceAlloc(int64_t n) {
  T* p = nullptr;
  WEIR_BENCH_CHECK(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T)));
  return p;
}

template <typename T>
T* Upload(const std::vector<T>& host) {
  T* p = DeviceAlloc<T>(static_cast<int64_t>(host.size()));
  WEIR_BENCH_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Fills `bytes` of device memory from a 16 MB device pattern (offset by `seed`).
void Fill(uint8_t* dst, int64_t bytes, const uint8_t* pattern, int seed) {
  constexpr int64_t kPattern = 16 << 20;
  const int64_t shift = (static_cast<int64_t>(seed) * 4099) % 4096;
  for (int64_t off = 0; off < bytes;) {
    const int64_t n = std::min(kPattern - shift, bytes - off);
    WEIR_BENCH_CHECK(cudaMemcpy(dst + off, pattern + shift, n, cudaMemcpyDeviceToDevice));
    off += n;
  }
}

// Per-call time (us) of `calls` enqueues captured in one graph (call c gets c).
double GraphUs(const std::function<void(int, cudaStream_t)>& enqueue, cudaStream_t stream) {
  return GraphMedianMs(enqueue, kCallsPerGraph, stream, 15, 3) * 1e3 / kCallsPerGraph;
}

// Stored bytes of one expert.
constexpr int64_t kW13Bytes = 2 * (kInter * kDim / 2 + kInter * kDim / 32);
constexpr int64_t kW2Bytes = kDim * kInter / 2 + kDim * kInter / 32;

// One layer's local experts, stored form, and the pointer arrays.
struct LayerWeights {
  uint8_t* storage = nullptr;
  const uint8_t** w1 = nullptr;  // device arrays [local]
  const uint8_t** w1s = nullptr;
  const uint8_t** w3 = nullptr;
  const uint8_t** w3s = nullptr;
  const uint8_t** w2 = nullptr;
  const uint8_t** w2s = nullptr;
};

LayerWeights MakeLayer(int local, const uint8_t* codes, const uint8_t* scales, int seed) {
  LayerWeights l;
  const int64_t codes13 = kInter * kDim / 2, scales13 = kInter * kDim / 32;
  const int64_t codes2 = kDim * kInter / 2, scales2 = kDim * kInter / 32;
  l.storage = DeviceAlloc<uint8_t>(local * (kW13Bytes + kW2Bytes));
  std::vector<const uint8_t*> p[6];
  uint8_t* at = l.storage;
  for (int e = 0; e < local; ++e) {
    const int64_t sizes[6] = {codes13, scales13, codes13, scales13, codes2, scales2};
    for (int i = 0; i < 6; ++i) {
      Fill(at, sizes[i], i % 2 == 0 ? codes : scales, seed * 64 + e * 6 + i);
      p[i].push_back(at);
      at += sizes[i];
    }
  }
  const uint8_t*** arrays[6] = {&l.w1, &l.w1s, &l.w3, &l.w3s, &l.w2, &l.w2s};
  for (int i = 0; i < 6; ++i) *arrays[i] = Upload(p[i]);
  return l;
}

// One layer's routing and activations for a batch.
struct Step {
  int64_t rows = 0;        // capacity: tokens * topk (the launch's row bound)
  int64_t local_rows = 0;  // rows that land on this rank
  int hit = 0;             // local experts with rows
  std::vector<int64_t> offsets;
  int64_t* d_offsets = nullptr;
  uint8_t *x = nullptr, *xs = nullptr, *h = nullptr, *hs = nullptr;
  float *rw = nullptr, *y = nullptr;
};

Step MakeStep(int64_t tokens, int experts, int local, std::mt19937& rng, const uint8_t* codes,
              const uint8_t* scales, int seed) {
  Step s;
  s.rows = tokens * kTopk;
  std::vector<int64_t> counts(local, 0);
  std::vector<int> ids(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int i = 0; i < experts; ++i) ids[i] = i;
    for (int k = 0; k < kTopk; ++k) {  // partial Fisher-Yates: 6 distinct experts
      std::uniform_int_distribution<int> pick(k, experts - 1);
      std::swap(ids[k], ids[pick(rng)]);
      if (ids[k] < local) ++counts[ids[k]];
    }
  }
  s.offsets = {0};
  for (int64_t c : counts) {
    s.offsets.push_back(s.offsets.back() + c);
    s.hit += c > 0;
  }
  s.local_rows = s.offsets.back();
  s.d_offsets = Upload(s.offsets);
  s.x = DeviceAlloc<uint8_t>(s.rows * kDim);
  s.xs = DeviceAlloc<uint8_t>(s.rows * kDim / 32);
  Fill(s.x, s.rows * kDim, codes, seed);
  Fill(s.xs, s.rows * kDim / 32, scales, seed + 1);
  std::vector<float> rw(s.rows, 0.4f);
  s.rw = Upload(rw);
  s.h = DeviceAlloc<uint8_t>(s.rows * kInter);
  s.hs = DeviceAlloc<uint8_t>(s.rows * kInter / 32);
  s.y = DeviceAlloc<float>(s.rows * kDim);
  return s;
}

void FreeStep(Step& s) {
  for (void* p : {static_cast<void*>(s.d_offsets), static_cast<void*>(s.x),
                  static_cast<void*>(s.xs), static_cast<void*>(s.h), static_cast<void*>(s.hs),
                  static_cast<void*>(s.rw), static_cast<void*>(s.y)}) {
    cudaFree(p);
  }
}

// The block-sum math of every call (argv[3]: mma or wgmma).
Mxfp4GemmMath g_math = Mxfp4GemmMath::kMmaF16;
// kWgmmaF16 has no kW8M128 (its f16 X tile does not fit).
bool MathRuns(Mxfp4GroupedTile t) {
  return !(g_math == Mxfp4GemmMath::kWgmmaF16 && t == Mxfp4GroupedTile::kW8M128);
}

// The rows a hit expert is expected to get, as the decoder's hint computes it
// for its own batch b (b x top-k over its local experts, every rank stepping
// b tokens): here `tokens` is the batch of all `ranks` together, so b =
// tokens / ranks and the hint is tokens x top-k / experts. kAuto takes its
// tiles from this (not from the launch's row capacity, tokens x top-k, which
// counts rows that land on other ranks).
int64_t RowsPerExpertHint(int64_t tokens, int experts) {
  return std::max<int64_t>(tokens * kTopk / experts, 1);
}

Mxfp4ExpertFfnParams FfnParams(const LayerWeights& w, const Step& s, int local, int64_t tokens,
                               int experts) {
  return {.x = s.x,
          .x_scales = s.xs,
          .expert_offsets = s.d_offsets,
          .route_weight = s.rw,
          .w1 = w.w1,
          .w1_scales = w.w1s,
          .w3 = w.w3,
          .w3_scales = w.w3s,
          .w2 = w.w2,
          .w2_scales = w.w2s,
          .h = s.h,
          .h_scales = s.hs,
          .y = s.y,
          .rows = s.rows,
          .dim = kDim,
          .inter = kInter,
          .num_experts = local,
          .rows_per_expert_hint = RowsPerExpertHint(tokens, experts),  // kAuto's tiles
          .math = g_math};
}

Mxfp4GroupedGateUpParams GateUpParams(const Mxfp4ExpertFfnParams& f, Mxfp4GroupedTile tile) {
  return {.x = f.x,
          .x_scales = f.x_scales,
          .expert_offsets = f.expert_offsets,
          .w1 = f.w1,
          .w1_scales = f.w1_scales,
          .w3 = f.w3,
          .w3_scales = f.w3_scales,
          .route_weight = f.route_weight,
          .h = f.h,
          .h_scales = f.h_scales,
          .rows = f.rows,
          .inter = f.inter,
          .dim = f.dim,
          .num_experts = f.num_experts,
          .rows_per_expert_hint = f.rows_per_expert_hint,
          .tile = tile,
          .math = f.math};
}

Mxfp4GroupedGemmParams DownParams(const Mxfp4ExpertFfnParams& f, Mxfp4GroupedTile tile) {
  return {.x = f.h,
          .x_scales = f.h_scales,
          .expert_offsets = f.expert_offsets,
          .w = f.w2,
          .w_scales = f.w2_scales,
          .y = f.y,
          .rows = f.rows,
          .n = f.dim,
          .k = f.inter,
          .num_experts = f.num_experts,
          .round_bf16 = true,
          .rows_per_expert_hint = f.rows_per_expert_hint,
          .tile = tile,
          .math = f.math};
}

// The reference GroupedExpertFfn on layer `s`'s routing: fp32 weights (the
// dequantized form it needs) for the hit experts only.
double ReferenceUs(const Step& s, int local, cudaStream_t stream) {
  std::vector<float*> owned;
  std::vector<const float*> p1(local, nullptr), p3(local, nullptr), p2(local, nullptr);
  for (int e = 0; e < local; ++e) {
    if (s.offsets[e + 1] == s.offsets[e]) continue;
    for (auto* v : {&p1, &p3, &p2}) {
      float* w = DeviceAlloc<float>(kInter * kDim);
      WEIR_BENCH_CHECK(cudaMemset(w, 0x3C, kInter * kDim * sizeof(float)));  // 0.0115...
      owned.push_back(w);
      (*v)[e] = w;
    }
  }
  const float** d1 = Upload(p1);
  const float** d3 = Upload(p3);
  const float** d2 = Upload(p2);
  float* x = DeviceAlloc<float>(s.rows * kDim);
  float* hidden = DeviceAlloc<float>(s.rows * kInter);
  float* y = DeviceAlloc<float>(s.rows * kDim);
  WEIR_BENCH_CHECK(cudaMemset(x, 0x3C, s.rows * kDim * sizeof(float)));
  const GroupedExpertFfnParams params{.x = x,
                                      .group_offsets = s.d_offsets,
                                      .route_weight = s.rw,
                                      .w1 = d1,
                                      .w3 = d3,
                                      .w2 = d2,
                                      .hidden = hidden,
                                      .y = y,
                                      .rows = s.rows,
                                      .dim = kDim,
                                      .inter = kInter,
                                      .num_groups = local};
  const double ms = MedianMs([&] { Ok(GroupedExpertFfn(params, stream)); }, stream, 3, 1);
  for (float* w : owned) cudaFree(w);
  for (void* q : {static_cast<void*>(d1), static_cast<void*>(d3), static_cast<void*>(d2),
                  static_cast<void*>(x), static_cast<void*>(hidden), static_cast<void*>(y)}) {
    cudaFree(q);
  }
  return ms * 1e3;
}

// The prefill table (see the top of the file): layer 0's weights, `tokens`
// tokens routed as in decode.
// One of Mxfp4Bf16GroupedGemm's forms, and a call of it (the bf16 route's
// columns in the prefill table and the decode rows).
struct Bf16RouteForm {
  const char* name;
  int widener_warps;
  bool register_a;
  int x_rows;
  bool deep_ring;
  bool stage_scale_test = false;
  bool fit_tile_rows = false;
  int warpgroups = 0;
  bool ballot_search = false;
  bool tail_rows = false;
  bool x_multicast = false;
  bool decode_mma = false;
};

absl::Status Bf16Route(const uint16_t* x, const int64_t* offsets, const uint8_t* const* w,
                       const uint8_t* const* ws, void* y, int64_t rows, int64_t n, int64_t k,
                       int experts, dense::Fp8GemmOutput output, const Bf16RouteForm& form,
                       cudaStream_t stream) {
  return Mxfp4Bf16GroupedGemm({.x = x,
                               .expert_offsets = offsets,
                               .w = w,
                               .w_scales = ws,
                               .y = y,
                               .rows = rows,
                               .n = n,
                               .k = k,
                               .num_experts = experts,
                               .output = output,
                               .widener_warps = form.widener_warps,
                               .register_a = form.register_a,
                               .x_rows = form.x_rows,
                               .deep_ring = form.deep_ring,
                               .stage_scale_test = form.stage_scale_test,
                               .fit_tile_rows = form.fit_tile_rows,
                               .consumer_warpgroups = form.warpgroups,
                               .ballot_group_search = form.ballot_search,
                               .tail_rows = form.tail_rows,
                               .x_multicast = form.x_multicast,
                               .decode_mma = form.decode_mma},
                              stream);
}

void Prefill(const LayerWeights& layer, int64_t tokens, int experts, int local, double copy_gbps,
             std::mt19937& rng, const uint8_t* codes, const uint8_t* scales, cudaStream_t stream) {
  Step s = MakeStep(tokens, experts, local, rng, codes, scales, 7);
  const Mxfp4ExpertFfnParams f = FfnParams(layer, s, local, tokens, experts);
  const double rows = static_cast<double>(s.local_rows);
  const double gu_flops = 2.0 * rows * 2 * kInter * kDim, dn_flops = 2.0 * rows * kDim * kInter;
  auto tf = [](double flops, double ms) { return ms > 0 ? flops / ms / 1e9 : 0.0; };
  Ok(Mxfp4ExpertFfn(f, stream));  // valid intermediates for down
  const double ffn_ms = MedianMs([&] { Ok(Mxfp4ExpertFfn(f, stream)); }, stream, 10);
  std::printf(
      "\nPrefill: %lld tokens, %lld local rows over %d experts (%.0f an expert); auto tiles "
      "(gate/up %s, down %s): FFN %.3f ms, %.0f TFLOP/s\n",
      static_cast<long long>(tokens), static_cast<long long>(s.local_rows), s.hit,
      rows / std::max(1, s.hit),
      Mxfp4GroupedTileName(ChooseMxfp4GroupedTile(f.rows_per_expert_hint, true, g_math)),
      Mxfp4GroupedTileName(ChooseMxfp4GroupedTile(f.rows_per_expert_hint, false, g_math)), ffn_ms,
      tf(gu_flops + dn_flops, ffn_ms));
  double gu_best = 1e30, dn_best = 1e30;
  for (Mxfp4GroupedTile t : kMxfp4GroupedTiles) {
    if (ShapeOfMxfp4GroupedTile(t).warps % 4 != 0 || !MathRuns(t)) continue;
    const double gu =
        MedianMs([&] { Ok(Mxfp4GroupedGateUp(GateUpParams(f, t), stream)); }, stream, 5);
    const double dn = MedianMs([&] { Ok(Mxfp4GroupedGemm(DownParams(f, t), stream)); }, stream, 5);
    gu_best = std::min(gu_best, gu), dn_best = std::min(dn_best, dn);
    std::printf("  %-8s gate/up %8.3f ms %6.0f TF/s | down %8.3f ms %6.0f TF/s\n",
                Mxfp4GroupedTileName(t), gu, tf(gu_flops, gu), dn, tf(dn_flops, dn));
  }
  // The experts' prefill design P (README "Not done"): the weights converted
  // to the FP8 tile form, then Fp8BlockGemm over the rows by expert (w1, w3,
  // w2; the SwiGLU and the quantization of h between them are not timed).
  {
    const int64_t w13 = kInter * kDim, w2 = kDim * kInter;
    uint8_t* c13 = DeviceAlloc<uint8_t>(int64_t{local} * 2 * w13);
    uint8_t* t13 = DeviceAlloc<uint8_t>(int64_t{local} * 2 * w13 / 1024);
    uint8_t* c2 = DeviceAlloc<uint8_t>(int64_t{local} * w2);
    uint8_t* t2 = DeviceAlloc<uint8_t>(int64_t{local} * w2 / 1024);
    int32_t* inexact = DeviceAlloc<int32_t>(3 * local);
    auto convert = [&](bool coalesced) {
      Ok(Mxfp4ToFp8Tiles({.w = layer.w1,
                          .w_scales = layer.w1s,
                          .codes = c13,
                          .tile_scales = t13,
                          .inexact = inexact,
                          .n = kInter,
                          .k = kDim,
                          .experts = local,
                          .codes_expert_stride = 2 * w13,
                          .tile_scales_expert_stride = 2 * w13 / 1024,
                          .coalesced = coalesced},
                         stream));
      Ok(Mxfp4ToFp8Tiles({.w = layer.w3,
                          .w_scales = layer.w3s,
                          .codes = c13 + w13,
                          .tile_scales = t13 + w13 / 1024,
                          .inexact = inexact + local,
                          .n = kInter,
                          .k = kDim,
                          .experts = local,
                          .codes_expert_stride = 2 * w13,
                          .tile_scales_expert_stride = 2 * w13 / 1024,
                          .coalesced = coalesced},
                         stream));
      Ok(Mxfp4ToFp8Tiles({.w = layer.w2,
                          .w_scales = layer.w2s,
                          .codes = c2,
                          .tile_scales = t2,
                          .inexact = inexact + 2 * local,
                          .n = kDim,
                          .k = kInter,
                          .experts = local,
                          .coalesced = coalesced},
                         stream));
    };
    // Bytes the conversion must move: packed codes and row scales in, e4m3
    // codes and tile scales out.
    const double conv_bytes =
        static_cast<double>(local) * 3 * kInter * kDim * (0.5 + 1.0 / 32 + 1.0 + 1.0 / 1024);
    const double warp_ms = MedianMs([&] { convert(false); }, stream, 5);
    const double conv_ms = MedianMs([&] { convert(true); }, stream, 5);
    std::printf(
        "  MXFP4 -> FP8 tiles (%d experts, %.0f MB moved): warp form %.3f ms (%.2f of copy), "
        "row-major form %.3f ms (%.2f of copy)\n",
        local, conv_bytes / 1e6, warp_ms, conv_bytes / (warp_ms * 1e-3) / 1e9 / copy_gbps, conv_ms,
        conv_bytes / (conv_ms * 1e-3) / 1e9 / copy_gbps);
    std::vector<int32_t> counts(3 * local);
    WEIR_BENCH_CHECK(cudaMemcpy(counts.data(), inexact, counts.size() * sizeof(int32_t),
                                cudaMemcpyDeviceToHost));
    int64_t inexact_tiles = 0;
    for (int32_t c : counts) inexact_tiles += c;
    float* y13 = DeviceAlloc<float>(s.rows * 2 * kInter);
    const dense::Fp8BlockGemmParams gu{.x = s.x,
                                       .x_scales = s.xs,
                                       .w = c13,
                                       .w_scales = t13,
                                       .y = y13,
                                       .m = s.rows,
                                       .n = 2 * kInter,
                                       .k = kDim,
                                       .groups = local,
                                       .group_offsets = s.d_offsets,
                                       .w_group_stride = 2 * w13,
                                       .w_scales_group_stride = 2 * w13 / 1024,
                                       .math = dense::Fp8GemmMath::kWgmma};
    const dense::Fp8BlockGemmParams dn{.x = s.h,
                                       .x_scales = s.hs,
                                       .w = c2,
                                       .w_scales = t2,
                                       .y = s.y,
                                       .m = s.rows,
                                       .n = kDim,
                                       .k = kInter,
                                       .output = dense::Fp8GemmOutput::kF32RoundedBf16,
                                       .groups = local,
                                       .group_offsets = s.d_offsets,
                                       .math = dense::Fp8GemmMath::kWgmma};
    const double gu_ms = MedianMs([&] { Ok(dense::Fp8BlockGemm(gu, stream)); }, stream, 5);
    const double dn_ms = MedianMs([&] { Ok(dense::Fp8BlockGemm(dn, stream)); }, stream, 5);
    std::printf(
        "  tile form (design P): convert %.3f ms (%lld inexact tiles), gate/up %.3f ms %.0f TF/s, "
        "down %.3f ms %.0f TF/s, all %.3f ms\n",
        conv_ms, static_cast<long long>(inexact_tiles), gu_ms, tf(gu_flops, gu_ms), dn_ms,
        tf(dn_flops, dn_ms), conv_ms + gu_ms + dn_ms);
    for (void* q : {static_cast<void*>(c13), static_cast<void*>(t13), static_cast<void*>(c2),
                    static_cast<void*>(t2), static_cast<void*>(inexact), static_cast<void*>(y13)}) {
      cudaFree(q);
    }
  }
  // The bf16 route (Mxfp4Bf16GroupedGemm): X and h in bf16 (Fp8ActBf16 of
  // their FP8 forms, timed apart), the MXFP4 codes widened in the product's
  // stages: w1 and w3 as two launches, then w2; no conversion.
  {
    uint16_t* x16 = DeviceAlloc<uint16_t>(s.rows * kDim);
    uint16_t* h16 = DeviceAlloc<uint16_t>(s.rows * kInter);
    float* g = DeviceAlloc<float>(s.rows * kInter);
    float* u = DeviceAlloc<float>(s.rows * kInter);
    const auto widen_x = [&] {
      Ok(dense::Fp8ActBf16({.codes = s.x, .scales = s.xs, .out = x16, .rows = s.rows, .cols = kDim},
                           stream));
      Ok(dense::Fp8ActBf16(
          {.codes = s.h, .scales = s.hs, .out = h16, .rows = s.rows, .cols = kInter}, stream));
    };
    widen_x();
    Bf16RouteForm form{};
    const auto product = [&](const uint16_t* x, const uint8_t* const* w, const uint8_t* const* ws,
                             void* y, int64_t n, int64_t k, dense::Fp8GemmOutput output) {
      Ok(Bf16Route(x, s.d_offsets, w, ws, y, s.rows, n, k, local, output, form, stream));
    };
    const double widen_ms = MedianMs(widen_x, stream, 5);
    // Four and eight warps widening the codes (Mxfp4Bf16GroupedGemmParams::
    // widener_warps), then the consumers widening their own register
    // fragments (register_a) over 128 or 80 X rows, with the producer waiting
    // for its copies or completing them on the ring's barriers (deep_ring),
    // or testing a stage's four scales once (stage_scale_test), and with it
    // the wgmma N fit to each tile's rows (fit_tile_rows), over three
    // consumer warpgroups (consumer_warpgroups), and the CTAs finding their
    // expert by a ballot (ballot_group_search), and 256 X rows a CTA over two
    // warpgroups (x_rows 256: wgmma N 256), with an expert's last tile
    // holding up to 32 rows past 256 (tail_rows: at 513 rows an expert two
    // tiles, not three), and by CTA pairs sharing each X stage (x_multicast);
    // the same bits.
    for (const Bf16RouteForm& f :
         {Bf16RouteForm{"4 widener warps", 4, false, 0, false},
          Bf16RouteForm{"8 widener warps", 8, false, 0, false},
          Bf16RouteForm{"register A", 0, true, 0, false},
          Bf16RouteForm{"register A, 80 X rows", 0, true, 80, false},
          Bf16RouteForm{"register A, deep ring", 0, true, 0, true},
          Bf16RouteForm{"register A, 80 X rows, deep ring", 0, true, 80, true},
          Bf16RouteForm{"register A, one scale test a stage", 0, true, 0, false, true},
          Bf16RouteForm{"register A, 80 X rows, one scale test a stage", 0, true, 80, false, true},
          Bf16RouteForm{"register A, one scale test a stage, wgmma N fit to the rows", 0, true, 0,
                        false, true, true},
          Bf16RouteForm{"register A, one scale test a stage, three warpgroups", 0, true, 0, false,
                        true, false, 3},
          Bf16RouteForm{"register A, one scale test a stage, fitted N, three warpgroups", 0, true,
                        0, false, true, true, 3},
          Bf16RouteForm{"register A, one scale test a stage, three warpgroups, ballot search", 0,
                        true, 0, false, true, false, 3, true},
          Bf16RouteForm{"register A, deep ring, one scale test a stage, three warpgroups", 0, true,
                        0, true, true, false, 3},
          Bf16RouteForm{"register A, deep ring, one scale test a stage, three warpgroups, ballot "
                        "search",
                        0, true, 0, true, true, false, 3, true},
          Bf16RouteForm{"register A, 256 X rows, deep ring, one scale test a stage, ballot search",
                        0, true, 256, true, true, false, 0, true},
          Bf16RouteForm{"register A, 256 X rows and a 32-row tail, deep ring, one scale test a "
                        "stage, ballot search",
                        0, true, 256, true, true, false, 0, true, true},
          Bf16RouteForm{"register A, 256 X rows by CTA pairs, deep ring, one scale test a stage, "
                        "ballot search",
                        0, true, 256, true, true, false, 0, true, false, true}}) {
      form = f;
      const double gu_ms = MedianMs(
          [&] {
            product(x16, layer.w1, layer.w1s, g, kInter, kDim, dense::Fp8GemmOutput::kF32);
            product(x16, layer.w3, layer.w3s, u, kInter, kDim, dense::Fp8GemmOutput::kF32);
          },
          stream, 5);
      const double dn_ms = MedianMs(
          [&] {
            product(h16, layer.w2, layer.w2s, s.y, kDim, kInter,
                    dense::Fp8GemmOutput::kF32RoundedBf16);
          },
          stream, 5);
      std::printf(
          "  bf16 route (MXFP4 widened in the stages, %s): X and h to bf16 %.3f "
          "ms, gate/up %.3f ms %.0f TF/s, down %.3f ms %.0f TF/s, all %.3f ms\n",
          f.name, widen_ms, gu_ms, tf(gu_flops, gu_ms), dn_ms, tf(dn_flops, dn_ms),
          widen_ms + gu_ms + dn_ms);
    }
    // The gate / up / SwiGLU form (Mxfp4Bf16GroupedGemmParams::swiglu) against
    // the 256-row tile's gate and up launches and the SwiGLU's FP8 launch
    // (both write h's FP8 form into the step's h).
    {
      form = Bf16RouteForm{"256 X rows", 0, true, 256, true, true, false, 0, true};
      const double apart_ms = MedianMs(
          [&] {
            product(x16, layer.w1, layer.w1s, g, kInter, kDim, dense::Fp8GemmOutput::kF32);
            product(x16, layer.w3, layer.w3s, u, kInter, kDim, dense::Fp8GemmOutput::kF32);
            Ok(decode::Swiglu({.gate = g,
                               .up = u,
                               .rows = s.rows,
                               .inter = kInter,
                               .round_bf16 = true,
                               .codes = s.h,
                               .scales = s.hs,
                               .row_count = s.d_offsets + local},
                              stream));
          },
          stream, 5);
      const auto fused = [&](bool tail, bool pairs) {
        return MedianMs(
            [&] {
              Ok(Mxfp4Bf16GroupedGemm({.x = x16,
                                       .expert_offsets = s.d_offsets,
                                       .w = layer.w1,
                                       .w_scales = layer.w1s,
                                       .rows = s.rows,
                                       .n = kInter,
                                       .k = kDim,
                                       .num_experts = local,
                                       .register_a = true,
                                       .x_rows = 256,
                                       .deep_ring = true,
                                       .stage_scale_test = true,
                                       .ballot_group_search = true,
                                       .swiglu = true,
                                       .tail_rows = tail,
                                       .x_multicast = pairs,
                                       .w_up = layer.w3,
                                       .w_up_scales = layer.w3s,
                                       .swiglu_round_bf16 = true,
                                       .h_codes = s.h,
                                       .h_scales = s.hs},
                                      stream));
            },
            stream, 5);
      };
      const double fused_ms = fused(false, false), tail_ms = fused(true, false);
      const double pairs_ms = fused(false, true);
      std::printf(
          "  bf16 route, gate/up and the SwiGLU's FP8 form (256 X rows, ballot search): "
          "apart %.3f ms, fused %.3f ms, fused with the 32-row tail %.3f ms, fused by CTA "
          "pairs %.3f ms\n",
          apart_ms, fused_ms, tail_ms, pairs_ms);
    }
    for (void* q : {static_cast<void*>(x16), static_cast<void*>(h16), static_cast<void*>(g),
                    static_cast<void*>(u)}) {
      cudaFree(q);
    }
  }
  // The ceiling: cuBLASLt FP8 on the same FLOPs as two dense products.
  std::string error;
  const std::unique_ptr<CublasLtFp8> lt = CublasLtFp8::Create(&error);
  if (lt == nullptr) {
    std::printf("  cuBLASLt unavailable (%s): no ceiling\n", error.c_str());
    FreeStep(s);
    return;
  }
  const int64_t m = s.local_rows;
  uint8_t* w = DeviceAlloc<uint8_t>(2 * kInter * kDim);
  uint8_t* x = DeviceAlloc<uint8_t>(m * kDim);
  void* y = DeviceAlloc<uint16_t>(m * std::max(2 * kInter, kDim));  // bf16 [m, n] of either
  Fill(w, 2 * kInter * kDim, codes, 3);
  Fill(x, m * kDim, codes, 4);
  const double lt_gu = lt->Ms(w, x, y, m, 2 * kInter, kDim, CUDA_R_16BF, stream);
  const double lt_dn = lt->Ms(w, x, y, m, kDim, kInter, CUDA_R_16BF, stream);
  std::printf(
      "  cuBLASLt FP8 (dense, same FLOPs): gate/up %.3f ms %.0f TF/s, down %.3f ms %.0f TF/s; "
      "FFN ours/Lt = %.2f (best tiles %.2f)\n",
      lt_gu, tf(gu_flops, lt_gu), lt_dn, tf(dn_flops, lt_dn),
      lt_gu > 0 && lt_dn > 0 ? (lt_gu + lt_dn) / ffn_ms : 0.0,
      lt_gu > 0 && lt_dn > 0 ? (lt_gu + lt_dn) / (gu_best + dn_best) : 0.0);
  for (void* q : {static_cast<void*>(w), static_cast<void*>(x), y}) cudaFree(q);
  FreeStep(s);
}

int Run(int experts, int ranks, int64_t prefill_tokens) {
  const int local = experts / ranks;
  cudaStream_t stream;
  WEIR_BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy_gbps = CopyGbps(stream, 10, 2);
  std::printf("device copy (1 GiB, read + write): %.0f GB/s\n", copy_gbps);
  std::printf(
      "V4.1-Flash MoE decode slice: %d experts / %d ranks = %d local, top-%d, dim %lld, "
      "inter %lld; expert = %.2f MB stored (w1+w3 %.2f, w2 %.2f)\n",
      experts, ranks, local, kTopk, static_cast<long long>(kDim), static_cast<long long>(kInter),
      (kW13Bytes + kW2Bytes) / 1e6, kW13Bytes / 1e6, kW2Bytes / 1e6);

  // Random patterns: any byte is a finite e2m1 pair; e4m3 codes avoid NaN;
  // scales 2^-7 .. 2^4.
  std::mt19937 rng(2024);
  std::vector<uint8_t> pattern(16 << 20), scale_pattern(16 << 20);
  std::uniform_int_distribution<int> byte(0, 255), scale(120, 131);
  for (auto& b : pattern) {
    int v = byte(rng);
    if ((v & 0x7F) == 0x7F) v = 0x3E;
    b = static_cast<uint8_t>(v);
  }
  for (auto& b : scale_pattern) b = static_cast<uint8_t>(scale(rng));
  const uint8_t* codes = Upload(pattern);
  const uint8_t* scales = Upload(scale_pattern);
  std::vector<LayerWeights> layers;
  for (int l = 0; l < kLayers; ++l) layers.push_back(MakeLayer(local, codes, scales, l));
  WEIR_BENCH_CHECK(cudaDeviceSynchronize());

  std::printf(
      "\nPer layer call (graph replays of %d calls over %d layers' weights, median; cold).\n"
      "MB = stored bytes that must be read: hit experts' w1+w3+w2 codes and scales + X + the FP8 "
      "intermediate.\n",
      kCallsPerGraph, kLayers);
  std::printf(
      "%-6s %-6s %-5s %8s | %9s %7s %6s | %8s %8s | %-7s %8s %7s | %-7s %8s %7s | %9s | "
      "%10s %7s\n",
      "batch", "rows", "hit", "MB", "ffn us", "GB/s", "/copy", "hot us", "empty us", "gu tile",
      "gu us", "/copy", "dn tile", "dn us", "/copy", "best sum", "ref us", "ref/ffn");
  if (prefill_tokens > 0)
    Prefill(layers[0], prefill_tokens, experts, local, copy_gbps, rng, codes, scales, stream);
  for (int64_t tokens : {1, 8, 32, 64}) {
    std::vector<Step> steps;
    for (int l = 0; l < kLayers; ++l) {
      steps.push_back(MakeStep(tokens, experts, local, rng, codes, scales, 100 + l));
    }
    double bytes = 0, gu_bytes = 0, dn_bytes = 0, rows = 0, hit = 0;
    for (const Step& s : steps) {
      gu_bytes += s.hit * double(kW13Bytes) + s.local_rows * double(kDim) * 33 / 32;
      dn_bytes += s.hit * double(kW2Bytes) + s.local_rows * double(kInter) * 33 / 32;
      rows += s.local_rows;
      hit += s.hit;
    }
    gu_bytes /= kLayers, dn_bytes /= kLayers, rows /= kLayers, hit /= kLayers;
    bytes = gu_bytes + dn_bytes;
    std::vector<Mxfp4ExpertFfnParams> params;
    for (int l = 0; l < kLayers; ++l)
      params.push_back(FfnParams(layers[l], steps[l], local, tokens, experts));
    for (const auto& p : params) Ok(Mxfp4ExpertFfn(p, stream));  // valid intermediates
    WEIR_BENCH_CHECK(cudaStreamSynchronize(stream));

    const double ffn = GraphUs(
        [&](int c, cudaStream_t st) { Ok(Mxfp4ExpertFfn(params[c % kLayers], st)); }, stream);
    // Hot: layer 0 repeated (its weights stay in L2); layer 0's hit count is
    // printed below the row, the cold figure averages all layers.
    const double hot =
        GraphUs([&](int, cudaStream_t st) { Ok(Mxfp4ExpertFfn(params[0], st)); }, stream);
    // No local rows at all: the launch floor (every CTA exits at once).
    std::vector<int64_t> zeros(local + 1, 0);
    int64_t* d_zero = Upload(zeros);
    Mxfp4ExpertFfnParams empty = params[0];
    empty.expert_offsets = d_zero;
    const double empty_us =
        GraphUs([&](int, cudaStream_t st) { Ok(Mxfp4ExpertFfn(empty, st)); }, stream);
    Mxfp4GroupedTile best_gu = Mxfp4GroupedTile::kAuto, best_dn = Mxfp4GroupedTile::kAuto;
    double gu_us = 1e30, dn_us = 1e30;
    for (Mxfp4GroupedTile t : kMxfp4GroupedTiles) {
      // gate/up: whole FP8 blocks
      if (ShapeOfMxfp4GroupedTile(t).warps % 4 != 0 || !MathRuns(t)) continue;
      const double us = GraphUs(
          [&](int c, cudaStream_t st) {
            Ok(Mxfp4GroupedGateUp(GateUpParams(params[c % kLayers], t), st));
          },
          stream);
      std::printf("  batch %lld gate/up %-7s %8.2f us\n", static_cast<long long>(tokens),
                  Mxfp4GroupedTileName(t), us);
      if (us < gu_us) gu_us = us, best_gu = t;
    }
    for (Mxfp4GroupedTile t : kMxfp4GroupedTiles) {
      // wgmma runs whole warpgroups: no 2-warp tile.
      if (Mxfp4MathIsWgmma(g_math) && ShapeOfMxfp4GroupedTile(t).warps % 4 != 0) continue;
      if (!MathRuns(t)) continue;
      const double us = GraphUs(
          [&](int c, cudaStream_t st) {
            Ok(Mxfp4GroupedGemm(DownParams(params[c % kLayers], t), st));
          },
          stream);
      std::printf("  batch %lld down    %-7s %8.2f us\n", static_cast<long long>(tokens),
                  Mxfp4GroupedTileName(t), us);
      if (us < dn_us) dn_us = us, best_dn = t;
    }
    // The bf16 register route at this batch (prompt_bf16_experts' kernel over a
    // decode step's rows, X and h widened to bf16 first, not timed): the tile
    // of the fewest X rows that holds an expert's average, the deep ring.
    {
      const Bf16RouteForm decode_form{
          "decode", 0, true,
          Mxfp4Bf16NarrowestXRows(static_cast<int64_t>(std::ceil(hit > 0 ? rows / hit : 1.0))),
          true};
      const int64_t cap = steps[0].rows;
      uint16_t* x16 = DeviceAlloc<uint16_t>(cap * kDim);
      uint16_t* h16 = DeviceAlloc<uint16_t>(cap * kInter);
      float* g = DeviceAlloc<float>(cap * kInter);
      WEIR_BENCH_CHECK(cudaMemset(x16, 0, cap * kDim * 2));
      WEIR_BENCH_CHECK(cudaMemset(h16, 0, cap * kInter * 2));
      // The decode form (decode_mma: mma.sync, each warp's W through its own
      // ring) over 8 or 16 X rows a CTA, the same bits.
      const Bf16RouteForm mma_form = [&] {
        Bf16RouteForm f{"decode mma", 0, false, decode_form.x_rows <= 8 ? 8 : 16, false};
        f.decode_mma = true;
        return f;
      }();
      const auto route = [&](int c, const uint16_t* x, bool down, cudaStream_t st,
                             const Bf16RouteForm& form) {
        const LayerWeights& L = layers[c % kLayers];
        const Step& st_ = steps[c % kLayers];
        const auto one = [&](const uint8_t* const* w, const uint8_t* const* ws, void* y, int64_t n,
                             int64_t k) {
          Ok(Bf16Route(x, st_.d_offsets, w, ws, y, st_.rows, n, k, local,
                       dense::Fp8GemmOutput::kF32, form, st));
        };
        if (down) {
          one(L.w2, L.w2s, st_.y, kDim, kInter);
        } else {
          one(L.w1, L.w1s, g, kInter, kDim);
          one(L.w3, L.w3s, g, kInter, kDim);
        }
      };
      for (const Bf16RouteForm* form : {&decode_form, &mma_form}) {
        const double r_gu =
            GraphUs([&](int c, cudaStream_t st) { route(c, x16, false, st, *form); }, stream);
        const double r_dn =
            GraphUs([&](int c, cudaStream_t st) { route(c, h16, true, st, *form); }, stream);
        std::printf(
            "  batch %lld bf16 route (%s over %d X rows): gate/up %8.2f us "
            "(/copy %.2f), down %8.2f us (/copy %.2f)\n",
            static_cast<long long>(tokens),
            form->decode_mma ? "decode form, mma.sync" : "register A, deep ring", form->x_rows,
            r_gu, gu_bytes / r_gu / 1e3 / copy_gbps, r_dn, dn_bytes / r_dn / 1e3 / copy_gbps);
      }
      // The decode form's gated launch as the decoder runs it (swiglu: gate,
      // up, the SwiGLU and h's FP8 form and bf16 values in one), against
      // the gate's and up product's bytes.
      {
        uint16_t* hb = DeviceAlloc<uint16_t>(cap * kInter);
        const double r_g = GraphUs(
            [&](int c, cudaStream_t st) {
              const LayerWeights& L = layers[c % kLayers];
              const Step& st_ = steps[c % kLayers];
              Ok(Mxfp4Bf16GroupedGemm({.x = x16,
                                       .expert_offsets = st_.d_offsets,
                                       .w = L.w1,
                                       .w_scales = L.w1s,
                                       .rows = st_.rows,
                                       .n = kInter,
                                       .k = kDim,
                                       .num_experts = local,
                                       .x_rows = mma_form.x_rows,
                                       .swiglu = true,
                                       .decode_mma = true,
                                       .w_up = L.w3,
                                       .w_up_scales = L.w3s,
                                       .swiglu_route_weight = st_.rw,
                                       .h_codes = st_.h,
                                       .h_scales = st_.hs,
                                       .h_bf16 = hb},
                                      st));
            },
            stream);
        std::printf(
            "  batch %lld bf16 route (decode form, gated launch over %d X rows): gate/up + SwiGLU "
            "%8.2f us (/copy %.2f)\n",
            static_cast<long long>(tokens), mma_form.x_rows, r_g, gu_bytes / r_g / 1e3 / copy_gbps);
        cudaFree(hb);
      }
      for (void* q : {static_cast<void*>(x16), static_cast<void*>(h16), static_cast<void*>(g)}) {
        cudaFree(q);
      }
    }
    const double ref = ReferenceUs(steps[0], local, stream);
    auto ratio = [&](double b, double us) { return b / us / 1e3 / copy_gbps; };
    std::printf(
        "%-6lld %-6.1f %-5.2f %8.2f | %9.2f %7.0f %6.2f | %8.2f %8.2f | %-7s %8.2f %7.2f | "
        "%-7s %8.2f %7.2f | %9.2f | %10.1f %7.1f\n",
        static_cast<long long>(tokens), rows, hit, bytes / 1e6, ffn, bytes / ffn / 1e3,
        ratio(bytes, ffn), hot, empty_us, Mxfp4GroupedTileName(best_gu), gu_us,
        ratio(gu_bytes, gu_us), Mxfp4GroupedTileName(best_dn), dn_us, ratio(dn_bytes, dn_us),
        gu_us + dn_us, ref, ref / ffn);
    std::printf("  (hot and ref: layer 0 only: %lld rows, %d hit experts)\n",
                static_cast<long long>(steps[0].local_rows), steps[0].hit);
    cudaFree(d_zero);
    for (Step& s : steps) FreeStep(s);
  }
  WEIR_BENCH_CHECK(cudaStreamSynchronize(stream));
  WEIR_BENCH_CHECK(cudaGetLastError());
  WEIR_BENCH_CHECK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace weir::kernels::cuda

int main(int argc, char** argv) {
  const int experts = argc > 1 ? std::atoi(argv[1]) : 384;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 8;
  const std::string math = argc > 3 ? argv[3] : "mma";
  const long long prefill = argc > 4 ? std::atoll(argv[4]) : 4096;
  if (experts <= 0 || ranks <= 0 || experts % ranks != 0 ||
      (math != "mma" && math != "wgmma" && math != "wgmma_f16") || prefill < 0) {
    std::fprintf(stderr,
                 "usage: mxfp4_grouped_gemm_bench [EXPERTS [RANKS [mma|wgmma|wgmma_f16 "
                 "[PREFILL_TOKENS]]]]\n");
    return 2;
  }
  if (math == "wgmma") weir::kernels::cuda::g_math = weir::kernels::cuda::Mxfp4GemmMath::kWgmma;
  if (math == "wgmma_f16") {
    weir::kernels::cuda::g_math = weir::kernels::cuda::Mxfp4GemmMath::kWgmmaF16;
  }
  std::printf("block sums: %s\n", math == "wgmma"       ? "wgmma (FP8)"
                                  : math == "wgmma_f16" ? "wgmma f16 (the mma pair's bits)"
                                                        : "mma.sync f16 pair");
  return weir::kernels::cuda::Run(experts, ranks, prefill);
}
