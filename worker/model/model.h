// worker/model/model.h
//
// Model: the DeepSeek-V4.1 forward (spec §4) on an Ops backend (CpuOps for
// now), over the weights of a Checkpoint.
//
//   ASSIGN_OR_RETURN(auto model, Model::Create(config, *checkpoint));
//   std::unique_ptr<SequenceState> seq = model->NewSequence();
//   ASSIGN_OR_RETURN(auto logits, model->Forward(*seq, prompt, 0));      // prefill
//   ASSIGN_OR_RETURN(logits, model->Forward(*seq, {next}, seq->length()));  // decode
//   ASSIGN_OR_RETURN(DraftResult d, model->Draft(*seq, next2));          // DSpark
//
// Semantics: Forward(tokens, start_pos) of any length at any start_pos is
// defined as running the tokens one at a time (spec §11 item 1); the CPU
// backend meets it to fp32 rounding (batch-invariant ops; only the vocabulary
// head's sgemm order may differ between chunkings). Cross-layer sharing
// follows LayerRoles; each indexer reads its own kv source's index keys.
//
// Thread safety: Forward / Draft mutate per-model scratch (ops statistics,
// expert executor, load counters): call them from one thread at a time.
// Different SequenceStates may be interleaved freely.

#ifndef WEIR_WORKER_MODEL_MODEL_H_
#define WEIR_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/rope.h"
#include "worker/model/attention.h"
#include "worker/model/checkpoint.h"
#include "worker/model/config.h"
#include "worker/model/dspark.h"
#include "worker/model/engram_gather.h"
#include "worker/model/engram_layer.h"
#include "worker/model/expert_executor.h"
#include "worker/model/layer_roles.h"
#include "worker/model/ops.h"
#include "worker/model/sequence_state.h"
#include "worker/model/weights.h"

namespace weir::model {

struct ModelOptions {
  // Positions a SequenceState can roll back; -1 = dspark_block_size + 1 (a
  // rejected verification block).
  int64_t max_rollback = -1;
  // Token id -> Engram compressed id [vocab] (from the tokenizer); empty =
  // identity, valid only if engram_compressed_vocab_size == vocab_size.
  std::vector<int64_t> engram_token_map;
  // kBf16: the reference's own precision; kFp32: fp32 activations (the
  // golden reference run of tests/golden is fp32).
  ActivationPrecision precision = ActivationPrecision::kBf16;
  // Expert parallelism (expert_parallel_model.h sets both): which routed
  // experts of the backbone this process loads, and the executor that runs
  // the backbone's MoE layers over the loaded weights. When make_executor is
  // set the backbone's MoE is collective: every rank must run the same number
  // of forwards (ForwardBatch, zero rows allowed), in the same order. DSpark
  // stages always load all their experts and run them locally.
  ExpertFilter expert_filter;
  std::function<std::unique_ptr<ExpertExecutor>(Ops&, const ModelWeights&)> make_executor;
  // Engram row sharding (expert_parallel_model.h sets both): which rows of
  // each Engram table this process holds, and the gather that serves the
  // Engram lookups (empty = LocalEngramGather, which needs whole tables).
  // With a collective gather every rank must run the same forwards, as with
  // make_executor.
  EngramRowFilter engram_row_filter;
  std::function<absl::StatusOr<std::unique_ptr<EngramGather>>(const ModelConfig&, Ops&,
                                                              const ModelWeights&)>
      make_engram_gather;
  // The Ops backend of the forward, made once in Create with `precision`
  // (e.g. CudaOps::Create, cuda_ops.h); its error fails Create. Empty = CpuOps.
  std::function<absl::StatusOr<std::unique_ptr<Ops>>(ActivationPrecision)> make_ops;
};

class Model {
 public:
  // Loads the weights of `checkpoint` for `config` onto the CPU backend.
  // INVALID_ARGUMENT if the checkpoint does not hold config's layout (names
  // the tensor), the Engram map or primes do not fit, or options are bad.
  // REQUIRES: `checkpoint` outlives the model (Engram tables stay mapped).
  static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config,
                                                       const Checkpoint& checkpoint,
                                                       ModelOptions options = {});

