// DeviceDecoder: the MoE layer inside the step (gate, routed experts as
// grouped products, shared expert, combine), the expert-parallel exchange
// with the other ranks (Dispatch, Return), the expert slots of a placement
// and their replacement (SetPlacement), and the expert load counts.

#include "worker/model/device_decoder_impl.h"

namespace weir::model {
using device_decoder_internal::EncodedExpert;
using device_decoder_internal::EncodeMxfp4Exactly;
using device_decoder_internal::LayerDev;
using device_decoder_internal::LocalExperts;
using device_decoder_internal::PlanExpertSlots;

namespace device_decoder_internal {

// The expert slots of `options` (INVALID_ARGUMENT for a placement that does
// not fit the config or the communicator).
absl::StatusOr<LocalExperts> PlanExpertSlots(const ModelConfig& c,
                                            const DeviceDecoderOptions& options) {
  LocalExperts x;
  const int logical = static_cast<int>(c.n_routed_experts);
  if (options.communicator == nullptr) {
    x.per_rank = logical;
    std::vector<int> identity(logical);
    for (int e = 0; e < logical; ++e) identity[e] = e;
    x.local.assign(c.n_layers, identity);
    return x;
  }
  x.world = options.communicator->world_size();
  x.rank = options.communicator->rank().value();
  const ExpertPlacement pl = options.placement.num_layers == 0
                                 ? IdentityPlacement(c.n_layers, logical, x.world)
                                 : options.placement;
  if (pl.world_size != x.world || pl.num_layers != c.n_layers || pl.num_logical != logical) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceDecoder: the expert placement is for ", pl.world_size, " ranks, ", pl.num_layers,
        " layers, ", pl.num_logical, " experts; the communicator has ", x.world,
        " ranks and the model ", c.n_layers, " layers of ", logical, " experts"));
  }
  RETURN_IF_ERROR(ValidatePlacement(pl));
  x.per_rank = pl.slots_per_rank;
  x.local.assign(c.n_layers, std::vector<int>(x.per_rank));
  x.replicas.assign(c.n_layers, {});
  const size_t physical = pl.num_physical();
  for (int l = 0; l < c.n_layers; ++l) {
    for (int s = 0; s < x.per_rank; ++s) x.local[l][s] = pl.logical(l, x.rank * x.per_rank + s);
    RETURN_IF_ERROR(kc::BuildReplicaTable(
        std::span<const int32_t>(pl.physical_to_logical).subspan(l * physical, physical), logical,
        &x.replicas[l]));
  }
  return x;
}

}  // namespace device_decoder_internal

// FP8 form of a bound input, made once (the reference's act_quant).
absl::Status DeviceDecoder::Impl::Fp8Input(SharedInput& in) {
  if (in.has_fp8) return absl::OkStatus();
  if (in.src == nullptr || in.rows * in.cols > in.capacity) {
    return absl::InternalError("DeviceDecoder: FP8 form of an unbound or oversized input");
  }
  RETURN_IF_ERROR(dense::ActQuantFp8(
      {.x = in.src, .codes = in.codes, .scales = in.scales, .rows = in.rows, .cols = in.cols},
      stream));
  in.has_fp8 = true;
  return absl::OkStatus();
}

// True when the shared expert's w1 and w3 run as one two-group FP8 launch
// over the one input (both FP8 of one shape, laid out so the strides are
// positive, at least a weight apart and aligned, outputs likewise).
bool DeviceDecoder::Impl::SharedGateUp(const LayerDev& L, int64_t b) const {
  const DevDense &w1 = L.sw1, &w3 = L.sw3;
  if (w1.codes == nullptr || w3.codes == nullptr || w1.out != w3.out || w1.in != w3.in ||
      w1.in != c.dim || b * c.dim > h_in.capacity) {
    return false;
  }
  const int64_t cs = w3.codes - w1.codes, ss = w3.scales - w1.scales, ys = su - sg;
  const int splits = FastSplits(w1.out, w1.in, 1);
  return cs >= w1.out * w1.in && cs % 16 == 0 && ss >= (w1.out + 31) / 32 * (w1.in / 32) &&
         ss % 4 == 0 && ys >= b * w1.out &&
         (splits == 1 || int64_t{2} * splits * b * w1.out <= split_count);
}

absl::Status DeviceDecoder::Impl::ConvertExperts(const LayerDev& L) {
  const int64_t d = c.dim, inter = L.inter, w13 = 2 * inter * d;
  const TileForm t = TilesOf(L);
  RETURN_IF_ERROR(kc::Mxfp4ToFp8Tiles({.w = L.w1c,
                                       .w_scales = L.w1q,
                                       .codes = t.w13,
                                       .tile_scales = t.w13_scales,
                                       .inexact = tile_inexact,
                                       .n = inter,
                                       .k = d,
                                       .experts = L.experts,
                                       .codes_expert_stride = w13,
                                       .tile_scales_expert_stride = w13 / 1024,
                                       .tile_rows_per_cta = options.tile_conversion_rows,
                                       .coalesced = options.coalesced_tile_conversion},
                                      stream));
  RETURN_IF_ERROR(kc::Mxfp4ToFp8Tiles({.w = L.w3c,
                                       .w_scales = L.w3q,
                                       .codes = t.w13 + inter * d,
                                       .tile_scales = t.w13_scales + inter * d / 1024,
                                       .inexact = tile_inexact + L.experts,
                                       .n = inter,
                                       .k = d,
                                       .experts = L.experts,
                                       .codes_expert_stride = w13,
                                       .tile_scales_expert_stride = w13 / 1024,
                                       .tile_rows_per_cta = options.tile_conversion_rows,
                                       .coalesced = options.coalesced_tile_conversion},
                                      stream));
  return kc::Mxfp4ToFp8Tiles({.w = L.w2c,
                              .w_scales = L.w2q,
                              .codes = t.w2,
                              .tile_scales = t.w2_scales,
                              .inexact = tile_inexact + 2 * L.experts,
                              .n = d,
                              .k = inter,
                              .experts = L.experts,
                              .tile_rows_per_cta = options.tile_conversion_rows,
                              .coalesced = options.coalesced_tile_conversion},
                             stream);
}

