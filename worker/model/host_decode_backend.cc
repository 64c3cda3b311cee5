#include "worker/model/host_decode_backend.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace weir::model {

HostDecodeBackend::HostDecodeBackend(Model& model, int max_sequences, int max_batch,
                                     int64_t max_positions, bool collective, int max_rows_per_slot)
    : model_(model),
      max_batch_(max_batch),
      max_positions_(max_positions),
      collective_(collective),
      max_rows_per_slot_(max_rows_per_slot),
      slots_(max_sequences),
      prompt_ends_(max_sequences, 0),
      tables_(max_sequences) {}

void HostDecodeBackend::ExpectBlockTables(int block_tokens, int64_t pool_blocks) {
  block_tokens_ = block_tokens;
  owner_.assign(pool_blocks, -1);
  for (std::vector<int32_t>& t : tables_) t.clear();
}

int64_t HostDecodeBackend::BlocksFor(int64_t positions) const {
  int64_t blocks = 0;
  for (const LayerRole& role : model_.roles().layers()) {
    if (role.is_dspark_stage || role.ratio <= 0 || block_tokens_ <= 0) continue;
    const int64_t e = block_tokens_ / role.ratio;
    blocks = std::max(blocks, (std::max<int64_t>(positions, 0) / role.ratio + e - 1) / e);
  }
  return blocks;
}

absl::Status HostDecodeBackend::SetBlockTable(int slot, std::span<const int32_t> blocks) {
  if (block_tokens_ <= 0) return DecodeBackend::SetBlockTable(slot, blocks);
  if (slot < 0 || slot >= max_sequences()) {
    return absl::InvalidArgumentError(absl::StrCat("SetBlockTable: slot ", slot));
  }
  const int64_t needed = holds(slot) ? BlocksFor(slots_[slot]->length()) : 0;
  if (static_cast<int64_t>(blocks.size()) < needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetBlockTable: ", blocks.size(), " blocks for a sequence needing ", needed));
  }
  absl::flat_hash_set<int32_t> seen;
  for (size_t j = 0; j < blocks.size(); ++j) {
    const int32_t b = blocks[j];
    if (b < 0 || b >= static_cast<int64_t>(owner_.size()) || !seen.insert(b).second ||
        (owner_[b] != -1 && owner_[b] != slot)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetBlockTable: block ", b, " of slot ", slot,
                       " is outside the pool, repeated or held by another slot"));
    }
    if (static_cast<int64_t>(j) < needed && tables_[slot][j] != b) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetBlockTable: slot ", slot, "'s block ", j, " holds entries"));
    }
  }
  for (int32_t b : tables_[slot]) owner_[b] = -1;
  tables_[slot].assign(blocks.begin(), blocks.end());
  for (int32_t b : tables_[slot]) owner_[b] = slot;
  ++stats_.table_sets;
  return absl::OkStatus();
}

absl::Status HostDecodeBackend::Start(int slot) {
  if (max_rows_per_slot_ < 2) return DecodeBackend::Start(slot);
  if (slot < 0 || slot >= max_sequences()) {
    return absl::InvalidArgumentError(absl::StrCat("Start: slot ", slot));
  }
  slots_[slot] = model_.NewSequence();
  prompt_ends_[slot] = 0;
  ++stats_.starts;
  return absl::OkStatus();
}

absl::Status HostDecodeBackend::SetPromptEnd(int slot, int64_t positions) {
  if (!holds(slot) || positions < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetPromptEnd: slot ", slot, ", positions ", positions));
  }
  prompt_ends_[slot] = positions;
  return absl::OkStatus();
}

