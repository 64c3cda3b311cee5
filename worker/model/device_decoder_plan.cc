// DeviceDecoder: the arena plan (weights, KV pools, activations, step
// inputs laid out by one Region pass, measured by a dry run), the checks of
// what a decoder can hold, and MaxPositionsFor.

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>

#include "worker/model/device_decoder_impl.h"

namespace weir::model {
using device_decoder_internal::CheckDecodable;
using device_decoder_internal::LocalExperts;

namespace device_decoder_internal {

int32_t DefaultBlockTokens(const LayerRoles& roles, int asked) {
  if (asked > 0) return asked;
  int64_t lcm = 1;
  for (const LayerRole& role : roles.layers()) {
    if (role.is_dspark_stage || role.ratio <= 0) continue;
    lcm = std::lcm(lcm, int64_t{role.ratio});
  }
  return static_cast<int32_t>((64 + lcm - 1) / lcm * lcm);
}

// What a decoder cannot hold (INVALID_ARGUMENT), before anything is
// allocated; otherwise the routed experts it holds. `synthetic`: the weights
// are shapes only (drawn on the device).
absl::StatusOr<LocalExperts> CheckDecodable(const ModelConfig& c, const LayerRoles& roles,
                                           const ModelWeights& w,
                                           const DeviceDecoderOptions& options,
                                           bool synthetic) {
  if (options.max_sequences < 1 || options.max_positions < 2 || options.max_batch < 1 ||
      options.batch_interval < 1 || options.max_rows_per_slot < 1 ||
      options.max_rows_per_slot > options.max_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceDecoder: max_sequences ", options.max_sequences, ", max_positions ",
                     options.max_positions, ", max_batch ", options.max_batch, ", batch_interval ",
                     options.batch_interval, ", max_rows_per_slot ", options.max_rows_per_slot,
                     " (each must be >= 1, max_positions >= 2, max_rows_per_slot <= max_batch)"));
  }
  if (options.attention_range_tiles < 0 || options.prompt_range_tiles < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceDecoder: attention_range_tiles ", options.attention_range_tiles,
                     ", prompt_range_tiles ", options.prompt_range_tiles, " (each >= 0)"));
  }
  if (const int h = options.attention_heads_per_block;
      h != 0 && (h < 0 || h > 8 || (h & (h - 1)) != 0 || c.n_heads % h != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: attention_heads_per_block ", h,
                                                   " (0, or 1, 2, 4 or 8 "
                                                   "dividing the model's ",
                                                   c.n_heads, " heads)"));
  }
  if (options.tile_conversion_rows < 1 || options.gate_logits_in_block_macs < 0 ||
      options.parallel_compressor_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceDecoder: tile_conversion_rows ", options.tile_conversion_rows,
        " (>= 1), gate_logits_in_block_macs ", options.gate_logits_in_block_macs,
        " and parallel_compressor_rows ", options.parallel_compressor_rows, " (>= 0)"));
  }
  if (const int w = options.bf16_route_widener_warps; w != 0 && w != 4 && w != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceDecoder: bf16_route_widener_warps ", w, " (0, 4 or 8)"));
  }
  if (const int r = options.bf16_route_x_rows;
      r != 0 && r != 128 && r != 256 && !(r == 80 && options.bf16_route_register_a)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceDecoder: bf16_route_x_rows ", r,
        " (0, 128 or 256: 256 where the register form takes it; 80 with bf16_route_register_a)"));
  }
  if (const int g = options.bf16_route_warpgroups; g != 0 && g != 2 && g != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceDecoder: bf16_route_warpgroups ", g, " (0, 2 or 3)"));
  }
  if (options.max_rollback < 0 || options.max_rollback > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceDecoder: max_rollback ", options.max_rollback, " (0 to 1024)"));
  }
  if (const int r = options.norm_cluster_ranks; r != 0 && r != 1 && r != 2 && r != 4 && r != 8) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: norm_cluster_ranks ", r,
                                                   " (0 = by the token count, 1, 2, 4 or 8)"));
  }
  if (const int t = options.norm_block_threads; t != 0 && t != 256 && t != 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceDecoder: norm_block_threads ", t, " (256, or 1,024: 0 = 1,024)"));
  }
  if (options.kv_block_tokens < 0 || options.kv_block_tokens > (1 << 20) || options.kv_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceDecoder: kv_block_tokens ", options.kv_block_tokens,
                     " (0 to 2^20), kv_blocks ", options.kv_blocks, " (>= 0)"));
  }
  for (const LayerRole& role : roles.layers()) {
    if (role.is_dspark_stage || role.ratio <= 0 || options.kv_block_tokens == 0) continue;
    if (options.kv_block_tokens % role.ratio != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceDecoder: kv_block_tokens ", options.kv_block_tokens,
                       " is not a multiple of compress ratio ", role.ratio));
    }
  }
  if (!options.expert_tile.empty()) {
    const std::optional<kc::Mxfp4GroupedTile> tile =
        kc::Mxfp4GroupedTileByName(options.expert_tile);
    if (!tile.has_value() || (*tile != kc::Mxfp4GroupedTile::kAuto &&
                              kc::ShapeOfMxfp4GroupedTile(*tile).warps % 4 != 0)) {
      std::string names;
      for (kc::Mxfp4GroupedTile t : kc::kMxfp4GroupedTiles) {
        if (kc::ShapeOfMxfp4GroupedTile(t).warps % 4 != 0) continue;
        absl::StrAppend(&names, names.empty() ? "" : ", ", kc::Mxfp4GroupedTileName(t));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceDecoder: expert_tile '", options.expert_tile,
                       "' is not a tile of both expert products (", names, ")"));
    }
  }
  if (static_cast<int>(w.layers.size()) < c.n_layers) {
    return absl::InvalidArgumentError("DeviceDecoder: weights of fewer layers than the config");
  }
  if (options.communicator != nullptr &&
      options.communicator->device().value() != options.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceDecoder: the communicator is on device ", options.communicator->device().value(),
        ", the decoder on ", options.device));
  }
  ASSIGN_OR_RETURN(LocalExperts slots, PlanExpertSlots(c, options));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = roles[l];
    const std::vector<ExpertWeightsF32>& experts = w.layers[l].ffn.experts;
    if (static_cast<int64_t>(experts.size()) != c.n_routed_experts) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: layer ", l, " has ",
                                                     experts.size(), " routed experts, not ",
                                                     c.n_routed_experts));
    }
    for (size_t s = 0; s < slots.local[l].size() && !synthetic; ++s) {
      if (experts[slots.local[l][s]].w1.w.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DeviceDecoder: layer ", l, " expert ", slots.local[l][s], " (local slot ", s,
            " of rank ", slots.rank, ") is not loaded"));
      }
    }
    if (role.has_engram) {
      const EngramWeights& e = w.layers[l].engram;
      if (e.row_begin != 0 || e.row_end != e.rows) {
        return absl::InvalidArgumentError("DeviceDecoder: sharded Engram tables are not supported");
      }
    }
    if (role.candidate_source >= 0 && roles[role.candidate_source].ratio != role.ratio) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DeviceDecoder: layer ", l, " is restricted by a candidate pool of another ratio"));
    }
    const ExpertWeightsF32& first = experts[slots.local[l][0]];
    for (int slot : slots.local[l]) {
      const ExpertWeightsF32& e = experts[slot];
      if (e.w1.fp8_activation != first.w1.fp8_activation ||
          e.w2.fp8_activation != first.w2.fp8_activation || e.w1.out != first.w1.out) {
        return absl::InvalidArgumentError(
            absl::StrCat("DeviceDecoder: layer ", l, " mixes expert formats"));
      }
    }
  }
  if (options.drafting) {
    // DSpark stages: window attention and MoE over their own experts, all
    // local on every rank (no exchange: a draft pass is no collective, so
    // ranks of an expert-parallel group draft independently); the drafting
    // weights present.
    const int first = c.n_layers, stages = c.n_mtp_layers;
    if (stages <= 0 || c.dspark_target_layer_ids.empty() || c.dspark_block_size < 1 ||
        c.dspark_markov_rank < 1 || static_cast<int>(w.layers.size()) < first + stages ||
        synthetic || w.dspark.main_proj.w.empty()) {
      return absl::InvalidArgumentError(
          "DeviceDecoder: drafting needs a model with DSpark stages, targets and real weights");
    }
    if (options.max_rows_per_slot < 2 || options.max_batch < c.dspark_block_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DeviceDecoder: drafting needs max_rows_per_slot >= 2 and max_batch >= the DSpark "
          "block (",
          c.dspark_block_size, ")"));
    }
    for (int l = first; l < first + stages; ++l) {
      const std::vector<ExpertWeightsF32>& experts = w.layers[l].ffn.experts;
      const int64_t n = MoeExperts(c, roles[l]);
      if (static_cast<int64_t>(experts.size()) != n || roles[l].ratio != 0 ||
          n > kc::kMoeGroupRowsMaxGroups) {
        return absl::InvalidArgumentError(
            absl::StrCat("DeviceDecoder: DSpark stage ", l - first, " has ", experts.size(),
                         " routed experts (config: ", n, ") or compresses"));
      }
      std::vector<int> identity(n);
      for (int e = 0; e < n; ++e) {
        identity[e] = e;
        if (experts[e].w1.w.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: DSpark stage ", l - first,
                                                         " expert ", e, " is not loaded"));
        }
      }
      slots.local.push_back(std::move(identity));
    }
  }
  if (c.n_routed_experts > kc::kMoeGroupRowsMaxGroups ||
      slots.per_rank > kc::kMoeGroupRowsMaxGroups) {
    return absl::InvalidArgumentError("DeviceDecoder: too many routed experts");
  }
  if (slots.world * c.n_activated_experts > kc::kMoeDispatchMaxPairs) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: ", slots.world, " ranks x top-",
                                                   c.n_activated_experts,
                                                   " pairs per token exceed the dispatch"));
  }
  return slots;
}

}  // namespace device_decoder_internal

