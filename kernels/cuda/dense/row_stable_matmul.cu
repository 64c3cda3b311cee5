#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/dense/fake_quant.h"
#include "kernels/cuda/dense/row_stable_matmul.cuh"
#include "kernels/cuda/dense/row_stable_matmul.h"

namespace weir::kernels::cuda::dense {
namespace {

// Kernel choice by rows (boundaries measured with dense_bench on an H200,
// out 4096, in 7168). Up to 16 rows the products are weight-bandwidth bound:
// each output's four lanes go to four threads (parallelism) and K slices are
// wide (loads in flight). From 129 rows on, the 64 x 64 register tile wins.
constexpr int kSmallRows = 4;
constexpr int kMediumRows = 16;
constexpr int kLargeRows = 128;
// Grid y (column tiles) is limited to 65535; the narrower tile sets the limit.
constexpr int64_t kMaxOut = int64_t{65535} * 32;

template <int kThreads, int kRowGroups, int kTm, int kTn, int kBk>
void Launch(const float* x, const MatmulParams& p, cudaStream_t stream) {
  constexpr int kBm = kRowGroups * kTm;
  constexpr int kBn = kThreads / 4 / kRowGroups * kTn;
  const dim3 grid(static_cast<unsigned>((p.rows + kBm - 1) / kBm),
                  static_cast<unsigned>((p.out + kBn - 1) / kBn));
  RowStableMatmulKernel<kThreads, kRowGroups, kTm, kTn, kBk>
      <<<grid, kThreads, 0, stream>>>(x, p.w, p.y, p.rows, p.out, p.in);
}

}  // namespace

bool SupportsRowStableMatmul(const MatmulParams& p) {
  return CheckMatmulParams(p).ok() && p.out <= kMaxOut;
}

absl::Status RowStableMatmul(const MatmulParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckMatmulParams(p); !s.ok()) return s;
  if (p.out > kMaxOut) {
    return absl::InvalidArgumentError("RowStableMatmul: out too large for the launch grid");
  }
  const float* x = nullptr;
  if (absl::Status s = Fp8ActivationInput(p.x, p.act_scratch, p.rows * p.in, p.fp8_activation,
                                          &x, stream);
      !s.ok()) {
    return s;
  }
  if (p.rows <= kSmallRows) {
    Launch<128, 1, 4, 1, 128>(x, p, stream);
  } else if (p.rows <= kMediumRows) {
    Launch<128, 1, 8, 1, 128>(x, p, stream);
  } else if (p.rows <= kLargeRows) {
    Launch<256, 4, 4, 4, 32>(x, p, stream);
  } else {
    const dim3 grid(static_cast<unsigned>((p.rows + 63) / 64),
                    static_cast<unsigned>((p.out + 63) / 64));
    RowStableMatmulTiledKernel<32><<<grid, 256, 0, stream>>>(x, p.w, p.y, p.rows, p.out, p.in);
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("RowStableMatmul launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
