// worker/model/cpu_ops.h
//
// CpuOps: the Ops interface (ops.h) over the CPU reference kernels of
// kernels/cpu. Matrix products use RowStableGemm (row_gemm.h) so that every
// op is batch-invariant; only the vocabulary head (Logits) uses OpenBLAS
// sgemm by default, whose summation order depends on the row count
// (CpuOpsOptions::row_stable_logits switches it to RowStableGemm, the order
// CudaOps's row-stable Logits reproduces bit for bit). MoeGate is called one
// token at a time; HcMix computes its mixes with RowStableGemm and then
// follows kernels/cpu/mhc.h exactly. IndexerScore rounds at the reference's bf16
// points (IndexerScoreArgs::round_bf16).
//
// Thread safety: not thread-safe (accumulates OpsStats); one per forward thread.

#ifndef WEIR_WORKER_MODEL_CPU_OPS_H_
#define WEIR_WORKER_MODEL_CPU_OPS_H_

#include "worker/model/ops.h"

namespace weir::model {

struct CpuOpsOptions {
  // Logits through RowStableGemm instead of OpenBLAS sgemm: same bits as
  // CudaOps (whose Logits uses the row-stable kernel) and as a one-row call.
  // Off by default: RowStableGemm runs at about 1/4.5 of sgemm's rate here
  // (tools/bench:model_cpu, tiny: prefill 128 tokens +3.5%, decode +1%; the
  // share grows with vocab x dim).
  bool row_stable_logits = false;
};

class CpuOps : public Ops {
 public:
  explicit CpuOps(ActivationPrecision precision = ActivationPrecision::kBf16,
                  const CpuOpsOptions& options = {})
      : precision_(precision), options_(options) {}
  ActivationPrecision precision() const override { return precision_; }

  absl::Status Matmul(const DenseWeight& w, std::span<const float> x, int64_t rows,
                      std::span<float> y) override;
  absl::Status Logits(const DenseWeight& head, std::span<const float> x, int64_t rows,
                      std::span<float> y) override;
  absl::Status RmsNorm(std::span<const float> x, std::span<const float> weight, int64_t rows,
                       int64_t dim, float eps, std::span<float> out) override;
  absl::Status Rope(const kernels::cpu::RopeTable& table,
                    const kernels::cpu::RopeArgs& args) override;
  absl::Status FakeQuant(std::span<float> x, FakeQuantFormat format) override;
  void RoundBf16(std::span<float> x) override;
  absl::Status SparseAttention(const kernels::cpu::SparseAttentionArgs& args) override;
  absl::Status CompressorPool(const kernels::cpu::CompressorPoolArgs& args) override;
  absl::Status IndexerScore(const kernels::cpu::IndexerScoreArgs& args) override;
  absl::Status TopkPositions(const kernels::cpu::TopkArgs& args) override;
  absl::Status CandidateBlocks(const kernels::cpu::CandidateBlocksArgs& args) override;
  absl::Status MoeGate(const kernels::cpu::MoeGateParams& params,
                       const kernels::cpu::MoeGateArgs& args) override;
  absl::Status HcMix(const kernels::cpu::HcParams& params,
                     const kernels::cpu::HcMixArgs& args) override;
  absl::Status HcCollapse(std::span<const float> x, std::span<const float> pre, int64_t tokens,
                          int hc_mult, int64_t dim, std::span<float> out) override;
  absl::Status HcExpand(std::span<const float> x, std::span<const float> y,
                        std::span<const float> post, std::span<const float> comb, int64_t tokens,
                        int hc_mult, int64_t dim, std::span<float> out) override;
  absl::Status EngramLookup(std::span<const uint8_t> table, std::span<const uint8_t> scales,
                            int64_t table_rows, int64_t dim, std::span<const int64_t> ids,
                            std::span<float> out) override;
  absl::Status EngramGate(const kernels::cpu::EngramGateArgs& args) override;

 private:
  bool bf16() const { return precision_ == ActivationPrecision::kBf16; }
  ActivationPrecision precision_;
  CpuOpsOptions options_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_CPU_OPS_H_
