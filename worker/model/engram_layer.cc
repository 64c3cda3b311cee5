#include "worker/model/engram_layer.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/engram_multipliers.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;

absl::StatusOr<EngramHasher> EngramHasher::Create(const ModelConfig& config,
                                                  std::vector<int64_t> token_map) {
  EngramHasher h;
  h.layers_ = static_cast<int>(config.engram_layer_ids.size());
  if (h.layers_ == 0) return h;
  const int64_t cv = config.engram_compressed_vocab_size;
  if (token_map.empty() && cv != config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Engram needs a compressed token map: compressed vocab ", cv, " != vocab ",
        config.vocab_size));
  }
  if (!token_map.empty() && static_cast<int64_t>(token_map.size()) != config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("Engram token map has ", token_map.size(),
                                                   " entries, vocab is ", config.vocab_size));
  }
  for (int64_t id : token_map) {
    if (id < 0 || id >= cv) {
      return absl::InvalidArgumentError(absl::StrCat("Engram token map id ", id));
    }
  }
  h.token_map_ = std::move(token_map);
  h.max_ngram_ = config.engram_max_ngram_size;
  h.heads_ = static_cast<int>(config.engram_n_heads);
  h.cols_ = config.engram_hash_cols();
  if (config.engram_pad_id < 0 || config.engram_pad_id >= config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("engram_pad_id ", config.engram_pad_id));
  }
  h.pad_id_ = h.Compress(config.engram_pad_id);
  ASSIGN_OR_RETURN(h.multipliers_,
                   cpu::EngramMultipliers(config.engram_layer_ids, h.max_ngram_, cv));
  ASSIGN_OR_RETURN(h.primes_, cpu::NextUnusedPrimes(h.layers_, h.max_ngram_, h.heads_,
                                                    config.engram_vocab_size));
  const int64_t per_layer = h.cols_;
  for (int l = 0; l < h.layers_; ++l) {
    const int64_t sum = std::accumulate(h.primes_.begin() + l * per_layer,
                                        h.primes_.begin() + (l + 1) * per_layer, int64_t{0});
    if (sum != config.engram_num_embeddings[l]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Engram layer ", config.engram_layer_ids[l], ": primes add up to ", sum,
                       ", engram_num_embeddings says ", config.engram_num_embeddings[l]));
    }
  }
  return h;
}

absl::Status EngramHasher::Hash(std::span<const int64_t> history, int64_t start_pos,
                                std::span<int64_t> rows) const {
  return cpu::EngramHash({.history = history, .multipliers = multipliers_, .primes = primes_,
                          .rows = rows, .start_pos = start_pos, .layers = layers_,
                          .max_ngram = max_ngram_, .heads = heads_, .pad_id = pad_id_});
}

absl::Status EngramForward(Ops& ops, const ModelConfig& config, const EngramWeights& w,
                           EngramGather& gather, int layer, std::span<const int64_t> rows,
                           int64_t tokens, std::span<float> x) {
  const int64_t cols = config.engram_hash_cols(), hd = config.engram_head_dim;
  const int64_t d = config.dim, n = config.hc_mult;
  if (static_cast<int64_t>(rows.size()) != tokens * cols) {
    return absl::InvalidArgumentError("EngramForward: rows size");
  }
  std::vector<float> emb(tokens * cols * hd);
  RETURN_IF_ERROR(gather.Gather(layer, rows, emb));
  if (tokens == 0) return absl::OkStatus();
  ops.RoundBf16(emb);
  std::vector<float> kv(tokens * (n + 1) * d);
  RETURN_IF_ERROR(ops.Matmul(w.wkv, emb, tokens, kv));
  ops.RoundBf16(kv);
  std::vector<float> key(tokens * n * d), value(tokens * d);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* src = kv.data() + t * (n + 1) * d;
    std::copy_n(src, n * d, key.data() + t * n * d);
    std::copy_n(src + n * d, d, value.data() + t * d);
  }
  return ops.EngramGate({.x = x, .key = key, .value = value, .weight = w.gate_weight,
                         .tokens = tokens, .hc_mult = static_cast<int>(n), .dim = d,
                         .eps = static_cast<float>(config.norm_eps), .bf16_boundaries = true});
}

}  // namespace weir::model
