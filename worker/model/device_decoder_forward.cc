// DeviceDecoder: the step's inputs (PrepareMeta) and the backbone it
// enqueues (Enqueue: embedding, Engram, mHC, attention with the compressor
// and the indexer, MoE, head), each op in the CPU's order.

#include "worker/model/device_decoder_impl.h"

namespace weir::model {
using device_decoder_internal::LayerDev;
using device_decoder_internal::StepMeta;

absl::StatusOr<bool> DeviceDecoder::Impl::PrepareMeta(std::span<const int> slot_ids,
                                                      std::span<const int64_t> tokens,
                                                      int64_t padded,
                                                      std::span<const int> head_rows,
                                                      int64_t head_padded) {
  const int64_t win = window(), cols = c.engram_hash_cols();
  const int layers_e = hasher.num_layers();
  const int64_t real_rows = static_cast<int64_t>(slot_ids.size());
  std::vector<int64_t> rows(std::max<int64_t>(layers_e * cols, 1));
  meta_h.valid[0] = real_rows;
  // Engram ids pushed onto slot histories for this step's later rows of a
  // slot (popped at the end: the step commits them only when it succeeds).
  std::vector<int> pushed;
  absl::Status hashed = absl::OkStatus();
  int64_t offset = 0;  // the row's place in its slot's run
  int64_t first = 0;   // the run's first row
  int64_t length = 1;  // the run's rows
  bool runs = false;
  for (int64_t i = 0; i < padded; ++i) {
    const bool real = i < real_rows;
    const int s = real ? slot_ids[i] : slots - 1;
    offset = real && i > 0 && slot_ids[i - 1] == s ? offset + 1 : 0;
    if (offset == 0) {
      first = i;
      length = 1;
      while (real && i + length < real_rows && slot_ids[i + length] == s) ++length;
      runs = runs || length > 1;
    }
    const int64_t p0 = real ? slot_state[s].length : 0, p = p0 + offset;
    meta_h.run_length[i] = offset == 0 ? static_cast<int32_t>(length) : 0;
    meta_h.tokens[i] = real ? tokens[i] : 0;
    meta_h.positions[i] = p;
    meta_h.slot[i] = s;
    // The window: a run's own positions from its staging rows (every row's
    // KV is written before any row attends), earlier ones from the ring; a
    // row alone writes and reads the ring directly.
    // A run of up to direct_run_rows() (a verification) writes the ring
    // straight away (its rows are distinct ring rows: the ring has room for
    // them past the window).
    const bool staged = length > direct_run_rows();
    const int64_t rg = ring();
    auto window_row = [&](int64_t pos) -> int32_t {
      if (staged && pos >= p0) return static_cast<int32_t>(staging_row(first + pos - p0));
      return static_cast<int32_t>(s * rg + pos % rg);
    };
    const int64_t lo = std::max<int64_t>(0, p - win + 1);
    for (int64_t j = 0; j < win; ++j) {
      const int64_t pos = lo + j;
      meta_h.win_rows[i * win + j] = pos <= p ? window_row(pos) : -1;
    }
    meta_h.win_write[i] = window_row(p);
    // After the attention the run's last `window` positions enter the ring.
    meta_h.win_commit[i] =
        staged && p > p0 + length - 1 - win ? static_cast<int32_t>(s * rg + p % rg) : -1;
    // The DSpark stage rings take the ring row directly (nothing of this
    // step reads them), a staged run's last `window` rows only.
    if (meta_h.ring_write != nullptr) {
      meta_h.ring_write[i] = staged ? meta_h.win_commit[i] : meta_h.win_write[i];
    }
    for (size_t ri = 0; ri < ratios.size(); ++ri) {
      const int r = ratios[ri];
      const bool emit = (p + 1) % r == 0;
      StepMeta::PerRatio& pr = meta_h.ratio[ri];
      pr.visible[i] = (p + 1) / r;
      pr.entry_pos[i] = emit ? p + 1 - r : 0;
      // The step's caller made the slot's table cover its rows (StepRows).
      pr.entry_write[i] = emit ? static_cast<int32_t>(EntryRow(s, r, (p + 1) / r - 1)) : -1;
    }
    if (layers_e > 0) {
      if (real && hashed.ok()) {
        std::vector<int64_t>& history = slot_state[s].history;
        history.push_back(hasher.Compress(tokens[i]));
        pushed.push_back(s);
        hashed = hasher.Hash(history, p, rows);
      } else {
        std::fill(rows.begin(), rows.end(), 0);
      }
      for (int e = 0; e < layers_e; ++e) {
        std::copy_n(rows.data() + e * cols, cols, meta_h.engram_ids[e] + i * cols);
      }
    }
  }
  for (int s : pushed) slot_state[s].history.pop_back();
  RETURN_IF_ERROR(hashed);
  // Each real row's attention shape (a prompt position's with
  // prompt_range_tiles); padding rows take the real rows' shape when they
  // have only one, so that such a step runs one launch.
  // prompt_bf16_linears: the same rows are the prompt's for the linears'
  // math (meta role serves both; roles_ stays 1 without the attention's
  // shape, linear_roles_ without the option).
  int row_roles = 0;
  prompt_shape_rows_ = 0;
  generated_rows_ = 0;
  const bool any_roles = PromptShape() || PromptLinears();
  for (int64_t i = 0; i < real_rows; ++i) {
    const bool prompt = any_roles && meta_h.positions[i] < slot_state[slot_ids[i]].prompt_end;
    meta_h.role[i] = prompt ? 1 : 0;
    row_roles |= prompt ? 2 : 1;
    generated_rows_ += prompt ? 0 : 1;
  }
  if (row_roles == 0) row_roles = 1;
  roles_ = PromptShape() ? row_roles : 1;
  linear_roles_ = PromptLinears() ? row_roles : 1;
  if (PromptShape()) {
    for (int64_t i = 0; i < real_rows; ++i) prompt_shape_rows_ += meta_h.role[i];
  }
  for (int64_t i = real_rows; i < padded; ++i) meta_h.role[i] = row_roles == 2 ? 1 : 0;
  span_rows_ = padded;
  fp8_spans_.clear();
  fp8_span_step_ = false;  // the caller sets it once it knows the step is eager
  if (linear_roles_ == 3) {
    fp8_spans_ = SpansOfRole(std::span<const int32_t>(meta_h.role, padded), 0, kFp8SpanAlign);
  }
  // prompt_kv_mirror: each run that starts in its prompt, with the rows its
  // attention may read (StepRows decides whether the step takes them).
  mirror_sequences_ = 0;
  mirror_stage_max_ = 0;
  mirror_last_max_ = 0;
  mirror_step_ = false;
  if (MirrorsPrompts() && (roles_ & 2) != 0) {
    for (int64_t i = 0; i < real_rows; ++i) {
      const int64_t len = meta_h.run_length[i];
      if (len == 0 || meta_h.role[i] != 1) continue;  // inside a run, or not a prompt's
      const int n = mirror_sequences_++;
      const bool staged = len > direct_run_rows();
      meta_h.mirror_slot[n] = meta_h.slot[i];
      meta_h.mirror_last[n] = meta_h.positions[i + len - 1];
      meta_h.mirror_stage_first[n] = staged ? static_cast<int32_t>(staging_row(i)) : -1;
      meta_h.mirror_stage_rows[n] = staged ? static_cast<int32_t>(len) : 0;
      mirror_stage_max_ = std::max(mirror_stage_max_, staged ? len : int64_t{0});
      mirror_last_max_ = std::max(mirror_last_max_, meta_h.positions[i + len - 1]);
    }
  }
  for (int64_t i = 0; i < head_padded; ++i) {
    meta_h.head_rows[i] = i < static_cast<int64_t>(head_rows.size()) ? head_rows[i] : 0;
  }
  RETURN_IF_ERROR(UploadTables());
  WEIR_DD_CUDA("step inputs", cudaMemcpyAsync(meta_dev, meta_host, meta_bytes,
                                              cudaMemcpyHostToDevice, stream));
  return runs;
}

absl::Status DeviceDecoder::Impl::MirrorPromptKv(int layer) {
  const LayerDev& L = layers[layer];
  const LayerRole& role = roles[layer];
  const int64_t hd = c.head_dim;
  kc::KvMirrorParams mp{.window_codes = win_codes + int64_t{L.window_base} * hd,
                        .window_scales = win_scales + int64_t{L.window_base} * hd / 32,
                        .window_bf16 = win_mirror,
                        .window_rows = window_region_rows(),
                        .ring_rows = ring(),
                        .slot = meta_d.mirror_slot,
                        .last_position = meta_d.mirror_last,
                        .stage_first = meta_d.mirror_stage_first,
                        .stage_rows = meta_d.mirror_stage_rows,
                        .sequences = mirror_sequences_,
                        .max_rows = ring() + mirror_stage_max_};
  if (role.ratio > 0) {  // the kv source's compressed entries, through the tables
    const int64_t row0 = layers[role.kv_source].comp_base - window_rows_total;
    mp.compressed_codes = comp_codes + row0 * hd / 2;
    mp.compressed_scales = comp_scales + row0 * hd / 16;
    mp.compressed_bf16 = comp_mirror;
    mp.compressed_rows = num_blocks * entries_per_block(role.ratio);
    mp.block_table = tables_dev;
    mp.table_width = static_cast<int>(table_width);
    mp.entries_per_block = static_cast<int>(entries_per_block(role.ratio));
    mp.ratio = role.ratio;
    mp.max_rows += (mirror_last_max_ + 1) / role.ratio;
  }
  ++kv_mirrors;
  return kc::DequantizeKvMirror(mp, stream);
}

absl::Status DeviceDecoder::Impl::Engram(int layer, int64_t b) {
  const LayerDev& L = layers[layer];
  const int e = c.engram_index(layer);
  const int64_t cols = c.engram_hash_cols(), ehd = c.engram_head_dim, d = c.dim, n = c.hc_mult;
  // fold_row_ops: the embeddings' bf16 boundary in the lookup, and the gate
  // reading the keys and the value in place from the projection's output
  // (the same bits; three launches fewer).
  const bool fold = FoldsRowOps();
  RETURN_IF_ERROR(kc::EngramLookup({.table = L.etable,
                                    .scales = L.escales,
                                    .ids = meta_d.engram_ids[e],
                                    .out = emb,
                                    .table_rows = L.erows,
                                    .dim = ehd,
                                    .num_ids = b * cols,
                                    .round_bf16 = fold && bf16()},
                                   stream));
  if (!fold) RETURN_IF_ERROR(Round(emb, b * cols * ehd));
  RETURN_IF_ERROR(MmRound(L.ewkv, emb, b, ekv));
  kc::EngramGateParams gate{.x = x,
                            .key = ekey,
                            .value = evalue,
                            .weight = L.egate,
                            .tokens = b,
                            .hc_mult = static_cast<int>(n),
                            .dim = d,
                            .eps = static_cast<float>(c.norm_eps),
                            .round_bf16 = bf16()};
  if (fold) {
    gate.key = ekv;
    gate.value = ekv + n * d;
    gate.key_token_stride = (n + 1) * d;
    gate.value_token_stride = (n + 1) * d;
    folded_row_ops += 3;
  } else {
    RETURN_IF_ERROR(dec::CopyRows(
        {.src = ekv, .dst = ekey, .rows = b, .width = n * d, .src_stride = (n + 1) * d}, stream));
    RETURN_IF_ERROR(dec::CopyRows(
        {.src = ekv + n * d, .dst = evalue, .rows = b, .width = d, .src_stride = (n + 1) * d},
        stream));
  }
  return kc::EngramGate(gate, stream);
}

absl::Status DeviceDecoder::Impl::UpdateCompressed(int layer, int64_t b) {
  const LayerDev& L = layers[layer];
  const int r = roles[layer].ratio;
  const StepMeta::PerRatio& pr = meta_d.ratio[ratio_index(r)];
  const int64_t hd = c.head_dim, di = c.index_head_dim;
  if (r == 1) {
    RETURN_IF_ERROR(MmRound(L.comp_wkv, h_in, b, latent));
  } else {
    RETURN_IF_ERROR(Mm(L.comp_wkv, h_in, b, cpa));
    RETURN_IF_ERROR(Mm(L.comp_wgate, h_in, b, cpg));
    RETURN_IF_ERROR(dec::CompressorDecode({.kv = cpa,
                                           .score = cpg,
                                           .kv_state = L.comp_kv_state,
                                           .score_state = L.comp_score_state,
                                           .state_slot = meta_d.slot,
                                           .positions = meta_d.positions,
                                           .run_length = meta_d.run_length,
                                           .out = latent,
                                           .rows = b,
                                           .dim = hd,
                                           .ratio = r,
                                           .state_rows = state_rows(r),
                                           .round_bf16 = bf16(),
                                           // a prefill chunk's long run: a thread a row
                                           .parallel_rows = options.parallel_compressor_rows > 0 &&
                                                            b >= options.parallel_compressor_rows},
                                          stream));
  }
  if (FusesKvRows()) {
    // The latent's norm (its pre-RoPE row back in latent, which the index
    // keys' product reads), RoPE and store in one launch; the index keys'
    // norm, RoPE and store in another.
    dec::KvRowFinishParams lp =
        KvRow(latent, L.comp_norm, b, hd, pr.entry_pos, layer, pr.entry_write);
    lp.out = latent;
    lp.rope_out = false;
    dec::KvRowFinishParams kp =
        KvRow(ik, L.index_k_norm, b, di, pr.entry_pos, layer, pr.entry_write);
    if (stored_kv) {
      const int64_t row0 = L.comp_base - window_rows_total;
      lp.store = dec::KvRowStore::kCodesNvfp4;
      lp.codes = comp_codes + row0 * hd / 2;
      lp.scales = comp_scales + row0 * hd / 16;
      kp.store = dec::KvRowStore::kCodesMxfp4;
      kp.codes = L.index_k_codes;
      kp.scales = L.index_k_scales;
    } else {
      lp.store = dec::KvRowStore::kFloatNvfp4;
      lp.pool = kv_pool + int64_t{L.comp_base} * hd;
      kp.store = dec::KvRowStore::kFloatMxfp4;
      kp.pool = L.index_k;
    }
    RETURN_IF_ERROR(FinishKvRows(lp));
    RETURN_IF_ERROR(MmRound(L.index_wk, latent, b, ik));
    return FinishKvRows(kp);
  }
  RETURN_IF_ERROR(Norm(latent, L.comp_norm, b, hd, /*round=*/true));
  // Index keys from the pre-RoPE latent.
  RETURN_IF_ERROR(MmRound(L.index_wk, latent, b, ik));
  RETURN_IF_ERROR(Norm(ik, L.index_k_norm, b, di, /*round=*/true));
  RETURN_IF_ERROR(Rope(ik, pr.entry_pos, b, 1, di, layer, /*inverse=*/false, /*round=*/true));
  if (!stored_kv) RETURN_IF_ERROR(Quant(ik, b * di, dense::FakeQuantFormat::kMxfp4));
  RETURN_IF_ERROR(Rope(latent, pr.entry_pos, b, 1, hd, layer, /*inverse=*/false, /*round=*/true));
  if (stored_kv) {  // codes + scales of exactly the values the fake quantization keeps
    RETURN_IF_ERROR(dense::QuantizeNvfp4Kv(
        {.x = latent, .codes = kq_codes, .scales = kq_scales, .n = b * hd}, stream));
    const int64_t row0 = L.comp_base - window_rows_total;
    RETURN_IF_ERROR(ScatterStored(comp_codes + row0 * hd / 2, comp_scales + row0 * hd / 16,
                                  hd / 2, hd / 16, pr.entry_write, b));
    // The index keys as MXFP4 (the same staging rows, now free).
    RETURN_IF_ERROR(dense::QuantizeMxfp4(
        {.x = ik, .codes = kq_codes, .scales = kq_scales, .n = b * di}, stream));
    return ScatterStored(L.index_k_codes, L.index_k_scales, di / 2, di / 32, pr.entry_write, b);
  }
  RETURN_IF_ERROR(Quant(latent, b * hd, dense::FakeQuantFormat::kNvfp4Kv));
  RETURN_IF_ERROR(dec::CopyRows({.src = latent,
                                 .dst = kv_pool + int64_t{L.comp_base} * hd,
                                 .dst_rows = pr.entry_write,
                                 .rows = b,
                                 .width = hd},
                                stream));
  return dec::CopyRows(
      {.src = ik, .dst = L.index_k, .dst_rows = pr.entry_write, .rows = b, .width = di}, stream);
}

absl::Status DeviceDecoder::Impl::SelectCompressed(int layer, int64_t b) {
  const LayerRole& role = roles[layer];
  const LayerDev& L = layers[layer];
  const LayerDev& src = layers[role.kv_source];
  const StepMeta::PerRatio& pr = meta_d.ratio[ratio_index(role.ratio)];
  const int64_t nh = c.index_n_heads, di = c.index_head_dim, me = max_entries(role.ratio);
  RETURN_IF_ERROR(
      MmRoundRope(L.index_wq_b, qr_in, b, iq, meta_d.positions, static_cast<int>(nh), di, layer));
  // fold_row_ops: q's MXFP4 form and the weights' scale made as IndexerScore
  // stages them (the same bits), two launches fewer.
  const bool fold = FoldsRowOps() && di % 32 == 0;
  if (!fold) RETURN_IF_ERROR(Quant(iq, b * nh * di, dense::FakeQuantFormat::kMxfp4));
  RETURN_IF_ERROR(MmRound(L.index_weights_proj, h_in, b, iw));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(di)) /
                                         std::sqrt(static_cast<double>(nh)));
  if (!fold) {
    RETURN_IF_ERROR(
        dec::Scale({.x = iw, .n = b * nh, .factor = scale, .round_bf16 = bf16()}, stream));
  }
  // Each query's keys through its slot's block table (paged pools).
  kc::IndexerScoreParams sp{.q = iq, .k = src.index_k, .weights = iw,
                            .visible_len = pr.visible, .out = scores, .queries = b,
                            .heads = static_cast<int>(nh), .dim = static_cast<int>(di),
                            .keys = me, .round_bf16 = bf16()};
  sp.block_table = tables_dev;
  sp.table_slot = meta_d.slot;
  sp.table_width = static_cast<int>(table_width);
  sp.entries_per_block = static_cast<int>(entries_per_block(role.ratio));
  sp.k_codes = src.index_k_codes;  // stored_kv: MXFP4 keys (index_k null)
  sp.k_scales = src.index_k_scales;
  if (fold) {
    sp.q_mxfp4 = true;
    sp.weights_factor = scale;  // (Scale rounds as IndexerScore's round_bf16: bf16())
    folded_row_ops += 2;
  }
  // A prefill chunk's rows read one sequence's keys: a block of 4 queries
  // stages each key tile once (the same bits).
  if (options.indexer_shared_keys && b >= kIndexerSharedKeysMinRows) {
    sp.form = !options.indexer_mma       ? kc::IndexerScoreForm::kSharedKeys
              : options.indexer_mma_bf16 ? kc::IndexerScoreForm::kSharedKeysMmaBf16
              : options.indexer_mma_sum  ? kc::IndexerScoreForm::kSharedKeysMmaSum
                                         : kc::IndexerScoreForm::kSharedKeysMma;
    ++shared_key_scores;
    const kc::IndexerScoreForm ran = kc::ResolveIndexerScoreForm(sp);
    if (ran == kc::IndexerScoreForm::kSharedKeysMma ||
        ran == kc::IndexerScoreForm::kSharedKeysMmaSum ||
        ran == kc::IndexerScoreForm::kSharedKeysMmaBf16) {
      ++mma_key_scores;
    }
  } else if (options.indexer_decode_mma && b < kIndexerSharedKeysMinRows) {
    // A decode step's rows, each over its own sequence's keys: a block a
    // query on the tensor cores (the same bits).
    sp.form = kc::IndexerScoreForm::kDecodeMmaBf16;
    if (kc::ResolveIndexerScoreForm(sp) == kc::IndexerScoreForm::kDecodeMmaBf16) {
      ++decode_mma_key_scores;
    }
  }
  RETURN_IF_ERROR(kc::IndexerScore(sp, stream));
  if (role.produces_candidates) {
    RETURN_IF_ERROR(kc::CandidateBlocks({.scores = scores,
                                         .visible_len = pr.visible,
                                         .pool = L.candidates,
                                         .rows = b,
                                         .width = me,
                                         .topk_blocks = static_cast<int>(c.candidate_topk_blocks),
                                         .block_size = static_cast<int>(c.candidate_block_size),
                                         .masked_past_visible = true},
                                        stream));
  } else if (role.candidate_source >= 0) {
    RETURN_IF_ERROR(dec::MaskScores(
        {.scores = scores, .keep = layers[role.candidate_source].candidates, .n = b * me},
        stream));
  }
  // IndexerScore scored every key past a query's visible length -inf (and
  // MaskScores only adds -inf), so the select reads the visible keys alone.
  return kc::TopkPositions({.scores = scores,
                            .visible_len = pr.visible,
                            .out = L.topk,
                            .rows = b,
                            .width = me,
                            .k = static_cast<int>(c.index_topk),
                            .masked_past_visible = true,
                            .in_registers = options.topk_in_registers},
                           stream);
}

