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

// The CTAs a token of a collapse-norm launch takes (params.cluster_ranks, 0
// resolved by the token count).
int NormRanks(const HcCollapseNormParams& p) {
  return p.cluster_ranks == 0 ? moe::HcNormClusterRanks(p.tokens) : p.cluster_ranks;
}

bool NormRanksOk(const HcCollapseNormParams& p) {
  const int r = p.cluster_ranks;
  return (r == 0 || r == 1 || r == 2 || r == 4 || r == 8) &&
         (p.block_threads == 0 || p.block_threads == 256 || p.block_threads == 1024) &&
         p.tokens * NormRanks(p) <= 0x7fffffff;
}

// The threads of a collapse-norm CTA: a token's row in two passes with one
// block a token (five with block_threads 256, four blocks an SM); a rank's
// share (at most a fifth of V4.1's 1,280 float4s with two ranks) in a few
// with a cluster.
constexpr int kNormThreads = 1024;
constexpr int kNarrowNormThreads = 256;  // HcCollapseNormParams::block_threads
constexpr int kClusterNormThreads = 256;

bool NarrowBlocks(const HcCollapseNormParams& p) { return p.block_threads == kNarrowNormThreads; }

// Launches a collapse-norm kernel with `ranks` CTAs a token: a plain launch
// for one, a cluster launch (cudaLaunchKernelEx) for more.
template <typename... Params, typename... Args>
void LaunchNorm(void (*kernel)(Params...), const HcCollapseNormParams& p, int ranks,
                cudaStream_t stream, Args... args) {
  const size_t smem = static_cast<size_t>(p.dim * 4);
  if (ranks == 1) {
    kernel<<<static_cast<unsigned>(p.tokens), NarrowBlocks(p) ? kNarrowNormThreads : kNormThreads,
             smem, stream>>>(args...);
    return;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(p.tokens * ranks));
  config.blockDim = dim3(kClusterNormThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(ranks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  // An error is left for LaunchStatus to report (cudaGetLastError).
  (void)cudaLaunchKernelEx(&config, kernel, args...);
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
         p.tokens <= 0x7fffffff && NormFp8OutputOk(p.out, p.codes, p.scales, p.dim) &&
         reinterpret_cast<uintptr_t>(p.bf16) % 8 == 0 &&
         (p.dq16 == nullptr ||
          (p.codes != nullptr && reinterpret_cast<uintptr_t>(p.dq16) % 16 == 0)) &&
         NormRanksOk(p);
}

absl::Status HcCollapseNorm(const HcCollapseNormParams& p, cudaStream_t stream) {
  if (!SupportsHcCollapseNorm(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("HcCollapseNorm: unsupported (tokens ", p.tokens, ", dim ", p.dim,
                     ", hc_mult ", p.hc_mult, ", eps ", p.eps, ", cluster_ranks ", p.cluster_ranks,
                     ", block_threads ", p.block_threads, ")"));
  }
  // With one block a token, 1,024 threads take a row of V4.1's 4 x 5,120
  // streams in two passes instead of five (each pass a round trip to
  // memory); a decode step of a few tokens spreads each over a cluster
  // (hc_norm_split.h). The norm's sum is warp 0's whatever the shape: same
  // bits.
  auto launch = [&](auto kernel, int ranks) {
    LaunchNorm(kernel, p, ranks, stream, p.x, p.pre, p.weight, p.out, p.dim, p.hc_mult, p.eps,
               p.round_collapse, p.round_out, p.codes, p.scales, p.bf16, p.dq16);
  };
  switch (NormRanks(p)) {
    case 1:
      if (NarrowBlocks(p)) {
        launch(moe::HcCollapseNormKernel<kNarrowNormThreads, 1>, 1);
      } else {
        launch(moe::HcCollapseNormKernel<kNormThreads, 1>, 1);
      }
      break;
    case 2:
      launch(moe::HcCollapseNormKernel<kClusterNormThreads, 2>, 2);
      break;
    case 4:
      launch(moe::HcCollapseNormKernel<kClusterNormThreads, 4>, 4);
      break;
    default:
      launch(moe::HcCollapseNormKernel<kClusterNormThreads, 8>, 8);
      break;
  }
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
  auto launch = [&](auto kernel, int ranks) {
    LaunchNorm(kernel, c, ranks, stream, e.x, e.y, e.post, e.comb, e.out, e.round_bf16, c.pre,
               c.weight, c.out, c.dim, c.eps, c.round_collapse, c.round_out, c.codes, c.scales,
               c.bf16, c.dq16);
  };
  // The kernel for n streams and `ranks` CTAs a token (threads as
  // HcCollapseNorm's).
  auto with_streams = [&]<int kN>() {
    switch (NormRanks(c)) {
      case 1:
        if (NarrowBlocks(c)) {
          launch(moe::HcExpandCollapseNormKernel<kNarrowNormThreads, kN, 1>, 1);
        } else {
          launch(moe::HcExpandCollapseNormKernel<kNormThreads, kN, 1>, 1);
        }
        break;
      case 2:
        launch(moe::HcExpandCollapseNormKernel<kClusterNormThreads, kN, 2>, 2);
        break;
      case 4:
        launch(moe::HcExpandCollapseNormKernel<kClusterNormThreads, kN, 4>, 4);
        break;
      default:
        launch(moe::HcExpandCollapseNormKernel<kClusterNormThreads, kN, 8>, 8);
        break;
    }
  };
  switch (e.hc_mult) {
    case 1:
      with_streams.template operator()<1>();
      break;
    case 2:
      with_streams.template operator()<2>();
      break;
    case 3:
      with_streams.template operator()<3>();
      break;
    default:
      with_streams.template operator()<4>();
      break;
  }
  return LaunchStatus("HcExpandCollapseNorm");
}

}  // namespace weir::kernels::cuda
