// kernels/cuda/moe/hc_mix_args.cuh — HcMixParams as the kernels' argument
// block, for the launchers of HcMix (mhc.cu) and HcMixSplitK
// (hc_mix_split.cu). Compiled by nvcc only.
#ifndef WEIR_KERNELS_CUDA_MOE_HC_MIX_ARGS_CUH_
#define WEIR_KERNELS_CUDA_MOE_HC_MIX_ARGS_CUH_

#include "kernels/cuda/moe/hc_sinkhorn.cuh"
#include "kernels/cuda/moe/mhc.h"

namespace weir::kernels::cuda::moe {

// `p` with its products taken from `mixes` (null: the kernel computes them).
inline HcMixKernelArgs HcMixArgsOf(const HcMixParams& p, const float* mixes) {
  return {.x = p.x,
          .hc_fn = p.hc_fn,
          .mixes = mixes,
          .scale = p.scale,
          .base = p.base,
          .pre = p.pre,
          .post = p.post,
          .comb = p.comb,
          .dim = p.dim,
          .n = p.hc_mult,
          .iters = p.sinkhorn_iters,
          .hc_eps = p.hc_eps,
          .norm_eps = p.norm_eps};
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_HC_MIX_ARGS_CUH_
