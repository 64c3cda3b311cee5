#include "worker/model/model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/model/attention.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/local_expert_executor.h"
#include "worker/model/mhc.h"
#include "worker/model/moe_layer.h"
#include "worker/model/model_runtime.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;

Model::Model(const ModelConfig& config, ModelOptions options)
    : config_(config), roles_(config), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config,
                                                     const Checkpoint& checkpoint,
                                                     ModelOptions options) {
  RETURN_IF_ERROR(ValidateModelConfig(config));
  RETURN_IF_ERROR(CheckCheckpoint(config, checkpoint.tensors()).ToStatus());
  if (options.max_rollback < 0) options.max_rollback = config.dspark_block_size + 1;
  std::unique_ptr<Model> m(new Model(config, std::move(options)));
  ASSIGN_OR_RETURN(m->weights_,
                   LoadModelWeights(m->config_, m->roles_, checkpoint, m->options_.expert_filter,
                                    m->options_.engram_row_filter));
  const ModelConfig& c = m->config_;
  auto table = [&](int ratio) {
    return cpu::RopeTable::Create(cpu::LayerRopeConfig(
        ratio, static_cast<int>(c.rope_head_dim), static_cast<float>(c.rope_theta),
        static_cast<float>(c.compress_rope_theta), c.original_seq_len,
        static_cast<float>(c.rope_factor), static_cast<float>(c.beta_fast),
        static_cast<float>(c.beta_slow)));
  };
  ASSIGN_OR_RETURN(cpu::RopeTable swa, table(0));
  ASSIGN_OR_RETURN(cpu::RopeTable compressed, table(1));
  m->rope_swa_ = std::make_unique<cpu::RopeTable>(std::move(swa));
  m->rope_compressed_ = std::make_unique<cpu::RopeTable>(std::move(compressed));
  for (const LayerRole& role : m->roles_.layers()) {
    m->rope_.push_back(role.ratio > 0 ? m->rope_compressed_.get() : m->rope_swa_.get());
  }
  ASSIGN_OR_RETURN(EngramHasher hasher,
                   EngramHasher::Create(c, std::move(m->options_.engram_token_map)));
  m->engram_ = std::make_unique<EngramHasher>(std::move(hasher));
  for (size_t l = 0; l < c.engram_layer_ids.size(); ++l) {
    const EngramWeights& e = m->weights_.layers[c.engram_layer_ids[l]].engram;
    if (e.rows != c.engram_num_embeddings[l]) {
      return absl::InvalidArgumentError(absl::StrCat("Engram table of layer ",
                                                     c.engram_layer_ids[l], " has ", e.rows,
                                                     " rows, config says ",
                                                     c.engram_num_embeddings[l]));
    }
  }
  if (m->options_.make_ops) {
    ASSIGN_OR_RETURN(m->ops_, m->options_.make_ops(m->options_.precision));
    m->options_.make_ops = nullptr;  // may capture the caller's locals
    if (m->ops_ == nullptr) return absl::InvalidArgumentError("make_ops gave null");
  } else {
    m->ops_ = std::make_unique<CpuOps>(m->options_.precision);
    // The CPU products read bf16 copies of the weights (the same values).
    KeepBf16Forms(m->weights_);
  }
  m->executor_ = std::make_unique<LocalExpertExecutor>(*m->ops_, m->weights_,
                                                       static_cast<float>(c.swiglu_limit));
  if (m->options_.make_executor) {
    m->local_executor_ = std::move(m->executor_);
    m->executor_ = m->options_.make_executor(*m->ops_, m->weights_);
    m->options_.make_executor = nullptr;  // may capture the caller's locals
    if (m->executor_ == nullptr) return absl::InvalidArgumentError("make_executor gave null");
  }
  if (m->options_.make_engram_gather) {
    ASSIGN_OR_RETURN(m->engram_gather_, m->options_.make_engram_gather(c, *m->ops_, m->weights_));
    m->options_.make_engram_gather = nullptr;  // may capture the caller's locals
    if (m->engram_gather_ == nullptr) {
      return absl::InvalidArgumentError("make_engram_gather gave null");
    }
  } else {
    ASSIGN_OR_RETURN(m->engram_gather_, LocalEngramGather::Create(c, *m->ops_, m->weights_));
  }
  m->collective_ = m->local_executor_ != nullptr || m->engram_gather_->collective();
  std::vector<int64_t> experts;
  for (const LayerRole& role : m->roles_.layers()) experts.push_back(MoeExperts(c, role));
  m->load_ = std::make_unique<ExpertLoad>(std::move(experts));
  return m;
}