  // Returns an empty sequence for this model (compressed entries in a
  // DenseKvStore).
  std::unique_ptr<SequenceState> NewSequence() const;
  // The same with the compressed entries in `store`, an empty store made for
  // this model's kv-source layers (e.g. a worker's paged block table).
  // REQUIRES: `store` is not null.
  std::unique_ptr<SequenceState> NewSequence(std::unique_ptr<CompressedKvStore> store) const;

  // CED bounded replay (spec §4.4) for `state`, an empty sequence whose
  // prompt will have `prompt_len` tokens (however it arrives in chunks):
  // positions before s = max(0, prompt_len - window_size) run only the
  // encoder layers [0, decoder_start) and the global-KV projection of the
  // decoder's kv source (hc-collapse, attn_norm, compressor and index keys of
  // layer decoder_start), so the compressed KV and index keys are the exact
  // forward's, bit for bit; the decoder layers run only at positions >= s,
  // their SWA truncated to [s, ...]. The outputs are an approximation of the
  // exact forward (DeepSeek trains for it). Logit rows of positions < s are
  // not computed: Forward returns them as NaN. Later forwards (decode,
  // verification, rollback) are as without replay: they see at most the
  // last window positions, all >= s. FAILED_PRECONDITION when the state
  // holds positions already or the model cannot replay (see
  // SupportsCedReplay); INVALID_ARGUMENT when prompt_len < 0.
  absl::Status StartCedReplay(SequenceState& state, int64_t prompt_len) const;
  // True when bounded replay is defined for this model: it has decoder layers
  // and no kv source after decoder_start (a later kv source would need the
  // decoder's hidden states of every prompt token).
  bool SupportsCedReplay() const;

  // Runs `tokens` at positions start_pos.. and returns logits [tokens, vocab]
  // (fp32; NaN rows for positions before the state's replay start, see
  // StartCedReplay). Advances `state` by tokens.size(). INVALID_ARGUMENT (state
  // unchanged) when tokens is empty, a token is outside [0, vocab),
  // start_pos != state.length(), or `state` belongs to another model shape.
  absl::StatusOr<std::vector<float>> Forward(SequenceState& state,
                                             std::span<const int64_t> tokens, int64_t start_pos);

  // One step over several sequences: row i runs tokens[i] on *states[i] at
  // start_pos[i]; returns logits [tokens[i].size(), vocab] per row, equal to
  // Forward of each row alone (bit-identical on the CPU backend). Every layer
  // processes all rows together, so each backbone MoE layer calls the expert
  // executor exactly once per step; with zero rows an expert-parallel model
  // still joins every layer's exchange (a rank without work). Rows are
  // validated as in Forward, and a state may appear only once; on a bad row
  // nothing changes and INVALID_ARGUMENT is returned (an expert-parallel
  // model first joins the step with zero rows, so its peers do not stall).
  // INTERNAL (all states of the step broken) if the step fails later, e.g.
  // UNAVAILABLE from the communicator.
  // `logits_from` (empty: 0 for every row): row i returns the logits of its
  // tokens logits_from[i] .. tokens[i].size() - 1 only, [(size - from),
  // vocab] (from == size: none), each computed as the whole row's would be
  // on a row-stable head (CpuOps row_stable_logits; the default head's
  // sgemm may round a row differently with another row count). A prefill
  // chunk that samples needs its last position, one that does not none: the
  // head (vocab x dim a position) and the logits' memory are then paid only
  // where they are read. INVALID_ARGUMENT (nothing changes) when its size is
  // neither 0 nor the row count or an entry is outside [0, tokens[i].size()].
  absl::StatusOr<std::vector<std::vector<float>>> ForwardBatch(
      std::span<SequenceState* const> states, std::span<const std::span<const int64_t>> tokens,
      std::span<const int64_t> start_pos, std::span<const int64_t> logits_from = {});

  // DSpark: drafts dspark_block_size tokens following `next_token`, the
  // target's token for position state.length(), from the features of the
  // last forwarded position. Does not change `state`. INVALID_ARGUMENT if the
  // token is out of range, the state holds fewer than 2 positions, or the
  // model has no DSpark stages.
  absl::StatusOr<DraftResult> Draft(const SequenceState& state, int64_t next_token);

