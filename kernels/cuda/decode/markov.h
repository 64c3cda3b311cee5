// kernels/cuda/decode/markov.h
//
// MarkovDraft: DSpark's Markov head over a whole draft block in one launch
// (worker/model/dspark.cc; spec model-v41.md §4.8). For each sequence r <
// sequences and each position i < block in turn, with p = prev[r]:
//   e = embed[p, :] (zeros when p is outside [0, vocab)),
//       also written to features[(r * block + i) * feature_stride
//                                + feature_offset + c] for c < rank;
//   bias[t] = DotRows(e, head[t, :])         (DotRows' bits, dot_rows.h)
//   row = logits + (r * block + i) * vocab; row[t] = row[t] + bias[t]  (in place)
//   p = the first t of the largest row[t]    (MarkovArgmax's rule, rows.h)
//   tokens[r * block + i] = p
// and prev[r] = the last p. This is exactly what the decoder's loop of
// CopyRows (embed rows by prev), CopyRows (into the features), DotRows (the
// bias) and MarkovArgmax gives, position by position, in 4 x block launches:
// the same bits (tested against that loop), one launch.
//
// One CTA a sequence runs the whole block, so the products of a position are
// spread over one SM: SupportsMarkovDraft bounds vocab x rank (a drafter's
// Markov head of a small vocabulary; the decoder keeps the four-kernel loop
// past it).
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DECODE_MARKOV_H_
#define WEIR_KERNELS_CUDA_DECODE_MARKOV_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::decode {

// Largest vocab x rank a MarkovDraft CTA takes (a 4,096 x 16 head is 65,536),
// and the largest rank (e lives in shared memory).
inline constexpr int64_t kMarkovDraftMaxProducts = int64_t{1} << 20;
inline constexpr int64_t kMarkovDraftMaxRank = 4096;

struct MarkovDraftParams {
  float* logits = nullptr;       // device [sequences * block, vocab]: the bias is added in place
  const float* embed = nullptr;  // device [vocab, rank]: the Markov embedding
  const float* head = nullptr;   // device [vocab, rank]: the Markov head (DotRows' w)
  float* features = nullptr;     // device [sequences * block, feature_stride]
  int64_t* tokens = nullptr;     // device [sequences * block]
  int32_t* prev = nullptr;       // device [sequences]: the token before each block; the last draft
  int64_t sequences = 0, vocab = 0, rank = 0;
  int64_t feature_stride = 0, feature_offset = 0;
  int block = 1;
};

// Returns true if MarkovDraft takes `p`: 0 <= sequences < 2^31, 1 <= vocab <
// 2^31, 0 < rank <= kMarkovDraftMaxRank a multiple of 4 (DotRows'), vocab x
// rank <= kMarkovDraftMaxProducts, block >= 1, feature_offset >= 0 and feature_offset
// + rank <= feature_stride, and the pointers when sequences > 0.
bool SupportsMarkovDraft(const MarkovDraftParams& p);

// Enqueues the block on `stream` (a CTA a sequence). INVALID_ARGUMENT when
// SupportsMarkovDraft is false; INTERNAL with the CUDA error if the launch
// fails. REQUIRES: no buffer overlaps another.
absl::Status MarkovDraft(const MarkovDraftParams& p, cudaStream_t stream);

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_MARKOV_H_