absl::Status DeviceDecoder::Impl::CheckTileForm() {
  tile_form_layers = 0;
  if (!options.expert_prefill_tiles) return absl::OkStatus();
  for (LayerDev& L : layers) {
    L.tile_exact = false;
    if (!FastExperts(L)) continue;
    RETURN_IF_ERROR(ConvertExperts(L));
    std::vector<int32_t> inexact(3 * static_cast<size_t>(L.experts));
    WEIR_DD_CUDA("tile form",
                 cudaMemcpyAsync(inexact.data(), tile_inexact, inexact.size() * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream));
    WEIR_DD_CUDA("tile form", cudaStreamSynchronize(stream));
    L.tile_exact = std::all_of(inexact.begin(), inexact.end(), [](int32_t n) { return n == 0; });
    tile_form_layers += L.tile_exact ? 1 : 0;
  }
  return absl::OkStatus();
}

// The tile form's dense math: the MXFP4 kernel's block sums (e4m3 wgmma with
// expert_wgmma, else the f16 mma pair, issued as f16 wgmma with
// dense_wgmma_f16: the same bits), so its bits are that kernel's.
dense::Fp8GemmMath DeviceDecoder::Impl::TileFormMath() const {
  if (options.expert_wgmma) return dense::Fp8GemmMath::kWgmma;
  return options.dense_wgmma_f16 ? dense::Fp8GemmMath::kWgmmaF16 : dense::Fp8GemmMath::kMmaF16;
}

absl::Status DeviceDecoder::Impl::SwigluToFp8(const LayerDev& L, int64_t rows, float limit,
                                              const int64_t* used_rows) {
  dec::SwigluParams p{.gate = gg,
                      .up = upg,
                      .route_weight = wg,
                      .out = gg,
                      .rows = rows,
                      .inter = L.inter,
                      .limit = limit,
                      .round_bf16 = bf16(),
                      .row_count = used_rows};
  // h's FP8 form in the SwiGLU's launch (ActQuantFp8's bits of its output,
  // kernels/cuda/decode/swiglu_test): the down product reads only that
  // form, so h itself is not written, one pass over the rows fewer.
  dec::SwigluParams fused = p;
  fused.out = nullptr;
  fused.codes = fh;
  fused.scales = fh_scales;
  if (options.fused_expert_swiglu_fp8 && dec::SupportsSwiglu(fused)) {
    ++fused_expert_swiglus;
    return dec::Swiglu(fused, stream);
  }
  RETURN_IF_ERROR(dec::Swiglu(p, stream));
  return dense::ActQuantFp8({.x = gg,
                             .codes = fh,
                             .scales = fh_scales,
                             .rows = rows,
                             .cols = L.inter,
                             .row_count = used_rows},
                            stream);
}

absl::Status DeviceDecoder::Impl::TileFormExperts(const LayerDev& L, int64_t rows, float limit,
                                                  bool bf16_out) {
  const int64_t d = c.dim, inter = L.inter, w13 = 2 * inter * d;
  const TileForm t = TilesOf(L);
  // w1 and w3: the first and second inter rows of each expert's stacked
  // weight, over one f16 panel of the rows' codes (where the tile reads one).
  const uint16_t* panel = nullptr;
  bool panel_scaled = false;
  for (int part = 0; part < 2; ++part) {
    dense::Fp8BlockGemmParams p{.x = fq,
                                .x_scales = fq_scales,
                                .w = t.w13 + part * inter * d,
                                .w_scales = t.w13_scales + part * inter * d / 1024,
                                .y = part == 0 ? gg : upg,
                                .m = rows,
                                .n = inter,
                                .k = d,
                                .groups = L.experts,
                                .group_offsets = group_offsets,
                                .w_group_stride = w13,
                                .w_scales_group_stride = w13 / 1024,
                                .math = TileFormMath(),
                                .x_f16 = panel,
                                .x_f16_scaled = panel_scaled,
                                .ws_halves = options.fp8_ws_halves};
    RETURN_IF_ERROR(MakeX16Panel(p));
    panel = p.x_f16;
    panel_scaled = p.x_f16_scaled;
    RETURN_IF_ERROR(dense::Fp8BlockGemm(p, stream));
  }
  // Rows are laid out for the step's capacity (b x topk); the groups end at
  // group_offsets[experts], and only rows before it are read after this.
  RETURN_IF_ERROR(
      SwigluToFp8(L, rows, limit, options.used_rows_only ? group_offsets + L.experts : nullptr));
  dense::Fp8BlockGemmParams p{.x = fh,
                              .x_scales = fh_scales,
                              .w = t.w2,
                              .w_scales = t.w2_scales,
                              .y = yg,
                              .m = rows,
                              .n = d,
                              .k = inter,
                              .output = ExpertsOutput(bf16_out),
                              .groups = L.experts,
                              .group_offsets = group_offsets,
                              .math = TileFormMath(),
                              .ws_halves = options.fp8_ws_halves};
  RETURN_IF_ERROR(MakeX16Panel(p));
  return dense::Fp8BlockGemm(p, stream);
}

bool DeviceDecoder::Impl::Bf16Experts(const LayerDev& L, bool ep) const {
  return options.prompt_bf16_experts && PromptLinears() && linear_roles_ != 1 && !ep &&
         Bf16RouteFits(L);
}

bool DeviceDecoder::Impl::Bf16RouteFits(const LayerDev& L) const {
  return FastExperts(L) && rx16 != nullptr && c.dim % 128 == 0 && L.inter % 128 == 0 &&
         2 * L.experts <= kc::kMoeGroupRowsMaxGroups;
}

