#include "worker/step_executor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "worker/kv_cache/kv_cache_layout.h"
#include "absl/strings/str_cat.h"
#include "worker/sampling/sampler.h"

namespace weir::worker {
namespace {

absl::Status RowError(size_t row, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("step row ", row, ": ", why));
}

}  // namespace

TokenLogprob ScoreToken(const float* logits, int64_t vocab, int32_t token, int32_t k) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  TokenLogprob out{.token = token,
                   .logprob = static_cast<float>(static_cast<double>(logits[token]) - log_z)};
  const float value = logits[token];
  for (int64_t i = 0; i < vocab; ++i) {
    out.rank += logits[i] > value || (logits[i] == value && i < token);
  }
  if (k <= 0) return out;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int32_t j = 0; j < k; ++j) {
    out.top.emplace_back(order[j],
                         static_cast<float>(static_cast<double>(logits[order[j]]) - log_z));
  }
  return out;
}

StepExecutor::StepExecutor(model::Model& model, int32_t max_slots,
                           grammar::GrammarCompiler* grammar, StepGrammarOptions options)
    : model_(model), grammar_(grammar), grammar_options_(options), slots_(max_slots) {}

void StepExecutor::LeaveDevice(int32_t slot_id) {
  Slot& slot = slots_[slot_id];
  if (!slot.on_device) return;
  device_->Release(slot_id).IgnoreError();
  slot.on_device = false;
  slot.device_blocks = -1;
  slot.device_prompt_end = -1;
}

int64_t StepExecutor::prompt_end(int32_t slot_id) const {
  const Slot& slot = slots_[slot_id];
  // Once it sampled, slot.prompt holds every prompt token (positions 0 on).
  return slot.sampled_once ? std::min(slot.output_from, static_cast<int64_t>(slot.prompt.size()))
                           : slot.output_from;
}

absl::Status StepExecutor::SendBlockTable(int32_t slot_id) {
  Slot& slot = slots_[slot_id];
  if (device_ == nullptr || !device_->takes_block_tables() || slot.paged == nullptr) {
    return absl::OkStatus();
  }
  const std::span<const BlockId> blocks = slot.paged->blocks();
  if (static_cast<int64_t>(blocks.size()) == slot.device_blocks) return absl::OkStatus();
  std::vector<int32_t> ids(blocks.size());
  for (size_t j = 0; j < blocks.size(); ++j) ids[j] = static_cast<int32_t>(blocks[j].value());
  if (absl::Status s = device_->SetBlockTable(slot_id, ids); !s.ok()) return s;
  slot.device_blocks = static_cast<int64_t>(blocks.size());
  return absl::OkStatus();
}

absl::Status StepExecutor::StartGrammar(const RowPlan& row, Slot& slot) {
  if (grammar_ == nullptr) {
    return absl::FailedPreconditionError(
        "structured output needs the model's tokenizer, which this worker has not loaded");
  }
  if (row.constrained_from < 0) {
    return absl::InvalidArgumentError("constrained_from is negative");
  }
  // The compile runs on the compiler's threads while this step's forward
  // runs; FinishGrammar waits only when a row needs the matcher.
  slot.pending_grammar = grammar_->CompileAsync(*row.constraint);
  slot.accepted_upto = row.constrained_from;
  return absl::OkStatus();
}

absl::Status StepExecutor::FinishGrammar(Slot& slot) {
  grammar::CompileFuture future = std::move(*slot.pending_grammar);
  slot.pending_grammar.reset();
  if (!future.WaitFor(grammar_options_.compile_wait)) {
    return absl::DeadlineExceededError("the constraint did not compile in time");
  }
  grammar::CompileResult compiled = future.Wait();
  if (!compiled.ok()) return compiled.status();
  if ((*compiled)->vocab().size() != model_.config().vocab_size) {
    return absl::InternalError("grammar vocabulary size differs from the model's");
  }
  // Drafting advances the matcher through a whole block and rolls it back.
  slot.matcher =
      std::make_unique<grammar::Matcher>(std::move(*compiled), std::max(7, max_draft_tokens() + 2));
  return absl::OkStatus();
}

absl::Status StepExecutor::AcceptInputs(Slot& slot, int64_t start,
                                        std::span<const int64_t> inputs) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t pos = start + static_cast<int64_t>(k);
    // Earlier positions are prompt, or a sample the matcher already accepted.
    if (pos < slot.accepted_upto) continue;
    if (absl::Status s = slot.matcher->AcceptToken(static_cast<int32_t>(inputs[k])); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("token ", inputs[k], " at position ", pos,
                                                     " violates the constraint: ", s.message()));
    }
    slot.accepted_upto = pos + 1;
  }
  return absl::OkStatus();
}

void StepExecutor::SampleConstrained(Slot& slot, const float* logits,
                                     const sampling::SampleRow& base, RowOutcome& out) {
  const int64_t vocab = model_.config().vocab_size;
  grammar::Matcher& matcher = *slot.matcher;
  const bool terminated = matcher.IsTerminated();
  const RowSampling row{.params = base.params,
                        .prompt = base.prompt_tokens,
                        .output = base.output_tokens,
                        .matcher = &matcher,
                        .want_logprob = base.want_logprob};
  sampling::SampleResult result = SamplePosition(logits, vocab, row, base.position, scratch_);
  out.status = result.status;
  if (!result.status.ok()) return;
  out.token = result.token;
  out.logprob = result.logprob;
  if (terminated) {
    // A row planned before the termination was seen: its token is discarded.
    out.finished = true;
    return;
  }
  if (absl::Status s = matcher.AcceptToken(result.token); !s.ok()) {
    out.status = absl::InternalError(absl::StrCat("sampled token ", result.token,
                                                  " was masked in but rejected: ", s.message()));
    out.token.reset();
    return;
  }
  slot.accepted_upto = base.position + 1;
  out.finished = matcher.IsTerminated();
}

