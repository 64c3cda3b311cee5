#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/moe/mhc.cuh"
#include "kernels/cuda/moe/mhc.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/hc_mix_args.cuh"

namespace weir::kernels::cuda {

static_assert(kHcMaxMult == moe::kHcMaxN);

namespace {

bool ShapeOk(int64_t tokens, int64_t dim, int n) {
  return tokens > 0 && dim > 0 && n >= 1 && n <= kHcMaxMult && tokens * n * dim < (int64_t{1} << 38);
}

constexpr int kElementThreads = 256;

unsigned ElementBlocks(int64_t elements) {
  return static_cast<unsigned>((elements + kElementThreads - 1) / kElementThreads);
}

}  // namespace

bool SupportsHcMix(const HcMixParams& p) {
  return ShapeOk(p.tokens, p.dim, p.hc_mult) && p.tokens <= 0x7fffffff && p.sinkhorn_iters >= 1 &&
         p.x != nullptr && (p.hc_fn != nullptr || p.mixes != nullptr) && p.scale != nullptr && p.base != nullptr &&
         p.pre != nullptr && p.post != nullptr && p.comb != nullptr;
}

absl::Status HcMix(const HcMixParams& p, cudaStream_t stream) {
  if (!SupportsHcMix(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HcMix: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", hc_mult ", p.hc_mult,
        ", iters ", p.sinkhorn_iters, "; needs 1 <= hc_mult <= ", kHcMaxMult,
        ", iters >= 1, non-null arrays)"));
  }
  const moe::HcMixKernelArgs args = moe::HcMixArgsOf(p, p.mixes);
  constexpr int kThreads = 256;
  moe::HcMixKernel<kThreads><<<static_cast<unsigned>(p.tokens), kThreads, 0, stream>>>(args);
  return LaunchStatus("HcMix");
}

bool SupportsHcCollapse(const HcCollapseParams& p) {
  return ShapeOk(p.tokens, p.dim, p.hc_mult) && p.x != nullptr && p.pre != nullptr &&
         p.out != nullptr;
}

absl::Status HcCollapse(const HcCollapseParams& p, cudaStream_t stream) {
  if (!SupportsHcCollapse(p)) {
    return absl::InvalidArgumentError(absl::StrCat("HcCollapse: unsupported (tokens ", p.tokens,
                                                   ", dim ", p.dim, ", hc_mult ", p.hc_mult,
                                                   ")"));
  }
  moe::HcCollapseKernel<<<ElementBlocks(p.tokens * p.dim), kElementThreads, 0, stream>>>(
      p.x, p.pre, p.out, p.tokens, p.dim, p.hc_mult, p.round_bf16);
  return LaunchStatus("HcCollapse");
}

bool SupportsHcCollapseNorm(const HcCollapseNormParams& p) {
  return ShapeOk(p.tokens, p.dim, p.hc_mult) && p.x != nullptr && p.pre != nullptr &&
         p.out != nullptr && p.dim % 4 == 0 && p.dim * 4 <= kStagedRowMaxBytes && p.eps >= 0.0f &&
         p.tokens <= 0x7fffffff && NormFp8OutputOk(p.out, p.codes, p.scales, p.dim);
}

absl::Status HcCollapseNorm(const HcCollapseNormParams& p, cudaStream_t stream) {
  if (!SupportsHcCollapseNorm(p)) {
    return absl::InvalidArgumentError(absl::StrCat("HcCollapseNorm: unsupported (tokens ", p.tokens,
                                                   ", dim ", p.dim, ", hc_mult ", p.hc_mult,
                                                   ", eps ", p.eps, ")"));
  }
  // A decode step has a block per token: 1,024 threads take a row of V4.1's
  // 4 x 5,120 streams in two passes instead of five (each pass a round trip
  // to memory). The norm's sum is warp 0's whatever the block: same bits.
  constexpr int kThreads = 1024;
  moe::HcCollapseNormKernel<kThreads>
      <<<static_cast<unsigned>(p.tokens), kThreads, static_cast<size_t>(p.dim * 4), stream>>>(
          p.x, p.pre, p.weight, p.out, p.dim, p.hc_mult, p.eps, p.round_collapse, p.round_out,
          p.codes, p.scales);
  return LaunchStatus("HcCollapseNorm");
}

bool SupportsHcExpand(const HcExpandParams& p) {
  return ShapeOk(p.tokens, p.dim, p.hc_mult) && p.x != nullptr && p.y != nullptr &&
         p.post != nullptr && p.comb != nullptr && p.out != nullptr;
}

absl::Status HcExpand(const HcExpandParams& p, cudaStream_t stream) {
  if (!SupportsHcExpand(p)) {
    return absl::InvalidArgumentError(absl::StrCat("HcExpand: unsupported (tokens ", p.tokens,
                                                   ", dim ", p.dim, ", hc_mult ", p.hc_mult,
                                                   ")"));
  }
  moe::HcExpandKernel<<<ElementBlocks(p.tokens * p.hc_mult * p.dim), kElementThreads, 0,
                        stream>>>(p.x, p.y, p.post, p.comb, p.out, p.tokens, p.dim, p.hc_mult,
                                  p.round_bf16);
  return LaunchStatus("HcExpand");
}

bool SupportsHcExpandCollapseNorm(const HcExpandParams& e, const HcCollapseNormParams& c) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return SupportsHcExpand(e) && SupportsHcCollapseNorm(c) && c.x == e.out && e.tokens == c.tokens &&
         e.dim == c.dim && e.hc_mult == c.hc_mult && e.hc_mult <= 4 && aligned(e.x) &&
         aligned(e.y) && aligned(e.out);
}

absl::Status HcExpandCollapseNorm(const HcExpandParams& e, const HcCollapseNormParams& c,
                                  cudaStream_t stream) {
  if (!SupportsHcExpandCollapseNorm(e, c)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HcExpandCollapseNorm: unsupported (tokens ", e.tokens, " / ", c.tokens, ", dim ", e.dim,
        " / ", c.dim, ", hc_mult ", e.hc_mult, " / ", c.hc_mult,
        "; needs HcExpand's and HcCollapseNorm's conditions, the collapse reading the expand's "
        "output, hc_mult <= 4 and 16-byte aligned x, y and out)"));
  }
  constexpr int kThreads = 1024;  // as HcCollapseNorm
  auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(c.tokens), kThreads, static_cast<size_t>(c.dim * 4), stream>>>(
        e.x, e.y, e.post, e.comb, e.out, e.round_bf16, c.pre, c.weight, c.out, c.dim, c.eps,
        c.round_collapse, c.round_out, c.codes, c.scales);
  };
  switch (e.hc_mult) {
    case 1:
      launch(moe::HcExpandCollapseNormKernel<kThreads, 1>);
      break;
    case 2:
      launch(moe::HcExpandCollapseNormKernel<kThreads, 2>);
      break;
    case 3:
      launch(moe::HcExpandCollapseNormKernel<kThreads, 3>);
      break;
    default:
      launch(moe::HcExpandCollapseNormKernel<kThreads, 4>);
      break;
  }
  return LaunchStatus("HcExpandCollapseNorm");
}

}  // namespace weir::kernels::cuda