std::unique_ptr<SequenceState> Model::NewSequence() const {
  return std::make_unique<SequenceState>(config_, roles_, options_.max_rollback);
}

std::unique_ptr<SequenceState> Model::NewSequence(std::unique_ptr<CompressedKvStore> store) const {
  return std::make_unique<SequenceState>(config_, roles_, options_.max_rollback,
                                         std::move(store));
}

absl::Status Model::CheckTokens(std::span<const int64_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token ", i, " is ", tokens[i],
                                                     ", vocabulary has ", config_.vocab_size));
    }
  }
  return absl::OkStatus();
}

bool Model::SupportsCedReplay() const {
  const int start = config_.decoder_start();
  if (start >= config_.n_layers) return false;
  for (int layer : config_.kv_source_layers) {
    if (layer > start && layer < config_.n_layers) return false;
  }
  return true;
}

absl::Status Model::StartCedReplay(SequenceState& state, int64_t prompt_len) const {
  if (prompt_len < 0) {
    return absl::InvalidArgumentError(absl::StrCat("StartCedReplay: prompt_len ", prompt_len));
  }
  if (!SupportsCedReplay()) {
    return absl::FailedPreconditionError(
        "StartCedReplay: the model has no CED decoder layers, or a kv source after "
        "decoder_start");
  }
  if (state.length() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "StartCedReplay: the sequence holds ", state.length(), " positions already"));
  }
  state.set_replay_start(std::max<int64_t>(0, prompt_len - config_.window_size));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Model::Forward(SequenceState& state,
                                                  std::span<const int64_t> tokens,
                                                  int64_t start_pos) {
  // Expert-parallel or sharded Engram: a one-row collective step. Bounded
  // replay skipping some of the tokens: RunBatch, which implements it.
  if (collective_ || state.replay_start() > start_pos) {
    SequenceState* const states[] = {&state};
    const std::span<const int64_t> rows[] = {tokens};
    const int64_t starts[] = {start_pos};
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits, ForwardBatch(states, rows, starts));
    return std::move(logits[0]);
  }
  if (tokens.empty()) return absl::InvalidArgumentError("Forward: no tokens");
  RETURN_IF_ERROR(CheckTokens(tokens));
  if (state.num_layers() != roles_.size() ||
      state.window(0).capacity() != config_.window_size + state.max_rollback()) {
    return absl::InvalidArgumentError("Forward: the sequence state belongs to another model");
  }
  if (state.broken()) {
    return absl::FailedPreconditionError("Forward: the sequence state is broken by an error");
  }
  if (start_pos != state.length()) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: start_pos ", start_pos,
                                                   " but the sequence holds ", state.length(),
                                                   " positions"));
  }
  std::vector<float> logits;
  absl::Status st = RunBackbone(state, tokens, start_pos, logits);
  if (!st.ok()) {
    state.MarkBroken();
    return absl::InternalError(absl::StrCat("Forward at ", start_pos, ": ", st.message()));
  }
  state.Advance(static_cast<int64_t>(tokens.size()));
  return logits;
}

