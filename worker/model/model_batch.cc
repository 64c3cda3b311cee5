// Model::ForwardBatch: one step over several sequences, every layer over all
// rows at once (attention per row, everything else batched), so that each
// backbone MoE layer makes one executor call per step.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/model/attention.h"
#include "worker/model/indexer.h"
#include "worker/model/mhc.h"
#include "worker/model/model.h"
#include "worker/model/model_runtime.h"
#include "worker/model/moe_layer.h"

namespace weir::model {

absl::Status Model::CheckRow(const SequenceState& state, std::span<const int64_t> tokens,
                             int64_t start_pos) const {
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens");
  RETURN_IF_ERROR(CheckTokens(tokens));
  if (state.num_layers() != roles_.size() ||
      state.window(0).capacity() != config_.window_size + state.max_rollback()) {
    return absl::InvalidArgumentError("the sequence state belongs to another model");
  }
  if (state.broken()) return absl::FailedPreconditionError("the sequence state is broken");
  if (start_pos != state.length()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "start_pos ", start_pos, " but the sequence holds ", state.length(), " positions"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<float>>> Model::ForwardBatch(
    std::span<SequenceState* const> states, std::span<const std::span<const int64_t>> tokens,
    std::span<const int64_t> start_pos, std::span<const int64_t> logits_from) {
  absl::Status bad;
  if (tokens.size() != states.size() || start_pos.size() != states.size()) {
    bad = absl::InvalidArgumentError(absl::StrCat("ForwardBatch: ", states.size(), " states, ",
                                                  tokens.size(), " token rows, ", start_pos.size(),
                                                  " start positions"));
  } else if (!logits_from.empty() && logits_from.size() != states.size()) {
    bad = absl::InvalidArgumentError(absl::StrCat("ForwardBatch: ", states.size(), " rows but ",
                                                  logits_from.size(), " logits_from entries"));
  }
  for (size_t i = 0; bad.ok() && i < logits_from.size(); ++i) {
    if (logits_from[i] < 0 || logits_from[i] > static_cast<int64_t>(tokens[i].size())) {
      bad = absl::InvalidArgumentError(absl::StrCat("ForwardBatch: row ", i, ": logits_from ",
                                                    logits_from[i], " outside [0, ",
                                                    tokens[i].size(), "]"));
    }
  }
  absl::flat_hash_set<const SequenceState*> seen;
  for (size_t i = 0; bad.ok() && i < states.size(); ++i) {
    if (states[i] == nullptr || !seen.insert(states[i]).second) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("ForwardBatch: row ", i, ": null or repeated sequence state"));
      break;
    }
    absl::Status st = CheckRow(*states[i], tokens[i], start_pos[i]);
    if (!st.ok())
      bad = absl::Status(st.code(), absl::StrCat("ForwardBatch: row ", i, ": ", st.message()));
  }
  if (!bad.ok() || states.empty()) {
    if (collective_) {  // expert-parallel or sharded Engram: peers wait for our exchanges
      absl::Status st = RunEmptyStep();
      if (!st.ok() && bad.ok())
        return absl::InternalError(absl::StrCat("ForwardBatch: ", st.message()));
    }
    if (!bad.ok()) return bad;
    return std::vector<std::vector<float>>{};
  }
  std::vector<std::vector<float>> logits;
  std::vector<int64_t> all;  // empty logits_from: every position of every row
  if (logits_from.empty()) {
    all.assign(states.size(), 0);
    logits_from = all;
  }
  absl::Status st = RunBatch(states, tokens, start_pos, logits_from, logits);
  if (!st.ok()) {
    for (SequenceState* s : states) s->MarkBroken();
    return absl::InternalError(absl::StrCat("ForwardBatch: ", st.message()));
  }
  for (size_t i = 0; i < states.size(); ++i) {
    states[i]->Advance(static_cast<int64_t>(tokens[i].size()));
  }
  return logits;
}

absl::Status Model::RunEmptyStep() {
  for (int layer = 0; layer < config_.n_layers; ++layer) RETURN_IF_ERROR(RunEmptyLayer(layer));
  return absl::OkStatus();
}

absl::Status Model::RunEmptyLayer(int layer) {
  if (roles_[layer].has_engram && engram_gather_->collective()) {
    RETURN_IF_ERROR(engram_gather_->Gather(layer, {}, {})) << "layer " << layer;
  }
  if (local_executor_ == nullptr) return absl::OkStatus();  // MoE runs locally
  const ExpertAssignments none{.tokens = 0, .topk = MoeTopk(config_, roles_[layer])};
  RETURN_IF_ERROR(executor_->Dispatch(layer, {}, none)) << "layer " << layer;
  RETURN_IF_ERROR(executor_->RunExperts()) << "layer " << layer;
  RETURN_IF_ERROR(executor_->Combine({})) << "layer " << layer;
  return absl::OkStatus();
}

namespace {

// Keeps, of every row i's tokens [off[i], off[i + 1]) in `v` ([tokens, width]),
// all but the first skip[i].
template <typename T>
void DropLeading(std::vector<T>& v, int64_t width, const std::vector<int64_t>& off,
                 const std::vector<int64_t>& skip) {
  int64_t out = 0;
  for (size_t i = 0; i + 1 < off.size(); ++i) {
    for (int64_t t = off[i] + skip[i]; t < off[i + 1]; ++t, ++out) {
      std::copy_n(v.begin() + t * width, width, v.begin() + out * width);
    }
  }
  v.resize(out * width);
}

}  // namespace

absl::Status Model::RunBatch(std::span<SequenceState* const> states,
                             std::span<const std::span<const int64_t>> tokens,
                             std::span<const int64_t> start_pos,
                             std::span<const int64_t> logits_from,
                             std::vector<std::vector<float>>& logits) {
  const ModelConfig& c = config_;
  const size_t rows = states.size();
  const int64_t d = c.dim, n = c.hc_mult;
  std::vector<int64_t> off(rows + 1, 0);  // first token of each row in the batch
  for (size_t i = 0; i < rows; ++i) off[i + 1] = off[i] + static_cast<int64_t>(tokens[i].size());
  const int64_t all = off[rows];
  const std::vector<int64_t> off_all = off;
  // Engram rows [T, layers, cols], each row hashed over its own history.
  const int64_t e_layers = engram_->num_layers(), cols = engram_->cols();
  std::vector<int64_t> engram_rows(all * e_layers * cols);
  for (size_t i = 0; i < rows && e_layers > 0; ++i) {
    std::vector<int64_t>& history = states[i]->engram_history();
    for (int64_t t : tokens[i]) history.push_back(engram_->Compress(t));
    RETURN_IF_ERROR(engram_->Hash(
        history, start_pos[i],
        std::span<int64_t>(engram_rows)
            .subspan(off[i] * e_layers * cols, (off[i + 1] - off[i]) * e_layers * cols)));
  }
  std::vector<float> x(all * n * d);
  for (size_t i = 0; i < rows; ++i) {
    for (int64_t t = 0; t < off[i + 1] - off[i]; ++t) {
      for (int64_t k = 0; k < n; ++k) {
        std::copy_n(weights_.embed.data() + tokens[i][t] * d, d,
                    x.data() + ((off[i] + t) * n + k) * d);
      }
    }
  }
  std::vector<float> pre = IdentityPreMix(all, static_cast<int>(n));
  const int64_t n_targets = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  std::vector<float> main_hidden(all * n_targets * d);
  std::vector<AttentionShared> shared(rows);
  // CED bounded replay (§4.4): row i's first skip[i] tokens lie before its
  // replay start; they leave the batch at the first decoder layer, after the
  // global-KV projection. From there `off` and `starts` describe the tokens
  // that remain (`total` of them).
  std::vector<int64_t> skip(rows, 0), starts(start_pos.begin(), start_pos.end());
  bool replay = false;
  for (size_t i = 0; i < rows; ++i) {
    skip[i] = std::clamp<int64_t>(states[i]->replay_start() - start_pos[i], 0, off[i + 1] - off[i]);
    replay = replay || skip[i] > 0;
  }
  int64_t total = all;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerRole& role = roles_[layer];
    const BlockWeights& w = weights_.layers[layer];
    if (replay && layer == c.decoder_start()) {
      RETURN_IF_ERROR(ProjectGlobalKv(states, start_pos, off, skip, x, pre, shared))
          << "CED global KV, layer " << layer;
      DropLeading(x, n * d, off, skip);
      DropLeading(pre, n, off, skip);
      DropLeading(main_hidden, n_targets * d, off, skip);
      DropLeading(engram_rows, e_layers * cols, off, skip);
      for (size_t i = 0; i < rows; ++i) {
        starts[i] += skip[i];
        off[i + 1] = off[i] + (off_all[i + 1] - off_all[i]) - skip[i];
        // An encoder index source's top-k or pool read by a decoder layer.
        for (auto& [source, topk] : shared[i].topk) {
          topk.erase(topk.begin(), topk.begin() + skip[i] * shared[i].topk_width[source]);
        }
        std::vector<uint8_t>& pool = shared[i].candidates;
        pool.erase(pool.begin(), pool.begin() + std::min<int64_t>(static_cast<int64_t>(pool.size()),
                                                                  skip[i] * shared[i].pool_width));
      }
      total = off[rows];
    }
    if (total == 0) {  // every token stopped before the decoder
      if (collective_) RETURN_IF_ERROR(RunEmptyLayer(layer));
      continue;
    }
    if (role.has_engram) {
      const int e = c.engram_index(layer);
      std::vector<int64_t> layer_rows(total * cols);
      for (int64_t t = 0; t < total; ++t) {
        std::copy_n(engram_rows.data() + (t * e_layers + e) * cols, cols,
                    layer_rows.data() + t * cols);
      }
      RETURN_IF_ERROR(
          EngramForward(*ops_, c, w.engram, *engram_gather_, layer, layer_rows, total, x));
    }
    for (int64_t i = 0; i < n_targets; ++i) {
      if (c.dspark_target_layer_ids[i] != layer) continue;
      for (int64_t t = 0; t < total; ++t) {  // mean over the streams, bf16 below
        float* dst = main_hidden.data() + (t * n_targets + i) * d;
        for (int64_t ch = 0; ch < d; ++ch) {
          float sum = 0.0f;
          for (int64_t k = 0; k < n; ++k) sum += x[(t * n + k) * d + ch];
          dst[ch] = sum / static_cast<float>(n);
        }
      }
    }
    const MoeContext mctx{*ops_, c, role, w.ffn, *executor_, load_.get()};
    RETURN_IF_ERROR(BlockForward(
        *ops_, c, w, total,
        [&](std::span<const float> in, std::span<float> out) -> absl::Status {
          for (size_t i = 0; i < rows; ++i) {  // attention reads each row's own state
            const int64_t s = off[i + 1] - off[i];
            if (s == 0) continue;  // bounded replay: the row's tokens stopped before the decoder
            const AttentionContext actx{*ops_,      c,         role,      w.attn, *rope_[layer],
                                        *states[i], shared[i], starts[i], s};
            RETURN_IF_ERROR(AttentionForward(actx, in.subspan(off[i] * d, s * d),
                                             out.subspan(off[i] * d, s * d)))
                << "row " << i;
          }
          return absl::OkStatus();
        },
        [&](std::span<const float> in, std::span<float> out) {
          return MoeForward(mctx, in, total, {}, out);
        },
        x, pre))
        << "layer " << layer;
  }
  ops_->RoundBf16(main_hidden);
  std::vector<float> h(total * d);
  if (total > 0) {
    RETURN_IF_ERROR(Collapse(*ops_, c, x, pre, total, h));
    RETURN_IF_ERROR(ops_->RmsNorm(h, weights_.norm, total, d, static_cast<float>(c.norm_eps), h));
    ops_->RoundBf16(h);
  }
  const ModelRuntime rt{c, roles_, weights_, rope_, *ops_, *executor_, load_.get()};
  logits.resize(rows);
  for (size_t i = 0; i < rows; ++i) {  // the head per row over the tokens asked for
    const int64_t s = off[i + 1] - off[i];
    // Row i's tokens [from, s + skip) are returned; those the decoder skipped
    // (bounded replay: the first skip[i]) have no logits (NaN).
    const int64_t from = logits_from[i], first = std::max(from, skip[i]);
    logits[i].assign((s + skip[i] - from) * c.vocab_size, std::numeric_limits<float>::quiet_NaN());
    if (const int64_t computed = s + skip[i] - first; computed > 0) {
      RETURN_IF_ERROR(ops_->Logits(
          weights_.head,
          std::span<const float>(h).subspan((off[i] + first - skip[i]) * d, computed * d), computed,
          std::span<float>(logits[i]).subspan((first - from) * c.vocab_size)));
    }
    if (s == 0) continue;
    if (c.n_mtp_layers > 0 && n_targets > 0) {
      RETURN_IF_ERROR(UpdateDsparkRings(
          rt,
          std::span<const float>(main_hidden).subspan(off[i] * n_targets * d, s * n_targets * d),
          starts[i], s, *states[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::ProjectGlobalKv(std::span<SequenceState* const> states,
                                    std::span<const int64_t> start_pos,
                                    const std::vector<int64_t>& off,
                                    const std::vector<int64_t>& skip, const std::vector<float>& x,
                                    const std::vector<float>& pre,
                                    std::vector<AttentionShared>& shared) {
  const ModelConfig& c = config_;
  const int layer = c.decoder_start();
  const LayerRole& role = roles_[layer];
  // A decoder reading an encoder layer's global KV has nothing to project.
  if (role.attention != AttentionRole::kFull) return absl::OkStatus();
  const BlockWeights& w = weights_.layers[layer];
  const int64_t d = c.dim, n = c.hc_mult;
  for (size_t i = 0; i < states.size(); ++i) {
    const int64_t s = skip[i];
    if (s == 0) continue;
    std::vector<float> in(s * d);
    RETURN_IF_ERROR(AttentionInput(*ops_, c, w,
                                   std::span<const float>(x).subspan(off[i] * n * d, s * n * d),
                                   std::span<const float>(pre).subspan(off[i] * n, s * n), s, in));
    const AttentionContext actx{*ops_,      c,         role,         w.attn, *rope_[layer],
                                *states[i], shared[i], start_pos[i], s};
    RETURN_IF_ERROR(UpdateCompressedKv(actx, in)) << "row " << i;
  }
  return absl::OkStatus();
}

}  // namespace weir::model
