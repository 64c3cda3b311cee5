#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/hc_mix_args.cuh"
#include "kernels/cuda/moe/hc_mix_split.cuh"
#include "kernels/cuda/moe/hc_mix_split.h"

namespace weir::kernels::cuda {

static_assert(kHcMixChunk == moe::kHcSplitChunk);
static_assert(kHcMixTokensPerCta == moe::kHcSplitTokens);

namespace {

int64_t Splits(int hc_mult, int64_t dim) { return (hc_mult * dim + kHcMixChunk - 1) / kHcMixChunk; }
// Tokens a CTA: one for a decode-sized call (more CTAs, each a quarter of the
// butterflies), else kHcMixTokensPerCta (each hc_fn chunk read by fewer CTAs).
int64_t TokensPerCta(int64_t tokens) {
  return tokens <= kHcMixOneTokenCtas ? 1 : kHcMixTokensPerCta;
}
int64_t Groups(int64_t tokens) {
  const int64_t per = TokensPerCta(tokens);
  return (tokens + per - 1) / per;
}
bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int64_t HcMixSplitPartialFloats(int64_t tokens, int hc_mult, int64_t dim) {
  return tokens * Splits(hc_mult, dim) * ((2 + hc_mult) * hc_mult + 1);
}

int64_t HcMixSplitCounters(int64_t tokens) { return std::max<int64_t>(tokens, 0); }

bool SupportsHcMixSplitK(const HcMixParams& p) {
  HcMixParams own = p;
  own.mixes = nullptr;
  return SupportsHcMix(own) && p.hc_fn != nullptr && p.hc_mult <= 4 &&
         (p.hc_mult * p.dim) % 4 == 0 && Aligned16(p.x) && Aligned16(p.hc_fn) &&
         Groups(p.tokens) <= 65535 && Splits(p.hc_mult, p.dim) < (int64_t{1} << 31);
}

absl::Status HcMixSplitK(const HcMixParams& p, const HcMixSplitScratch& scratch,
                         cudaStream_t stream) {
  if (!SupportsHcMixSplitK(p) || scratch.partials == nullptr || scratch.counters == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HcMixSplitK: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", hc_mult ", p.hc_mult,
        ", iters ", p.sinkhorn_iters,
        "; needs 1 <= hc_mult <= 4, hc_mult * dim % 4 == 0, 16-byte aligned x and hc_fn, "
        "at most ",
        65535 * kHcMixTokensPerCta, " tokens, non-null arrays and scratch)"));
  }
  const moe::HcMixKernelArgs args = moe::HcMixArgsOf(p, nullptr);
  const dim3 grid(static_cast<unsigned>(Splits(p.hc_mult, p.dim)),
                  static_cast<unsigned>(Groups(p.tokens)));
  constexpr int kThreads = moe::kHcSplitThreads;
  const bool one = TokensPerCta(p.tokens) == 1;
  auto launch = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, stream>>>(args, p.tokens, scratch.partials, scratch.counters);
  };
  switch (p.hc_mult) {
    case 1:
      one ? launch(moe::HcMixSplitKernel<1, 1>) : launch(moe::HcMixSplitKernel<1>);
      break;
    case 2:
      one ? launch(moe::HcMixSplitKernel<2, 1>) : launch(moe::HcMixSplitKernel<2>);
      break;
    case 3:
      one ? launch(moe::HcMixSplitKernel<3, 1>) : launch(moe::HcMixSplitKernel<3>);
      break;
    default:
      one ? launch(moe::HcMixSplitKernel<4, 1>) : launch(moe::HcMixSplitKernel<4>);
      break;
  }
  return LaunchStatus("HcMixSplitK");
}

}  // namespace weir::kernels::cuda
