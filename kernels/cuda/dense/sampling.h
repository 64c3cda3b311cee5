// kernels/cuda/dense/sampling.h
//
// Per-row selections over logits [rows, vocab] on the GPU, with the
// semantics of the CPU sampler (worker/sampling/sampler.h) and of the
// worker's return_top_k (worker/step_executor.cc):
//   * ArgmaxRows: greedy decoding; the largest logit, ties to the lowest id.
//   * TopKRows: the k largest logits and their ids, sorted by descending
//     value, ties to the lower id first (-0 and +0 are equal values).
//   * RowLogSumExp: the log-softmax normalizer (max and sum of exp in double)
//     from which the host forms logprobs exactly as the CPU sampler does.
// Results are exact (selections compare values, they do not add them) and do
// not depend on how many rows a call holds; RowLogSumExp's double sum runs in
// a different order than the CPU's, so a logprob formed from it may differ
// from the CPU's in the last float bit in rare cases.
//
// Stochastic sampling (temperature, top-k, top-p, min-p and the seeded draw)
// stays on the host: the CPU draw accumulates std::exp in double in sorted
// order and compares a 53-bit uniform against that running sum, and CUDA's
// double exp differs from glibc's in the last bit for some inputs, so a draw
// near a bucket boundary could pick another token; the bias and penalties
// also walk the sequence's token history, which lives on the host. The
// device part of such a row is TopKRows (for top_k > 0 the kept candidates
// are exactly its output) plus RowLogSumExp.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DENSE_SAMPLING_H_
#define WEIR_KERNELS_CUDA_DENSE_SAMPLING_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

// ArgmaxRows id for a row holding NaN or +Inf (the CPU sampler's
// "NUMERICAL_ERROR"), and for a row whose logits are all -Inf (its "every
// token is masked").
inline constexpr int32_t kArgmaxNonFinite = -1;
inline constexpr int32_t kArgmaxAllMasked = -2;

struct ArgmaxParams {
  const float* logits = nullptr;  // device [rows, vocab]
  int64_t rows = 0;
  int64_t vocab = 0;              // 1 .. 2^31 - 1
  int32_t* ids = nullptr;         // device [rows]: argmax id or a kArgmax* code
  float* values = nullptr;        // device [rows] logits[row, id]; may be null
};

// True for non-null logits and ids, rows in [1, 2^31) and vocab in [1, 2^31).
bool SupportsArgmaxRows(const ArgmaxParams& params);

// Enqueues the per-row argmax on `stream`. A row's value entry is written
// only for a valid id. INVALID_ARGUMENT when unsupported; INTERNAL with the
// CUDA error string if the launch fails.
absl::Status ArgmaxRows(const ArgmaxParams& params, cudaStream_t stream);

// The largest k TopKRows takes.
inline constexpr int kMaxTopK = 1024;

struct TopKParams {
  const float* logits = nullptr;  // device [rows, vocab]
  int64_t rows = 0;
  int64_t vocab = 0;              // 1 .. 2^31 - 1
  int k = 0;                      // 1 .. min(vocab, kMaxTopK)
  float* values = nullptr;        // device [rows, k]: logits[row, ids[row, i]]
  int32_t* ids = nullptr;         // device [rows, k]
};

// True for non-null pointers, rows and vocab in [1, 2^31), 1 <= k <=
// min(vocab, kMaxTopK).
bool SupportsTopKRows(const TopKParams& params);

// Enqueues the per-row top-k on `stream`: entries i = 0..k-1 in descending
// value, equal values by ascending id; NaN ranks below -Inf (the CPU's
// comparator leaves NaN rows unspecified; callers reject them first).
// INVALID_ARGUMENT when unsupported; INTERNAL if the launch fails.
absl::Status TopKRows(const TopKParams& params, cudaStream_t stream);

struct LogSumExpParams {
  const float* logits = nullptr;      // device [rows, vocab]
  const float* temperature = nullptr; // device [rows] or null; an entry <= 0 counts as 1
  int64_t rows = 0;
  int64_t vocab = 0;                  // 1 .. 2^31 - 1
  float* max = nullptr;               // device [rows]: m = max_i v_i
  double* sum = nullptr;              // device [rows]: sum_i exp(double(v_i) - m)
};

// True for non-null logits, max and sum, rows and vocab in [1, 2^31).
bool SupportsRowLogSumExp(const LogSumExpParams& params);

// Enqueues, per row, with v_i = logits[i] / t (an fp32 division, as the CPU
// sampler divides by the temperature; t = 1 for greedy rows), m and sum as
// above. The CPU's logprob of token j is then
// float(double(v_j) - m - log(sum)). Meaningful for rows whose logits are
// finite or -Inf with at least one finite. INVALID_ARGUMENT when unsupported;
// INTERNAL if the launch fails.
absl::Status RowLogSumExp(const LogSumExpParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_SAMPLING_H_
