#include "tests/reference_greedy.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace weir::testing_util {

std::vector<uint32_t> ReferenceGreedy(model::Model& m, const std::vector<uint32_t>& prompt,
                                      uint32_t max_new, bool ced_replay) {
  auto seq = m.NewSequence();
  if (ced_replay) {
    EXPECT_TRUE(m.StartCedReplay(*seq, static_cast<int64_t>(prompt.size())).ok());
  }
  std::vector<int64_t> input(prompt.begin(), prompt.end());
  std::vector<uint32_t> out;
  const int64_t vocab = m.config().vocab_size;
  while (out.size() < max_new) {
    auto logits = m.Forward(*seq, input, seq->length());
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return out;
    const float* last = logits->data() + (input.size() - 1) * vocab;
    const int64_t next = std::max_element(last, last + vocab) - last;
    out.push_back(static_cast<uint32_t>(next));
    input = {next};
  }
  return out;
}

}  // namespace weir::testing_util