absl::Status DeviceDecoder::Impl::Bf16RouteExperts(const LayerDev& L, int64_t rows, float limit,
                                                   const int64_t* offsets, bool bf16_out,
                                                   bool x_bf16_ready) {
  const int64_t d = c.dim, inter = L.inter;
  if (rows * std::max(d, inter) > rx16_count) {
    return absl::InternalError(absl::StrCat("DeviceDecoder: the experts' bf16 rows (", rows, " x ",
                                            std::max(d, inter), ") exceed their scratch of ",
                                            rx16_count));
  }
  // Rows are laid out for the step's capacity; this route's groups end at
  // offsets[experts], and no row past it is read or written (rows before its
  // first group, a step's generated rows, go through the elementwise passes
  // too, after the FP8 experts are done with them).
  const int64_t* used_rows = offsets + L.experts;
  // X rows a CTA: the option's; for a decode step on the route
  // (bf16_experts_every_row, a step of generated rows only) the narrowest
  // tile that holds a local expert's expected rows. Time only, never bits.
  int route_x_rows = options.bf16_route_x_rows;
  const int decode_x_rows = kc::Mxfp4Bf16NarrowestXRows(rows / std::max(L.experts, 1));
  if (RouteEveryRow() && linear_roles_ == 1 && options.bf16_route_register_a) {
    route_x_rows = decode_x_rows;
  }
  // bf16_route_decode_mma: such a step's products on the decode form (8 or
  // 16 X rows a CTA) where a local expert averages at most 16 rows. The
  // same bits; time only.
  const bool decode_mma =
      options.bf16_route_decode_mma && RouteEveryRow() && linear_roles_ == 1 && decode_x_rows <= 16;
  // 256 X rows a CTA (bf16_route_x_rows 256) where the step's rows give a
  // local expert at least 64 on average (its tiles of at most 128 rows of an
  // expert run wgmma N 128), with the deep ring and the one scale test a
  // stage over two warpgroups (the kernel's one such instance); else (and
  // outside the register form) the 128-row tile.
  const bool x256 = !decode_mma && route_x_rows == 256 && options.bf16_route_register_a &&
                    rows >= int64_t{64} * std::max(L.experts, 1);
  if (route_x_rows == 256 && !x256) route_x_rows = 0;
  // The register form's options, in the combinations the kernel takes.
  // (The deep ring takes the one scale test a stage only over three
  // warpgroups, without the fitted N, or over 256 X rows.)
  const bool deep_ring = x256 || (options.bf16_route_deep_ring && options.bf16_route_register_a);
  const bool wide_tile = route_x_rows == 0 || route_x_rows == 128;  // fit_rows', 3 groups' tile
  const bool deep_three =
      options.bf16_route_warpgroups == 3 && wide_tile && !options.bf16_route_fit_tile_rows;
  const bool stage_test = x256 || (options.bf16_route_stage_scale_test &&
                                   options.bf16_route_register_a && (!deep_ring || deep_three));
  const bool fit_rows = options.bf16_route_fit_tile_rows && stage_test && wide_tile && !deep_ring;
  // The products' X: rx16 (X's or h's widened codes), or h's bf16 values
  // where the decode form's SwiGLU launch wrote them (h16 below).
  const uint16_t* route_x = rx16;
  auto params = [&](const uint8_t* const* w, const uint8_t* const* ws, float* y, int64_t n,
                    int64_t k, dense::Fp8GemmOutput output) {
    kc::Mxfp4Bf16GroupedGemmParams p{.x = route_x,
                                     .expert_offsets = offsets,
                                     .w = w,
                                     .w_scales = ws,
                                     .y = y,
                                     .rows = rows,
                                     .n = n,
                                     .k = k,
                                     .num_experts = L.experts,
                                     .output = output,
                                     .ballot_group_search = options.bf16_route_ballot_search};
    if (decode_mma) {  // none of the register form's options
      p.x_rows = decode_x_rows;
      p.decode_mma = true;
      return p;
    }
    p.widener_warps = options.bf16_route_widener_warps;
    p.register_a = options.bf16_route_register_a;
    p.x_rows = route_x_rows;
    p.deep_ring = deep_ring;
    p.stage_scale_test = stage_test;
    p.fit_tile_rows = fit_rows;
    p.consumer_warpgroups = stage_test && wide_tile ? options.bf16_route_warpgroups : 0;
    p.tail_rows = x256 && options.bf16_route_tail_rows;
    p.x_multicast = x256 && options.bf16_route_multicast;
    return p;
  };
  auto product = [&](const uint8_t* const* w, const uint8_t* const* ws, float* y, int64_t n,
                     int64_t k, dense::Fp8GemmOutput output) {
    return kc::Mxfp4Bf16GroupedGemm(params(w, ws, y, n, k, output), stream);
  };
  // An FP8 operand (X's or h's codes and scales) into rx16 as bf16.
  auto widen = [&](const uint8_t* codes, const uint8_t* scales, int64_t cols) {
    return dense::Fp8ActBf16({.codes = codes,
                              .scales = scales,
                              .out = rx16,
                              .rows = rows,
                              .cols = cols,
                              .row_count = used_rows},
                             stream);
  };
  if (x_bf16_ready) {
    ++route_x_gathered_layers;
  } else {
    RETURN_IF_ERROR(widen(fq, fq_scales, d));
  }
  // bf16_route_gate_up_bf16: gate and up as bf16 bits (in gg's and upg's
  // first halves), which the SwiGLU rounds them to anyway: the same bits,
  // half the bytes written and read between the products and the SwiGLU.
  dec::SwigluParams act{.route_weight = wg,
                        .rows = rows,
                        .inter = inter,
                        .limit = limit,
                        .round_bf16 = bf16(),
                        .codes = fh,
                        .scales = fh_scales,
                        .row_count = used_rows,
                        .gate_bf16 = reinterpret_cast<const uint16_t*>(gg),
                        .up_bf16 = reinterpret_cast<const uint16_t*>(upg)};
  const bool gate_up_bf16 = options.bf16_route_gate_up_bf16 && options.fused_expert_swiglu_fp8 &&
                            dec::SupportsSwiglu(act);
  const dense::Fp8GemmOutput gate_up =
      gate_up_bf16 ? dense::Fp8GemmOutput::kBf16 : dense::Fp8GemmOutput::kF32;
  // bf16_route_swiglu: with the 256-row tile, the gate and up products and
  // the SwiGLU in one launch, h's FP8 form of the groups' rows made from the
  // products' fp32 sums in the ring (the bits of the launches below; rows
  // before the first group, a mixed step's generated rows, keep fh as it
  // was: only this route's groups read it after).
  // (The decode form has such a launch too: bf16_route_decode_mma.)
  const bool fused = options.bf16_route_swiglu && (x256 || decode_mma) && !gate_up_bf16 &&
                     options.fused_expert_swiglu_fp8 && inter % 32 == 0;
  // The decode form's SwiGLU launch also writes h's bf16 values (the bits
  // the widening below would make), after X's in rx16 where they fit, so
  // the down product reads them with no widening launch between.
  uint16_t* const h16 =
      fused && decode_mma && rows * (d + inter) <= rx16_count ? rx16 + rows * d : nullptr;
  if (fused) {
    kc::Mxfp4Bf16GroupedGemmParams p = params(L.w1c, L.w1q, nullptr, inter, d, gate_up);
    p.swiglu = true;
    p.w_up = L.w3c;
    p.w_up_scales = L.w3q;
    p.swiglu_route_weight = wg;
    p.swiglu_limit = limit;
    p.swiglu_round_bf16 = bf16();
    p.h_codes = fh;
    p.h_scales = fh_scales;
    p.h_bf16 = h16;
    RETURN_IF_ERROR(kc::Mxfp4Bf16GroupedGemm(p, stream));
    ++fused_expert_swiglus;
    ++route_swiglu_layers;
  } else {
    RETURN_IF_ERROR(product(L.w1c, L.w1q, gg, inter, d, gate_up));
    RETURN_IF_ERROR(product(L.w3c, L.w3q, upg, inter, d, gate_up));
  }
  if (gate_up_bf16) {
    ++fused_expert_swiglus;
    ++bf16_gate_up_layers;
    RETURN_IF_ERROR(dec::Swiglu(act, stream));
  } else if (!fused) {
    RETURN_IF_ERROR(SwigluToFp8(L, rows, limit, used_rows));
  }
  if (h16 != nullptr) {
    route_x = h16;
    ++route_h_bf16_layers;
  } else {
    RETURN_IF_ERROR(widen(fh, fh_scales, inter));
  }
  RETURN_IF_ERROR(product(L.w2c, L.w2q, yg, d, inter, ExpertsOutput(bf16_out)));
  ++prompt_bf16_expert_layers;
  if (x256) ++route_x256_layers;
  if (decode_mma) ++route_decode_mma_layers;
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Impl::PromptGate(const LayerDev& L, int64_t b, const SharedInput& in) {
  const int64_t d = c.dim;
  // h's bf16 bits: the collapse-norm's (prompt_gate_norm_bf16), else a
  // ToBf16 launch into xb; the same bits.
  const uint16_t* x16 = xb;
  if (in.has_bf16 && in.src == h && in.rows == b && in.cols == d) {
    x16 = in.bf16;
    ++prompt_gate_norm_inputs;
  } else {
    if (b * d > xb_count) {
      return absl::InternalError(absl::StrCat("DeviceDecoder: the gate's bf16 input of ", b * d,
                                              " elements exceeds its scratch of ", xb_count));
    }
    RETURN_IF_ERROR(dec::ToBf16({.x = h, .out = xb, .n = b * d}, stream));
  }
  // Never split (a row's bits its X row's and W's alone at every chunk
  // length); with rows of both roles only the prompt's are written (Bf16Gemm's
  // row_role), else CUTLASS's GEMM may take it (the same bits).
  dense::Bf16GemmParams p{.x = x16,
                          .w = L.gate16,
                          .y = gate_logits,
                          .m = b,
                          .n = L.logical,
                          .k = d,
                          .output = dense::Fp8GemmOutput::kF32,
                          .row_role = linear_roles_ == 3 ? meta_d.role : nullptr,
                          .role = 1,
                          .ws_m256 = WsM256(b, L.logical, d),
                          .ws_persistent = options.bf16_ws_persistent};
  RETURN_IF_ERROR(RunBf16Gemm(p));
  ++prompt_gate_products;
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Impl::Moe(int layer, int64_t b) {
  const LayerDev& L = layers[layer];
  // A DSpark stage has a gate of its own size (MoeExperts, MoeTopk).
  const int k = L.route_topk;
  const int logical = L.logical;
  const int64_t d = c.dim;
  kc::GateScore score = kc::GateScore::kSqrtSoftplus;
  if (c.score_func == ScoreFunc::kSigmoid) score = kc::GateScore::kSigmoid;
  if (c.score_func == ScoreFunc::kSoftmax) score = kc::GateScore::kSoftmax;
  // kFast on one rank: the shared expert forks onto `side` here and joins
  // before the combine, a branch of the step's graph beside the routed
  // experts (its own FP8 and split-K scratch swapped in while enqueued).
  // (Its inputs, h_in's FP8 form, exist: Collapse made them. With an
  // exchange the routed path's collectives keep the stream to themselves.)
  const bool concurrent = Branches() && !(options.communicator != nullptr && layer < c.n_layers) &&
                          FastFp8(L.sw1) && FastFp8(L.sw3) && FastFp8(L.sw2) && h_in.has_fp8;
  // h_in as Collapse bound it (the shared expert unbinds it when enqueued).
  const SharedInput h_bound = h_in;
  if (concurrent) RETURN_IF_ERROR(ForkSide([&] { return SharedExpert(L, b); }));
  Mark("moe.gate");
  // kFast: the reference's logits (bits and all) in a launch of their own, a
  // warp per (token, expert), so a small batch fills the GPU; a gate of at
  // most gate_logits_in_block_macs multiply-adds a token (small's 16 x
  // 1,024) has MoeGate's block sum them, the same WarpLaneSum bits, one
  // launch fewer.
  // prompt_bf16_gate: the prompt rows' logits as a bf16 GEMM (PromptGate),
  // after MoeGateLogits wrote every row's where the step holds generated
  // rows too; MoeGate then reads them all.
  const bool prompt_gate = L.gate16 != nullptr && linear_roles_ != 1;
  const bool logits_launch =
      fast() && (prompt_gate || int64_t{logical} * d > options.gate_logits_in_block_macs);
  if (logits_launch && (!prompt_gate || linear_roles_ == 3)) {
    RETURN_IF_ERROR(kc::MoeGateLogits({.x = h,
                                       .weight = L.gate,
                                       .logits = gate_logits,
                                       .tokens = b,
                                       .dim = d,
                                       .num_experts = logical},
                                      stream));
  }
  if (prompt_gate) RETURN_IF_ERROR(PromptGate(L, b, h_bound));
  RETURN_IF_ERROR(kc::MoeGate({.x = h,
                               .weight = L.gate,
                               .logits = logits_launch ? gate_logits : nullptr,
                               .bias = L.bias,
                               .bias_vl = L.bias_vl,
                               .indices = moe_idx,
                               .weights = moe_w,
                               .tokens = b,
                               .dim = d,
                               .num_experts = logical,
                               .topk = k,
                               .gate_temp = static_cast<float>(c.gate_temp),
                               .route_scale = static_cast<float>(c.route_scale),
                               .norm_topk_prob = c.norm_topk_prob,
                               .score = score,
                               // the in-block logits of the fast path: a warp an expert
                               .wide_block = fast() && !logits_launch},
                              stream));
  // The pairs this rank computes: its own (groups = logical experts), or with
  // a communicator every rank's pairs routed here (groups = local slots).
  // (A DSpark stage's experts are all local: never exchanged.)
  const bool ep = options.communicator != nullptr && layer < c.n_layers;
  const float* in_x = h;
  const int32_t* in_groups = moe_idx;
  const float* in_weight = moe_w;
  int64_t in_tokens = b;
  if (ep) {
    Mark("moe.dispatch");
    RETURN_IF_ERROR(kc::ExpertSlots({.indices = moe_idx,
                                     .replica_offsets = L.ep_offsets,
                                     .replica_slots = L.ep_slots,
                                     .slots = ep_physical,
                                     .tokens = b,
                                     .topk = k,
                                     .num_logical = logical,
                                     .rank = ex.rank},
                                    stream));
    if (lsa_exchange()) {  // straight into the peers' windows, then their barrier
      if (k > c.n_activated_experts) {
        return absl::InternalError("DeviceDecoder: an exchanged layer routes past its windows");
      }
      RETURN_IF_ERROR(kc::MoeDispatchLsa({.slots = ep_physical,
                                          .route_weight = moe_w,
                                          .x = h,
                                          .valid_tokens = meta_d.valid,
                                          .recv_x = ep_sym->window(0),
                                          .recv_slot = ep_sym->window(1),
                                          .recv_weight = ep_sym->window(2),
                                          .return_row = ep_return_row,
                                          .barrier = ep_sym->window(4),
                                          .abort = lsa_abort,
                                          .comm = &ep_sym->dev_comm(),
                                          .tokens = b,
                                          .dim = d,
                                          .topk = k,
                                          .slots_per_rank = ex.per_rank},
                                         stream));
    } else {
      RETURN_IF_ERROR(kc::MoeDispatchPack({.slots = ep_physical,
                                           .route_weight = moe_w,
                                           .x = h,
                                           .valid_tokens = meta_d.valid,
                                           .send_x = ep_send_x,
                                           .send_slot = ep_send_slot,
                                           .send_weight = ep_send_w,
                                           .return_row = ep_return_row,
                                           .tokens = b,
                                           .dim = d,
                                           .topk = k,
                                           .world = ex.world,
                                           .slots_per_rank = ex.per_rank},
                                          stream));
      RETURN_IF_ERROR(Dispatch(b));
    }
    in_x = ep_recv_x;
    in_groups = ep_recv_slot;
    in_weight = ep_recv_w;
    in_tokens = ex.world * b;
  }
  const int64_t rows = in_tokens * k;
  Mark("moe.experts");
  // The step's padding rows (a batch padded up to its graph's size) route
  // to no expert: at batch 1 of 8 they would add up to topk experts' weights
  // to the step's reads. (The exchange leaves them out by itself; a DSpark
  // stage's rows are its own.)
  kc::MoeGroupRowsParams group{.groups = in_groups,
                               .x = in_x,
                               .route_weight = in_weight,
                               .group_offsets = group_offsets,
                               .pair_row = pair_row,
                               .x_grouped = xg,
                               .weight_grouped = wg,
                               .tokens = in_tokens,
                               .dim = d,
                               .topk = k,
                               .num_groups = L.experts,
                               .valid_tokens = !ep && layer < c.n_layers ? meta_d.valid : nullptr,
                               .wide = options.wide_group_rows};
  // The fast experts read the grouped rows' FP8 form only. Without an
  // exchange the rows are h's, whose FP8 form the FFN's Collapse made (the
  // same ActQuantFp8 bits, row by row): gather those codes and scales and
  // skip the fp32 gather and its quantization.
  const bool gather_codes = FastExperts(L) && !ep && h_bound.src == in_x && h_bound.has_fp8 &&
                            h_bound.rows == in_tokens && h_bound.cols == d;
  if (gather_codes) {
    kc::MoeGroupRowsParams codes = group;
    codes.x = nullptr;
    codes.x_grouped = nullptr;
    codes.codes = h_bound.codes;
    codes.scales = h_bound.scales;
    codes.codes_grouped = fq;
    codes.scales_grouped = fq_scales;
    // bf16_route_decode_mma: a decode step with every row on the route also
    // gathers X's bf16 values into rx16 (what the route's widening launch
    // would make of the gathered codes), so the route starts with its
    // products.
    if (options.bf16_route_decode_mma && RouteEveryRow() && linear_roles_ == 1 &&
        Bf16RouteFits(L) && rows * d <= rx16_count) {
      codes.bf16_grouped = rx16;
    }
    if (kc::SupportsMoeGroupRows(codes)) group = codes;
  }
  const bool by_codes = group.codes != nullptr;
  const bool x_bf16_gathered = group.bf16_grouped != nullptr;
  // prompt_bf16_experts, a step of both roles: role-major groups, the
  // generated rows' L.experts groups first (the FP8 experts below read
  // group_offsets[0 .. experts] and so only them), then the prompt's (the
  // bf16 route reads group_offsets + experts). A step of prompt rows only
  // takes the bf16 route for every row. A row's bits depend on its X row
  // and its expert alone in both maths, so where it lands does not matter.
  const bool bf16_experts = Bf16Experts(L, ep);
  // bf16_experts_every_row: every row of every step on the bf16 route (the
  // generated rows' too), so a row's experts take one maths whatever the
  // step holds.
  const bool route_every_row = RouteEveryRow() && !ep && Bf16RouteFits(L);
  if (bf16_experts && linear_roles_ == 3 && !route_every_row) {
    group.token_role = meta_d.role;
    group.role_stride = L.experts;
    group.num_groups = 2 * L.experts;
  }
  RETURN_IF_ERROR(kc::MoeGroupRows(group, stream));
  if (layer < c.n_layers) {  // the backbone's load (EPLB); not the DSpark stages'
    // With branches on the mix path, off the experts' way: its counters are
    // read after the step, and moe_idx / group_offsets are next written after
    // the Expand that joins the path.
    auto load = [&] {
      return kc::AccumulateExpertLoad({.experts = moe_idx,
                                       .valid_tokens = meta_d.valid,
                                       .group_offsets = ep ? group_offsets : nullptr,
                                       .routed = load_routed + int64_t{layer} * c.n_routed_experts,
                                       .served = load_served + layer,
                                       .tokens = b,
                                       .topk = k,
                                       .num_experts = static_cast<int>(c.n_routed_experts),
                                       .num_groups = L.experts},
                                      stream);
    };
    RETURN_IF_ERROR(Branches() ? Beside(load) : load());
  }
  const float limit = static_cast<float>(c.swiglu_limit);
  auto grouped = [&](const float* in, const float* const* w, const uint8_t* const* codes,
                     const uint8_t* const* scales, int64_t out_dim, int64_t in_dim, bool fp8,
                     float* out) {
    dense::GroupedMatmulParams p{.x = in, .group_offsets = group_offsets, .w = w, .y = out,
                                 .rows = rows, .out = out_dim, .in = in_dim,
                                 .num_groups = L.experts, .fp8_activation = fp8,
                                 .act_scratch = fp8 ? act : nullptr,
                                 .max_group_rows = in_tokens};
    if (L.mxfp4) {
      p.w = nullptr;
      p.w_mxfp4 = codes;
      p.w_mxfp4_scales = scales;
    }
    return dense::RowStableGroupedMatmul(p, stream);
  };
  // The tokens whose rows the FP8 experts take: with both roles on the two
  // maths, the generated ones only (a prompt chunk beside a few decode rows
  // should not convert every expert to the tile form for those rows). A
  // choice of tiles and forms, never of bits; eager steps only (the count is
  // not in the graph key, so a graph keeps the choice of its capture, b).
  const int64_t fp8_tokens =
      bf16_experts && linear_roles_ == 3 && fp8_span_step_ ? generated_rows_ : b;
  const bool tile_form = FastExperts(L) && options.expert_prefill_tiles && L.tile_exact &&
                         fp8_tokens * k / std::max(L.experts, 1) >= kExpertTileFormRows;
  if (FastExperts(L) && !by_codes) {  // the reference's act_quant of the grouped rows
    RETURN_IF_ERROR(dense::ActQuantFp8(
        {.x = xg,
         .codes = fq,
         .scales = fq_scales,
         .rows = rows,
         .cols = d,
         // (every group's rows: with role-major groups the prompt's too)
         .row_count = options.used_rows_only ? group_offsets + group.num_groups : nullptr},
        stream));
  }
  // expert_out_bf16: where one prefill form writes every row's output (the
  // bf16 route for a step of prompt rows only, or the tile form with no route
  // beside it), w2 writes yg as bf16 bits and the combine widens them: the
  // same values (those forms round y to bf16 anyway), half of yg's bytes.
  const bool route_only = route_every_row || (bf16_experts && linear_roles_ == 2);
  const bool both_maths = bf16_experts && linear_roles_ == 3 && !route_every_row;
  const bool yg_bf16 =
      options.expert_out_bf16 && bf16() && !ep && (route_only || (tile_form && !both_maths));
  if (yg_bf16) ++expert_out_bf16_layers;
  if (route_only) {  // every row a prompt's
    RETURN_IF_ERROR(Bf16RouteExperts(L, rows, limit, group_offsets, yg_bf16, x_bf16_gathered));
  } else if (tile_form) {  // (FastExperts: tile_form implies it)
    // Resident tiles were converted at Create / SetPlacement.
    if (L.rt13 == nullptr) RETURN_IF_ERROR(ConvertExperts(L));
    RETURN_IF_ERROR(TileFormExperts(L, rows, limit, yg_bf16));
  } else if (FastExperts(L)) {
    // kFast: gate/up with SwiGLU, the route weight and the FP8 quantization
    // of h fused, then w2, all on tensor cores over the MXFP4 weights (rows
    // past the groups' end are never read).
    RETURN_IF_ERROR(kc::Mxfp4ExpertFfn(
        {.x = fq,
         .x_scales = fq_scales,
         .expert_offsets = group_offsets,
         .route_weight = wg,
         .w1 = L.w1c,
         .w1_scales = L.w1q,
         .w3 = L.w3c,
         .w3_scales = L.w3q,
         .w2 = L.w2c,
         .w2_scales = L.w2q,
         .h = fh,
         .h_scales = fh_scales,
         .y = yg,
         .rows = rows,
         .dim = d,
         .inter = L.inter,
         .num_experts = L.experts,
         .swiglu_limit = limit,
         .round_bf16 = bf16(),
         // A local expert's expected rows: every rank's b x k pairs spread over
         // world x L.experts experts (rows counts the exchange's padding too).
         .rows_per_expert_hint = std::max<int64_t>(fp8_tokens * k / L.experts, 1),
         .gate_up_tile = expert_tile,
         .down_tile = expert_tile,
         .math = options.expert_wgmma       ? kc::Mxfp4GemmMath::kWgmma
                 : options.expert_wgmma_f16 ? kc::Mxfp4GemmMath::kWgmmaF16
                                            : kc::Mxfp4GemmMath::kMmaF16},
        stream));
  } else {
    RETURN_IF_ERROR(grouped(xg, L.w1s, L.w1c, L.w1q, L.inter, d, L.w13_fp8, gg));
    RETURN_IF_ERROR(grouped(xg, L.w3s, L.w3c, L.w3q, L.inter, d, L.w13_fp8, upg));
    RETURN_IF_ERROR(dec::Swiglu({.gate = gg, .up = upg, .route_weight = wg, .out = gg,
                                 .rows = rows, .inter = L.inter, .limit = limit,
                                 .round_bf16 = bf16()},
                                stream));
    RETURN_IF_ERROR(grouped(gg, L.w2s, L.w2c, L.w2q, d, L.inter, L.w2_fp8, yg));
  }
  // Both roles: the prompt's groups on the bf16 route (the FP8 experts took
  // the generated rows' groups).
  if (both_maths) {
    RETURN_IF_ERROR(Bf16RouteExperts(L, rows, limit, group_offsets + L.experts));
  }
  // The fast experts round y in their epilogue (round_bf16 above).
  if (!FastExperts(L)) RETURN_IF_ERROR(Round(yg, rows * d));
  if (ep) {
    // Each received pair's output into the block of the rank it came from
    // (pairs served elsewhere: zeros), then back.
    Mark("moe.return");
    if (lsa_exchange()) {
      RETURN_IF_ERROR(kc::MoeReturnLsa({.y_grouped = yg,
                                        .pair_row = pair_row,
                                        .ret = ep_sym->window(3),
                                        .barrier = ep_sym->window(4),
                                        .abort = lsa_abort,
                                        .comm = &ep_sym->dev_comm(),
                                        .tokens = b,
                                        .dim = d,
                                        .topk = k},
                                       stream));
    } else {
      RETURN_IF_ERROR(dec::CopyRows(
          {.src = yg, .dst = ep_back, .src_rows = pair_row, .rows = rows, .width = d}, stream));
      RETURN_IF_ERROR(Return(b));
    }
  }
  if (concurrent) {
    RETURN_IF_ERROR(JoinSide());
  } else {
    Mark("moe.shared");
    RETURN_IF_ERROR(SharedExpert(L, b));
  }
  Mark("moe.combine");
  return kc::MoeCombine(
      {.y_grouped = ep        ? ep_ret
                    : yg_bf16 ? nullptr
                              : yg,
       .y_grouped_bf16 = yg_bf16 ? reinterpret_cast<const uint16_t*>(yg) : nullptr,
       .pair_row = ep ? ep_return_row : pair_row,
       .experts = moe_idx,
       .shared = sy,
       .out = y,
       .tokens = b,
       .dim = d,
       .topk = k,
       .round_bf16 = bf16(),
       .vec16 = options.combine_vec16},
      stream);
}

absl::Status DeviceDecoder::Impl::SharedExpert(const LayerDev& L, int64_t b) {
  const int64_t d = c.dim;
  const float limit = static_cast<float>(c.swiglu_limit);
  // w1 and w3 read the same FP8 form of h_in, bound to h by Collapse (made
  // in its launch when w1 is FP8, otherwise by the first of them).
  if (!SharedGateUp(L, b)) {
    RETURN_IF_ERROR(Mm(L.sw1, h_in, b, sg));
    RETURN_IF_ERROR(Mm(L.sw3, h_in, b, su));
  } else {
    // One launch of two groups over the one input: each group's split and
    // so its bits are those of its own call (split_groups 1).
    RETURN_IF_ERROR(Fp8Input(h_in));
    RETURN_IF_ERROR(Fp8Gemm({.x = h_in.codes,
                             .x_scales = h_in.scales,
                             .w = L.sw1.codes,
                             .w_scales = L.sw1.scales,
                             .y = sg,
                             .m = b,
                             .n = L.sw1.out,
                             .k = d,
                             .groups = 2,
                             .x_shared = true,
                             .w_group_stride = L.sw3.codes - L.sw1.codes,
                             .w_scales_group_stride = L.sw3.scales - L.sw1.scales,
                             .y_group_stride = su - sg},
                            /*split_groups=*/1));
  }
  Unbind(h_in);
  dec::SwigluParams act{.gate = sg,
                        .up = su,
                        .out = sg,
                        .rows = b,
                        .inter = L.sw1.out,
                        .limit = limit,
                        .round_bf16 = bf16()};
  if (options.fused_swiglu_fp8 && FastFp8(L.sw2) && L.sw2.in == L.sw1.out &&
      b * L.sw2.in <= fq_count) {
    // w2 reads the activation's FP8 form, made in the activation's launch
    // (ActQuantFp8's bits, one launch fewer); the fp32 form is not needed.
    act.out = nullptr;
    act.codes = fq;
    act.scales = fq_scales;
    if (dec::SupportsSwiglu(act)) {
      RETURN_IF_ERROR(dec::Swiglu(act, stream));
      ++fused_swiglu_fp8;
      return Fp8RoundOf(L.sw2, fq, fq_scales, b, sy);
    }
    act.out = sg;
    act.codes = act.scales = nullptr;
  }
  RETURN_IF_ERROR(dec::Swiglu(act, stream));
  return MmRound(L.sw2, sg, b, sy);
}

absl::Status DeviceDecoder::Impl::Dispatch(int64_t b) {
  using parallel::DataType;
  using parallel::P2POp;
  const int64_t d = c.dim, k = c.n_activated_experts;
  // The three blocks per peer (4-byte elements), sent and received in this order.
  struct Block {
    void* send;
    void* recv;
    int64_t count;
    DataType dtype;
  };
  const Block blocks[] = {{ep_send_x, ep_recv_x, b * d, DataType::kFloat32},
                          {ep_send_slot, ep_recv_slot, b * k, DataType::kInt32},
                          {ep_send_w, ep_recv_w, b * k, DataType::kFloat32}};
  std::vector<P2POp> ops;
  ops.reserve(6 * ex.world);
  for (int p = 0; p < ex.world; ++p) {
    for (P2POp::Kind kind : {P2POp::Kind::kSend, P2POp::Kind::kRecv}) {
      for (const Block& blk : blocks) {
        char* base = static_cast<char*>(kind == P2POp::Kind::kSend ? blk.send : blk.recv);
        ops.push_back({.kind = kind, .peer = Rank(p), .data = base + p * blk.count * 4,
                       .count = blk.count, .dtype = blk.dtype});
      }
    }
  }
  return options.communicator->GroupSendRecv(
      ops, {.memory = parallel::MemoryKind::kDevice, .stream = stream});
}

absl::Status DeviceDecoder::Impl::Return(int64_t b) {
  const int64_t block = b * c.n_activated_experts * c.dim;
  std::vector<int64_t> counts(ex.world, block), offsets(ex.world);
  for (int p = 0; p < ex.world; ++p) offsets[p] = p * block;
  return options.communicator->AllToAllV(
      {.send = ep_back, .send_counts = counts, .send_offsets = offsets, .recv = ep_ret,
       .recv_counts = counts, .recv_offsets = offsets, .dtype = parallel::DataType::kFloat32},
      {.memory = parallel::MemoryKind::kDevice, .stream = stream});
}

absl::Status DeviceDecoder::SetPlacement(const ExpertPlacement& placement) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  if (options_.communicator == nullptr || m.seed != 0) {
    return absl::InvalidArgumentError(
        "SetPlacement: only a decoder with a communicator and real weights has a placement");
  }
  DeviceDecoderOptions next_options = options_;
  next_options.placement = placement;
  ASSIGN_OR_RETURN(LocalExperts next, PlanExpertSlots(c, next_options));
  if (next.per_rank != m.ex.per_rank) {
    return absl::InvalidArgumentError(absl::StrCat("SetPlacement: ", next.per_rank,
                                                   " slots per rank; the decoder holds ",
                                                   m.ex.per_rank));
  }
  // Everything is checked and encoded on the host before the first upload.
  struct Upload {
    void* dst;
    const void* src;
    size_t bytes;
  };
  std::vector<Upload> uploads;
  std::vector<EncodedExpert> encoded;  // owns the MXFP4 bytes until uploaded
  encoded.reserve(static_cast<size_t>(c.n_layers) * next.per_rank);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerDev& L = m.layers[l];
    const std::vector<ExpertWeightsF32>& experts = m.wts.layers[l].ffn.experts;
    for (int s = 0; s < next.per_rank; ++s) {
      const int e = next.local[l][s];
      if (e == m.ex.local[l][s]) continue;
      const ExpertWeightsF32& w = experts[e];
      const DenseWeight* parts[3] = {&w.w1, &w.w3, &w.w2};
      if (w.w1.w.empty() || w.w1.out != L.inter || w.w1.fp8_activation != L.w13_fp8 ||
          w.w2.fp8_activation != L.w2_fp8 || w.w1.in != c.dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SetPlacement: layer ", l, " expert ", e, " (local slot ", s,
            ") is not loaded in the model or has another format"));
      }
      if (L.mxfp4) {
        EncodedExpert& enc = encoded.emplace_back();
        for (int k = 0; k < 3; ++k) {
          if (!EncodeMxfp4Exactly(*parts[k], enc.codes[k], enc.scales[k])) {
            return absl::FailedPreconditionError(absl::StrCat(
                "SetPlacement: layer ", l, " expert ", e, " does not re-encode as MXFP4"));
          }
          uploads.push_back({L.slot_codes[k][s], enc.codes[k].data(), enc.codes[k].size()});
          uploads.push_back({L.slot_scales[k][s], enc.scales[k].data(), enc.scales[k].size()});
        }
      } else {
        for (int k = 0; k < 3; ++k) {
          uploads.push_back({L.slot_w[k][s], parts[k]->w.data(), parts[k]->w.size() * 4});
        }
      }
    }
    uploads.push_back({const_cast<int32_t*>(L.ep_offsets), next.replicas[l].offsets.data(),
                       next.replicas[l].offsets.size() * sizeof(int32_t)});
    uploads.push_back({const_cast<int32_t*>(L.ep_slots), next.replicas[l].slots.data(),
                       next.replicas[l].slots.size() * sizeof(int32_t)});
  }
  WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
  WEIR_DD_CUDA("placement", cudaStreamSynchronize(m.stream));
  for (const Upload& u : uploads) {
    WEIR_DD_CUDA("placement upload", cudaMemcpy(u.dst, u.src, u.bytes, cudaMemcpyHostToDevice));
  }
  // The DSpark stages' slots (all local) stay as they are.
  for (size_t l = next.local.size(); l < m.ex.local.size(); ++l) {
    next.local.push_back(std::move(m.ex.local[l]));
  }
  m.ex = std::move(next);
  options_.placement = placement;
  m.options.placement = placement;
  // Other experts in the slots: whether they convert exactly is asked again.
  RETURN_IF_ERROR(m.CheckTileForm());
  stats_.tile_form_layers = m.tile_form_layers;
  return absl::OkStatus();
}

