// coordinator/scheduler/test_util.h
//
// Small builders shared by the scheduler tests.
//
// Thread safety: pure functions.

#ifndef WEIR_COORDINATOR_SCHEDULER_TEST_UTIL_H_
#define WEIR_COORDINATOR_SCHEDULER_TEST_UTIL_H_

#include <cstdint>
#include <numeric>
#include <vector>

#include "coordinator/scheduler/rank_scheduler.h"

namespace weir::coordinator::scheduler {

// 4-token blocks of ratio-1 KV, 8 slots, max_model_len 64, EOS = 0.
inline RankSchedulerConfig SmallConfig(int32_t blocks, int64_t budget = 2048, int32_t batch = 8) {
  RankSchedulerConfig c;
  c.kv.block_tokens = 4;
  c.kv.compress_ratios = {1};
  c.kv.num_blocks = blocks;
  c.kv.num_seq_slots = 8;
  c.max_model_len = 64;
  c.max_prefill_tokens = budget;
  c.max_decode_batch = batch;
  c.eos_token_ids = {0};
  return c;
}

// Prompt tokens 100 + 10 * id, 101 + 10 * id, ...
inline SeqRequest MakeRequest(uint64_t id, int prompt_len, uint32_t max_new = 16) {
  SeqRequest r;
  r.id = RequestId(id);
  r.prompt.resize(prompt_len);
  std::iota(r.prompt.begin(), r.prompt.end(), static_cast<uint32_t>(100 + 10 * id));
  r.max_new_tokens = max_new;
  return r;
}

// A result that samples `token` on every row of `plan`.
inline RankStepResult UniformResult(const RankStepPlan& plan, uint32_t token) {
  RankStepResult r;
  r.step_id = plan.step_id;
  r.rows.resize(plan.rows.size(), RowOutput{{token}, false});
  return r;
}

// The row of `plan` for `id`, or null.
inline const PlanRow* FindRow(const RankStepPlan& plan, uint64_t id) {
  for (const PlanRow& row : plan.rows) {
    if (row.request == RequestId(id)) return &row;
  }
  return nullptr;
}

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_TEST_UTIL_H_
