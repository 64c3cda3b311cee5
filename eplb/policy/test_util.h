// eplb/policy/test_util.h
//
// Test helpers: building loads from a formula and checking placements with
// code written independently of the library's own validation.
//
// Thread safety: pure functions.

#ifndef WEIR_EPLB_POLICY_TEST_UTIL_H_
#define WEIR_EPLB_POLICY_TEST_UTIL_H_

#include <functional>

#include "eplb/policy/expert_load.h"
#include "eplb/policy/placement.h"
#include "gtest/gtest.h"

namespace weir::eplb::policy {

// Returns the load [num_windows, num_layers, num_logical] with value
// fn(window, layer, expert). CHECK-fails on invalid values (tests only).
ExpertLoad MakeLoad(int num_windows, int num_layers, int num_logical,
                    const std::function<double(int, int, int)>& fn);

// Checks sizes, that every logical expert has >= 1 replica, that every rank
// holds exactly num_physical / num_ranks slots, and that the logical->physical
// map, the counts and the physical->logical map agree.
testing::AssertionResult IsConsistent(const Placement& placement, int num_layers, int num_logical,
                                      int num_physical, int num_ranks);

// Returns sum over (window, layer) of the maximum rank load, each expert's
// load split evenly over its replicas.
double SumOfMaxRankLoad(const Placement& placement, const ExpertLoad& load);

// Returns the rank of every replica of `expert` in `layer`.
std::vector<int> RanksOf(const Placement& placement, int layer, int expert);

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_TEST_UTIL_H_
