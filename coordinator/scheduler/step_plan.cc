// coordinator/scheduler/step_plan.cc

#include "coordinator/scheduler/step_plan.h"

namespace weir::coordinator::scheduler {

const char* StepTypeName(StepType type) {
  switch (type) {
    case StepType::kPrefill:
      return "PREFILL";
    case StepType::kDecode:
      return "DECODE";
  }
  return "?";
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "NONE";
    case FinishReason::kEos:
      return "EOS";
    case FinishReason::kStopToken:
      return "STOP_TOKEN";
    case FinishReason::kMaxTokens:
      return "MAX_TOKENS";
    case FinishReason::kContextLimit:
      return "CONTEXT_LIMIT";
    case FinishReason::kCancelled:
      return "CANCELLED";
    case FinishReason::kWorkerEnded:
      return "WORKER_ENDED";
  }
  return "?";
}

}  // namespace weir::coordinator::scheduler
