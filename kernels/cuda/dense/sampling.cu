#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/dense/sampling.cuh"
#include "kernels/cuda/dense/sampling.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr int64_t kMaxIndex = int64_t{1} << 31;  // exclusive bound of rows and vocab
constexpr int kThreads = 512;

bool GoodShape(int64_t rows, int64_t vocab) {
  return rows >= 1 && rows < kMaxIndex && vocab >= 1 && vocab < kMaxIndex;
}

}  // namespace

bool SupportsArgmaxRows(const ArgmaxParams& p) {
  return p.logits != nullptr && p.ids != nullptr && GoodShape(p.rows, p.vocab);
}

absl::Status ArgmaxRows(const ArgmaxParams& p, cudaStream_t stream) {
  if (!SupportsArgmaxRows(p)) {
    return absl::InvalidArgumentError(
        "ArgmaxRows: needs device logits and ids, rows and vocab in [1, 2^31)");
  }
  ArgmaxKernel<kThreads><<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(
      p.logits, p.vocab, p.ids, p.values);
  return LaunchStatus("ArgmaxRows");
}

bool SupportsTopKRows(const TopKParams& p) {
  return p.logits != nullptr && p.values != nullptr && p.ids != nullptr &&
         GoodShape(p.rows, p.vocab) && p.k >= 1 && p.k <= kMaxTopK && p.k <= p.vocab;
}

absl::Status TopKRows(const TopKParams& p, cudaStream_t stream) {
  if (!SupportsTopKRows(p)) {
    return absl::InvalidArgumentError(
        "TopKRows: needs device pointers, rows and vocab in [1, 2^31), 1 <= k <= "
        "min(vocab, 1024)");
  }
  TopKKernel<kThreads, kMaxTopK><<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(
      p.logits, p.vocab, p.k, p.values, p.ids);
  return LaunchStatus("TopKRows");
}

bool SupportsRowLogSumExp(const LogSumExpParams& p) {
  return p.logits != nullptr && p.max != nullptr && p.sum != nullptr &&
         GoodShape(p.rows, p.vocab);
}

absl::Status RowLogSumExp(const LogSumExpParams& p, cudaStream_t stream) {
  if (!SupportsRowLogSumExp(p)) {
    return absl::InvalidArgumentError(
        "RowLogSumExp: needs device logits, max and sum, rows and vocab in [1, 2^31)");
  }
  LogSumExpKernel<kThreads><<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(
      p.logits, p.temperature, p.vocab, p.max, p.sum);
  return LaunchStatus("RowLogSumExp");
}

}  // namespace weir::kernels::cuda::dense