absl::Status HostDecodeBackend::Import(int slot, const SequenceState& state) {
  if (slot < 0 || slot >= max_sequences()) {
    return absl::InvalidArgumentError(absl::StrCat("Import: slot ", slot));
  }
  if (state.broken() || state.length() < 1 || state.length() >= max_positions_) {
    return absl::InvalidArgumentError(absl::StrCat("Import: a state of ", state.length(),
                                                   " positions (broken: ", state.broken(), ")"));
  }
  if (block_tokens_ > 0 && static_cast<int64_t>(tables_[slot].size()) < BlocksFor(state.length())) {
    return absl::InvalidArgumentError(absl::StrCat("Import: ", state.length(), " positions need ",
                                                   BlocksFor(state.length()), " KV blocks; slot ",
                                                   slot, "'s table holds ", tables_[slot].size()));
  }
  slots_[slot] = std::make_unique<SequenceState>(state);
  prompt_ends_[slot] = 0;
  ++stats_.imports;
  return absl::OkStatus();
}

absl::Status HostDecodeBackend::Export(int slot, SequenceState& state) {
  if (!holds(slot)) return absl::InvalidArgumentError(absl::StrCat("Export: slot ", slot));
  if (state.length() > slots_[slot]->length()) {
    return absl::InvalidArgumentError("Export: the state is longer than the slot's sequence");
  }
  // Into the state's own store (the worker's paged blocks, when it has them).
  if (absl::Status s = state.CopyFrom(*slots_[slot]); !s.ok()) return s;
  ++stats_.exports;
  return absl::OkStatus();
}

absl::Status HostDecodeBackend::Release(int slot) {
  if (slot < 0 || slot >= max_sequences()) {
    return absl::InvalidArgumentError(absl::StrCat("Release: slot ", slot));
  }
  slots_[slot].reset();
  for (int32_t b : tables_[slot]) owner_[b] = -1;
  tables_[slot].clear();
  return absl::OkStatus();
}

std::vector<absl::StatusOr<DraftResult>> HostDecodeBackend::DraftBatch(
    std::span<const int> slots, std::span<const int64_t> next_tokens, bool with_logits) {
  if (!drafting_) return DecodeBackend::DraftBatch(slots, next_tokens, with_logits);
  std::vector<absl::StatusOr<DraftResult>> out(
      slots.size(), absl::InvalidArgumentError("DraftBatch: the slot holds no sequence"));
  std::vector<const SequenceState*> states;
  std::vector<int64_t> tokens;
  std::vector<size_t> rows;
  for (size_t i = 0; i < slots.size() && i < next_tokens.size(); ++i) {
    if (!holds(slots[i])) continue;
    states.push_back(slots_[slots[i]].get());
    tokens.push_back(next_tokens[i]);
    rows.push_back(i);
  }
  std::vector<absl::StatusOr<DraftResult>> drafted = model_.DraftBatch(states, tokens);
  for (size_t j = 0; j < rows.size(); ++j) {
    // As a DeviceDecoder, which does not copy the logits back unless asked.
    if (!with_logits && drafted[j].ok()) drafted[j]->logits.clear();
    out[rows[j]] = std::move(drafted[j]);
  }
  stats_.drafts += static_cast<int64_t>(rows.size());
  if (with_logits) stats_.draft_logits += static_cast<int64_t>(rows.size());
  return out;
}

