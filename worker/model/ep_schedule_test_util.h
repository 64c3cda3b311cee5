// worker/model/ep_schedule_test_util.h
//
// Test fixture of expert-parallel model tests: a schedule of sequences, each
// owned by one rank, prefilled at some step and then decoded greedily for a
// number of steps. RunRankSchedule runs one rank's part (every step is one
// ForwardBatch, with zero rows when the rank has nothing to do);
// RunReferenceSchedule runs every sequence alone with Model::Forward on a
// single-process model. Results are comparable per (sequence, step).
//
// Thread safety: functions over caller-owned models.

#ifndef WEIR_WORKER_MODEL_EP_SCHEDULE_TEST_UTIL_H_
#define WEIR_WORKER_MODEL_EP_SCHEDULE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/expert_placement.h"
#include "worker/model/model.h"

namespace weir::model {

struct ScheduledSequence {
  int rank = 0;
  int start_step = 0;  // the step of its prefill
  std::vector<int64_t> prompt;
  int decode_steps = 0;
};

// Per sequence: the logits of the last position of every forward
// [1 + decode_steps][vocab] and the greedy token after each.
struct SequenceResult {
  std::vector<std::vector<float>> last_logits;
  std::vector<int64_t> tokens;
};

// A placement of `config`'s routed experts over `world` ranks of
// `slots_per_rank` slots: per layer every expert once, then replicas drawn
// with `seed`, shuffled. REQUIRES: world * slots_per_rank >= n_routed_experts.
ExpertPlacement ShuffledPlacement(const ModelConfig& config, int world, int slots_per_rank,
                                  uint32_t seed);

// Steps of the schedule (last step of any sequence + 1).
int ScheduleSteps(const std::vector<ScheduledSequence>& schedule);

// Index of the largest value (first on ties).
int64_t Argmax(const std::vector<float>& v);

// Runs rank `rank`'s sequences; results for the other sequences stay empty.
// Records, per step, the number of rows this rank ran in `rows_per_step`.
absl::StatusOr<std::vector<SequenceResult>> RunRankSchedule(
    Model& model, const std::vector<ScheduledSequence>& schedule, int rank,
    std::vector<int>* rows_per_step = nullptr);

// Runs every sequence alone, prefill then decodes, with Model::Forward.
absl::StatusOr<std::vector<SequenceResult>> RunReferenceSchedule(
    Model& model, const std::vector<ScheduledSequence>& schedule);

// Max over all compared rows of max|a - b| / max|b|; "" in `mismatch` when the
// greedy tokens agree everywhere, else a description of the first difference.
double CompareResults(const std::vector<SequenceResult>& got,
                      const std::vector<SequenceResult>& want, std::string* mismatch);

// Flat binary (de)serialization for results written by forked ranks.
std::string SerializeResults(const std::vector<SequenceResult>& results);
absl::StatusOr<std::vector<SequenceResult>> ParseResults(const std::string& bytes);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_EP_SCHEDULE_TEST_UTIL_H_
