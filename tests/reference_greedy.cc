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

std::vector<std::vector<uint32_t>> ArithmeticPrompts(int count, uint32_t offset,
                                                     uint32_t per_prompt, uint32_t per_token) {
  std::vector<std::vector<uint32_t>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<uint32_t> p;
    for (int j = 0; j < 3 + (i * 7) % 29; ++j) {
      p.push_back(
          (offset + static_cast<uint32_t>(i) * per_prompt + static_cast<uint32_t>(j) * per_token) %
          4000);
    }
    prompts.push_back(p);
  }
  return prompts;
}

}  // namespace weir::testing_util
