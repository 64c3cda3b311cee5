#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/hc_mix_args.cuh"
#include "kernels/cuda/moe/hc_mix_split.cuh"
#include "kernels/cuda/moe/hc_mix_split.h"
#include "kernels/cuda/moe/hc_mix_tf32.cuh"

namespace weir::kernels::cuda {

static_assert(kHcMixChunk == moe::kHcSplitChunk);
static_assert(kHcMixTokensPerCta == moe::kHcSplitTokens);
static_assert(kHcMixLoopTokens % kHcMixTokensPerCta == 0, "the loop's groups fit the counters");
static_assert(kHcMixTf32Tokens == moe::kHcTf32Tokens);

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
// f.template operator()<kN>() for kN = hc_mult (1 - 4; SupportsHcMixSplitK
// holds it there).
template <typename F>
void WithHcMult(int hc_mult, F&& f) {
  switch (hc_mult) {
    case 1:
      f.template operator()<1>();
      break;
    case 2:
      f.template operator()<2>();
      break;
    case 3:
      f.template operator()<3>();
      break;
    default:
      f.template operator()<4>();
      break;
  }
}

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
                         cudaStream_t stream, int64_t split_on_y_tokens, bool transposed_sums,
                         bool token_loop) {
  if (!SupportsHcMixSplitK(p) || scratch.partials == nullptr || scratch.counters == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HcMixSplitK: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", hc_mult ", p.hc_mult,
        ", iters ", p.sinkhorn_iters,
        "; needs 1 <= hc_mult <= 4, hc_mult * dim % 4 == 0, 16-byte aligned x and hc_fn, "
        "at most ",
        65535 * kHcMixTokensPerCta, " tokens, non-null arrays and scratch)"));
  }
  const moe::HcMixKernelArgs args = moe::HcMixArgsOf(p, nullptr);
  const int64_t splits = Splits(p.hc_mult, p.dim), groups = Groups(p.tokens);
  if (token_loop && p.tokens >= kHcMixLoopMinTokens && splits <= 0x7FFFFFFF) {
    // Groups of kHcMixLoopTokens: fewer than Groups(), so the counters fit.
    const dim3 grid(static_cast<unsigned>(splits),
                    static_cast<unsigned>((p.tokens + kHcMixLoopTokens - 1) / kHcMixLoopTokens));
    auto loop = [&]<int kN>() {
      moe::HcMixSplitLoopKernel<kN, kHcMixLoopTokens><<<grid, moe::kHcSplitThreads, 0, stream>>>(
          args, p.tokens, scratch.partials, scratch.counters);
    };
    WithHcMult(p.hc_mult, loop);
    return LaunchStatus("HcMixSplitK");
  }
  constexpr int kThreads = moe::kHcSplitThreads;
  const bool one = TokensPerCta(p.tokens) == 1;
  // Prefill-sized calls: the splits on y, kHcMixGroupsPerCta groups a CTA.
  const bool split_on_y =
      split_on_y_tokens > 0 && p.tokens >= split_on_y_tokens && splits <= 65535 && !one;
  const int loops = split_on_y ? static_cast<int>(kHcMixGroupsPerCta) : 1;
  const dim3 grid = split_on_y ? dim3(static_cast<unsigned>((groups + loops - 1) / loops),
                                      static_cast<unsigned>(splits))
                               : dim3(static_cast<unsigned>(splits), static_cast<unsigned>(groups));
  auto launch = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, stream>>>(args, p.tokens, scratch.partials, scratch.counters,
                                          loops);
  };
  auto launch_n = [&]<int kN>() {
    if (transposed_sums) {  // the same bits by fewer instructions (WarpSumsTransposed)
      if (one) {
        launch(moe::HcMixSplitKernel<kN, 1, false, true>);
      } else if (split_on_y) {
        launch(moe::HcMixSplitKernel<kN, moe::kHcSplitTokens, true, true>);
      } else {
        launch(moe::HcMixSplitKernel<kN, moe::kHcSplitTokens, false, true>);
      }
    } else if (one) {
      launch(moe::HcMixSplitKernel<kN, 1>);
    } else if (split_on_y) {
      launch(moe::HcMixSplitKernel<kN, moe::kHcSplitTokens, true>);
    } else {
      launch(moe::HcMixSplitKernel<kN>);
    }
  };
  WithHcMult(p.hc_mult, launch_n);
  return LaunchStatus("HcMixSplitK");
}

absl::Status HcMixTf32(const HcMixParams& p, const HcMixSplitScratch& scratch, cudaStream_t stream,
                       const int32_t* row_role, int role, bool promote, int tile_rows) {
  if (!SupportsHcMixSplitK(p) || scratch.partials == nullptr || scratch.counters == nullptr ||
      (tile_rows != 1 && tile_rows != 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HcMixTf32: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", hc_mult ", p.hc_mult,
        ", iters ", p.sinkhorn_iters, ", tile_rows ", tile_rows,
        "; needs 1 <= hc_mult <= 4, hc_mult * dim % 4 == 0, 16-byte aligned x and hc_fn, "
        "non-null arrays and scratch, tile_rows 1 or 2)"));
  }
  const moe::HcMixKernelArgs args = moe::HcMixArgsOf(p, nullptr);
  const int64_t cta_tokens = kHcMixTf32Tokens * tile_rows;
  const dim3 grid(static_cast<unsigned>(Splits(p.hc_mult, p.dim)),
                  static_cast<unsigned>((p.tokens + cta_tokens - 1) / cta_tokens));
  auto launch = [&](auto kernel) {
    kernel<<<grid, moe::kHcTf32Threads, 0, stream>>>(args, p.tokens, scratch.partials,
                                                     scratch.counters, row_role, role);
  };
  auto launch_n = [&]<int kN>() {
    if (promote) {
      tile_rows == 2 ? launch(moe::HcMixTf32Kernel<kN, true, 2>)
                     : launch(moe::HcMixTf32Kernel<kN, true>);
    } else {
      tile_rows == 2 ? launch(moe::HcMixTf32Kernel<kN, false, 2>)
                     : launch(moe::HcMixTf32Kernel<kN>);
    }
  };
  WithHcMult(p.hc_mult, launch_n);
  return LaunchStatus("HcMixTf32");
}

}  // namespace weir::kernels::cuda
