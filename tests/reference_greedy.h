// tests/reference_greedy.h
//
// testonly: the in-process reference of the serving tests: a model's greedy
// continuation of one prompt, one sequence at a time (the prompt as one
// chunk, then one token a step), optionally with CED bounded replay as the
// workers apply it. A forward failure is a test failure and ends the output.

#ifndef WEIR_TESTS_REFERENCE_GREEDY_H_
#define WEIR_TESTS_REFERENCE_GREEDY_H_

#include <cstdint>
#include <vector>

#include "worker/model/model.h"

namespace weir::testing_util {

// The first `max_new` greedy tokens after `prompt` (ties to the lower id).
std::vector<uint32_t> ReferenceGreedy(model::Model& m, const std::vector<uint32_t>& prompt,
                                      uint32_t max_new, bool ced_replay = false);

}  // namespace weir::testing_util

#endif  // WEIR_TESTS_REFERENCE_GREEDY_H_
