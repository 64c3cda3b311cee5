#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/decode/markov.cuh"
#include "kernels/cuda/decode/markov.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::decode {

bool SupportsMarkovDraft(const MarkovDraftParams& p) {
  if (p.sequences < 0 || p.sequences > INT_MAX || p.vocab < 1 || p.vocab > INT_MAX || p.rank <= 0 ||
      p.rank % 4 != 0 || p.rank > kMarkovDraftMaxRank || p.block < 1 || p.feature_offset < 0 ||
      p.feature_offset + p.rank > p.feature_stride || p.vocab * p.rank > kMarkovDraftMaxProducts) {
    return false;
  }
  return p.sequences == 0 || (p.logits != nullptr && p.embed != nullptr && p.head != nullptr &&
                              p.features != nullptr && p.tokens != nullptr && p.prev != nullptr);
}

absl::Status MarkovDraft(const MarkovDraftParams& p, cudaStream_t stream) {
  if (!SupportsMarkovDraft(p)) {
    return absl::InvalidArgumentError(
        "MarkovDraft: needs 0 <= sequences < 2^31, 1 <= vocab < 2^31, 0 < rank <= " +
        std::to_string(kMarkovDraftMaxRank) +
        " a multiple of 4, vocab x rank <= " + std::to_string(kMarkovDraftMaxProducts) +
        ", block >= 1, the features' columns inside their stride and the pointers; got "
        "sequences " +
        std::to_string(p.sequences) + " vocab " + std::to_string(p.vocab) + " rank " +
        std::to_string(p.rank) + " block " + std::to_string(p.block) + " feature offset " +
        std::to_string(p.feature_offset) + " stride " + std::to_string(p.feature_stride));
  }
  if (p.sequences == 0) return absl::OkStatus();
  const size_t smem = static_cast<size_t>(p.rank) * sizeof(float);
  auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(p.sequences), kMarkovThreads, smem, stream>>>(
        p.logits, p.embed, p.head, p.features, p.tokens, p.prev, p.vocab, p.rank, p.feature_stride,
        p.feature_offset, p.block);
  };
  if (p.rank <= 16) {
    launch(MarkovDraftKernel<4>);
  } else if (p.rank <= 32) {
    launch(MarkovDraftKernel<8>);
  } else if (p.rank <= 64) {
    launch(MarkovDraftKernel<16>);
  } else {
    launch(MarkovDraftKernel<32>);
  }
  return LaunchStatus("MarkovDraft");
}

}  // namespace weir::kernels::cuda::decode