absl::Status DeviceDecoder::Impl::Layout(Region& r) {
  const ModelWeights& w = wts;
  const int64_t d = c.dim, n = c.hc_mult, hd = c.head_dim, di = c.index_head_dim;
  const int64_t bc = batch_cap, win = window();
  fills = 0;
  expert_bytes = 0;
  mxfp4_layers = 0;
  tile_resident_bytes = 0;
  int64_t max_in = 1;
  RETURN_IF_ERROR(LayoutWeights(r, max_in));
  weight_bytes = r.used();
  // --- pools
  int64_t rows = 0;
  for (int l = 0; l < held_layers(); ++l) {  // the DSpark stages' rings too
    layers[l].window_base = static_cast<int32_t>(rows);
    rows += window_region_rows();
  }
  window_rows_total = rows;
  int64_t max_width = 1;
  // Spec model-v41 storage table: index keys MXFP4 (e2m1 + E8M0 per 32); the
  // compressor's partial groups fp32 in the reference too (kv and score,
  // ratio rows of head_dim a sequence and layer).
  DeviceKvPool index_keys{.name = "index_keys", .stored_bytes_per_entry = di / 2 + di / 32};
  DeviceKvPool comp_state{.name = "compressor_state"};
  int64_t comp_state_stored = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = roles[l];
    LayerDev& L = layers[l];
    if (role.ratio > 0) max_width = std::max(max_width, max_entries(role.ratio));
    if (role.attention != AttentionRole::kFull) continue;
    // Paged: [num_blocks, e] entries (the padding slot's block last).
    const int64_t me = num_blocks * entries_per_block(role.ratio);
    L.comp_base = static_cast<int32_t>(rows);
    rows += me;
    if (stored_kv) {  // MXFP4: e2m1 codes + an E8M0 scale per 32
      L.index_k_codes = r.Alloc<uint8_t>(me * di / 2, &index_keys.bytes);
      L.index_k_scales = r.Alloc<uint8_t>(me * di / 32, &index_keys.bytes);
    } else {
      L.index_k = r.Alloc<float>(me * di, &index_keys.bytes);
    }
    index_keys.entries += me;
    if (role.ratio > 1) {
      L.comp_kv_state = r.Alloc<float>(slots * state_rows(role.ratio) * hd, &comp_state.bytes);
      L.comp_score_state = r.Alloc<float>(slots * state_rows(role.ratio) * hd, &comp_state.bytes);
      comp_state.entries += slots;
      comp_state_stored += slots * 2 * role.ratio * hd * 4;  // fp32 kv and score rows
    }
  }
  if (comp_state.entries > 0) {
    comp_state.stored_bytes_per_entry = comp_state_stored / comp_state.entries;
  }
  if (rows >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: the KV pool would hold ", rows,
                                                   " rows; int32 indices need < 2^31"));
  }
  pool_rows = rows;
  const int64_t comp_rows = rows - window_rows_total;
  // Stored form: the window FP8 + UE8M0 per 32, compressed entries FP4 + E4M3
  // per 16.
  DeviceKvPool window{
      .name = "window", .entries = window_rows_total, .stored_bytes_per_entry = hd + hd / 32};
  DeviceKvPool compressed{
      .name = "compressed", .entries = comp_rows, .stored_bytes_per_entry = hd / 2 + hd / 16};
  if (stored_kv) {
    kv_pool = nullptr;
    win_codes = r.Alloc<uint8_t>(window_rows_total * hd, &window.bytes);
    win_scales = r.Alloc<uint8_t>(window_rows_total * hd / 32, &window.bytes);
    comp_codes = r.Alloc<uint8_t>(comp_rows * hd / 2, &compressed.bytes);
    comp_scales = r.Alloc<uint8_t>(comp_rows * hd / 16, &compressed.bytes);
    kq_codes = r.Alloc<uint8_t>(bc * hd);
    kq_scales = r.Alloc<uint8_t>(bc * hd / 16);
    if (MirrorsPrompts()) {
      int64_t comp_max = 0;  // the largest compressed region a layer reads
      for (int l = 0; l < c.n_layers; ++l) {
        if (roles[l].ratio > 0 && roles[l].attention == AttentionRole::kFull) {
          comp_max = std::max(comp_max, num_blocks * entries_per_block(roles[l].ratio));
        }
      }
      win_mirror = r.Alloc<uint16_t>(window_region_rows() * hd);
      comp_mirror = comp_max > 0 ? r.Alloc<uint16_t>(comp_max * hd) : nullptr;
    }
  } else {
    kv_pool = r.Alloc<float>(rows * hd);
    window.bytes = window_rows_total * hd * sizeof(float);  // fp32 rows of one pool
    compressed.bytes = comp_rows * hd * sizeof(float);
  }
  kv_pools = {window, compressed, index_keys, comp_state};
  tables_dev = table_width > 0 ? r.Alloc<int32_t>(slots * table_width) : nullptr;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRole& role = roles[l];
    if (role.ratio > 0 && role.index_source == l) {
      layers[l].topk = r.Alloc<int32_t>(bc * c.index_topk);
    }
    if (role.produces_candidates) {
      layers[l].candidates = r.Alloc<uint8_t>(bc * max_entries(role.ratio));
    }
  }
  load_routed = r.Alloc<int64_t>(c.n_layers * c.n_routed_experts);
  load_served = r.Alloc<int64_t>(c.n_layers);
  pool_bytes = r.used() - weight_bytes;
  // --- activations
  const int64_t nmix = c.hc_mix_dim();
  int64_t k = c.n_activated_experts, logical = c.n_routed_experts;
  for (const LayerDev& L : layers) {  // a DSpark stage's own gate
    k = std::max<int64_t>(k, L.route_topk);
    logical = std::max<int64_t>(logical, L.logical);
  }
  int64_t inter = 1, inter_s = 1;
  for (const LayerDev& L : layers) inter = std::max(inter, L.inter);
  for (int l = 0; l < held_layers(); ++l) {  // the shared experts (a DSpark stage's too)
    inter_s = std::max<int64_t>(inter_s, w.layers[l].ffn.shared.w1.out);
  }
  x = r.Alloc<float>(bc * n * d);
  x2 = r.Alloc<float>(bc * n * d);
  mixes = r.Alloc<float>(bc * nmix);
  for (Coeffs* cc : {&ca, &cf}) {
    cc->pre = r.Alloc<float>(bc * n);
    cc->post = r.Alloc<float>(bc * n);
    cc->comb = r.Alloc<float>(bc * n * n);
  }
  {
    std::vector<float> ident(bc * n, 0.0f);
    for (int64_t t = 0; t < bc; ++t) ident[t * n] = 1.0f;
    identity_pre = const_cast<float*>(r.Put(ident));
  }
  h = r.Alloc<float>(bc * d);
  y = r.Alloc<float>(bc * d);
  // Expert pairs handled here: this rank's own, or every rank's with a communicator.
  const int64_t pairs = ex.world * bc * std::max<int64_t>(k, 1);
  act = r.Alloc<float>(pairs * std::max(max_in, inter));
  if (fast()) {
    const int64_t widest = std::max(max_in, inter);
    fq_count = pairs * widest;
    fq = r.Alloc<uint8_t>(fq_count);
    fq_scales = r.Alloc<uint8_t>(pairs * (widest / 32 + 1));
    fh = r.Alloc<uint8_t>(pairs * inter);
    fh_scales = r.Alloc<uint8_t>(pairs * (inter / 32 + 1));
    if (options.expert_prefill_tiles) {
      // One layer's local experts in the tile form (the largest layer), or
      // with expert_tiles_resident every layer's own.
      int64_t w13 = 0, w2 = 0, experts = 1;
      for (LayerDev& L : layers) {
        if (!L.mxfp4) continue;
        const int64_t l13 = int64_t{L.experts} * 2 * L.inter * d,
                      l2 = int64_t{L.experts} * d * L.inter;
        experts = std::max<int64_t>(experts, L.experts);
        if (options.expert_tiles_resident) {
          L.rt13 = r.Alloc<uint8_t>(std::max<int64_t>(l13, 16));
          L.rt13_scales = r.Alloc<uint8_t>(std::max<int64_t>(l13 / 1024, 1));
          L.rt2 = r.Alloc<uint8_t>(std::max<int64_t>(l2, 16));
          L.rt2_scales = r.Alloc<uint8_t>(std::max<int64_t>(l2 / 1024, 1));
          tile_resident_bytes += l13 + l13 / 1024 + l2 + l2 / 1024;
          continue;
        }
        w13 = std::max(w13, l13);
        w2 = std::max(w2, l2);
      }
      if (w13 > 0) {  // some layer converts at every step
        tile13 = r.Alloc<uint8_t>(w13);
        tile13_scales = r.Alloc<uint8_t>(std::max<int64_t>(w13 / 1024, 1));
        tile2 = r.Alloc<uint8_t>(std::max<int64_t>(w2, 16));
        tile2_scales = r.Alloc<uint8_t>(std::max<int64_t>(w2 / 1024, 1));
      }
      tile_inexact = r.Alloc<int32_t>(3 * experts);
    }
    gate_logits = r.Alloc<float>(bc * std::max<int64_t>(logical, 1));
    xb_count = std::max({pairs * widest, bc * c.n_heads * hd, bc * d});  // d: prompt_bf16_gate's h
    xb = r.Alloc<uint16_t>(xb_count);
    using Shared = std::pair<SharedInput*, int64_t>;
    for (auto [in, cols] : {Shared{&h_in, d}, Shared{&qr_in, c.q_lora_rank}}) {
      in->capacity = bc * cols;
      in->codes = r.Alloc<uint8_t>(in->capacity);
      in->scales = r.Alloc<uint8_t>(in->capacity / 32 + bc);
      in->bf16 = r.Alloc<uint16_t>(in->capacity);
    }
    if (options.prompt_norm_dequant_bf16) h_in.dq16 = r.Alloc<uint16_t>(h_in.capacity);
    split_count = bc * SplitFloatsPerRow();
    split = r.Alloc<float>(split_count);
    if (options.concurrent_branches) {  // a parallel branch's own (ForkSide)
      side_fq_count = bc * widest;
      side_fq = r.Alloc<uint8_t>(side_fq_count);
      side_fq_scales = r.Alloc<uint8_t>(bc * (widest / 32 + 1));
      side_split = r.Alloc<float>(split_count);
      if (options.bf16_branches) {  // the KV branch's bf16 inputs: the compressor's latent
        side_xb_count = bc * std::max(hd, d);
        side_xb = r.Alloc<uint16_t>(side_xb_count);
      }
    }
    // The f16 panels of the warp-specialized prefill tile, which only steps
    // of more than kX16PanelMinRows rows run.
    if (options.prefill_x16_panel && bc > kX16PanelMinRows) {
      x16_count = fq_count;
      x16 = r.Alloc<uint16_t>(x16_count);
      if (options.concurrent_branches) {
        side_x16_count = side_fq_count;
        side_x16 = r.Alloc<uint16_t>(side_x16_count);
      }
    }
    // prompt_bf16_linears: X's bf16 values (as many as fq holds) and, where
    // steps of more than 256 rows take the warp-specialized bf16 tile, the
    // bf16 values of the largest FP8 weight (a grouped one's groups
    // together), the branch's own of each.
    // (bf16_experts_every_row needs rx16 alone.)
    if (PromptLinears() || RouteEveryRow()) {
      rx16_count = fq_count;
      rx16 = r.Alloc<uint16_t>(rx16_count);
      if (options.concurrent_branches) {
        side_rx16_count = side_fq_count;
        side_rx16 = r.Alloc<uint16_t>(side_rx16_count);
      }
    }
    if (PromptLinears()) {
      // (prompt_fp8_lt re-blocks each weight into w16 at any row count.)
      if (bc > kX16PanelMinRows || options.prompt_fp8_lt) {
        int64_t largest = 0, widest = 0;
        // Every weight with FP8 activations (its codes are null in the
        // measuring pass, so the fp32 ones that stayed on the reference
        // kernel count too: an upper bound both passes agree on).
        auto weigh = [&](const DevDense& w, int64_t groups) {
          if (w.fp8 && !w.w8) {
            largest = std::max(largest, groups * w.out * w.in);
            widest = std::max(widest, w.out);
          }
        };
        for (const LayerDev& L : layers) {
          for (const DevDense* w :
               {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_b, &L.comp_wkv, &L.comp_wgate, &L.index_wk,
                &L.index_wq_b, &L.index_weights_proj, &L.sw1, &L.sw2, &L.sw3, &L.ewkv}) {
            weigh(*w, 1);
          }
          if (!L.wo_a.empty()) weigh(L.wo_a[0], static_cast<int64_t>(L.wo_a.size()));
        }
        for (const DevDense* w : {&head, &main_proj, &markov_head, &confidence}) weigh(*w, 1);
        w16_count = largest;
        w16 = r.Alloc<uint16_t>(w16_count);
        if (options.concurrent_branches) {
          side_w16_count = largest;
          side_w16 = r.Alloc<uint16_t>(side_w16_count);
        }
        if (options.prompt_fp8_lt) {  // a weight slice's products: the m % 4 rows, mixed steps'
          lt_slice_width = std::min(widest, kFp8LtSliceRows);
          lt_y_rows = dense::Fp8LtPaddedRows(bc);
          lt_tail = r.Alloc<float>(4 * lt_slice_width);
          lt_y = r.Alloc<float>(lt_y_rows * lt_slice_width);
          lt_ws = r.Alloc<uint8_t>(dense::Fp8LtGemm::kWorkspaceBytes);
          if (options.concurrent_branches) {
            side_lt_tail = r.Alloc<float>(4 * lt_slice_width);
            side_lt_y = r.Alloc<float>(lt_y_rows * lt_slice_width);
            side_lt_ws = r.Alloc<uint8_t>(dense::Fp8LtGemm::kWorkspaceBytes);
          }
        }
      }
    }
    // Zeroed once; each split product leaves its counters zero again.
    split_counter_count = kSplitCounters;
    split_counters = const_cast<uint32_t*>(
        r.Put(std::vector<uint32_t>(static_cast<size_t>(split_counter_count), 0u)));
    if (options.concurrent_branches) {  // the branch's products may overlap the main path's
      side_split_counters = const_cast<uint32_t*>(
          r.Put(std::vector<uint32_t>(static_cast<size_t>(split_counter_count), 0u)));
    }
    if (options.fast_mhc) {
      hc_partials = r.Alloc<float>(kc::HcMixSplitPartialFloats(bc, static_cast<int>(n), d));
      hc_counters = const_cast<uint32_t*>(
          r.Put(std::vector<uint32_t>(kc::HcMixSplitCounters(bc), 0u)));
    }
  }
  qr = r.Alloc<float>(bc * c.q_lora_rank);
  q = r.Alloc<float>(bc * c.n_heads * hd);
  kvw = r.Alloc<float>(bc * hd);
  o = r.Alloc<float>(bc * c.n_heads * hd);
  og = r.Alloc<float>(bc * c.n_heads * hd);
  ug = r.Alloc<float>(bc * c.o_groups * c.o_lora_rank);
  u = r.Alloc<float>(bc * c.o_groups * c.o_lora_rank);
  cpa = r.Alloc<float>(bc * hd);
  cpg = r.Alloc<float>(bc * hd);
  latent = r.Alloc<float>(bc * hd);
  ik = r.Alloc<float>(bc * di);
  iq = r.Alloc<float>(bc * c.index_n_heads * di);
  iw = r.Alloc<float>(bc * c.index_n_heads);
  scores = r.Alloc<float>(bc * max_width);
  // A step's window + top-k entries, or a draft pass's window + block.
  index = r.Alloc<int32_t>(bc * (win + std::max<int64_t>(c.index_topk, draft_block())));
  moe_idx = r.Alloc<int32_t>(bc * k);
  moe_w = r.Alloc<float>(bc * k);
  // prompt_bf16_experts: room for role-major groups (twice the experts).
  group_offsets = r.Alloc<int64_t>((PromptLinears() && options.prompt_bf16_experts ? 2 : 1) *
                                       std::max<int64_t>(logical, ex.per_rank) +
                                   1);
  pair_row = r.Alloc<int32_t>(pairs);
  xg = r.Alloc<float>(pairs * d);
  wg = r.Alloc<float>(pairs);
  gg = r.Alloc<float>(pairs * inter);
  upg = r.Alloc<float>(pairs * inter);
  yg = r.Alloc<float>(pairs * d);
  if (lsa_exchange()) {  // the receive side in the symmetric windows (Build)
    ep_return_row = r.Alloc<int32_t>(bc * k);
    ep_physical = r.Alloc<int32_t>(bc * k);
    if (ep_sym != nullptr) {
      ep_recv_x = static_cast<float*>(ep_sym->local(0));
      ep_recv_slot = static_cast<int32_t*>(ep_sym->local(1));
      ep_recv_w = static_cast<float*>(ep_sym->local(2));
      ep_ret = static_cast<float*>(ep_sym->local(3));
    }
  } else if (options.communicator != nullptr) {
    const int64_t rows_all = ex.world * bc;
    ep_send_x = r.Alloc<float>(rows_all * d);
    ep_recv_x = r.Alloc<float>(rows_all * d);
    ep_send_w = r.Alloc<float>(rows_all * k);
    ep_recv_w = r.Alloc<float>(rows_all * k);
    ep_send_slot = r.Alloc<int32_t>(rows_all * k);
    ep_recv_slot = r.Alloc<int32_t>(rows_all * k);
    ep_return_row = r.Alloc<int32_t>(bc * k);
    ep_physical = r.Alloc<int32_t>(bc * k);
    ep_back = r.Alloc<float>(pairs * d);
    ep_ret = r.Alloc<float>(pairs * d);
  }
  sg = r.Alloc<float>(bc * inter_s);
  su = r.Alloc<float>(bc * inter_s);
  sy = r.Alloc<float>(bc * d);
  const int64_t cols = c.engram_hash_cols();
  emb = r.Alloc<float>(bc * std::max<int64_t>(cols, 1) * c.engram_head_dim);
  ekv = r.Alloc<float>(bc * (n + 1) * d);
  ekey = r.Alloc<float>(bc * n * d);
  evalue = r.Alloc<float>(bc * d);
  logits = r.Alloc<float>(bc * c.vocab_size);
  greedy_ids = r.Alloc<int32_t>(bc);
  h_head = r.Alloc<float>(bc * d);
  if (options.drafting) {
    const int64_t targets_n = static_cast<int64_t>(c.dspark_target_layer_ids.size());
    const int64_t rank = c.dspark_markov_rank;
    targets = r.Alloc<float>(bc * targets_n * d);
    main_x = r.Alloc<float>(bc * d);
    draft_h = r.Alloc<float>(bc * d);
    markov_e = r.Alloc<float>(bc * rank);
    markov_bias = r.Alloc<float>(bc * c.vocab_size);
    draft_feat = r.Alloc<float>(bc * (d + rank));
    draft_conf = r.Alloc<float>(bc);
    draft_tokens = r.Alloc<int64_t>(bc);
  }
  // --- step inputs
  size_t mb = 0;
  LayoutMeta(nullptr, meta_d, mb);
  meta_bytes = mb;
  meta_dev = r.Alloc<char>(static_cast<int64_t>(mb));
  if (meta_dev != nullptr) LayoutMeta(meta_dev, meta_d, mb);
  RETURN_IF_ERROR(fill_status);
  return r.status();
}

