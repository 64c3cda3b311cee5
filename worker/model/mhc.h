// worker/model/mhc.h
//
// Single-pass mHC block schedule of V4.1 (spec §4.6): the residual is hc_mult
// streams X [tokens, n, dim]; each sublayer site computes its coefficients
// from the stream it reads, but the *collapse* of a sublayer's input uses the
// `pre` computed one site earlier:
//   (a_pre, a_post, a_C) = H_attn(X);  y = Attn(attn_norm(collapse(X, pre_in)))
//   X1 = a_post (x) y + a_C^T X
//   (f_pre, f_post, f_C) = H_ffn(X1);  z = MoE(ffn_norm(collapse(X1, a_pre)))
//   X2 = f_post (x) z + f_C^T X1;      return X2, pre_out = f_pre
// Block 0 (and DSpark stage 0) start from pre_in = one-hot [1, 0, ..., 0].
//
// Thread safety: functions over caller-owned memory.

#ifndef WEIR_WORKER_MODEL_MHC_H_
#define WEIR_WORKER_MODEL_MHC_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/config.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

// A sublayer: reads x [tokens, dim] (normed), writes out [tokens, dim].
using Sublayer = std::function<absl::Status(std::span<const float> x, std::span<float> out)>;

// Returns the one-hot initial pre mix [tokens, n].
std::vector<float> IdentityPreMix(int64_t tokens, int hc_mult);

// Runs one block on x [tokens, n, dim] in place; pre [tokens, n] is pre_in on
// entry and the block's f_pre on return.
absl::Status BlockForward(Ops& ops, const ModelConfig& config, const BlockWeights& w,
                          int64_t tokens, const Sublayer& attention, const Sublayer& ffn,
                          std::vector<float>& x, std::vector<float>& pre);

// The attention sublayer's input of a block, out [tokens, dim] =
// bf16(attn_norm(collapse(x, pre_in))), without running the block (the same
// ops as BlockForward): CED's global-KV projection of the prompt tokens the
// decoder skips (spec §4.4).
absl::Status AttentionInput(Ops& ops, const ModelConfig& config, const BlockWeights& w,
                            std::span<const float> x, std::span<const float> pre,
                            int64_t tokens, std::span<float> out);

// out [tokens, dim] = bf16(sum_j pre[t, j] x[t, j, :]).
absl::Status Collapse(Ops& ops, const ModelConfig& config, std::span<const float> x,
                      std::span<const float> pre, int64_t tokens, std::span<float> out);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_MHC_H_
