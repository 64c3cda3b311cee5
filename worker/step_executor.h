// worker/step_executor.h
//
// StepExecutor runs the rows of StepPlans on one rank's Model: it owns the
// sequence slots (SequenceState + token history), resolves zero-overhead
// remaps from the previous step's samples, runs the forward, samples, and
// releases slots. Plain C++ in and out; the Worker service converts protos.
//
// Structured output: a row that starts a slot (start_pos 0) with a
// constraint gets a grammar Matcher for that slot (compiled through the
// executor's GrammarCompiler and its cache). Input tokens at positions >=
// constrained_from are generated tokens the matcher must accept (a
// recompute after preemption replays them); before sampling, the tokens the
// grammar forbids get -inf logits; the sampled token is accepted, and once the
// matcher terminates the row reports `finished`. Speculative rows of such a
// slot draft only tokens the grammar allows, and verify each draft under the
// mask of its position (the matcher advances through the accepted drafts;
// see draft_acceptance.h). Grammar failures (a compile
// error, a rejected token, an empty mask) are that row's error
// (INVALID_ARGUMENT); unconstrained rows in the same step are unaffected.
//
// KV blocks: with a kv_cache::BlockPool (SetKvCache; the worker always sets
// one), each slot's compressed KV and index keys live only in the blocks the
// plans gave it: a row's new_blocks are appended to its slot's block table
// (a row starting at position 0 begins a new table), the forward reads and
// writes through that table (kv_cache::PagedKvStore), and a released or
// restarted slot returns its blocks to the pool at once, before the plan's
// rows claim any. A plan whose blocks are foreign, held by another live slot,
// given twice, or too few for the positions a row writes is refused whole
// (INVALID_ARGUMENT, nothing runs). Without a pool, sequences keep their
// entries in per-sequence vectors and block ids are ignored (tests).
//
// Thread safety: not thread-safe; owned by the thread serving the Steps stream.

#ifndef WEIR_WORKER_STEP_EXECUTOR_H_
#define WEIR_WORKER_STEP_EXECUTOR_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/strong_id.h"
#include "grammar/compiler.h"
#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "worker/draft_acceptance.h"
#include "worker/kv_cache/block_pool.h"
#include "worker/kv_cache/paged_kv_store.h"
#include "worker/model/decode_backend.h"
#include "worker/model/model.h"
#include "worker/ngram_lookup.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/sampling_params.h"
#include "worker/verify_length.h"

namespace weir::worker {

struct RowPlan {
  int32_t slot = -1;
  // 0 starts the slot afresh; otherwise must equal the slot's length.
  int64_t start_pos = 0;
  std::vector<int64_t> tokens;
  // >= 0: append the token that row `remap` of the previous step sampled.
  int32_t remap = -1;
  bool sample = false;
  sampling::SamplingParams sampling;
  int32_t return_top_k = 0;
  // Structured output; read only when start_pos == 0 or fork_from >= 0 (the
  // slot keeps it).
  std::optional<grammar::Constraint> constraint;
  // Positions >= this are generated tokens the constraint must accept.
  int64_t constrained_from = 0;
  // With start_pos 0: positions >= this were generated before (a recompute)
  // and count as output for the penalties; <= 0 means all input is prompt.
  int64_t output_from = 0;
  // KV blocks newly given to the slot's sequence, in block-table order
  // (start_pos 0: the first blocks of a new table). Used with a KV pool only.
  std::vector<BlockId> new_blocks;
  // Log-probabilities (of the model's distribution: log-softmax of the
  // logits, before sampling parameters or a constraint), -1 = none.
  // >= 0: RowOutcome::sampled_logprobs scores the sampled token with this
  // many most likely tokens.
  int32_t logprobs = -1;
  // >= 0: RowOutcome::prompt_logprobs scores every input token at a position
  // in [1, prompt_end), given the positions before it, with this many most
  // likely tokens. Position start_pos > 0 is scored from the last logits of
  // the slot's previous row, kept only if that row asked too (else skipped).
  int32_t prompt_logprobs = -1;
  int64_t prompt_end = 0;
  // >= 0: the row starts `slot` afresh as a copy of slot `fork_from`'s
  // sequence (its KV, rings and token history; parallel samples of one
  // prompt share its prefill), made before this plan's forwards, so
  // start_pos must equal the source's length then; the row's new_blocks
  // must cover start_pos + its tokens. The source must not be released or
  // restarted by the plan, nor be a fork itself.
  int32_t fork_from = -1;
  // >= 0: a speculative row (DSpark, spec §4.8). Its input (one token, or the
  // remap) is followed by up to this many of the drafts the slot's previous
  // speculative row made after that token; they are verified in this row's
  // forward (each position sampled as a plain row would be; a draft is
  // accepted while it equals that sample), the rejected positions are rolled
  // back, and after the row's last sample the slot drafts
  // num_draft_tokens() new tokens for its next row. The row may then write
  // up to start + 1 + draft_tokens positions before the rollback, so its
  // blocks must cover them; with remap >= 0, start_pos is a lower bound of
  // the slot's length (the exact one is known here only). -1: a plain row.
  int32_t draft_tokens = -1;
  // With start_pos 0 on an executor with CED replay on (SetCedReplay): run
  // this sequence's prefill exactly. Rows scoring their prompt
  // (prompt_logprobs >= 0) always do.
  bool exact_prefill = false;
};

// The log-probability of one token at one position.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  // 1 = the most likely (ties: lower ids first).
  int32_t rank = 1;
  // [k] the most likely tokens and their log-probabilities, most likely first.
  std::vector<std::pair<int32_t, float>> top;
};