absl::Status DeviceDecoder::Impl::WindowKv(int layer, SharedInput& in, int64_t b,
                                           const int32_t* dst_rows) {
  const LayerDev& L = layers[layer];
  const int64_t hd = c.head_dim;
  RETURN_IF_ERROR(MmRound(L.wkv, in, b, kvw));
  if (FusesKvRows()) {  // norm, RoPE, quantization and scatter in one launch
    dec::KvRowFinishParams p = KvRow(kvw, L.kv_norm, b, hd, meta_d.positions, layer, dst_rows);
    if (stored_kv) {
      p.store = dec::KvRowStore::kCodesFp8;
      p.codes = win_codes + int64_t{L.window_base} * hd;
      p.scales = win_scales + int64_t{L.window_base} * hd / 32;
    } else {
      p.store = dec::KvRowStore::kFloatFp8;
      p.pool = kv_pool + int64_t{L.window_base} * hd;
    }
    return FinishKvRows(p);
  }
  RETURN_IF_ERROR(Norm(kvw, L.kv_norm, b, hd, /*round=*/true));
  RETURN_IF_ERROR(Rope(kvw, meta_d.positions, b, 1, hd, layer, /*inverse=*/false, /*round=*/true));
  if (stored_kv) {  // e4m3 codes + UE8M0 per 32: the values FakeQuant kFp8 keeps
    RETURN_IF_ERROR(dense::ActQuantFp8(
        {.x = kvw, .codes = kq_codes, .scales = kq_scales, .rows = b, .cols = hd}, stream));
    return ScatterStored(win_codes + int64_t{L.window_base} * hd,
                         win_scales + int64_t{L.window_base} * hd / 32, hd, hd / 32, dst_rows, b);
  }
  RETURN_IF_ERROR(Quant(kvw, b * hd, dense::FakeQuantFormat::kFp8));
  return dec::CopyRows({.src = kvw,
                        .dst = kv_pool + int64_t{L.window_base} * hd,
                        .dst_rows = dst_rows,
                        .rows = b,
                        .width = hd},
                       stream);
}