std::vector<BlockId> StepExecutor::block_table(int32_t slot) const {
  const Slot& s = slots_[slot];
  if (s.paged == nullptr) return {};
  return {s.paged->blocks().begin(), s.paged->blocks().end()};
}

void StepExecutor::ScorePrompt(const RowPlan& row, Slot& slot, int64_t start,
                               const std::vector<int64_t>& inputs,
                               const std::vector<float>& logits, RowOutcome& out) const {
  const int64_t vocab = model_.config().vocab_size;
  const int32_t k = static_cast<int32_t>(std::min<int64_t>(row.prompt_logprobs, vocab));
  const int64_t n = static_cast<int64_t>(inputs.size());
  for (int64_t j = 0; j < n; ++j) {
    const int64_t pos = start + j;
    if (pos < 1 || pos >= row.prompt_end) continue;
    // Position pos is predicted by the logits of position pos - 1.
    const float* before = nullptr;
    if (j > 0) {
      before = logits.data() + (j - 1) * vocab;
    } else if (slot.last_logits_pos == pos - 1) {
      before = slot.last_logits.data();
    } else {
      continue;
    }
    if (out.prompt_logprobs.empty()) out.prompt_logprobs_from = pos;
    out.prompt_logprobs.push_back(ScoreToken(before, vocab, static_cast<int32_t>(inputs[j]), k));
  }
  if (start + n < row.prompt_end) {
    // The prompt goes on in a later row: keep what predicts its first position.
    slot.last_logits.assign(logits.end() - vocab, logits.end());
    slot.last_logits_pos = start + n - 1;
  } else {
    slot.last_logits.clear();
    slot.last_logits_pos = -1;
  }
}

absl::Status StepExecutor::Fork(const RowPlan& row) {
  Slot& source = slots_[row.fork_from];
  if (source.on_device) {
    // The device decoder holds the source's current state: bring it back.
    absl::Status back = device_->Export(row.fork_from, *source.state);
    LeaveDevice(row.fork_from);
    if (!back.ok()) {
      source.state->MarkBroken();
      return absl::InternalError(absl::StrCat("slot ", row.fork_from, ": ", back.message()));
    }
  }
  Slot& slot = slots_[row.slot];
  if (absl::Status s = slot.state->CopyFrom(*source.state); !s.ok()) {
    return absl::InternalError(absl::StrCat("fork of slot ", row.fork_from, " into slot ",
                                            row.slot, ": ", s.message()));
  }
  // The source's tokens so far are the fork's prompt (what the penalties see).
  slot.prompt = source.prompt;
  slot.prompt.insert(slot.prompt.end(), source.output.begin(), source.output.end());
  return absl::OkStatus();
}

absl::Status StepExecutor::SetCedReplay(bool on) {
  if (on && !model_.SupportsCedReplay()) {
    return absl::InvalidArgumentError(
        "CED bounded replay needs decoder layers and no kv source after decoder_start; this "
        "model has not");
  }
  ced_replay_ = on;
  return absl::OkStatus();
}

void StepExecutor::StartSlot(int32_t slot_id) {
  LeaveDevice(slot_id);
  Slot& slot = slots_[slot_id];
  // Drop the previous sequence first: its blocks go back before new ones come.
  slot = Slot{};
  if (pool_ == nullptr) {
    slot.state = model_.NewSequence();
    return;
  }
  auto table = std::make_unique<kv_cache::PagedKvStore>(*pool_, SeqSlot(slot_id));
  slot.paged = table.get();
  slot.state = model_.NewSequence(std::move(table));
}

void StepExecutor::ValidateBlocks(const std::vector<RowPlan>& rows,
                                  const std::vector<int32_t>& release,
                                  std::vector<absl::Status>& bad) const {
  // Slots whose blocks return before any row of the plan claims one.
  absl::flat_hash_set<int32_t> dropped(release.begin(), release.end());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (bad[i].ok() && (rows[i].start_pos == 0 || rows[i].fork_from >= 0)) {
      dropped.insert(rows[i].slot);
    }
  }
  absl::flat_hash_set<int32_t> given;
  auto check = [&](size_t i) -> absl::Status {
    const RowPlan& row = rows[i];
    const Slot& slot = slots_[row.slot];
    for (BlockId b : row.new_blocks) {
      if (!pool_->Contains(b)) {
        return RowError(i, absl::StrCat("KV block ", b.value(), " is not in this worker's pool of ",
                                        pool_->num_blocks(), " blocks"));
      }
      if (std::optional<SeqSlot> owner = pool_->owner(b);
          owner.has_value() && !dropped.contains(owner->value())) {
        return RowError(i, absl::StrCat("KV block ", b.value(), " given to slot ", row.slot,
                                        " is still held by slot ", owner->value()));
      }
      if (!given.insert(b.value()).second) {
        return RowError(i, absl::StrCat("KV block ", b.value(), " is given twice in this plan"));
      }
    }
    const bool fresh = row.start_pos == 0 || row.fork_from >= 0 || dropped.contains(row.slot) ||
                       slot.paged == nullptr;
    const int64_t held =
        (fresh ? 0 : static_cast<int64_t>(slot.paged->blocks().size())) +
        static_cast<int64_t>(row.new_blocks.size());
    // A speculative row writes its verified drafts too (rolled back later).
    const int64_t begin = fresh || slot.state == nullptr ? row.start_pos : slot.state->length();
    const int64_t end = begin + static_cast<int64_t>(row.tokens.size()) + (row.remap >= 0 ? 1 : 0) +
                        UsableDrafts(row, SingleInput(row), static_cast<int64_t>(rows.size()));
    const int64_t needed = kv_cache::BlocksForPositions(pool_->layout(), end);
    if (needed > held) {
      return RowError(i, absl::StrCat("positions up to ", end, " need ", needed,
                                      " KV blocks; slot ", row.slot, " holds ", held));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (bad[i].ok()) bad[i] = check(i);
  }
}

