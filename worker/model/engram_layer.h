// worker/model/engram_layer.h
//
// Engram of V4.1 (spec §4.7): EngramHasher turns a sequence's compressed
// token ids into table rows per Engram layer (n-gram hash with numpy-derived
// odd multipliers and per-(size, head) primes, kernels/cpu/engram.h);
// EngramForward gathers the rows (EngramGather: FP8 rows, E8M0 per 32, held
// here or row-sharded over ranks), projects them with wkv into hc_mult keys
// and one value, and adds the gated value to each residual stream (before
// the block).
//
// Thread safety: EngramHasher is immutable after Create; EngramForward
// follows the rules of its Ops and EngramGather (one thread at a time).

#ifndef WEIR_WORKER_MODEL_ENGRAM_LAYER_H_
#define WEIR_WORKER_MODEL_ENGRAM_LAYER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/engram_gather.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

class EngramHasher {
 public:
  // `token_map` [vocab_size] maps token ids to compressed ids (spec §4.7 step
  // 1, produced by the tokenizer); empty means identity, allowed only when
  // engram_compressed_vocab_size == vocab_size. INVALID_ARGUMENT on a map of
  // the wrong size or ids outside [0, compressed vocab), or when a layer's
  // primes do not add up to its engram_num_embeddings.
  static absl::StatusOr<EngramHasher> Create(const ModelConfig& config,
                                             std::vector<int64_t> token_map);

  // Compressed id of `token`. REQUIRES: 0 <= token < vocab_size.
  int64_t Compress(int64_t token) const {
    return token_map_.empty() ? token : token_map_[token];
  }
  // Rows [tokens, layers, cols] for positions [start_pos, history.size()).
  absl::Status Hash(std::span<const int64_t> history, int64_t start_pos,
                    std::span<int64_t> rows) const;
  int num_layers() const { return layers_; }
  int64_t cols() const { return cols_; }

 private:
  EngramHasher() = default;
  std::vector<int64_t> token_map_;
  std::vector<int64_t> multipliers_;  // [layers, max_ngram]
  std::vector<int64_t> primes_;       // [layers, max_ngram - 1, heads]
  int layers_ = 0;
  int max_ngram_ = 0;
  int heads_ = 0;
  int64_t cols_ = 0;
  int64_t pad_id_ = 0;
};

// Applies the Engram module of backbone layer `layer` with rows [tokens,
// cols] to the streams x [tokens, hc_mult, dim] in place; the table rows come
// from `gather` (one Gather call, also when tokens == 0: a collective gather
// must be joined; nothing else happens then).
absl::Status EngramForward(Ops& ops, const ModelConfig& config, const EngramWeights& w,
                           EngramGather& gather, int layer, std::span<const int64_t> rows,
                           int64_t tokens, std::span<float> x);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_ENGRAM_LAYER_H_