absl::Status DeviceDecoder::TakeExpertLoad(std::span<int64_t> routed, std::span<int64_t> served) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const size_t n_routed = static_cast<size_t>(c.n_layers * c.n_routed_experts);
  if (routed.size() != n_routed || served.size() != static_cast<size_t>(c.n_layers)) {
    return absl::InvalidArgumentError(absl::StrCat("TakeExpertLoad: spans of ", routed.size(),
                                                   " and ", served.size(), "; expected ",
                                                   n_routed, " and ", c.n_layers));
  }
  std::vector<int64_t> r(n_routed), s(c.n_layers);
  WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
  WEIR_DD_CUDA("load", cudaMemcpyAsync(r.data(), m.load_routed, r.size() * sizeof(int64_t),
                                       cudaMemcpyDeviceToHost, m.stream));
  WEIR_DD_CUDA("load", cudaMemcpyAsync(s.data(), m.load_served, s.size() * sizeof(int64_t),
                                       cudaMemcpyDeviceToHost, m.stream));
  WEIR_DD_CUDA("load", cudaMemsetAsync(m.load_routed, 0, r.size() * sizeof(int64_t), m.stream));
  WEIR_DD_CUDA("load", cudaMemsetAsync(m.load_served, 0, s.size() * sizeof(int64_t), m.stream));
  WEIR_DD_CUDA("load", cudaStreamSynchronize(m.stream));
  for (size_t i = 0; i < r.size(); ++i) routed[i] += r[i];
  for (size_t i = 0; i < s.size(); ++i) served[i] += s[i];
  return absl::OkStatus();
}

}  // namespace weir::model