void DeviceDecoder::Impl::LayoutMeta(char* base, StepMeta& m, size_t& bytes) const {
  size_t used = 0;
  auto take = [&](auto*& p, int64_t n) {
    using T = std::remove_reference_t<decltype(*p)>;
    used = (used + 15) / 16 * 16;
    p = base != nullptr ? reinterpret_cast<T*>(base + used) : nullptr;
    used += n * sizeof(T);
  };
  const int64_t bc = batch_cap;
  take(m.tokens, bc);
  take(m.positions, bc);
  take(m.slot, bc);
  take(m.win_rows, bc * window());
  take(m.win_write, bc);
  take(m.win_commit, bc);
  take(m.run_length, bc);
  take(m.head_rows, bc);
  take(m.role, bc);
  if (MirrorsPrompts()) {
    take(m.mirror_slot, bc);
    take(m.mirror_last, bc);
    take(m.mirror_stage_first, bc);
    take(m.mirror_stage_rows, bc);
  }
  if (options.drafting) {
    take(m.ring_write, bc);
    take(m.draft_rows, bc * (window() + draft_block()));
    take(m.draft_prev, bc);
  }
  m.ratio.assign(ratios.size(), {});
  for (StepMeta::PerRatio& pr : m.ratio) {
    take(pr.visible, bc);
    take(pr.entry_pos, bc);
    take(pr.entry_write, bc);
  }
  m.engram_ids.assign(c.engram_layer_ids.size(), nullptr);
  for (int64_t*& ids : m.engram_ids) take(ids, bc * c.engram_hash_cols());
  take(m.valid, 1);
  bytes = used;
}