// Scores `token` under `logits` [vocab]: its log-softmax, rank and the `k`
// most likely tokens. REQUIRES: 0 <= token < vocab, 0 <= k <= vocab.
TokenLogprob ScoreToken(const float* logits, int64_t vocab, int32_t token, int32_t k);

struct RowOutcome {
  std::optional<int32_t> token;
  // The sampler's log-probability of `token` when the row asked for logprobs
  // (RowPlan::logprobs >= 0), else 0: the sampler then skips that pass over
  // the vocabulary.
  float logprob = 0.0f;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logits;
  // A per-row failure (the rest of the step is unaffected).
  absl::Status status;
  // The row's constraint terminated (after accepting `token`, or before).
  bool finished = false;
  // RowPlan::logprobs: the sampled token's.
  std::optional<TokenLogprob> sampled_logprobs;
  // RowPlan::prompt_logprobs: one per scored position, in order, the first
  // at position prompt_logprobs_from.
  int64_t prompt_logprobs_from = 0;
  std::vector<TokenLogprob> prompt_logprobs;
  // Speculative rows: the drafts accepted before `token`, in order, and their
  // log-probabilities (as `logprob`); the row emits accepted..., token.
  std::vector<int32_t> accepted;
  std::vector<float> accepted_logprobs;
  // RowPlan::logprobs on a speculative row: each accepted draft's, scored as
  // sampled_logprobs scores `token`.
  std::vector<TokenLogprob> accepted_scored;
  // Speculative rows: the drafts the row verified (0 .. draft_tokens).
  int64_t verified_drafts = 0;
  // A speculative row that verified nothing because its slot had paused
  // drafting after its previous sample (DraftPacer).
  bool drafts_paused = false;
  // A speculative row whose verified drafts came from prompt lookup
  // (SetNgramLookup), not from a DSpark draft pass.
  bool lookup_drafts = false;
};

struct StepGrammarOptions {
  // Longest a row waits for its constraint to compile (the compiler's own
  // compile timeout normally ends it first).
  absl::Duration compile_wait = absl::Seconds(30);
};

class StepExecutor {
 public:
  // Does not take ownership; `model` (and `grammar`, if not null) must
  // outlive the executor. Without a compiler, constrained rows fail with
  // FAILED_PRECONDITION. REQUIRES: max_slots >= 1.
  StepExecutor(model::Model& model, int32_t max_slots,
               grammar::GrammarCompiler* grammar = nullptr, StepGrammarOptions options = {});

  // Validates every row first (slot in range and used once, positions
  // consistent with the slot, tokens in the vocabulary, remap naming a row of
  // the previous step that sampled, sampling parameters; with a KV pool, the
  // blocks: in the pool, not held by a slot that stays live, not given twice,
  // enough for the positions the row writes): a row that fails does not run
  // and its outcome carries INVALID_ARGUMENT naming it, while the other rows
  // run (a release outside the slots refuses the whole plan with
  // INVALID_ARGUMENT, and nothing runs). Then drops the `release` slots (their blocks go
  // back to the pool), restarts the slots of rows at position 0, adds every
  // row's new blocks to its table, runs the rows in order (a released slot
  // may be reused by a row starting at position 0) and returns one outcome
  // per row.
  absl::StatusOr<std::vector<RowOutcome>> Execute(const std::vector<RowPlan>& rows,
                                                  const std::vector<int32_t>& release);

