#include "worker/model/host_decode_backend.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace weir::model {

HostDecodeBackend::HostDecodeBackend(Model& model, int max_sequences, int max_batch,
                                     int64_t max_positions, bool collective)
    : model_(model), max_batch_(max_batch), max_positions_(max_positions),
      collective_(collective), slots_(max_sequences) {}

absl::Status HostDecodeBackend::Import(int slot, const SequenceState& state) {
  if (slot < 0 || slot >= max_sequences()) {
    return absl::InvalidArgumentError(absl::StrCat("Import: slot ", slot));
  }
  if (state.broken() || state.length() < 1 || state.length() >= max_positions_) {
    return absl::InvalidArgumentError(absl::StrCat("Import: a state of ", state.length(),
                                                   " positions (broken: ", state.broken(), ")"));
  }
  slots_[slot] = std::make_unique<SequenceState>(state);
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
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> HostDecodeBackend::Step(std::span<const int> slots,
                                                           std::span<const int64_t> tokens) {
  const int64_t rows = static_cast<int64_t>(slots.size());
  absl::Status valid = [&]() -> absl::Status {
    if ((rows == 0 && !collective_) || rows > max_batch_ || tokens.size() != slots.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Step: ", rows, " slots, ", tokens.size(),
                                                     " tokens"));
    }
    absl::flat_hash_set<int> seen;
    for (int s : slots) {
      if (!holds(s) || !seen.insert(s).second) {
        return absl::InvalidArgumentError(absl::StrCat("Step: slot ", s));
      }
      if (slots_[s]->length() >= max_positions_) {
        return absl::OutOfRangeError(absl::StrCat("Step: slot ", s, " is full"));
      }
    }
    return absl::OkStatus();
  }();
  if (!valid.ok()) {
    if (collective_) model_.ForwardBatch({}, {}, {}).IgnoreError();  // join the group's step
    return valid;
  }
  std::vector<SequenceState*> states;
  std::vector<std::span<const int64_t>> inputs;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < rows; ++i) {
    states.push_back(slots_[slots[i]].get());
    inputs.push_back(tokens.subspan(i, 1));
    starts.push_back(slots_[slots[i]]->length());
  }
  if (fail_next_ && collective_) model_.ForwardBatch({}, {}, {}).IgnoreError();
  absl::StatusOr<std::vector<std::vector<float>>> logits =
      fail_next_ ? absl::InternalError("HostDecodeBackend: injected failure")
                 : model_.ForwardBatch(states, inputs, starts);
  fail_next_ = false;
  if (!logits.ok()) {
    if (logits.status().code() == absl::StatusCode::kInvalidArgument) return logits.status();
    for (int s : slots) slots_[s].reset();
    return absl::InternalError(logits.status().message());
  }
  std::vector<float> out;
  for (const std::vector<float>& row : *logits) out.insert(out.end(), row.begin(), row.end());
  ++stats_.steps;
  stats_.rows += rows;
  return out;
}

}  // namespace weir::model