int64_t DeviceDecoder::Impl::GroupedWoAStride(const LayerDev& L) const {
  const int64_t groups = c.o_groups, gin = c.o_group_in_dim(), rank = c.o_lora_rank;
  if (groups <= 1 || !IsBf16(L.wo_a[0])) return 0;
  if (L.wo_a[0].w8) {  // codes and scales, each evenly apart
    const int64_t stride = L.wo_a[1].codes - L.wo_a[0].codes;
    const int64_t s_stride = L.wo_a[1].scales - L.wo_a[0].scales;
    if (stride % 16 != 0 || stride < rank * gin ||
        s_stride < dense::Bf16GemmWeightScaleBytes(rank, gin)) {
      return 0;
    }
    for (int64_t g = 1; g < groups; ++g) {
      if (!L.wo_a[g].w8 || L.wo_a[g].codes != L.wo_a[0].codes + g * stride ||
          L.wo_a[g].scales != L.wo_a[0].scales + g * s_stride) {
        return 0;
      }
    }
    return stride;
  }
  const int64_t stride = L.wo_a[1].bf16 - L.wo_a[0].bf16;
  if (stride % 8 != 0 || stride < rank * gin) return 0;
  for (int64_t g = 1; g < groups; ++g) {
    if (L.wo_a[g].bf16 != L.wo_a[0].bf16 + g * stride) return 0;
  }
  return stride;
}