  // Decode rows (one input token on a slot that already holds positions) run
  // on `backend` (null: none; everything runs on the model), e.g. a
  // model::DeviceDecoder: a slot's sequence moves into it at its first decode
  // row (Import) and comes back (Export) before a row of several tokens uses
  // it or once it reaches the backend's max_positions(); a slot the backend
  // cannot take (too long, beyond its slots) stays on the model. Decode rows
  // run after the model's rows, max_batch() at a time. A collective backend
  // (DecodeBackend::collective, one rank of an expert-parallel group, whose
  // model is then expert-parallel too) gets exactly one Step per Execute,
  // empty when this rank has no decode rows, after exactly one ForwardBatch
  // of the model, on every path including refusals and failures, so the
  // ranks' collectives pair up; decode rows beyond its max_batch() then run
  // on the model.
  // REQUIRES: `backend` was made for this executor's model, outlives the
  // executor, and is set before the first Execute.
  void SetDecodeBackend(model::DecodeBackend* backend) { device_ = backend; }

  // Keeps every slot's compressed KV in `pool`'s blocks, as the plans assign
  // them (see the file comment). Does not take ownership.
  // REQUIRES: `pool` was laid out for this executor's model, outlives the
  // executor, and is set before the first Execute.
  void SetKvCache(kv_cache::BlockPool* pool) { pool_ = pool; }
  // The pool (null: none).
  const kv_cache::BlockPool* kv_cache() const { return pool_; }
  // The block table of `slot` (empty without a pool or a sequence).
  // REQUIRES: 0 <= slot < max_slots().
  std::vector<BlockId> block_table(int32_t slot) const;
  // Rows run on the decode backend since construction.
  // (Positions, since several a row may run there: prefill chunks.) Safe to
  // read from another thread (a log line).
  int64_t device_rows() const { return device_rows_.load(std::memory_order_relaxed); }
  // Of those, the positions of rows of several (device-resident prefill) or
  // of a slot's first position.
  int64_t device_prefill_rows() const {
    return device_prefill_rows_.load(std::memory_order_relaxed);
  }