namespace {

// The largest n in [lo, hi] whose bytes_at(n) fits `budget` (bytes_at grows
// with n), by bisection; RESOURCE_EXHAUSTED naming `what` when not even lo
// does.
absl::StatusOr<int64_t> LargestFitting(
    int64_t lo, int64_t hi, size_t budget,
    const std::function<absl::StatusOr<size_t>(int64_t)>& bytes_at, const char* what) {
  ASSIGN_OR_RETURN(size_t smallest, bytes_at(lo));
  if (smallest > budget) {
    return absl::ResourceExhaustedError(absl::StrCat("DeviceDecoder: even ", what, " need ",
                                                     smallest, " bytes, ", budget, " available"));
  }
  ASSIGN_OR_RETURN(size_t largest, bytes_at(hi));
  if (largest <= budget) return hi;
  while (lo < hi) {  // bytes_at(lo) fits; the answer is in [lo, hi]
    const int64_t mid = lo + (hi - lo + 1) / 2;
    ASSIGN_OR_RETURN(size_t bytes, bytes_at(mid));
    if (bytes <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

absl::StatusOr<int64_t> DeviceDecoder::Impl::FitPositions(size_t budget_bytes) {
  // The arena grows with max_positions: the largest that fits.
  ASSIGN_OR_RETURN(const int64_t positions, LargestFitting(
                                                2, options.max_positions, budget_bytes,
                                                [&](int64_t p) -> absl::StatusOr<size_t> {
                                                  options.max_positions = p;
                                                  return MeasureArena();
                                                },
                                                "2 positions per sequence"));
  options.max_positions = positions;
  return positions;
}

absl::StatusOr<std::unique_ptr<DeviceDecoder::Impl>> DeviceDecoder::Impl::DryRun(
    const Model& model, ActivationPrecision precision, const DeviceDecoderOptions& options) {
  ASSIGN_OR_RETURN(LocalExperts slots,
                   CheckDecodable(model.config(), model.roles(), model.weights(), options));
  ASSIGN_OR_RETURN(EngramHasher hasher,
                   EngramHasher::Create(model.config(), options.engram_token_map));
  auto m = std::make_unique<Impl>(nullptr, model.config(), model.roles(), model.weights(),
                                  precision, options, std::move(hasher));
  m->ex = std::move(slots);
  m->EncodeExperts();
  return m;
}

absl::StatusOr<int64_t> DeviceDecoder::MaxPositionsFor(const Model& model,
                                                       ActivationPrecision precision,
                                                       const DeviceDecoderOptions& options,
                                                       size_t budget_bytes,
                                                       size_t* arena_bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<Impl> m, Impl::DryRun(model, precision, options));
  ASSIGN_OR_RETURN(int64_t positions, m->FitPositions(budget_bytes));
  if (arena_bytes != nullptr) {
    ASSIGN_OR_RETURN(*arena_bytes, m->MeasureArena());
  }
  return positions;
}

absl::StatusOr<int64_t> DeviceDecoder::MaxKvBlocksFor(const Model& model,
                                                      ActivationPrecision precision,
                                                      const DeviceDecoderOptions& options,
                                                      size_t budget_bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<Impl> m, Impl::DryRun(model, precision, options));
  m->Plan();  // table_width
  // More blocks than every slot's table could hold are never used.
  const int64_t most = std::max<int64_t>(1, int64_t{options.max_sequences} * m->table_width);
  return LargestFitting(
      1, most, budget_bytes,
      [&](int64_t blocks) -> absl::StatusOr<size_t> {
        m->options.kv_blocks = blocks;
        return m->MeasureArena();
      },
      "one KV block");
}

}  // namespace weir::model