  // DSpark for several sequences in one forward (dspark.h DsparkDraftBatch):
  // row i drafts after next_tokens[i] on *states[i]. Returns one result per
  // row, each bit-identical to Draft of that row alone. A row that Draft
  // would refuse (null or unusable state, fewer than 2 positions, token out
  // of range) gets Draft's INVALID_ARGUMENT and the other rows still draft.
  // Every row fails with INVALID_ARGUMENT when the model has no DSpark stages
  // or the spans differ in size, and every drafted row with INTERNAL when the
  // forward fails. A state may appear several times. Changes no state.
  std::vector<absl::StatusOr<DraftResult>> DraftBatch(std::span<const SequenceState* const> states,
                                                      std::span<const int64_t> next_tokens);

  const ModelConfig& config() const { return config_; }
  const LayerRoles& roles() const { return roles_; }
  // Routed (token, expert) counts per (layer, logical expert), DSpark stages included.
  ExpertLoad& expert_load() { return *load_; }
  // The loaded weights (routed experts and Engram rows as the options said).
  const ModelWeights& weights() const { return weights_; }
  // The routed experts of backbone layer `layer` (< n_layers), for the expert
  // re-placement of the load balancer (expert_moves.h), which installs and
  // frees experts here and then switches the executor's placement. Only
  // between forwards. REQUIRES: 0 <= layer < n_layers.
  std::vector<ExpertWeightsF32>& mutable_routed_experts(int layer) {
    return weights_.layers[layer].ffn.experts;
  }
  // Tells the ops that weights were replaced (after mutable_routed_experts
  // changes), so a backend caching them on a device drops its copies.
  void WeightsChanged() { ops_->InvalidateWeights(); }
  const OpsStats& ops_stats() const { return ops_->stats(); }

 private:
  Model(const ModelConfig& config, ModelOptions options);
  absl::Status CheckTokens(std::span<const int64_t> tokens) const;
  // Validation of one Forward row (INVALID_ARGUMENT / FAILED_PRECONDITION).
  absl::Status CheckRow(const SequenceState& state, std::span<const int64_t> tokens,
                        int64_t start_pos) const;
  // The backbone of ForwardBatch (model_batch.cc); rows validated.
  absl::Status RunBatch(std::span<SequenceState* const> states,
                        std::span<const std::span<const int64_t>> tokens,
                        std::span<const int64_t> start_pos, std::span<const int64_t> logits_from,
                        std::vector<std::vector<float>>& logits);
  // A collective step without rows: every backbone Engram gather (if
  // collective) and MoE exchange (if expert-parallel), empty.
  absl::Status RunEmptyStep();
  // The same for one backbone layer.
  absl::Status RunEmptyLayer(int layer);
  // CED bounded replay: the global KV (compressed KV, index keys) of the
  // decoder's kv source for row i's first skip[i] tokens (at start_pos[i];
  // [off[i], ..) in the batch's streams x [tokens, hc, dim] and pre mix
  // [tokens, hc] entering layer decoder_start).
  absl::Status ProjectGlobalKv(std::span<SequenceState* const> states,
                               std::span<const int64_t> start_pos,
                               const std::vector<int64_t>& off,
                               const std::vector<int64_t>& skip, const std::vector<float>& x,
                               const std::vector<float>& pre,
                               std::vector<AttentionShared>& shared);
  absl::Status RunBackbone(SequenceState& state, std::span<const int64_t> tokens,
                           int64_t start_pos, std::vector<float>& logits);

  ModelConfig config_;
  LayerRoles roles_;
  ModelOptions options_;
  ModelWeights weights_;
  std::unique_ptr<kernels::cpu::RopeTable> rope_swa_, rope_compressed_;
  std::vector<const kernels::cpu::RopeTable*> rope_;  // per layer
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<ExpertExecutor> executor_;        // backbone MoE layers
  std::unique_ptr<ExpertExecutor> local_executor_;  // DSpark stages (if executor_ is not local)
  std::unique_ptr<ExpertLoad> load_;
  std::unique_ptr<EngramHasher> engram_;
  std::unique_ptr<EngramGather> engram_gather_;
  // Forwards are collective steps (an expert-parallel executor or a
  // collective Engram gather): Forward is a one-row ForwardBatch.
  bool collective_ = false;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_MODEL_H_
