#include "worker/model/ep_schedule_test_util.h"

#include <algorithm>
#include <random>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::model {

int ScheduleSteps(const std::vector<ScheduledSequence>& schedule) {
  int steps = 0;
  for (const ScheduledSequence& s : schedule) {
    steps = std::max(steps, s.start_step + 1 + s.decode_steps);
  }
  return steps;
}

int64_t Argmax(const std::vector<float>& v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

namespace {

void Record(std::vector<float> logits, int64_t vocab, SequenceResult& r) {
  std::vector<float> last(logits.end() - vocab, logits.end());
  r.tokens.push_back(Argmax(last));
  r.last_logits.push_back(std::move(last));
}

}  // namespace

absl::StatusOr<std::vector<SequenceResult>> RunRankSchedule(
    Model& model, const std::vector<ScheduledSequence>& schedule, int rank,
    std::vector<int>* rows_per_step) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<SequenceResult> results(schedule.size());
  std::vector<std::unique_ptr<SequenceState>> states(schedule.size());
  for (int step = 0; step < ScheduleSteps(schedule); ++step) {
    std::vector<SequenceState*> rows;
    std::vector<std::vector<int64_t>> inputs;
    std::vector<int64_t> starts;
    std::vector<size_t> which;
    for (size_t i = 0; i < schedule.size(); ++i) {
      const ScheduledSequence& s = schedule[i];
      if (s.rank != rank || step < s.start_step || step > s.start_step + s.decode_steps) continue;
      if (step == s.start_step) {
        states[i] = model.NewSequence();
        inputs.push_back(s.prompt);
      } else {
        inputs.push_back({results[i].tokens.back()});
      }
      rows.push_back(states[i].get());
      starts.push_back(states[i]->length());
      which.push_back(i);
    }
    std::vector<std::span<const int64_t>> tokens(inputs.begin(), inputs.end());
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits,
                     model.ForwardBatch(rows, tokens, starts));
    if (logits.size() != rows.size()) return absl::InternalError("row count of the logits");
    for (size_t r = 0; r < rows.size(); ++r) Record(std::move(logits[r]), vocab, results[which[r]]);
    if (rows_per_step != nullptr) rows_per_step->push_back(static_cast<int>(rows.size()));
  }
  return results;
}

absl::StatusOr<std::vector<SequenceResult>> RunReferenceSchedule(
    Model& model, const std::vector<ScheduledSequence>& schedule) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<SequenceResult> results(schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) {
    std::unique_ptr<SequenceState> state = model.NewSequence();
    ASSIGN_OR_RETURN(std::vector<float> logits, model.Forward(*state, schedule[i].prompt, 0));
    Record(std::move(logits), vocab, results[i]);
    for (int d = 0; d < schedule[i].decode_steps; ++d) {
      const int64_t next[] = {results[i].tokens.back()};
      ASSIGN_OR_RETURN(logits, model.Forward(*state, next, state->length()));
      Record(std::move(logits), vocab, results[i]);
    }
  }
  return results;
}

double CompareResults(const std::vector<SequenceResult>& got,
                      const std::vector<SequenceResult>& want, std::string* mismatch) {
  mismatch->clear();
  double worst = 0;
  if (got.size() != want.size()) {
    *mismatch = "different sequence counts";
    return INFINITY;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].tokens != want[i].tokens ||
        got[i].last_logits.size() != want[i].last_logits.size()) {
      if (mismatch->empty()) *mismatch = absl::StrCat("sequence ", i, ": greedy tokens differ");
      continue;
    }
    for (size_t s = 0; s < got[i].last_logits.size(); ++s) {
      const std::vector<float>& a = got[i].last_logits[s];
      const std::vector<float>& b = want[i].last_logits[s];
      if (a.size() != b.size()) return INFINITY;
      double diff = 0, scale = 1e-30;
      for (size_t k = 0; k < a.size(); ++k) {
        diff = std::max(diff, static_cast<double>(std::fabs(a[k] - b[k])));
        scale = std::max(scale, static_cast<double>(std::fabs(b[k])));
      }
      worst = std::max(worst, diff / scale);
    }
  }
  return worst;
}

namespace {

void Put(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); }

bool Get(const std::string& in, size_t& pos, void* dst, size_t bytes) {
  if (pos + bytes > in.size()) return false;
  std::memcpy(dst, in.data() + pos, bytes);
  pos += bytes;
  return true;
}

}  // namespace

std::string SerializeResults(const std::vector<SequenceResult>& results) {
  std::string out;
  Put(out, static_cast<int64_t>(results.size()));
  for (const SequenceResult& r : results) {
    Put(out, static_cast<int64_t>(r.tokens.size()));
    for (size_t s = 0; s < r.tokens.size(); ++s) {
      Put(out, r.tokens[s]);
      Put(out, static_cast<int64_t>(r.last_logits[s].size()));
      out.append(reinterpret_cast<const char*>(r.last_logits[s].data()),
                 r.last_logits[s].size() * sizeof(float));
    }
  }
  return out;
}

absl::StatusOr<std::vector<SequenceResult>> ParseResults(const std::string& bytes) {
  size_t pos = 0;
  int64_t n = 0;
  if (!Get(bytes, pos, &n, sizeof(n)) || n < 0 || n > 1 << 20) {
    return absl::DataLossError("results: bad header");
  }
  std::vector<SequenceResult> results(n);
  for (SequenceResult& r : results) {
    int64_t steps = 0;
    if (!Get(bytes, pos, &steps, sizeof(steps)) || steps < 0 || steps > 1 << 20) {
      return absl::DataLossError("results: bad step count");
    }
    for (int64_t s = 0; s < steps; ++s) {
      int64_t token = 0, size = 0;
      if (!Get(bytes, pos, &token, sizeof(token)) || !Get(bytes, pos, &size, sizeof(size)) ||
          size < 0 || size > 1 << 24) {
        return absl::DataLossError("results: bad row");
      }
      std::vector<float> logits(size);
      if (!Get(bytes, pos, logits.data(), size * sizeof(float))) {
        return absl::DataLossError("results: truncated logits");
      }
      r.tokens.push_back(token);
      r.last_logits.push_back(std::move(logits));
    }
  }
  return results;
}

ExpertPlacement ShuffledPlacement(const ModelConfig& config, int world, int slots_per_rank,
                                  uint32_t seed) {
  std::mt19937 gen(seed);
  ExpertPlacement p{.num_layers = static_cast<int>(config.n_layers),
                    .num_logical = static_cast<int>(config.n_routed_experts),
                    .slots_per_rank = slots_per_rank,
                    .world_size = world};
  for (int l = 0; l < p.num_layers; ++l) {
    std::vector<int32_t> slots(p.num_physical());
    for (int s = 0; s < p.num_physical(); ++s) {
      slots[s] = s < p.num_logical ? s : static_cast<int32_t>(gen() % p.num_logical);
    }
    std::shuffle(slots.begin(), slots.end(), gen);
    p.physical_to_logical.insert(p.physical_to_logical.end(), slots.begin(), slots.end());
  }
  return p;
}

}  // namespace weir::model