int32_t StepExecutor::used_slots() const {
  return static_cast<int32_t>(std::count_if(slots_.begin(), slots_.end(),
                                            [](const Slot& s) { return s.state != nullptr; }));
}

absl::Status StepExecutor::Validate(const std::vector<RowPlan>& rows,
                                    const std::vector<int32_t>& release,
                                    std::vector<absl::Status>& bad) const {
  const int64_t vocab = model_.config().vocab_size;
  for (int32_t slot : release) {
    if (slot < 0 || slot >= max_slots()) {
      return absl::InvalidArgumentError(absl::StrCat("release of slot ", slot, " outside [0, ",
                                                     max_slots(), ")"));
    }
  }
  bad.assign(rows.size(), absl::OkStatus());
  const absl::flat_hash_set<int32_t> released(release.begin(), release.end());
  absl::flat_hash_set<int32_t> used;
  // Slots a row restarts (position 0) or makes a fork: no fork may copy them.
  absl::flat_hash_set<int32_t> renewed;
  for (const RowPlan& row : rows) {
    if (row.start_pos == 0 || row.fork_from >= 0) renewed.insert(row.slot);
  }
  auto check = [&](size_t i) -> absl::Status {
    const RowPlan& row = rows[i];
    if (row.slot < 0 || row.slot >= max_slots()) {
      return RowError(i, absl::StrCat("slot ", row.slot, " outside [0, ", max_slots(), ")"));
    }
    if (!used.insert(row.slot).second) {
      return RowError(i, absl::StrCat("slot ", row.slot, " appears twice"));
    }
    const Slot& slot = slots_[row.slot];
    int64_t length =
        slot.state == nullptr || released.contains(row.slot) ? 0 : slot.state->length();
    if (row.fork_from >= 0) {
      if (row.fork_from >= max_slots() || row.fork_from == row.slot ||
          slots_[row.fork_from].state == nullptr || released.contains(row.fork_from) ||
          renewed.contains(row.fork_from) || slots_[row.fork_from].state->broken()) {
        return RowError(i, absl::StrCat("fork_from slot ", row.fork_from,
                                        " holds no sequence this plan keeps"));
      }
      length = slots_[row.fork_from].state->length();
      if (row.start_pos != length) {
        return RowError(i, absl::StrCat("fork at start_pos ", row.start_pos, " but slot ",
                                        row.fork_from, " holds ", length, " positions"));
      }
    }
    // A speculative decode row's start is a lower bound: the coordinator
    // does not know how many drafts the row before it accepted.
    const bool at_least = row.draft_tokens >= 0 && row.remap >= 0 && row.fork_from < 0;
    if (row.start_pos != 0 && (at_least ? row.start_pos > length : row.start_pos != length)) {
      return RowError(i, absl::StrCat("start_pos ", row.start_pos, " but slot ", row.slot,
                                      " holds ", length, " positions"));
    }
    if (row.tokens.empty() && row.remap < 0) return RowError(i, "no input tokens");
    if (row.draft_tokens > max_draft_tokens()) {
      return RowError(i,
                      absl::StrCat("draft_tokens ", row.draft_tokens,
                                   " above this worker's most drafts a row ", max_draft_tokens()));
    }
    for (int64_t t : row.tokens) {
      if (t < 0 || t >= vocab) {
        return RowError(i, absl::StrCat("token ", t, " outside [0, ", vocab, ")"));
      }
    }
    if (row.remap >= 0 && (row.remap >= static_cast<int32_t>(previous_samples_.size()) ||
                           previous_samples_[row.remap] < 0)) {
      return RowError(i, absl::StrCat("remap to row ", row.remap,
                                      " which did not sample in the previous step"));
    }
    if (row.return_top_k < 0 || row.return_top_k > vocab) {
      return RowError(i, absl::StrCat("return_top_k ", row.return_top_k, " out of range"));
    }
    if (row.logprobs > vocab || row.prompt_logprobs > vocab) {
      return RowError(i, absl::StrCat("logprobs ", row.logprobs, " / prompt_logprobs ",
                                      row.prompt_logprobs, " above the vocabulary"));
    }
    sampling::SamplingLimits limits{.vocab_size = static_cast<int32_t>(vocab)};
    if (absl::Status s = sampling::ValidateSamplingParams(row.sampling, limits); !s.ok()) {
      return RowError(i, std::string(s.message()));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < rows.size(); ++i) bad[i] = check(i);
  if (pool_ != nullptr) ValidateBlocks(rows, release, bad);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RowOutcome>> StepExecutor::Execute(
    const std::vector<RowPlan>& rows, const std::vector<int32_t>& release) {
  std::vector<absl::Status> bad;
  if (absl::Status s = Validate(rows, release, bad); !s.ok()) {
    // Not a row's fault: the whole plan is refused (a collective still
    // takes its step, with no rows).
    model_.ForwardBatch({}, {}, {}).IgnoreError();
    if (device_ != nullptr && device_->collective()) device_->Step({}, {}).IgnoreError();
    return s;
  }
  const size_t n_bad =
      std::count_if(bad.begin(), bad.end(), [](const absl::Status& b) { return !b.ok(); });
  if (n_bad == 0) return ExecuteValid(rows, release);
  // A row that fails validation fails alone: it does not run and answers
  // its error; the others run as a plan of their own. The next step's remaps
  // name rows of this plan, so the samples are spread back to its indices.
  std::vector<RowPlan> kept;
  std::vector<size_t> where;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!bad[i].ok()) continue;
    kept.push_back(rows[i]);
    where.push_back(i);
  }
  absl::StatusOr<std::vector<RowOutcome>> ran = ExecuteValid(kept, release);
  if (!ran.ok()) return ran.status();
  std::vector<RowOutcome> outcomes(rows.size());
  std::vector<int32_t> samples(rows.size(), -1);
  for (size_t j = 0; j < where.size(); ++j) {
    outcomes[where[j]] = std::move((*ran)[j]);
    samples[where[j]] = previous_samples_[j];
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!bad[i].ok()) outcomes[i].status = bad[i];
  }
  previous_samples_ = std::move(samples);
  return outcomes;
}