  // Speculative decoding: speculative rows (RowPlan::draft_tokens) draft
  // `n` tokens after their last sample (0: off; rows then verify nothing
  // and draft nothing). INVALID_ARGUMENT unless 0 <= n <= the model's
  // dspark_block_size, n <= the sequences' max_rollback, and the model has
  // DSpark stages when n > 0.
  absl::Status SetSpeculation(int32_t num_draft_tokens);
  // How many of its drafts a speculative row verifies: without a curve (the
  // default) all it may (RowPlan::draft_tokens of those kept); with one, the
  // k of them with the most expected tokens per unit of step cost under the
  // drafts' DSpark confidences and the curve at the plan's row count
  // (verify_length.h, ChooseVerifyLength), and a row whose recent drafts
  // did not pay for the draft pass and the positions they took pauses
  // drafting for a while (DraftPacer; drafts_paused()). Outputs are the
  // same either way: only how many tokens a step delivers changes.
  void SetVerifyCostCurve(std::optional<VerifyCostCurve> curve) { cost_curve_ = std::move(curve); }
  // At most `rows` speculative rows draft in a step (0, the default: no
  // limit): a step with more drafts nothing after its samples (each such row
  // counts in drafts_paused() and RowOutcome::drafts_paused next step), so
  // its rows verify nothing next step and decode at the plain rate, where a
  // verification's extra positions and the draft pass cost more than the
  // drafts return. Outputs are the same either way.
  void SetSpeculationMaxBatch(int64_t rows) { speculation_max_batch_ = std::max<int64_t>(0, rows); }
  // Prompt lookup beside DSpark (ngram_lookup.h): after its sample, a
  // speculative row whose last `min_match` tokens occurred before in its
  // sequence takes the num_draft_tokens() tokens that followed them there as
  // its drafts (with a constraint: those the grammar allows, in order) and
  // skips the DSpark draft pass; other rows draft as before. 0 (the default)
  // turns it off. Outputs are the same either way (drafts are verified as
  // any).
  // * `max_match` > min_match: the lengths max_match .. min_match are tried
  //   in turn, the longest that matches proposes (vLLM's prompt_lookup_max
  //   .. prompt_lookup_min); 0: min_match alone.
  // * `tokens`: how many tokens a lookup proposes (0: the num_draft_tokens()
  //   of SetSpeculation, whatever it is when drafting); more than DSpark's
  //   block lets a long repetition be verified in one step (the plans'
  //   draft_tokens may then go up to it: max_draft_tokens()).
  // * Without SetSpeculation (no DSpark drafts; a model without stages too)
  //   lookup is the only source of drafts (`--speculative=ngram`, vLLM's
  //   ngram method): `tokens` then says how many (0: none), a row without a
  //   match verifies nothing next step, and a decode backend that rolls back
  //   that many positions (DecodeBackend::max_rollback) takes speculative
  //   rows though it does not draft.
  // INVALID_ARGUMENT unless 0 <= min_match <= kMaxNgramMatch, max_match is 0
  // or in [min_match, kMaxNgramMatch], and 0 <= tokens <= kMaxNgramMatch and
  // the sequences' max_rollback (a verification's drafts may all be
  // rejected).
  absl::Status SetNgramLookup(int32_t min_match, int32_t tokens = 0, int32_t max_match = 0);
  int32_t ngram_lookup() const { return ngram_lookup_; }
  int32_t ngram_lookup_max() const { return ngram_lookup_max_; }
  // The most drafts a speculative row may verify (RowPlan::draft_tokens'
  // bound): num_draft_tokens(), or the lookup's tokens when larger.
  int32_t max_draft_tokens() const {
    return ngram_lookup_ > 0 ? std::max(num_draft_tokens_, lookup_tokens_) : num_draft_tokens_;
  }
  const std::optional<VerifyCostCurve>& verify_cost_curve() const { return cost_curve_; }
  // CED bounded replay (spec §4.4, model::Model::StartCedReplay): a row that
  // starts a sequence (start_pos 0, no fork_from; not exact_prefill, no
  // prompt_logprobs) runs the decoder layers only over the last window
  // positions of its prompt, which ends at output_from (<= 0: at the end of
  // the row's own input), however the prompt is chunked. Forks copy their
  // source's replay. INVALID_ARGUMENT when on and the model cannot replay.
  absl::Status SetCedReplay(bool on);
  bool ced_replay() const { return ced_replay_; }
  int32_t num_draft_tokens() const { return num_draft_tokens_; }
  // Drafts verified and accepted by speculative rows since construction.
  int64_t drafts_verified() const { return drafts_verified_; }
  int64_t drafts_accepted() const { return drafts_accepted_; }
  // Draft passes a speculative row skipped since construction because its
  // drafts did not pay for their cost (with a cost curve: DraftPacer).
  int64_t drafts_paused() const { return drafts_paused_; }
  // Blocks of drafts taken from prompt lookup instead of a DSpark draft
  // pass, and DSpark blocks drafted, since construction.
  int64_t lookup_drafts() const { return lookup_drafts_; }
  int64_t dspark_drafts() const { return dspark_drafts_; }
  // Tests: replaces the drafts `slot` made after its last sample (a
  // speculative row must have sampled there), e.g. with the plain decode's
  // continuation to exercise acceptance on random weights.
  // `confidence` [drafts.size()]: their confidence logits (empty: as sure
  // as can be).
  void SetDraftsForTest(int32_t slot, std::vector<int64_t> drafts,
                        std::vector<float> confidence = {}) {
    if (confidence.empty()) confidence.assign(drafts.size(), 30.0f);
    slots_[slot].drafts = std::move(drafts);
    slots_[slot].draft_confidence = std::move(confidence);
  }

  int32_t max_slots() const { return static_cast<int32_t>(slots_.size()); }
  // The positions of `slot` that are its prompt's: those before output_from
  // (a recompute's original prompt) and, once it sampled, before its first
  // sample; until then every position fed is (INT64_MAX). What the backend
  // gets as SetPromptEnd.
  int64_t prompt_end(int32_t slot) const;
  // Number of slots holding a sequence.
  int32_t used_slots() const;

