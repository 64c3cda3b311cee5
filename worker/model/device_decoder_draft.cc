// DeviceDecoder: DSpark drafting on the device (options.drafting). Every
// step writes the stages' rings from the targets (UpdateStageRings, inside
// the step's graph); DraftBatch runs each asked sequence's block through the
// stages and the heads (EnqueueDraft), as worker/model/dspark.cc does on the
// CPU, op for op.

#include "worker/model/device_decoder_impl.h"

namespace weir::model {
using device_decoder_internal::LayerDev;

absl::Status DeviceDecoder::Impl::UpdateStageRings(int64_t b) {
  const int64_t d = c.dim;
  const int64_t width = static_cast<int64_t>(c.dspark_target_layer_ids.size()) * d;
  // UpdateDsparkRings after RunBackbone's bf16 boundary on main_hidden.
  RETURN_IF_ERROR(Round(targets, b * width));
  RETURN_IF_ERROR(MmRound(main_proj, targets, b, main_x));
  // Every stage's wkv reads main_x: its FP8 (or bf16) form made once.
  RETURN_IF_ERROR(Norm(main_x, main_norm, b, d, /*round=*/true, &h_in,
                       layers[c.n_layers].wkv.codes != nullptr));
  for (int stage = 0; stage < c.n_mtp_layers; ++stage) {
    RETURN_IF_ERROR(WindowKv(c.n_layers + stage, h_in, b, meta_d.ring_write))
        << "DSpark stage " << stage;
  }
  Unbind(h_in);
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Impl::EnqueueDraft(int64_t sequences, int64_t padded,
                                               bool with_logits) {
  const int64_t bs = draft_block(), d = c.dim, rank = c.dspark_markov_rank, v = c.vocab_size;
  const int64_t rows = sequences * bs;
  runs_ = false;
  roles_ = 1;
  linear_roles_ = 1;
  attn_rows_ = meta_d.draft_rows;
  attn_width_ = window() + bs;
  float* const x0 = x;
  float* const x20 = x2;
  absl::Status st = [&]() -> absl::Status {
    Mark("draft.stages");
    RETURN_IF_ERROR(dec::EmbedStreams({.embed = embed,
                                       .token_ids = meta_d.tokens,
                                       .out = x,
                                       .tokens = padded,
                                       .vocab = v,
                                       .dim = d,
                                       .copies = static_cast<int>(c.hc_mult)},
                                      stream));
    const float* pre = identity_pre;
    for (int stage = 0; stage < c.n_mtp_layers; ++stage) {
      const int l = c.n_layers + stage;
      const LayerDev& L = layers[l];
      RETURN_IF_ERROR(Mix(L.hc_attn, padded, ca));
      RETURN_IF_ERROR(Collapse(pre, padded, L.attn_norm, L.wq_a.codes != nullptr));
      RETURN_IF_ERROR(Attention(l, padded)) << "DSpark stage " << stage;
      RETURN_IF_ERROR(Expand(ca, padded));
      RETURN_IF_ERROR(Mix(L.hc_ffn, padded, cf));
      RETURN_IF_ERROR(Collapse(ca.pre, padded, L.ffn_norm, L.sw1.codes != nullptr));
      RETURN_IF_ERROR(Moe(l, padded)) << "DSpark stage " << stage;
      RETURN_IF_ERROR(Expand(cf, padded));
      pre = cf.pre;
    }
    Mark("draft.heads");
    // h (its rows are the confidence features' first part), then the norm.
    RETURN_IF_ERROR(kc::HcCollapse({.x = x,
                                    .pre = pre,
                                    .out = draft_h,
                                    .tokens = padded,
                                    .dim = d,
                                    .hc_mult = static_cast<int>(c.hc_mult),
                                    .round_bf16 = bf16()},
                                   stream));
    RETURN_IF_ERROR(kc::RmsNorm({.x = draft_h,
                                 .weight = dspark_norm,
                                 .out = h,
                                 .rows = padded,
                                 .dim = d,
                                 .eps = static_cast<float>(c.norm_eps),
                                 .round_bf16 = bf16()},
                                stream));
    RETURN_IF_ERROR(HeadProduct(head, h, rows, logits));
    const int64_t fw = d + rank;  // a feature row: [h ; e]
    RETURN_IF_ERROR(dec::CopyRows({.src = draft_h,
                                   .dst = draft_feat,
                                   .rows = rows,
                                   .width = d,
                                   .src_stride = d,
                                   .dst_stride = fw},
                                  stream));
    // The Markov head over the block: on kFast with the head on DotRows, one
    // MarkovDraft launch (the loop's bits); otherwise one position of every
    // sequence at a time: e of the previous token, its bias on the
    // position's logits, the first maximum.
    const dec::MarkovDraftParams fused{.logits = logits,
                                       .embed = markov_embed,
                                       .head = markov_head.w,
                                       .features = draft_feat,
                                       .tokens = draft_tokens,
                                       .prev = meta_d.draft_prev,
                                       .sequences = sequences,
                                       .vocab = v,
                                       .rank = rank,
                                       .feature_stride = fw,
                                       .feature_offset = d,
                                       .block = static_cast<int>(bs)};
    if (options.fused_markov && fast() && options.fast_dot_rows && markov_head.bf16 == nullptr &&
        dec::SupportsMarkovDraft(fused)) {
      RETURN_IF_ERROR(dec::MarkovDraft(fused, stream));
    } else {
      for (int64_t i = 0; i < bs; ++i) {
        RETURN_IF_ERROR(dec::CopyRows({.src = markov_embed,
                                       .dst = markov_e,
                                       .src_rows = meta_d.draft_prev,
                                       .rows = sequences,
                                       .width = rank,
                                       .src_capacity = v},
                                      stream));
        RETURN_IF_ERROR(dec::CopyRows({.src = markov_e,
                                       .dst = draft_feat + i * fw + d,
                                       .rows = sequences,
                                       .width = rank,
                                       .src_stride = rank,
                                       .dst_stride = bs * fw},
                                      stream));
        RETURN_IF_ERROR(HeadProduct(markov_head, markov_e, sequences, markov_bias));
        RETURN_IF_ERROR(dec::MarkovArgmax({.logits = logits,
                                           .bias = markov_bias,
                                           .tokens = draft_tokens,
                                           .prev = meta_d.draft_prev,
                                           .sequences = sequences,
                                           .vocab = v,
                                           .block = static_cast<int>(bs),
                                           .step = static_cast<int>(i)},
                                          stream));
      }
    }
    RETURN_IF_ERROR(Mm(confidence, draft_feat, rows, draft_conf));
    Mark(nullptr);
    if (with_logits) {
      WEIR_DD_CUDA("draft logits", cudaMemcpyAsync(logits_host, logits, rows * v * sizeof(float),
                                                   cudaMemcpyDeviceToHost, stream));
    }
    WEIR_DD_CUDA("draft tokens", cudaMemcpyAsync(draft_host, draft_tokens, rows * sizeof(int64_t),
                                                 cudaMemcpyDeviceToHost, stream));
    WEIR_DD_CUDA("draft confidences",
                 cudaMemcpyAsync(draft_host + batch_cap * sizeof(int64_t), draft_conf,
                                 rows * sizeof(float), cudaMemcpyDeviceToHost, stream));
    return absl::OkStatus();
  }();
  x = x0;  // as Enqueue: the same buffers start every pass
  x2 = x20;
  return st;
}

std::vector<absl::StatusOr<DraftResult>> DeviceDecoder::DraftBatch(
    std::span<const int> slots, std::span<const int64_t> next_tokens, bool with_logits) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  std::vector<absl::StatusOr<DraftResult>> out(
      slots.size(), absl::FailedPreconditionError(
                        "DraftBatch: the decoder was created without options.drafting"));
  if (!options_.drafting) return out;
  const int64_t bs = m.draft_block(), win = m.window(), rg = m.ring(), v = c.vocab_size;
  // The sequences that can draft; the others get their error.
  std::vector<size_t> asked;
  absl::flat_hash_set<int> seen;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int s = slots[i];
    if (i >= next_tokens.size()) {
      out[i] = absl::InvalidArgumentError("DraftBatch: fewer tokens than slots");
    } else if (s < 0 || s >= options_.max_sequences || !m.slot_state[s].used) {
      out[i] =
          absl::InvalidArgumentError(absl::StrCat("DraftBatch: slot ", s, " holds no sequence"));
    } else if (m.slot_state[s].length < 2) {
      out[i] = absl::InvalidArgumentError(absl::StrCat(
          "DraftBatch: slot ", s, " holds ", m.slot_state[s].length, " positions (2 needed)"));
    } else if (m.slot_state[s].length + bs > options_.max_positions) {
      out[i] = absl::InvalidArgumentError(absl::StrCat(
          "DraftBatch: slot ", s, "'s block would pass max_positions ", options_.max_positions));
    } else if (next_tokens[i] < 0 || next_tokens[i] >= v) {
      out[i] = absl::InvalidArgumentError(
          absl::StrCat("DraftBatch: token ", next_tokens[i], ", vocabulary has ", v));
    } else if (!seen.insert(s).second) {
      out[i] = absl::InvalidArgumentError(absl::StrCat("DraftBatch: slot ", s, " repeated"));
    } else {
      asked.push_back(i);
    }
  }
  if (asked.empty()) return out;
  if (cudaError_t e = cudaSetDevice(options_.device); e != cudaSuccess) {
    for (size_t i : asked) out[i] = device_decoder_internal::CudaError("set device", e);
    return out;
  }
  const int64_t per_pass = m.batch_cap / bs;  // >= 1 (max_batch >= block, checked at Create)
  const int64_t interval = options_.batch_interval;
  Impl::StepMeta& mh = m.meta_h;
  for (size_t first = 0; first < asked.size(); first += per_pass) {
    const int64_t n = std::min<int64_t>(per_pass, static_cast<int64_t>(asked.size() - first));
    const int64_t rows = n * bs;
    const int64_t padded = std::min(m.batch_cap, (rows + interval - 1) / interval * interval);
    const int64_t width = win + bs;
    for (int64_t i = 0; i < padded; ++i) {
      const bool real = i < rows;
      const int64_t r = i / bs, t = i % bs;
      const size_t k = real ? asked[first + r] : 0;
      const int s = real ? slots[k] : m.slots - 1;
      const int64_t p = real ? m.slot_state[s].length - 1 : 0;  // the last position held
      mh.tokens[i] = real ? (t == 0 ? next_tokens[k] : c.dspark_noise_token_id) : 0;
      mh.positions[i] = real ? p + 1 + t : 0;
      mh.slot[i] = s;
      mh.win_write[i] = static_cast<int32_t>(m.staging_row(i));  // the block's own KV
      int32_t* entries = mh.draft_rows + i * width;
      std::fill_n(entries, width, -1);
      if (!real) {
        entries[0] = static_cast<int32_t>(m.staging_row(i));
        continue;
      }
      // DsparkIndices: the ring's slots 0 .. n_ring - 1 (position q in slot
      // q % window), then the block's rows.
      const int64_t n_ring = std::min(win, p + 1);
      for (int64_t q = p - n_ring + 1; q <= p; ++q) {
        entries[q % win] = static_cast<int32_t>(s * rg + q % rg);
      }
      for (int64_t u = 0; u < bs; ++u) {
        entries[n_ring + u] = static_cast<int32_t>(m.staging_row(r * bs + u));
      }
      if (t == 0) mh.draft_prev[r] = static_cast<int32_t>(next_tokens[k]);
    }
    mh.valid[0] = rows;
    absl::Status st = [&]() -> absl::Status {
      WEIR_DD_CUDA("draft inputs", cudaMemcpyAsync(m.meta_dev, m.meta_host, m.meta_bytes,
                                                   cudaMemcpyHostToDevice, m.stream));
      // A graph per sequence count and logits copy (the copies back depend
      // on them; at most 2 x max_sequences graphs, whatever graph_max_rows);
      // the step graphs' keys are >= 0.
      if (options_.use_graphs) {
        RETURN_IF_ERROR(LaunchGraph(-1 - (2 * n + (with_logits ? 1 : 0)),
                                    [&] { return m.EnqueueDraft(n, padded, with_logits); }));
        ++stats_.graph_launches;
      } else {
        RETURN_IF_ERROR(m.EnqueueDraft(n, padded, with_logits));
      }
      WEIR_DD_CUDA("draft", cudaStreamSynchronize(m.stream));
      return absl::OkStatus();
    }();
    ++stats_.draft_launches;
    for (int64_t r = 0; r < n; ++r) {
      const size_t k = asked[first + r];
      if (!st.ok()) {
        out[k] = st;
        continue;
      }
      DraftResult dr;
      const auto* tokens = reinterpret_cast<const int64_t*>(m.draft_host);
      const auto* conf =
          reinterpret_cast<const float*>(m.draft_host + m.batch_cap * sizeof(int64_t));
      dr.tokens.assign(tokens + r * bs, tokens + (r + 1) * bs);
      dr.confidence.assign(conf + r * bs, conf + (r + 1) * bs);
      if (with_logits) {
        dr.logits.assign(m.logits_host + r * bs * v, m.logits_host + (r + 1) * bs * v);
      }
      out[k] = std::move(dr);
      ++stats_.drafts;
    }
  }
  stats_.draft_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace weir::model
