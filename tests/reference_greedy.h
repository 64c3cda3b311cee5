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

// `count` prompts of 3 to 31 token ids (prompt i: 3 + 7i mod 29 ids), id j of
// prompt i = (offset + i * per_prompt + j * per_token) mod 4000: the serving
// tests' mix of short and long prompts, inside the tiny vocabulary.
std::vector<std::vector<uint32_t>> ArithmeticPrompts(int count, uint32_t offset,
                                                     uint32_t per_prompt, uint32_t per_token);

}  // namespace weir::testing_util

#endif  // WEIR_TESTS_REFERENCE_GREEDY_H_
