// worker/model/ops.h
//
// Ops: the primitive operations the V4.1 forward (model.h) is written
// against. CpuOps (cpu_ops.h) implements them over kernels/cpu; a CUDA
// backend implements the same interface over device buffers. Argument structs
// are the kernels' plain span structs (kernels/cpu/*.h), so every op has the
// CPU reference as its specification.
//
// Batch invariance: every op except Logits must give each token (row) a
// result that does not depend on the other rows of the call. The model relies
// on it for "a chunk equals its tokens one at a time" (spec §4.11, §11 item 1).
//
// Thread safety: an Ops instance is used by one forward at a time (its
// statistics are not synchronized); the functions themselves keep no state.

#ifndef WEIR_WORKER_MODEL_OPS_H_
#define WEIR_WORKER_MODEL_OPS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/compressor.h"
#include "kernels/cpu/engram.h"
#include "kernels/cpu/indexer_score.h"
#include "kernels/cpu/mhc.h"
#include "kernels/cpu/moe_gate.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sparse_attention.h"
#include "kernels/cpu/topk.h"

namespace weir::model {

// A linear layer's weight as the backend holds it: W [out, in], fp32 values
// of the stored format (exact dequantization), plus whether the reference
// quantizes the activation to FP8 (blocks of 32, UE8M0) before this product
// (true for FP8 and MXFP4 stored weights, spec §4.9).
struct DenseWeight {
  int64_t out = 0;
  int64_t in = 0;
  std::vector<float> w;  // [out, in]
  bool fp8_activation = false;
  // Empty, or w's values as bf16 bit patterns [out, in] when every one of
  // them is exactly a bf16 value (FP8 and MXFP4 weights always are): the
  // CPU products read these instead, half the bytes, the same values
  // (KeepBf16Form). Whatever changes w must clear or remake it.
  std::vector<uint16_t> w_bf16;
};

// Makes w.w_bf16 when every value of w.w is a bf16 one (no rounding), else
// leaves it empty. Returns whether it did.
bool KeepBf16Form(DenseWeight& w);

// INVALID_ARGUMENT unless rows > 0, `w` holds out * in values, and x and y
// hold rows * w.in and rows * w.out values: the spans every backend's Matmul
// and Logits require.
absl::Status CheckMatmulShapes(const DenseWeight& w, size_t x, int64_t rows, size_t y);

// Block formats the model fake-quantizes activations and caches into (§4.9).
enum class FakeQuantFormat {
  kFp8,       // e4m3, 32-blocks, UE8M0: SWA KV, activations
  kMxfp4,     // e2m1, 32-blocks, E8M0: index K and Q
  kNvfp4Kv,   // e2m1, 16-blocks, E4M3 scale: main compressed KV
};

// Where activations are rounded (spec §4.9 "reference simulates"): kBf16
// rounds at the reference's bf16 storage points (its own precision, as its
// generate script runs); kFp32 keeps activations fp32 (the reference run with
// torch's default dtype fp32). Quantization (FP8/FP4) is simulated in both.
enum class ActivationPrecision { kBf16, kFp32 };

// Time spent in matrix products since construction (Matmul and Logits, the
// mHC mixes; not the FP8 activation quantization before a product).
struct OpsStats {
  double matmul_seconds = 0;
  int64_t matmul_flops = 0;
};

class Ops {
 public:
  virtual ~Ops() = default;

  // Returns y [rows, w.out] = act(x) [rows, w.in] * W^T, act = FP8 fake-quant
  // when w.fp8_activation. Batch-invariant. INVALID_ARGUMENT on mis-sized spans.
  virtual absl::Status Matmul(const DenseWeight& w, std::span<const float> x, int64_t rows,
                              std::span<float> y) = 0;
  // As Matmul (no activation quantization), for the vocabulary head only:
  // may use any summation order (results feed nothing but the logits).
  virtual absl::Status Logits(const DenseWeight& head, std::span<const float> x, int64_t rows,
                              std::span<float> y) = 0;
  // out [rows, dim] = RmsNorm(x) * weight (weight empty = ones); out may alias x.
  virtual absl::Status RmsNorm(std::span<const float> x, std::span<const float> weight,
                               int64_t rows, int64_t dim, float eps, std::span<float> out) = 0;
  // Rotates the last rope dims of x [tokens, heads, head_dim] in place.
  virtual absl::Status Rope(const kernels::cpu::RopeTable& table,
                            const kernels::cpu::RopeArgs& args) = 0;
  // Replaces x by quantize->dequantize in `format` (blocks along the last dim).
  virtual absl::Status FakeQuant(std::span<float> x, FakeQuantFormat format) = 0;
  // Rounds to bf16 (nearest even) in place at a reference storage point;
  // a no-op under ActivationPrecision::kFp32.
  virtual void RoundBf16(std::span<float> x) = 0;

  virtual absl::Status SparseAttention(const kernels::cpu::SparseAttentionArgs& args) = 0;
  virtual absl::Status CompressorPool(const kernels::cpu::CompressorPoolArgs& args) = 0;
  // Index scores; under kBf16 with the reference's bf16 rounding of the
  // per-head dot, the weighted term and the head sum (IndexerScoreArgs::round_bf16).
  virtual absl::Status IndexerScore(const kernels::cpu::IndexerScoreArgs& args) = 0;
  virtual absl::Status TopkPositions(const kernels::cpu::TopkArgs& args) = 0;
  virtual absl::Status CandidateBlocks(const kernels::cpu::CandidateBlocksArgs& args) = 0;
  // Routes tokens (gate logits, scores, biased top-k, normalized weights).
  virtual absl::Status MoeGate(const kernels::cpu::MoeGateParams& params,
                               const kernels::cpu::MoeGateArgs& args) = 0;
  // pre/post/comb [tokens, n], [tokens, n], [tokens, n, n] from the streams
  // x [tokens, n, dim]: mixes = hc_fn v * rsqrt(mean(v^2) + norm_eps), then
  // the split + Sinkhorn of kernels/cpu/mhc.h.
  virtual absl::Status HcMix(const kernels::cpu::HcParams& params,
                             const kernels::cpu::HcMixArgs& args) = 0;
  virtual absl::Status HcCollapse(std::span<const float> x, std::span<const float> pre,
                                  int64_t tokens, int hc_mult, int64_t dim,
                                  std::span<float> out) = 0;
  virtual absl::Status HcExpand(std::span<const float> x, std::span<const float> y,
                                std::span<const float> post, std::span<const float> comb,
                                int64_t tokens, int hc_mult, int64_t dim,
                                std::span<float> out) = 0;
  virtual absl::Status EngramLookup(std::span<const uint8_t> table,
                                    std::span<const uint8_t> scales, int64_t table_rows,
                                    int64_t dim, std::span<const int64_t> ids,
                                    std::span<float> out) = 0;
  virtual absl::Status EngramGate(const kernels::cpu::EngramGateArgs& args) = 0;

  // The activation precision; HcCollapse / HcExpand / EngramGate round their
  // outputs to bf16 exactly when it is kBf16.
  virtual ActivationPrecision precision() const = 0;

  // Weights the ops were given may have been replaced or freed (the load
  // balancer moved experts): a backend that caches weights drops its copies.
  // Between forwards only.
  virtual void InvalidateWeights() {}

  const OpsStats& stats() const { return stats_; }

 protected:
  OpsStats stats_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_OPS_H_