absl::StatusOr<std::vector<RowOutcome>> StepExecutor::ExecuteValid(
    const std::vector<RowPlan>& rows, const std::vector<int32_t>& release) {
  const bool collective = device_ != nullptr && device_->collective();
  // An expert-parallel step is a collective: a path that leaves early joins
  // it with no rows (the model's forward, then a collective backend's step)
  // so the other ranks are not left waiting.
  auto join = [&](bool model_too) {
    if (model_too) model_.ForwardBatch({}, {}, {}).IgnoreError();
    if (collective) device_->Step({}, {}).IgnoreError();
  };
  const int64_t vocab = model_.config().vocab_size;
  std::vector<RowOutcome> outcomes(rows.size());
  std::vector<int32_t> samples(rows.size(), -1);
  // Releases come first: a slot freed by this plan may be reused by its rows.
  // Then rows that start a slot afresh drop what it held; only then do rows
  // claim their new blocks, so a block moving between slots is free by then.
  for (int32_t slot : release) {
    LeaveDevice(slot);
    slots_[slot] = Slot{};
  }
  for (const RowPlan& row : rows) {
    if (row.start_pos != 0 && row.fork_from < 0) continue;
    StartSlot(row.slot);
    Slot& slot = slots_[row.slot];
    if (row.output_from > 0) slot.output_from = row.output_from;
    if (row.constraint.has_value()) slot.grammar_status = StartGrammar(row, slot);
    if (ced_replay_ && row.fork_from < 0 && !row.exact_prefill && row.prompt_logprobs < 0) {
      // The prompt ends at output_from whatever its chunks (a recompute's
      // output_from is the original prompt's end: the same replay again).
      const int64_t prompt_len =
          row.output_from > 0 ? row.output_from
                              : static_cast<int64_t>(row.tokens.size()) + (row.remap >= 0 ? 1 : 0);
      // Cannot fail: SetCedReplay checked the model, and the slot is fresh.
      model_.StartCedReplay(*slot.state, prompt_len).IgnoreError();
    }
  }
  if (pool_ != nullptr) {
    for (const RowPlan& row : rows) {
      if (row.new_blocks.empty()) continue;
      // Validate checked every block against the pool and the plan.
      if (absl::Status s = slots_[row.slot].paged->AddBlocks(row.new_blocks); !s.ok()) {
        join(/*model_too=*/true);
        return absl::InternalError(absl::StrCat("slot ", row.slot, ": ", s.message()));
      }
    }
  }
  // Forks copy their source before any forward of this plan moves it on.
  for (const RowPlan& row : rows) {
    if (row.fork_from < 0) continue;
    if (absl::Status s = Fork(row); !s.ok()) {
      join(/*model_too=*/true);
      return s;
    }
  }
  std::vector<std::vector<int64_t>> inputs(rows.size());
  std::vector<int64_t> starts(rows.size());
  // Speculative rows: the drafts appended to their inputs.
  std::vector<int64_t> drafts(rows.size(), 0);
  // Rows on the model (host sequence states) and rows on the device decoder.
  std::vector<size_t> host_rows, device_rows;
  std::vector<model::SequenceState*> states;
  std::vector<std::span<const int64_t>> tokens;
  std::vector<int64_t> host_starts;
  // The first input of each row whose logits the model returns: the head
  // runs only where they are read (Model::ForwardBatch's logits_from).
  std::vector<int64_t> logits_from(rows.size(), 0), host_from;
  // A collective backend takes one Step per plan, at most max_batch rows:
  // sequences already on it decode there first, newcomers take what is left.
  // Whether a row of `n` positions may run on the backend (chunks: several
  // positions of a slot, i.e. device-resident prefill), as far as the plan
  // tells.
  // With speculation, only a backend that drafts (it keeps the DSpark rings
  // its steps update) takes prompt chunks and speculating rows; a row that
  // verifies drafts goes whole into one step (every position's logits). A
  // collective backend too: its drafts and rollbacks are no collectives (the
  // stages' experts are on every rank), and a verification is rows of the
  // one collective step the rank takes per plan anyway.
  // Prompt lookup alone (no DSpark drafts) keeps no draft state: a backend
  // that rolls back as many positions as a row may verify takes its rows.
  const bool backend_drafts = device_ != nullptr && device_->drafts();
  const bool backend_verifies = backend_drafts || (device_ != nullptr && num_draft_tokens_ == 0 &&
                                                   device_->max_rollback() >= max_draft_tokens());
  auto chunks_ok = [&](const RowPlan& row) {
    return device_ != nullptr && device_->max_rows_per_slot() > 1 &&
           (num_draft_tokens_ == 0 || backend_drafts) && !ced_replay_ && row.prompt_logprobs < 0;
  };
  auto backend_takes = [&](const RowPlan& row, int64_t start, int64_t n, int64_t row_drafts) {
    return device_ != nullptr && (row.draft_tokens < 0 || backend_verifies) && n >= 1 &&
           start + n <= device_->max_positions() &&
           (row_drafts == 0 || n <= device_->max_rows_per_slot()) &&
           (n == 1 ? start > 0 || chunks_ok(row) : chunks_ok(row));
  };
  int64_t room_for_new = 0;
  int64_t device_tokens = 0;  // positions of device_rows' inputs
  if (collective) {
    int64_t resident = 0;
    for (const RowPlan& row : rows) {
      // A verification's drafts are positions of the step too.
      const int64_t one = SingleInput(row);
      const int64_t verify =
          row.draft_tokens >= 0 ? UsableDrafts(row, one, static_cast<int64_t>(rows.size())) : 0;
      const int64_t n = static_cast<int64_t>(row.tokens.size()) + (row.remap >= 0 ? 1 : 0) + verify;
      if (slots_[row.slot].on_device && backend_takes(row, row.start_pos, n, verify) &&
          n <= device_->max_rows_per_slot()) {
        resident += n;
      }
    }
    room_for_new = std::max<int64_t>(0, device_->max_batch() - resident);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowPlan& row = rows[i];
    Slot& slot = slots_[row.slot];
    inputs[i] = row.tokens;
    if (row.remap >= 0) inputs[i].push_back(previous_samples_[row.remap]);
    if (row.draft_tokens >= 0) {
      drafts[i] = UsableDrafts(row, inputs[i].size() == 1 ? inputs[i][0] : -1,
                               static_cast<int64_t>(rows.size()));
      inputs[i].insert(inputs[i].end(), slot.drafts.begin(), slot.drafts.begin() + drafts[i]);
      slot.drafts.clear();  // the row drafts anew after its last sample
      slot.draft_confidence.clear();
    }
    if (slot.matcher != nullptr && slot.grammar_status.ok()) {
      // Drafts reach the matcher only once verified (VerifyDrafts).
      slot.grammar_status =
          AcceptInputs(slot, slot.state->length(),
                       std::span<const int64_t>(inputs[i]).first(inputs[i].size() - drafts[i]));
    }
    outcomes[i].status = slot.grammar_status;
    starts[i] = slot.state->length();
    // On the backend: one token at a position it still holds, or (a backend
    // of several rows a slot: device-resident prefill) a chunk of positions
    // that ends where it still holds them, unless the row needs what only
    // the model keeps (drafts and their features, prompt logprobs, a CED
    // replay).
    const int64_t n = static_cast<int64_t>(inputs[i].size());
    bool decode = backend_takes(row, starts[i], n, drafts[i]);
    if (decode && collective) {  // one step: the row whole, within the batch
      decode = n <= device_->max_rows_per_slot() && device_tokens + n <= device_->max_batch() &&
               (slot.on_device || n <= room_for_new);
    }
    if (decode && slot.on_device) {
      // Its table grew with this plan's blocks (paged backends); if the
      // backend refuses it, the sequence comes back to the host below.
      decode = SendBlockTable(row.slot).ok();
    }
    if (decode && !slot.on_device) {
      // Paged backends get the slot's table (this plan's blocks included)
      // before the sequence moves in; a refused move leaves no table there.
      decode =
          SendBlockTable(row.slot).ok() &&
          (starts[i] == 0 ? device_->Start(row.slot) : device_->Import(row.slot, *slot.state)).ok();
      if (!decode && slot.device_blocks >= 0) {
        device_->Release(row.slot).IgnoreError();
        slot.device_blocks = -1;
      }
      if (decode) slot.device_prompt_end = 0;  // as Start and Import leave it
      if (decode && collective) room_for_new -= n;
    }
    if (decode && slot.device_prompt_end != prompt_end(row.slot)) {
      // Which of the row's positions are the prompt's, before its step (a
      // backend may shape their arithmetic by it: never by the chunking).
      // Cannot fail: the backend holds the slot.
      slot.device_prompt_end = prompt_end(row.slot);
      device_->SetPromptEnd(row.slot, slot.device_prompt_end).IgnoreError();
    }
    if (decode) {
      slot.on_device = true;
      device_rows.push_back(i);
      device_tokens += n;
      // The last position's logits when the row samples, returns its top
      // logits or scores its prompt (a decode row, n == 1; as logits_from
      // below); every position's when it verifies drafts.
      logits_from[i] =
          drafts[i] > 0
              ? 0
              : (row.sample || row.return_top_k > 0 || row.prompt_logprobs >= 0 ? n - 1 : n);
      continue;
    }
    if (slot.on_device) {
      // Several tokens, or a slot the backend cannot extend: bring its sequence back.
      absl::Status back = device_->Export(row.slot, *slot.state);
      LeaveDevice(row.slot);
      if (!back.ok()) {
        slot.state->MarkBroken();
        join(/*model_too=*/true);
        return absl::InternalError(absl::StrCat("slot ", row.slot, ": ", back.message()));
      }
    }
    host_rows.push_back(i);
    states.push_back(slot.state.get());
    tokens.emplace_back(inputs[i]);
    host_starts.push_back(starts[i]);
    // Every position of a row that verifies drafts or scores its prompt; the
    // last of one that samples or returns its top logits; none of a prefill
    // chunk that does neither.
    const int64_t size = static_cast<int64_t>(inputs[i].size());
    if (drafts[i] == 0 && row.prompt_logprobs < 0) {
      logits_from[i] = row.sample || row.return_top_k > 0 ? size - 1 : size;
    }
    host_from.push_back(logits_from[i]);
  }
  // A row whose samples are the argmax of its logits and that reads them
  // for nothing else (greedy without bias or penalties; no grammar,
  // logprobs, top logits or prompt scores): a step whose rows with logits
  // are all such lets the backend pick the tokens (StepRowsGreedy: on a GPU,
  // 4 bytes a row come back instead of the row's logits). A verification
  // is such a row too: greedy acceptance compares each draft with the argmax
  // of the position before it (AcceptDrafts over presampled picks), so its
  // 1 + drafts positions come back as picks.
  auto plain_greedy = [&](size_t i) {
    const RowPlan& row = rows[i];
    const Slot& slot = slots_[row.slot];
    return row.sample && row.sampling.temperature == 0.0f && row.sampling.logit_bias.empty() &&
           !sampling::UsesHistory(row.sampling) && row.logprobs < 0 && row.return_top_k == 0 &&
           row.prompt_logprobs < 0 && slot.matcher == nullptr &&
           !slot.pending_grammar.has_value() && outcomes[i].status.ok();
  };
  // The backend's picks for such a row (tokens or DecodeBackend::kGreedy*
  // codes), when it made them: one for the row's last position, or one per
  // logit row of a verification (from logits_from, as its logits would be).
  std::vector<std::vector<int32_t>> picked(rows.size());
  std::vector<std::vector<float>> logits(rows.size());
  // A device row's logits [vocab] in the backend's view (valid until its next
  // step: only the last batch's rows are kept so, earlier batches are
  // copied); null: the row's logits are in `logits`.
  std::vector<const float*> viewed(rows.size(), nullptr);
  // One batched forward for the model's rows: each MoE layer runs once per
  // step (a plan of only decode rows on a backend that is not collective
  // skips it).
  if (!host_rows.empty() || device_rows.empty() || collective) {
    absl::StatusOr<std::vector<std::vector<float>>> host =
        model_.ForwardBatch(states, tokens, host_starts, host_from);
    if (!host.ok()) {
      join(/*model_too=*/false);
      return host.status();
    }
    for (size_t j = 0; j < host_rows.size(); ++j) logits[host_rows[j]] = std::move((*host)[j]);
  }
  // Device rows in backend steps of at most its max_batch positions, each
  // row's positions in pieces of at most max_rows_per_slot (a piece a row a
  // step, in order); the logits of a row's last position come back with its
  // last piece. A collective backend takes exactly one step (possibly
  // empty), which holds every device row whole.
  const int64_t batch_cap = device_ != nullptr ? device_->max_batch() : 1;
  const int64_t piece_cap = device_ != nullptr ? device_->max_rows_per_slot() : 1;
  std::vector<int64_t> done(rows.size(), 0);  // positions of the row stepped so far
  size_t pending = 0;                         // device rows before this have finished
  while (pending < device_rows.size()) {
    std::vector<int> device_slots, logit_rows;
    std::vector<int64_t> device_tokens_in;
    struct Piece {
      size_t i;
      int64_t n;
      int logit_index;  // index in logit_rows of its first logit row, or -1
      int logit_count;  // its logit rows (the row's last position, or all of a verification)
    };
    std::vector<Piece> pieces;
    for (size_t j = pending; j < device_rows.size(); ++j) {
      const size_t i = device_rows[j];
      const int64_t left = static_cast<int64_t>(inputs[i].size()) - done[i];
      const int64_t room = batch_cap - static_cast<int64_t>(device_slots.size());
      if (left == 0) continue;
      if (room == 0) break;
      // A row that needs several positions' logits (a verification) is never
      // split: it waits for a step with room for all of it.
      const int64_t size = static_cast<int64_t>(inputs[i].size());
      const bool whole = logits_from[i] < size - 1;
      if (whole && left > room) break;
      const int64_t n = std::min({left, piece_cap, room});
      const int first = static_cast<int>(device_slots.size());
      for (int64_t k = 0; k < n; ++k) {
        device_slots.push_back(rows[i].slot);
        device_tokens_in.push_back(inputs[i][done[i] + k]);
      }
      int logit_index = -1, logit_count = 0;
      if (n == left && logits_from[i] < size) {
        logit_index = static_cast<int>(logit_rows.size());
        for (int64_t k = whole ? logits_from[i] : n - 1; k < n; ++k, ++logit_count) {
          logit_rows.push_back(first + static_cast<int>(k));
        }
      }
      pieces.push_back({i, n, logit_index, logit_count});
    }
    bool greedy = !logit_rows.empty();
    for (const Piece& piece : pieces) {
      if (piece.logit_index >= 0 && !plain_greedy(piece.i)) greedy = false;
    }
    absl::StatusOr<std::span<const float>> out = std::span<const float>();
    absl::StatusOr<std::span<const int32_t>> picks = std::span<const int32_t>();
    if (greedy) {
      picks =
          device_->StepRowsGreedy(device_slots, device_tokens_in, std::span<const int>(logit_rows));
      if (!picks.ok()) out = picks.status();
    } else {
      out = device_->StepRows(device_slots, device_tokens_in, std::span<const int>(logit_rows));
    }
    if (!out.ok()) {
      // The decoder dropped the slots of the failed step; rows not finished
      // yet are stale on the host too. Rows finished by an earlier step keep
      // their sequences.
      for (size_t j = pending; j < device_rows.size(); ++j) {
        const size_t i = device_rows[j];
        const bool in_step =
            std::any_of(pieces.begin(), pieces.end(), [&](const Piece& p) { return p.i == i; });
        if (!in_step && done[i] == static_cast<int64_t>(inputs[i].size())) continue;
        LeaveDevice(rows[i].slot);
        slots_[rows[i].slot].state->MarkBroken();
      }
      return out.status();
    }
    for (const Piece& piece : pieces) {
      done[piece.i] += piece.n;
      slots_[rows[piece.i].slot].state->Advance(piece.n);
      device_rows_ += piece.n;
      if (inputs[piece.i].size() > 1 || starts[piece.i] == 0) device_prefill_rows_ += piece.n;
    }
    while (pending < device_rows.size() &&
           done[device_rows[pending]] ==
               static_cast<int64_t>(inputs[device_rows[pending]].size())) {
      ++pending;
    }
    const bool last_step = pending == device_rows.size();
    for (const Piece& piece : pieces) {
      if (piece.logit_index < 0) continue;
      if (greedy) {
        picked[piece.i].assign(picks->begin() + piece.logit_index,
                               picks->begin() + piece.logit_index + piece.logit_count);
        continue;
      }
      const float* row_logits = out->data() + static_cast<int64_t>(piece.logit_index) * vocab;
      if (piece.logit_count > 1) {  // a verification: every position from logits_from
        logits[piece.i].assign(row_logits, row_logits + piece.logit_count * vocab);
      } else if (last_step && rows[piece.i].prompt_logprobs < 0) {
        viewed[piece.i] = row_logits;
      } else {
        logits[piece.i].assign(row_logits, row_logits + vocab);
      }
    }
    if (collective) break;
  }
  if (collective && device_rows.empty()) {
    // The group's step, without rows on this rank.
    if (absl::StatusOr<std::span<const float>> out = device_->StepView({}, {}); !out.ok()) {
      return out.status();
    }
  }
  // Rows whose samples depend on nothing but their logits and parameters
  // (no grammar, no penalty over the history the loop below extends) are
  // sampled first, together: SampleBatch splits a large batch over the
  // sampler threads (at batch 64 of V4.1, 8.3 M logits). A plain row's one
  // sample; a verification's every draft position and the one after (the
  // row's own sample once the drafts stop: the loop takes what it needs).
  std::vector<std::vector<sampling::SampleResult>> presampled(rows.size());
  {
    std::vector<sampling::SampleRow> batch;
    std::vector<std::pair<size_t, size_t>> spans;  // (row, samples)
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!picked[i].empty()) {  // the backend's greedy picks, as the sampler reports them
        // A verification's picks from its first position (logits_from 0):
        // those of the position before each draft and of its last position,
        // as the host samples them below; a plain row's one pick.
        const int64_t n = static_cast<int64_t>(inputs[i].size());
        const int64_t first = drafts[i] > 0 ? n - drafts[i] - 1 : 0;
        for (int64_t k = first; k < static_cast<int64_t>(picked[i].size()); ++k) {
          sampling::SampleResult r;
          const int32_t id = picked[i][k];
          if (id >= 0 && id < vocab) {
            r.token = id;
          } else if (id == model::DecodeBackend::kGreedyNonFinite) {
            r.status = sampling::NonFiniteLogitsError();
          } else if (id == model::DecodeBackend::kGreedyAllMasked) {
            r.status = sampling::EveryTokenMaskedError();
          } else {
            r.status = absl::InternalError(absl::StrCat("decode backend picked token ", id));
          }
          presampled[i].push_back(std::move(r));
        }
        continue;
      }
      const RowPlan& row = rows[i];
      const Slot& slot = slots_[row.slot];
      const sampling::SamplingParams& p = row.sampling;
      const int64_t n = static_cast<int64_t>(inputs[i].size());
      if (!row.sample || !outcomes[i].status.ok() || slot.matcher != nullptr ||
          slot.pending_grammar.has_value() || sampling::UsesHistory(p)) {
        continue;
      }
      const sampling::SampleRow base_row{
          .params = &p, .is_draft = false, .want_logprob = row.logprobs >= 0};
      if (drafts[i] > 0) {
        // Every position's logits from the row's first (VerifyDrafts).
        if (logits_from[i] != 0 || static_cast<int64_t>(logits[i].size()) != n * vocab) continue;
        const int64_t base = n - drafts[i];
        for (int64_t k = 0; k <= drafts[i]; ++k) {
          sampling::SampleRow r = base_row;
          r.logits = logits[i].data() + (base - 1 + k) * vocab;
          r.position = starts[i] + base + k;
          batch.push_back(r);
        }
        spans.emplace_back(i, static_cast<size_t>(drafts[i] + 1));
        continue;
      }
      if (viewed[i] == nullptr && n - 1 < logits_from[i]) continue;
      sampling::SampleRow r = base_row;
      r.logits =
          viewed[i] != nullptr ? viewed[i] : logits[i].data() + (n - 1 - logits_from[i]) * vocab;
      r.position = slot.state->length();
      batch.push_back(r);
      spans.emplace_back(i, 1);
    }
    std::vector<sampling::SampleResult> sampled =
        sampling::SampleBatch(batch, static_cast<int32_t>(vocab));
    size_t at = 0;
    for (const auto& [i, count] : spans) {
      presampled[i].assign(std::make_move_iterator(sampled.begin() + at),
                           std::make_move_iterator(sampled.begin() + at + count));
      at += count;
    }
  }
  std::vector<DraftRequest> drafting;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowPlan& row = rows[i];
    Slot& slot = slots_[row.slot];
    // A constraint still compiling is finished only once a row needs it: it
    // samples, or feeds positions the matcher must accept.
    const int64_t end = starts[i] + static_cast<int64_t>(inputs[i].size());
    if (slot.pending_grammar.has_value() && slot.grammar_status.ok() &&
        (row.sample || end > slot.accepted_upto)) {
      slot.grammar_status = FinishGrammar(slot);
      if (slot.grammar_status.ok()) {
        slot.grammar_status =
            AcceptInputs(slot, starts[i],
                         std::span<const int64_t>(inputs[i]).first(inputs[i].size() - drafts[i]));
      }
      outcomes[i].status = slot.grammar_status;
    }
    // Drafts join the history only once accepted (VerifyDrafts).
    for (size_t j = 0; j + drafts[i] < inputs[i].size(); ++j) {
      const bool generated =
          slot.sampled_once || starts[i] + static_cast<int64_t>(j) >= slot.output_from;
      (generated ? slot.output : slot.prompt).push_back(static_cast<int32_t>(inputs[i][j]));
    }
    // Prompt lookup's index grows with what a speculative row forwarded: a
    // prompt's at its last chunk (the one that samples), beside that chunk's
    // forward, instead of at the first draft; then a step's few tokens.
    if (ngram_lookup_ > 0 && row.draft_tokens >= 0) {
      slot.lookup.Index(slot.prompt, slot.output, ngram_lookup_, ngram_lookup_max_);
    }
    RowOutcome& out = outcomes[i];
    int64_t kept = static_cast<int64_t>(inputs[i].size());
    // Nothing to verify because the slot skipped its last draft pass.
    out.drafts_paused = row.draft_tokens > 0 && drafts[i] == 0 && slot.paused_drafting;
    out.lookup_drafts = drafts[i] > 0 && slot.drafts_from_lookup;
    if (drafts[i] > 0 && out.status.ok()) {
      absl::StatusOr<int64_t> verified =
          VerifyDrafts(row, slot, starts[i], inputs[i], drafts[i],
                       static_cast<int64_t>(rows.size()), logits[i], out, presampled[i]);
      if (!verified.ok()) {
        out.status = verified.status();
        continue;
      }
      kept = *verified;
    }
    // The logits of the last kept position (null where none were computed:
    // then the row neither samples nor returns its top logits).
    const float* last = viewed[i];
    if (last == nullptr && kept - 1 >= logits_from[i] && !logits[i].empty()) {
      last = logits[i].data() + (kept - 1 - logits_from[i]) * vocab;
    }
    if (row.return_top_k > 0) {
      std::vector<int32_t> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + row.return_top_k, order.end(),
                        [last](int32_t a, int32_t b) {
                          return last[a] > last[b] || (last[a] == last[b] && a < b);
                        });
      for (int k = 0; k < row.return_top_k; ++k) {
        out.top_ids.push_back(order[k]);
        out.top_logits.push_back(last[order[k]]);
      }
    }
    if (row.prompt_logprobs >= 0 && out.status.ok()) {
      ScorePrompt(row, slot, starts[i], inputs[i], logits[i], out);
    }
    if (!row.sample || !out.status.ok()) continue;
    const int32_t logprobs_k = static_cast<int32_t>(std::min<int64_t>(row.logprobs, vocab));
    sampling::SampleRow sample_row{.logits = last,
                                   .params = &row.sampling,
                                   .prompt_tokens = slot.prompt,
                                   .output_tokens = slot.output,
                                   .position = slot.state->length(),
                                   .is_draft = false,
                                   // Only a row that asked for logprobs reports the
                                   // sampler's (a pass with an exp a token).
                                   .want_logprob = row.logprobs >= 0};
    if (slot.matcher != nullptr) {
      SampleConstrained(slot, last, sample_row, out);
      if (out.token.has_value()) {
        samples[i] = *out.token;
        slot.sampled_once = true;
        if (row.logprobs >= 0) out.sampled_logprobs = ScoreToken(last, vocab, *out.token, logprobs_k);
        if (row.draft_tokens >= 0 && !out.finished) drafting.push_back({row.slot, *out.token});
      }
      continue;
    }
    const RowSampling plain{.params = &row.sampling,
                            .prompt = slot.prompt,
                            .output = slot.output,
                            .want_logprob = row.logprobs >= 0};
    // Presampled: index 0 of a plain row, the first position not accepted of
    // a verification.
    const size_t own =
        static_cast<size_t>(kept - (static_cast<int64_t>(inputs[i].size()) - drafts[i]));
    sampling::SampleResult result =
        own < presampled[i].size()
            ? std::move(presampled[i][own])
            : SamplePosition(last, vocab, plain, sample_row.position, scratch_);
    out.status = result.status;
    if (result.status.ok()) {
      out.token = result.token;
      out.logprob = result.logprob;
      samples[i] = result.token;
      slot.sampled_once = true;
      if (row.logprobs >= 0) out.sampled_logprobs = ScoreToken(last, vocab, result.token, logprobs_k);
      if (row.draft_tokens >= 0) drafting.push_back({row.slot, result.token});
    }
  }
  // One batched draft for every row that drafts (they sampled above).
  DraftAfter(drafting);
  previous_samples_ = std::move(samples);
  return outcomes;
}

}  // namespace weir::worker