absl::Status DeviceDecoder::Impl::Attention(int layer, int64_t b) {
  const LayerRole& role = roles[layer];
  const LayerDev& L = layers[layer];
  const int64_t hd = c.head_dim, heads = c.n_heads, ql = c.q_lora_rank;
  const int64_t* pos = meta_d.positions;
  const bool direct = DirectWoA(L, b);
  Mark("attn.qkv");
  // h and, after its norm, qr hold their values to the end of the attention;
  // the compressor and the indexer read them too. Collapse bound h_in to h
  // (with its FP8 form when wq_a reads it), Norm binds qr_in to qr.
  // kFast: the window KV and the compressor (products of h_in's FP8 form,
  // which exists: Collapse made it) run on a parallel branch beside the
  // query projections; the indexer and the attention read both after the
  // join.
  const bool compress = role.ratio > 0 && role.attention == AttentionRole::kFull;
  // A branch's product reads a form that exists (made by the collapse-norm)
  // or stages its own input in the branch's scratch: FP8 ones in side_fq,
  // bf16 ones (bf16_branches) through side_xb.
  bool bf16_on_branch = false;
  auto reads_h = [&](const DevDense& w) {
    if (FastFp8(w)) return h_in.has_fp8;
    const bool ok = side_xb != nullptr && IsBf16(w) && h_in.has_bf16;
    bf16_on_branch |= ok;
    return ok;
  };
  auto reads_own = [&](const DevDense& w) {
    if (FastFp8(w)) return true;
    const bool ok = side_xb != nullptr && IsBf16(w) && b * w.in <= side_xb_count;
    bf16_on_branch |= ok;
    return ok;
  };
  const bool branch = Branches() && reads_h(L.wkv) &&
                      (!compress || (reads_h(L.comp_wkv) && reads_own(L.index_wk) &&
                                     (role.ratio == 1 || reads_h(L.comp_wgate))));
  if (branch && bf16_on_branch) ++bf16_branches;
  auto kv_side = [&]() -> absl::Status {
    // Window KV, written into the slot's ring before the attention reads it.
    RETURN_IF_ERROR(WindowKv(layer, h_in, b, meta_d.win_write));
    if (compress) {
      Mark("attn.compressor");
      RETURN_IF_ERROR(UpdateCompressed(layer, b));
    }
    return absl::OkStatus();
  };
  if (branch) RETURN_IF_ERROR(ForkSide(kv_side));
  RETURN_IF_ERROR(MmRound(L.wq_a, h_in, b, qr));
  RETURN_IF_ERROR(Norm(qr, L.q_norm, b, ql, /*round=*/true, &qr_in, L.wq_b.codes != nullptr));
  RETURN_IF_ERROR(MmRoundRope(L.wq_b, qr_in, b, q, pos, static_cast<int>(heads), hd, layer));
  RETURN_IF_ERROR(branch ? JoinSide() : kv_side());
  // Compressed part.
  dec::AssembleIndexParams ip{.window = attn_rows_,
                              .out = index,
                              .rows = b,
                              .window_width = static_cast<int>(attn_width_),
                              .window_base = L.window_base};
  if (role.ratio > 0) {
    if (role.attention == AttentionRole::kFull || role.attention == AttentionRole::kReindex) {
      Mark("attn.indexer");
      RETURN_IF_ERROR(SelectCompressed(layer, b));
    }
    ip.topk = layers[role.index_source].topk;
    ip.block_table = tables_dev;  // top-k entries -> pool rows through the tables
    ip.table_slot = meta_d.slot;
    ip.table_width = static_cast<int>(table_width);
    ip.entries_per_block = static_cast<int>(entries_per_block(role.ratio));
    ip.k_width = static_cast<int>(c.index_topk);
    ip.topk_base = layers[role.kv_source].comp_base;
  }
  Mark("attn.sparse");
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  if (stored_kv) {
    // Two index lists: the window ring's rows (the step inputs, relative to
    // this layer's ring) and the selected compressed entries (relative to
    // the kv source's entries).
    kc::SparseDecodeAttentionParams sp{
        .q = q,
        .sink = L.sink,
        .window_codes = win_codes + int64_t{L.window_base} * hd,
        .window_scales = win_scales + int64_t{L.window_base} * hd / 32,
        .window_index = attn_rows_,
        .window_rows = window_region_rows(),
        .window_width = static_cast<int>(attn_width_),
        .out = o,
        .queries = b,
        .heads = static_cast<int>(heads),
        .head_dim = static_cast<int>(hd),
        .scale = scale,
        .round_bf16 = bf16(),  // o's bf16 boundary in the attention's epilogue
        .kernel = options.attention_wgmma ? kc::SparseDecodeKernel::kWgmma64
                                          : kc::SparseDecodeKernel::kMma16,
        .wgmma_range_tiles = options.attention_range_tiles,
        .wgmma_overlap = options.attention_overlap};
    if (role.ratio > 0) {
      dec::AssembleIndexParams cp = ip;
      cp.window = nullptr;
      cp.window_width = 0;
      cp.window_base = 0;
      cp.topk_base = 0;
      RETURN_IF_ERROR(dec::AssembleIndex(cp, stream));
      const int64_t row0 = layers[role.kv_source].comp_base - window_rows_total;
      sp.compressed_codes = comp_codes + row0 * hd / 2;
      sp.compressed_scales = comp_scales + row0 * hd / 16;
      sp.compressed_index = index;
      sp.compressed_rows = num_blocks * entries_per_block(role.ratio);
      sp.compressed_width = ip.k_width;
    }
    // attention_grouped_out: the wgmma attention writes og itself (with
    // direct_wo_a xb's bf16 bits), transposed with the inverse RoPE: the
    // SwapAxes below is skipped, the same bits.
    if (FusesWgAttentionOut() && sp.kernel == kc::SparseDecodeKernel::kWgmma64) {
      sp.out = nullptr;
      sp.grouped = GroupedAttentionOut(layer, direct);
      attention_out_fused_ = true;
    }
    if (roles_ == 1) {
      RETURN_IF_ERROR(kc::SparseDecodeAttention(sp, stream));
    } else {
      // The prompt's positions in their own shape (prompt_range_tiles);
      // with generated positions beside them, each launch computes its
      // role's queries (meta role).
      kc::SparseDecodeAttentionParams pp = sp;
      pp.kernel = kc::SparseDecodeKernel::kWgmma64;
      pp.wgmma_range_tiles = options.prompt_range_tiles;
      if (mirror_step_) {  // prompt_kv_mirror: the rows copied as bf16 (the same bits)
        RETURN_IF_ERROR(MirrorPromptKv(layer));
        pp.window_bf16 = win_mirror;
        if (role.ratio > 0) pp.compressed_bf16 = comp_mirror;
      }
      if (roles_ == 3) {
        sp.query_role = meta_d.role;
        sp.role = 0;
        pp.query_role = meta_d.role;
        pp.role = 1;
        RETURN_IF_ERROR(kc::SparseDecodeAttention(sp, stream));
      }
      RETURN_IF_ERROR(kc::SparseDecodeAttention(pp, stream));
    }
  } else {
    RETURN_IF_ERROR(dec::AssembleIndex(ip, stream));
    // fold_row_ops: o's bf16 boundary in the attention's launch (the Round
    // below is then skipped; the same bits).
    const bool round_o = FoldsRowOps() && bf16();
    kc::SparseAttentionParams ap{.q = q,
                                 .kv = kv_pool,
                                 .sink = L.sink,
                                 .index = index,
                                 .out = o,
                                 .queries = b,
                                 .heads = static_cast<int>(heads),
                                 .head_dim = static_cast<int>(hd),
                                 .kv_len = pool_rows,
                                 .topk = ip.window_width + ip.k_width,
                                 .scale = scale,
                                 .round_bf16 = round_o,
                                 .staged = fast() && options.staged_attention,
                                 .heads_per_block = options.attention_heads_per_block};
    // fused_attention_out: the staged kernel writes og itself, transposed
    // with the inverse RoPE (the SwapAxes below; the same bits); with
    // direct_wo_a as the bf16 bits the grouped product reads (xb).
    if (FusesAttentionOut()) {
      ap.out = nullptr;
      ap.grouped = GroupedAttentionOut(layer, direct);
      attention_out_fused_ = kc::SparseAttentionStages(ap);
      if (!attention_out_fused_) {  // not staged here: the plain output, then SwapAxes
        ap.grouped = {};
        ap.out = o;
      }
    }
    RETURN_IF_ERROR(kc::SparseAttention(ap, stream));
    if (round_o) ++folded_row_ops;
  }
  if (runs_) {  // the runs' last window positions, staging -> ring
    if (stored_kv) {
      RETURN_IF_ERROR(MoveStaged(win_codes + int64_t{L.window_base} * hd, hd, b));
      RETURN_IF_ERROR(MoveStaged(win_scales + int64_t{L.window_base} * hd / 32, hd / 32, b));
    } else {
      RETURN_IF_ERROR(MoveStaged(kv_pool + int64_t{L.window_base} * hd, hd * 4, b));
    }
  }
  Mark("attn.out");
  Unbind(h_in);
  Unbind(qr_in);
  if (!stored_kv && !(FoldsRowOps() && bf16())) RETURN_IF_ERROR(Round(o, b * heads * hd));
  // Grouped low-rank output: o [B, G, gin] -> og [G, B, gin] -> ug [G, B, r] -> u [B, G, r].
  // The inverse RoPE of o rides on the first transpose (ApplyRope's bits,
  // one launch fewer) where a group row holds whole heads.
  const int64_t groups = c.o_groups, gin = c.o_group_in_dim(), rank = c.o_lora_rank;
  dec::SwapAxesParams swap{.src = o, .dst = og, .a = b, .b = groups, .width = gin};
  if (direct) {  // og's bf16 bits, which the grouped product reads
    swap.dst = nullptr;
    swap.dst_bf16 = xb;
  }
  if (attention_out_fused_) {  // og written by the attention
    attention_out_fused_ = false;
    ++fused_ropes;
    ++folded_row_ops;
  } else {
    if (options.fused_rope && gin % hd == 0) {
      ++fused_ropes;
      swap.rope_positions = pos;
      swap.rope_cos_sin = cos_sin(layer);
      swap.rope_cos_sin_rows = options.max_positions;
      swap.rope_head_dim = static_cast<int>(hd);
      swap.rope_dim = static_cast<int>(c.rope_head_dim);
      swap.rope_inverse = true;
      swap.rope_round_bf16 = bf16();
    } else {
      RETURN_IF_ERROR(
          Rope(o, pos, b, static_cast<int>(heads), hd, layer, /*inverse=*/true, /*round=*/true));
    }
    RETURN_IF_ERROR(dec::SwapAxes(swap, stream));
  }
  // kFast: one grouped Bf16Gemm when the groups' bf16 weights lie evenly apart.
  const int64_t stride = GroupedWoAStride(L);
  const bool grouped = stride != 0;
  // kFast FP8 groups: one ActQuantFp8 over every group's rows and one
  // grouped Fp8BlockGemm when the codes and scales lie evenly apart.
  const DevDense& w0 = L.wo_a[0];
  bool fp8_grouped = groups > 1 && FastFp8(w0) && b * groups * gin <= fq_count &&
                     (b * gin) % 16 == 0 && (b * gin / 32) % 4 == 0;
  const int64_t c_stride = fp8_grouped ? L.wo_a[1].codes - w0.codes : 0;
  const int64_t s_stride = fp8_grouped ? L.wo_a[1].scales - w0.scales : 0;
  for (int64_t g = 1; fp8_grouped && g < groups; ++g) {
    fp8_grouped = L.wo_a[g].codes == w0.codes + g * c_stride &&
                  L.wo_a[g].scales == w0.scales + g * s_stride && c_stride % 16 == 0 &&
                  s_stride % 4 == 0 && c_stride >= rank * gin &&
                  s_stride >= (rank + 31) / 32 * (gin / 32);
  }
  // The bf16 boundary of u: in the grouped launches' epilogue (rounding
  // commutes with the SwapAxes after it), else a pass over u.
  const dense::Fp8GemmOutput ug_output =
      bf16() ? dense::Fp8GemmOutput::kF32RoundedBf16 : dense::Fp8GemmOutput::kF32;
  if (direct) {  // xb holds og's bf16 bits; u's rows written in place
    // reduce_fp8_out: u's FP8 form, which wo_b reads, by the split's second
    // kernel where the product splits (no ActQuantFp8 launch).
    const bool fp8_u = options.reduce_fp8_out && FastFp8(L.wo_b) && L.wo_b.in == groups * rank &&
                       b * groups * rank <= fq_count;
    bool made = false;
    RETURN_IF_ERROR(Bf16GemmOf(L.wo_a[0], xb, b, u, static_cast<int>(groups), stride, ug_output,
                               /*y_group_stride=*/rank, /*y_row_stride=*/groups * rank,
                               fp8_u ? fq : nullptr, fp8_u ? fq_scales : nullptr, &made,
                               WoAScaleStride(L)));
    ++direct_wo_a;
    if (made) {
      ++reduce_fp8_out;
      return Fp8RoundOf(L.wo_b, fq, fq_scales, b, y);
    }
    return MmRound(L.wo_b, u, b, y);
  }
  if (grouped) {
    RETURN_IF_ERROR(MmBf16(L.wo_a[0], og, b, ug, static_cast<int>(groups), stride, ug_output,
                           WoAScaleStride(L)));
  } else if (fp8_grouped) {
    RETURN_IF_ERROR(dense::ActQuantFp8(
        {.x = og, .codes = fq, .scales = fq_scales, .rows = groups * b, .cols = gin}, stream));
    RETURN_IF_ERROR(Fp8Gemm({.x = fq,
                             .x_scales = fq_scales,
                             .w = w0.codes,
                             .w_scales = w0.scales,
                             .y = ug,
                             .m = b,
                             .n = rank,
                             .k = gin,
                             .output = ug_output,
                             .groups = static_cast<int>(groups),
                             .x_group_stride = b * gin,
                             .x_scales_group_stride = b * gin / 32,
                             .w_group_stride = c_stride,
                             .w_scales_group_stride = s_stride,
                             .y_group_stride = b * rank}));
  } else {
    for (int64_t g = 0; g < groups; ++g) {
      RETURN_IF_ERROR(Mm(L.wo_a[g], og + g * b * gin, b, ug + g * b * rank,
                         static_cast<int>(groups)));
    }
  }
  RETURN_IF_ERROR(dec::SwapAxes({.src = ug, .dst = u, .a = groups, .b = b, .width = rank}, stream));
  if (!grouped && !fp8_grouped) RETURN_IF_ERROR(Round(u, b * groups * rank));
  return MmRound(L.wo_b, u, b, y);
}