 private:
  struct Slot {
    std::unique_ptr<model::SequenceState> state;
    // With a pool: the block table, which is `state`'s compressed store.
    kv_cache::PagedKvStore* paged = nullptr;
    std::vector<int32_t> prompt;  // tokens forwarded before the first sample
    std::vector<int32_t> output;  // sampled tokens fed back as inputs
    bool sampled_once = false;
    // Input positions >= this are output (recomputed generations).
    int64_t output_from = std::numeric_limits<int64_t>::max();
    // Structured output: the slot's matcher, the first constrained position,
    // and the position after the last token the matcher accepted.
    std::unique_ptr<grammar::Matcher> matcher;
    // The constraint's compile, until a row needs the matcher.
    std::optional<grammar::CompileFuture> pending_grammar;
    int64_t accepted_upto = 0;
    // A grammar failure sticks to the slot until it is released.
    absl::Status grammar_status;
    // The sequence lives in the device decoder (`state` has the right
    // length but stale contents until Export).
    bool on_device = false;
    // Blocks of its table the backend has (DecodeBackend::SetBlockTable);
    // -1: none sent since the backend last forgot the slot.
    int64_t device_blocks = -1;
    // The prompt end the backend has (DecodeBackend::SetPromptEnd); -1:
    // none sent since the backend last started, imported or forgot the slot.
    int64_t device_prompt_end = -1;
    // Prompt logprobs across rows: the logits [vocab] of the last position of
    // the previous row, and that position (-1: none kept).
    std::vector<float> last_logits;
    int64_t last_logits_pos = -1;
    // Speculative decoding: the drafts made after token `drafts_after`
    // sampled for position `drafts_pos` (the slot's length then).
    std::vector<int64_t> drafts;
    std::vector<float> draft_confidence;  // [drafts.size()] logits
    int64_t drafts_after = -1;
    int64_t drafts_pos = -1;
    // With a cost curve: whether the slot drafts after its next samples
    // (verify_length.h DraftPacer), and whether it skipped its last draft
    // pass for it.
    DraftPacer pacer;
    bool paused_drafting = false;
    // Prompt lookup over prompt ++ output (SetNgramLookup), and whether the
    // drafts made after the last sample came from it.
    NgramIndex lookup;
    bool drafts_from_lookup = false;
  };

  // The drafts `row` verifies: RowPlan::draft_tokens of the slot's drafts, if
  // they follow the row's single input token at the slot's length (0 for a
  // plain, restarted or forked row, or one whose constraint still compiles).
  // `input` is that token. With a cost curve, the first ChooseVerifyLength of
  // them for a plan of `batch` rows.
  int64_t UsableDrafts(const RowPlan& row, int64_t input, int64_t batch) const;
  // The row's single resolved input token (its token or remap), else -1.
  int64_t SingleInput(const RowPlan& row) const;
  // Accepts the longest prefix of the `drafts` last inputs of a speculative
  // row that equals the samples of their positions (`logits` [inputs, vocab],
  // the inputs from position `start`), appends the accepted ones to the
  // slot's output and `out`, and rolls the rest back. Returns the inputs kept.
  // `presampled`: empty, or the samples of the drafts' positions (and more),
  // as AcceptDrafts takes them.
  // With a cost curve, the slot's pacer sees the verification (at a plan of
  // `batch` rows).
  absl::StatusOr<int64_t> VerifyDrafts(const RowPlan& row, Slot& slot, int64_t start,
                                       const std::vector<int64_t>& inputs, int64_t drafts,
                                       int64_t batch, const std::vector<float>& logits,
                                       RowOutcome& out,
                                       std::span<const sampling::SampleResult> presampled = {});
  // A slot that drafts its next block after `token`, its sample of this step.
  struct DraftRequest {
    int32_t slot = -1;
    int32_t token = -1;
  };
  // Drafts each requested slot's next block after its token, all slots in one
  // Model::DraftBatch (a slot's drafts are cleared when the model cannot draft
  // it; a failed draft is logged and leaves it none). With a matcher (which
  // has accepted `token`), each draft is one the grammar allows after the
  // ones before it. With a cost curve, a slot whose pacer is paused drafts
  // nothing (its next row verifies nothing). REQUIRES: each slot at most
  // once, with a state.
  void DraftAfter(std::span<const DraftRequest> requests);
  // DraftAfter's block under `matcher`: position i keeps the draft if the
  // grammar allows it after drafts 0..i-1, else takes the allowed token with
  // the highest draft logit; it stops where nothing is allowed or a draft
  // would end the grammar. The matcher is left as it was.
  std::vector<int64_t> AllowedDrafts(grammar::Matcher& matcher, const model::DraftResult& drafted);
  // The longest prefix of `tokens` the grammar allows in order, stopping
  // before a token that would end it. The matcher is left as it was.
  std::vector<int64_t> AllowedPrefix(grammar::Matcher& matcher, std::span<const int64_t> tokens);

