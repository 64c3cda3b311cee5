#include "worker/model/cpu_ops.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rms_norm.h"
#include "worker/model/row_gemm.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;
namespace {

class MatmulTimer {
 public:
  MatmulTimer(OpsStats& stats, int64_t flops)
      : stats_(stats), start_(std::chrono::steady_clock::now()) {
    stats_.matmul_flops += flops;
  }
  ~MatmulTimer() {
    stats_.matmul_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  OpsStats& stats_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

absl::Status CpuOps::Matmul(const DenseWeight& w, std::span<const float> x, int64_t rows,
                            std::span<float> y) {
  RETURN_IF_ERROR(CheckMatmulShapes(w, x.size(), rows, y.size()));
  const float* in = x.data();
  std::vector<float> xq;
  if (w.fp8_activation) {
    xq.assign(x.begin(), x.end());
    RETURN_IF_ERROR(cpu::FakeQuantFp8(xq, cpu::kFp8Block)) << "Matmul activation";
    in = xq.data();
  }
  MatmulTimer timer(stats_, 2 * rows * w.out * w.in);  // the product only, not the quantization
  if (w.w_bf16.size() == w.w.size() && !w.w_bf16.empty()) {
    RowStableGemmBf16W(in, w.w_bf16.data(), y.data(), rows, w.out, w.in);  // same values
  } else {
    RowStableGemm(in, w.w.data(), y.data(), rows, w.out, w.in);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::Logits(const DenseWeight& head, std::span<const float> x, int64_t rows,
                            std::span<float> y) {
  RETURN_IF_ERROR(CheckMatmulShapes(head, x.size(), rows, y.size()));
  MatmulTimer timer(stats_, 2 * rows * head.out * head.in);
  if (options_.row_stable_logits) {
    RowStableGemm(x.data(), head.w.data(), y.data(), rows, head.out, head.in);
    return absl::OkStatus();
  }
  const cpu::LinearWeight w{.format = cpu::WeightFormat::kF32, .out_features = head.out,
                            .in_features = head.in, .f32 = head.w};
  return cpu::Linear(w, {.x = x, .y = y, .rows = rows, .act_quant = cpu::ActQuant::kNone});
}

absl::Status CpuOps::RmsNorm(std::span<const float> x, std::span<const float> weight,
                             int64_t rows, int64_t dim, float eps, std::span<float> out) {
  return cpu::RmsNorm(
      {.x = x, .weight = weight, .out = out, .rows = rows, .dim = dim, .eps = eps});
}

absl::Status CpuOps::Rope(const cpu::RopeTable& table, const cpu::RopeArgs& args) {
  return cpu::ApplyRope(table, args);
}

absl::Status CpuOps::FakeQuant(std::span<float> x, FakeQuantFormat format) {
  switch (format) {
    case FakeQuantFormat::kFp8:
      return cpu::FakeQuantFp8(x, cpu::kFp8Block);
    case FakeQuantFormat::kMxfp4:
      return cpu::FakeQuantFp4(x, cpu::kMxfp4Block, cpu::Fp4Scale::kE8m0);
    case FakeQuantFormat::kNvfp4Kv:
      return cpu::FakeQuantFp4(x, cpu::kKvFp4Block, cpu::Fp4Scale::kE4m3);
  }
  return absl::InvalidArgumentError("FakeQuant: unknown format");
}

void CpuOps::RoundBf16(std::span<float> x) {
  if (bf16()) cpu::RoundToBf16InPlace(x);
}

absl::Status CpuOps::SparseAttention(const cpu::SparseAttentionArgs& args) {
  return cpu::SparseAttention(args);
}

absl::Status CpuOps::CompressorPool(const cpu::CompressorPoolArgs& args) {
  return cpu::CompressorPool(args);
}

absl::Status CpuOps::IndexerScore(const cpu::IndexerScoreArgs& args) {
  cpu::IndexerScoreArgs rounded = args;
  rounded.round_bf16 = bf16();
  return cpu::IndexerScore(rounded);
}

absl::Status CpuOps::TopkPositions(const cpu::TopkArgs& args) { return cpu::TopkPositions(args); }

absl::Status CpuOps::CandidateBlocks(const cpu::CandidateBlocksArgs& args) {
  return cpu::CandidateBlocks(args);
}

absl::Status CpuOps::MoeGate(const cpu::MoeGateParams& params, const cpu::MoeGateArgs& args) {
  // One token per call: the kernel's sgemm is not batch-invariant.
  const int64_t d = args.dim, k = params.topk;
  if (args.tokens <= 0 || d <= 0 || k <= 0 ||
      static_cast<int64_t>(args.x.size()) != args.tokens * d ||
      static_cast<int64_t>(args.indices.size()) != args.tokens * k ||
      static_cast<int64_t>(args.weights.size()) != args.tokens * k ||
      !(args.image_mask.empty() || static_cast<int64_t>(args.image_mask.size()) == args.tokens)) {
    return absl::InvalidArgumentError("MoeGate: bad shapes");
  }
  for (int64_t t = 0; t < args.tokens; ++t) {
    cpu::MoeGateArgs one = args;
    one.x = args.x.subspan(t * d, d);
    one.indices = args.indices.subspan(t * k, k);
    one.weights = args.weights.subspan(t * k, k);
    one.image_mask = args.image_mask.empty() ? args.image_mask : args.image_mask.subspan(t, 1);
    one.tokens = 1;
    RETURN_IF_ERROR(cpu::MoeGate(params, one));
  }
  return absl::OkStatus();
}

absl::Status CpuOps::HcMix(const cpu::HcParams& params, const cpu::HcMixArgs& args) {
  const int64_t n = params.hc_mult, t = args.tokens, d = args.dim, n_mix = (2 + n) * n;
  if (n < 1 || t <= 0 || d <= 0 || static_cast<int64_t>(args.x.size()) != t * n * d ||
      static_cast<int64_t>(args.hc_fn.size()) != n_mix * n * d ||
      static_cast<int64_t>(args.pre.size()) != t * n ||
      static_cast<int64_t>(args.post.size()) != t * n ||
      static_cast<int64_t>(args.comb.size()) != t * n * n) {
    return absl::InvalidArgumentError(absl::StrCat("HcMix: bad shapes for tokens ", t));
  }
  std::vector<float> mixes(t * n_mix);
  {
    MatmulTimer timer(stats_, 2 * t * n_mix * n * d);
    RowStableGemm(args.x.data(), args.hc_fn.data(), mixes.data(), t, n_mix, n * d);
  }
  return cpu::HcMixFromProducts(params, args, mixes);
}

absl::Status CpuOps::HcCollapse(std::span<const float> x, std::span<const float> pre,
                                int64_t tokens, int hc_mult, int64_t dim, std::span<float> out) {
  return cpu::HcCollapse(x, pre, tokens, hc_mult, dim, bf16(), out);
}

absl::Status CpuOps::HcExpand(std::span<const float> x, std::span<const float> y,
                              std::span<const float> post, std::span<const float> comb,
                              int64_t tokens, int hc_mult, int64_t dim, std::span<float> out) {
  return cpu::HcExpand(x, y, post, comb, tokens, hc_mult, dim, bf16(), out);
}

absl::Status CpuOps::EngramLookup(std::span<const uint8_t> table, std::span<const uint8_t> scales,
                                  int64_t table_rows, int64_t dim, std::span<const int64_t> ids,
                                  std::span<float> out) {
  return cpu::EngramLookup(table, scales, table_rows, dim, ids, out);
}

absl::Status CpuOps::EngramGate(const cpu::EngramGateArgs& args) {
  cpu::EngramGateArgs a = args;
  a.bf16_boundaries = bf16();
  return cpu::EngramGate(a);
}

}  // namespace weir::model