absl::Status DeviceDecoder::Impl::HeadProduct(const DevDense& w, const float* in, int64_t rows,
                                              float* out) {
  if (IsBf16(w)) return MmBf16(w, in, rows, out);  // kFast, bf16
  const dense::MatmulParams p{.x = in, .w = w.w, .y = out, .rows = rows, .out = w.out, .in = w.in};
  if (fast() && options.fast_dot_rows) {  // a CTA per vocabulary row, fixed order (batch-invariant)
    return dec::DotRows({.x = in, .w = w.w, .y = out, .rows = rows, .out = w.out, .k = w.in},
                        stream);
  }
  return options.row_stable_logits ? dense::RowStableMatmul(p, stream) : gemm->Matmul(p, stream);
}

absl::Status DeviceDecoder::Impl::Enqueue(int64_t b, int64_t head_b, bool runs) {
  runs_ = runs;
  attn_rows_ = meta_d.win_rows;
  attn_width_ = window();
  float* const x0 = x;
  float* const x20 = x2;
  absl::Status st = [&]() -> absl::Status {
    Mark("embed");
    RETURN_IF_ERROR(dec::EmbedStreams({.embed = embed, .token_ids = meta_d.tokens, .out = x,
                                       .tokens = b, .vocab = c.vocab_size, .dim = c.dim,
                                       .copies = static_cast<int>(c.hc_mult)},
                                      stream));
    const float* pre = identity_pre;
    // kFast: the Expand ending a layer runs in the next layer's attention
    // Collapse (one launch, Collapse's `expand`), unless Engram changes the
    // streams between them.
    const Coeffs* expand = nullptr;
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerDev& L = layers[l];
      if (roles[l].has_engram) {
        if (expand != nullptr) RETURN_IF_ERROR(Expand(*expand, b));
        expand = nullptr;
        Mark("engram");
        RETURN_IF_ERROR(Engram(l, b)) << "layer " << l;
      }
      Mark("mhc");
      // h's FP8 form in the collapse's launch when wq_a reads it as FP8.
      RETURN_IF_ERROR(
          Collapse(pre, b, L.attn_norm, L.wq_a.codes != nullptr, expand, AttentionReadsBf16(L)));
      expand = nullptr;
      // DSpark targets: the layer's input, the mean over its streams.
      for (size_t t = 0; options.drafting && t < c.dspark_target_layer_ids.size(); ++t) {
        if (c.dspark_target_layer_ids[t] != l) continue;
        const int64_t width = static_cast<int64_t>(c.dspark_target_layer_ids.size()) * c.dim;
        RETURN_IF_ERROR(dec::StreamMean({.x = x,
                                         .out = targets + t * c.dim,
                                         .tokens = b,
                                         .dim = c.dim,
                                         .copies = static_cast<int>(c.hc_mult),
                                         .out_stride = width},
                                        stream));
      }
      RETURN_IF_ERROR(MixBeside(L.hc_attn, b, ca));
      RETURN_IF_ERROR(Attention(l, b)) << "layer " << l;
      Mark("mhc");
      RETURN_IF_ERROR(
          Collapse(ca.pre, b, L.ffn_norm, L.sw1.codes != nullptr, &ca, FfnNormMakesGateBf16(L)));
      RETURN_IF_ERROR(MixBeside(L.hc_ffn, b, cf));
      RETURN_IF_ERROR(Moe(l, b)) << "layer " << l;
      expand = &cf;
      pre = cf.pre;
    }
    if (expand != nullptr) {
      Mark("mhc");
      RETURN_IF_ERROR(Expand(*expand, b));
    }
    if (options.drafting) {
      Mark("dspark.rings");
      RETURN_IF_ERROR(UpdateStageRings(b));
    }
    Mark("head");
    RETURN_IF_ERROR(Collapse(pre, b, final_norm));
    // Logits of some rows only (a prefill chunk's last row): their h rows
    // gathered first; every head below is row by row, so a row's logits do
    // not depend on which rows are asked.
    const float* hx = h;
    if (head_b >= 0) {
      if (head_b == 0) return absl::OkStatus();
      RETURN_IF_ERROR(dec::CopyRows({.src = h,
                                     .dst = h_head,
                                     .src_rows = meta_d.head_rows,
                                     .rows = head_b,
                                     .width = c.dim,
                                     .src_capacity = b},
                                    stream));
      hx = h_head;
      b = head_b;
    }
    return HeadProduct(head, hx, b, logits);
  }();
  JoinMix();  // a step that failed between a MixBeside and its Expand
  x = x0;  // the same buffers start every step (graphs bake the pointers in)
  x2 = x20;
  return st;
}

}  // namespace weir::model