  // RowPlan::prompt_logprobs of row `row`, whose `inputs` started at `start`
  // and whose forward gave `logits` [inputs.size(), vocab].
  void ScorePrompt(const RowPlan& row, Slot& slot, int64_t start,
                   const std::vector<int64_t>& inputs, const std::vector<float>& logits,
                   RowOutcome& out) const;

  // Ends the slot's residence in the device decoder (nothing if none).
  void LeaveDevice(int32_t slot_id);
  // A backend that takes block tables: gives it the slot's table (its
  // PagedKvStore's blocks) if it grew since the backend last had it.
  absl::Status SendBlockTable(int32_t slot_id);

  // Starts compiling `row`'s constraint for `slot` (start_pos 0, constrained).
  absl::Status StartGrammar(const RowPlan& row, Slot& slot);
  // Waits for the slot's pending compile and creates its matcher.
  absl::Status FinishGrammar(Slot& slot);
  // Feeds `inputs` starting at position `start` to the slot's matcher.
  absl::Status AcceptInputs(Slot& slot, int64_t start, std::span<const int64_t> inputs);
  // Samples from `logits` masked by the slot's grammar, and accepts the token.
  void SampleConstrained(Slot& slot, const float* logits, const sampling::SampleRow& base,
                         RowOutcome& out);

  // INVALID_ARGUMENT for a release outside the slots (the plan is refused);
  // otherwise OK with bad[i] = row i's error (OK for a good row).
  absl::Status Validate(const std::vector<RowPlan>& rows, const std::vector<int32_t>& release,
                        std::vector<absl::Status>& bad) const;
  // The block checks of Validate (with a pool), for the rows still good.
  void ValidateBlocks(const std::vector<RowPlan>& rows, const std::vector<int32_t>& release,
                      std::vector<absl::Status>& bad) const;
  // Execute after validation: every row good.
  absl::StatusOr<std::vector<RowOutcome>> ExecuteValid(const std::vector<RowPlan>& rows,
                                                       const std::vector<int32_t>& release);
  // Makes `slot_id` hold a new empty sequence (its previous one and, with a
  // pool, that one's blocks are dropped).
  void StartSlot(int32_t slot_id);
  // Fork rows (RowPlan::fork_from): copies the source's sequence into the
  // row's (started, blocks added) slot. INTERNAL if the copy fails.
  absl::Status Fork(const RowPlan& row);

  model::Model& model_;
  model::DecodeBackend* device_ = nullptr;
  kv_cache::BlockPool* pool_ = nullptr;
  std::atomic<int64_t> device_rows_ = 0;
  std::atomic<int64_t> device_prefill_rows_ = 0;
  int32_t num_draft_tokens_ = 0;
  std::optional<VerifyCostCurve> cost_curve_;
  int64_t speculation_max_batch_ = 0;  // SetSpeculationMaxBatch
  int32_t ngram_lookup_ = 0;           // SetNgramLookup
  int32_t ngram_lookup_max_ = 0;       // SetNgramLookup's max_match (>= ngram_lookup_)
  int32_t lookup_tokens_ = 0;          // SetNgramLookup's tokens (0: num_draft_tokens_)
  int64_t lookup_drafts_ = 0;
  int64_t dspark_drafts_ = 0;
  bool ced_replay_ = false;
  int64_t drafts_verified_ = 0;
  int64_t drafts_accepted_ = 0;
  int64_t drafts_paused_ = 0;
  grammar::GrammarCompiler* const grammar_;
  const StepGrammarOptions grammar_options_;
  std::vector<Slot> slots_;
  MaskScratch scratch_;  // the grammar's mask and the masked logits
  // Token each row of the previous step sampled (-1 if it did not).
  std::vector<int32_t> previous_samples_;
};

}  // namespace weir::worker

#endif  // WEIR_WORKER_STEP_EXECUTOR_H_