absl::Status Model::RunBackbone(SequenceState& state, std::span<const int64_t> tokens,
                                int64_t start_pos, std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t s = static_cast<int64_t>(tokens.size()), d = c.dim, n = c.hc_mult;
  const ModelRuntime rt{c, roles_, weights_, rope_, *ops_, *executor_, load_.get()};
  // Engram rows for every Engram layer [S, layers, cols].
  std::vector<int64_t> engram_rows;
  if (engram_->num_layers() > 0) {
    std::vector<int64_t>& history = state.engram_history();
    for (int64_t t : tokens) history.push_back(engram_->Compress(t));
    engram_rows.resize(s * engram_->num_layers() * engram_->cols());
    RETURN_IF_ERROR(engram_->Hash(history, start_pos, engram_rows));
  }
  // Streams [S, n, dim]: the embedding repeated (bf16 values).
  std::vector<float> x(s * n * d);
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t k = 0; k < n; ++k) {
      std::copy_n(weights_.embed.data() + tokens[t] * d, d, x.data() + (t * n + k) * d);
    }
  }
  std::vector<float> pre = IdentityPreMix(s, static_cast<int>(n));
  const int64_t n_targets = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  std::vector<float> main_hidden(s * n_targets * d);
  AttentionShared shared;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerRole& role = roles_[layer];
    const BlockWeights& w = weights_.layers[layer];
    if (role.has_engram) {
      const int e = c.engram_index(layer), cols = static_cast<int>(engram_->cols());
      std::vector<int64_t> rows(s * cols);
      for (int64_t t = 0; t < s; ++t) {
        std::copy_n(engram_rows.data() + (t * engram_->num_layers() + e) * cols, cols,
                    rows.data() + t * cols);
      }
      RETURN_IF_ERROR(EngramForward(*ops_, c, w.engram, *engram_gather_, layer, rows, s, x));
    }
    for (int64_t i = 0; i < n_targets; ++i) {
      if (c.dspark_target_layer_ids[i] != layer) continue;
      for (int64_t t = 0; t < s; ++t) {  // mean over the streams, bf16
        float* dst = main_hidden.data() + (t * n_targets + i) * d;
        for (int64_t ch = 0; ch < d; ++ch) {
          float sum = 0.0f;
          for (int64_t k = 0; k < n; ++k) sum += x[(t * n + k) * d + ch];
          dst[ch] = sum / static_cast<float>(n);
        }
      }
    }
    const AttentionContext actx{*ops_, c, role, w.attn, *rope_[layer], state, shared,
                                start_pos, s};
    const MoeContext mctx{*ops_, c, role, w.ffn, *executor_, load_.get()};
    RETURN_IF_ERROR(BlockForward(
        *ops_, c, w, s,
        [&](std::span<const float> in, std::span<float> out) {
          return AttentionForward(actx, in, out);
        },
        [&](std::span<const float> in, std::span<float> out) {
          return MoeForward(mctx, in, s, {}, out);
        },
        x, pre))
        << "layer " << layer;
  }
  ops_->RoundBf16(main_hidden);
  std::vector<float> h(s * d);
  RETURN_IF_ERROR(Collapse(*ops_, c, x, pre, s, h));
  RETURN_IF_ERROR(ops_->RmsNorm(h, weights_.norm, s, d, static_cast<float>(c.norm_eps), h));
  ops_->RoundBf16(h);
  logits.assign(s * c.vocab_size, 0.0f);
  RETURN_IF_ERROR(ops_->Logits(weights_.head, h, s, logits));
  if (c.n_mtp_layers > 0 && n_targets > 0) {
    RETURN_IF_ERROR(UpdateDsparkRings(rt, main_hidden, start_pos, s, state));
  }
  return absl::OkStatus();
}

absl::StatusOr<DraftResult> Model::Draft(const SequenceState& state, int64_t next_token) {
  const SequenceState* const states[] = {&state};
  return std::move(DraftBatch(states, std::span<const int64_t>(&next_token, 1))[0]);
}

std::vector<absl::StatusOr<DraftResult>> Model::DraftBatch(
    std::span<const SequenceState* const> states, std::span<const int64_t> next_tokens) {
  std::vector<absl::StatusOr<DraftResult>> out(states.size());
  absl::Status refused;
  if (config_.n_mtp_layers == 0 || config_.dspark_block_size <= 0) {
    refused = absl::InvalidArgumentError("Draft: the model has no DSpark stages");
  } else if (next_tokens.size() != states.size()) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("DraftBatch: ", states.size(), " states but ", next_tokens.size(), " tokens"));
  }
  if (!refused.ok()) {
    for (absl::StatusOr<DraftResult>& r : out) r = refused;
    return out;
  }
  // The rows that can draft, in order.
  std::vector<size_t> rows;
  std::vector<const SequenceState*> good;
  std::vector<int64_t> tokens;
  for (size_t i = 0; i < states.size(); ++i) {
    const SequenceState* state = states[i];
    if (absl::Status s = CheckTokens(next_tokens.subspan(i, 1)); !s.ok()) {
      out[i] = s;
    } else if (state == nullptr || state->num_layers() != roles_.size() || state->broken()) {
      out[i] = absl::InvalidArgumentError("Draft: unusable sequence state");
    } else if (state->length() < 2) {
      out[i] = absl::InvalidArgumentError(
          absl::StrCat("Draft: needs 2 forwarded positions, the sequence holds ", state->length()));
    } else {
      rows.push_back(i);
      good.push_back(state);
      tokens.push_back(next_tokens[i]);
    }
  }
  if (rows.empty()) return out;
  ExpertExecutor& stages = local_executor_ ? *local_executor_ : *executor_;
  const ModelRuntime rt{config_, roles_, weights_, rope_, *ops_, stages, load_.get()};
  absl::StatusOr<std::vector<DraftResult>> drafted = DsparkDraftBatch(rt, good, tokens);
  for (size_t j = 0; j < rows.size(); ++j) {
    if (drafted.ok()) {
      out[rows[j]] = std::move((*drafted)[j]);
    } else {
      out[rows[j]] = absl::InternalError(absl::StrCat("Draft: ", drafted.status().message()));
    }
  }
  return out;
}

}  // namespace weir::model