absl::Status HostDecodeBackend::Rollback(int slot, int64_t length) {
  if (!rollback_) return DecodeBackend::Rollback(slot, length);
  if (!holds(slot) || length < 0 || length > slots_[slot]->length()) {
    return absl::InvalidArgumentError(absl::StrCat("Rollback: slot ", slot, " to ", length));
  }
  const int64_t undo = slots_[slot]->length() - length;
  if (undo == 0) return absl::OkStatus();
  if (max_rollback_ > 0 && undo > max_rollback_) {
    return absl::InvalidArgumentError(absl::StrCat("Rollback: slot ", slot, " by ", undo,
                                                   " positions, more than ", max_rollback_));
  }
  if (absl::Status s = slots_[slot]->Rollback(undo); !s.ok()) return s;
  ++stats_.rollbacks;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> HostDecodeBackend::Step(std::span<const int> slots,
                                                           std::span<const int64_t> tokens) {
  absl::StatusOr<std::span<const float>> view = StepRows(slots, tokens, std::nullopt);
  if (!view.ok()) return view.status();
  return std::vector<float>(view->begin(), view->end());
}

absl::StatusOr<std::span<const float>> HostDecodeBackend::StepRows(
    std::span<const int> slots, std::span<const int64_t> tokens,
    std::optional<std::span<const int>> logit_rows) {
  const int64_t rows = static_cast<int64_t>(slots.size());
  // Runs: [first row, rows) of one slot each.
  std::vector<std::pair<int64_t, int64_t>> runs;
  absl::Status valid = [&]() -> absl::Status {
    if ((rows == 0 && !collective_) || rows > max_batch_ || tokens.size() != slots.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Step: ", rows, " slots, ", tokens.size(),
                                                     " tokens"));
    }
    absl::flat_hash_set<int> seen;
    for (int64_t i = 0; i < rows; ++i) {
      const int s = slots[i];
      if (i > 0 && slots[i - 1] == s) {
        ++runs.back().second;
      } else {
        if (!holds(s) || !seen.insert(s).second) {
          return absl::InvalidArgumentError(absl::StrCat("Step: slot ", s));
        }
        runs.push_back({i, 1});
      }
      if (runs.back().second > max_rows_per_slot_) {
        return absl::InvalidArgumentError(
            absl::StrCat("Step: slot ", s, " has more than ", max_rows_per_slot_, " rows"));
      }
      if (slots_[s]->length() + runs.back().second > max_positions_) {
        return absl::OutOfRangeError(absl::StrCat("Step: slot ", s, " is full"));
      }
      if (block_tokens_ > 0 && BlocksFor(slots_[s]->length() + runs.back().second) >
                                   static_cast<int64_t>(tables_[s].size())) {
        return absl::OutOfRangeError(absl::StrCat("Step: slot ", s, "'s rows pass its table of ",
                                                  tables_[s].size(), " blocks"));
      }
    }
    return CheckLogitRows(logit_rows, rows);
  }();
  if (!valid.ok()) {
    if (collective_) model_.ForwardBatch({}, {}, {}).IgnoreError();  // join the group's step
    return valid;
  }
  std::vector<SequenceState*> states;
  std::vector<std::span<const int64_t>> inputs;
  std::vector<int64_t> starts;
  for (const auto& [first, n] : runs) {
    states.push_back(slots_[slots[first]].get());
    inputs.push_back(tokens.subspan(first, n));
    starts.push_back(slots_[slots[first]]->length());
  }
  const bool fail = fail_in_ > 0 && --fail_in_ == 0;
  if (fail && collective_) model_.ForwardBatch({}, {}, {}).IgnoreError();
  absl::StatusOr<std::vector<std::vector<float>>> logits =
      fail ? absl::InternalError("HostDecodeBackend: injected failure")
           : model_.ForwardBatch(states, inputs, starts);
  if (!logits.ok()) {
    if (logits.status().code() == absl::StatusCode::kInvalidArgument) return logits.status();
    for (int s : slots) {
      slots_[s].reset();
      for (int32_t b : tables_[s]) owner_[b] = -1;
      tables_[s].clear();
    }
    return absl::InternalError(logits.status().message());
  }
  std::vector<float> all;
  for (const std::vector<float>& run : *logits) all.insert(all.end(), run.begin(), run.end());
  if (logit_rows.has_value()) {
    KeepRows(all, rows, *logit_rows, rows_view_);
  } else {
    rows_view_ = std::move(all);
  }
  ++stats_.steps;
  stats_.rows += rows;
  for (size_t r = 0; r < runs.size(); ++r) {
    for (int64_t j = 0; j < runs[r].second; ++j) {
      // starts[r] is the run's first position (the state has moved on since).
      (starts[r] + j < prompt_ends_[slots[runs[r].first]] ? stats_.prompt_rows
                                                          : stats_.output_rows)++;
    }
  }
  return std::span<const float>(rows_view_);
}

}  // namespace weir::model
