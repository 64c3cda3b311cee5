// coordinator/scheduler/kv_layout.cc

#include "coordinator/scheduler/kv_layout.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace weir::coordinator::scheduler {

absl::Status ValidateKvLayout(const KvLayout& layout) {
  if (layout.block_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_tokens must be >= 1, got ", layout.block_tokens));
  }
  for (int32_t r : layout.compress_ratios) {
    if (r < 1 || layout.block_tokens % r != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "compress ratio ", r, " must be >= 1 and divide block_tokens ", layout.block_tokens));
    }
  }
  if (layout.num_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_blocks must be >= 0, got ", layout.num_blocks));
  }
  if (layout.num_seq_slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_seq_slots must be >= 1, got ", layout.num_seq_slots));
  }
  return absl::OkStatus();
}

int64_t BlocksForTokens(const KvLayout& layout, int64_t num_tokens) {
  if (num_tokens <= 0) return 0;
  int64_t blocks = 0;
  for (int32_t r : layout.compress_ratios) {
    const int64_t entries = num_tokens / r;
    const int64_t per_block = layout.block_tokens / r;
    blocks = std::max(blocks, (entries + per_block - 1) / per_block);
  }
  return blocks;
}

}  // namespace weir::coordinator::scheduler
