#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/dense/fp8_reblock.cuh"
#include "kernels/cuda/dense/fp8_reblock.h"
#include "kernels/cuda/dense/fp8_reblock_ref.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::dense {
namespace {

using fp8_reblock::kChunksPerSpan;
using fp8_reblock::kRowsPerPass;
using fp8_reblock::kThreads;

// Rows form: CTA (row tile blockIdx.x of 32 padded rows, span blockIdx.y);
// thread: row tid / 8, codes [16 (tid % 8), + 16) of the span.
__global__ void __launch_bounds__(kThreads)
    ReblockRowsKernel(const uint8_t* codes, const uint8_t* __restrict__ scales, uint8_t* out_codes,
                      float* __restrict__ out_scales, int64_t rows, int64_t k, int rows_per_scale) {
  GridDependencyPrologue();
  const int64_t padded = Fp8LtPaddedRows(rows);
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerPass + threadIdx.x / kChunksPerSpan;
  const int chunk = static_cast<int>(threadIdx.x % kChunksPerSpan);
  const int64_t kb = blockIdx.y;
  if (r >= padded) return;
  const int64_t at = r * k + kb * kFp8LtScaleBlock + 16 * chunk;  // [padded, k]
  if (r >= rows) {                                                // pad row: zero codes, zero scale
    *reinterpret_cast<uint4*>(out_codes + at) = make_uint4(0, 0, 0, 0);
    if (chunk == 0) out_scales[Fp8Vec128ScaleIndex(r, kb, rows)] = 0.0f;
    return;
  }
  // The span's four stored scale bytes (k % 128 == 0: they never straddle a row).
  const int64_t scale_row = rows_per_scale == 1 ? r : r / 32;  // 1 or 32: no 64-bit division
  const uint8_t* s = scales + scale_row * (k / 32) + 4 * kb;
  const uint32_t s0 = __ldg(s), s1 = __ldg(s + 1), s2 = __ldg(s + 2), s3 = __ldg(s + 3);
  const uint32_t big = max(max(s0, s1), max(s2, s3));
  const int block = chunk / 2;  // this thread's 32-block; selects, not an indexed array (no stack)
  const uint32_t mine = block == 0 ? s0 : block == 1 ? s1 : block == 2 ? s2 : s3;
  fp8_reblock::ReblockSixteen(codes + at, out_codes + at, big - mine);
  if (chunk == 0) out_scales[Fp8Vec128ScaleIndex(r, kb, rows)] = fp8_reblock::Ue8m0Value(big);
}

// Tiles form: CTA (128-row block blockIdx.x, span blockIdx.y); thread: rows
// tid / 8 + 32 i (i = 0..3, the block's tile row i), codes [16 (tid % 8), +
// 16) of the span. Each warp takes the block's scale as the max of its (up
// to) 16 tile bytes, lane l < 16 reading tile (l / 4, l % 4).
__global__ void __launch_bounds__(kThreads)
    ReblockTilesKernel(const uint8_t* codes, const uint8_t* __restrict__ scales, uint8_t* out_codes,
                       float* __restrict__ out_scales, int64_t n, int64_t k) {
  GridDependencyPrologue();
  const int64_t nb = blockIdx.x, kb = blockIdx.y;
  const int64_t k_blocks = k / 32, tile_rows = (n + 31) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t lane_tile = 4 * nb + lane / 4;
  const uint32_t mine = lane < 16 && lane_tile < tile_rows
                            ? __ldg(scales + lane_tile * k_blocks + 4 * kb + lane % 4)
                            : 0u;
  const uint32_t big = __reduce_max_sync(0xFFFFFFFFu, mine);
  const int chunk = static_cast<int>(threadIdx.x % kChunksPerSpan);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = nb * kFp8LtScaleBlock + threadIdx.x / kChunksPerSpan + kRowsPerPass * i;
    if (r >= n) break;
    const uint32_t s = __ldg(scales + (4 * nb + i) * k_blocks + 4 * kb + chunk / 2);
    const int64_t at = r * k + kb * kFp8LtScaleBlock + 16 * chunk;
    fp8_reblock::ReblockSixteen(codes + at, out_codes + at, big - s);
  }
  if (threadIdx.x == 0) out_scales[Fp8Blk128ScaleIndex(nb, kb, k)] = fp8_reblock::Ue8m0Value(big);
  // The block row's padding (K blocks k / 128 .. L4 - 1), by its last span's CTA.
  const int64_t spans = k / kFp8LtScaleBlock;
  if (kb == spans - 1 && threadIdx.x < Fp8Blk128ScaleStride(k) - spans) {
    out_scales[Fp8Blk128ScaleIndex(nb, spans + threadIdx.x, k)] = 0.0f;
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The checks both forms share; `what` names the op, `rows_name` its row count.
absl::Status CheckShape(const char* what, const char* rows_name, int64_t rows, int64_t k) {
  if (rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", rows_name, " ", rows, " < 1"));
  }
  if (k <= 0 || k % kFp8LtScaleBlock != 0 || k / kFp8LtScaleBlock > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": k ", k, " must be a positive multiple of 128, at most 128 x 65535"));
  }
  if (rows > (int64_t{1} << 40) / k) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", rows_name, " ", rows, " x k ", k, " above 2^40"));
  }
  return absl::OkStatus();
}

// One thread a 16-byte chunk of a row: blockIdx.y the row (x 65,535 at
// most per launch row block: see CopyRowsOfRole), x the chunks.
__global__ void __launch_bounds__(256)
    CopyRowsOfRoleKernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                         const int32_t* __restrict__ row_role, int64_t row0, int64_t chunks,
                         int64_t src_row_bytes, int64_t dst_row_bytes, int32_t role) {
  GridDependencyPrologue();
  const int64_t r = row0 + blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks || __ldg(row_role + r) != role) return;
  *reinterpret_cast<uint4*>(dst + r * dst_row_bytes + 16 * c) =
      __ldg(reinterpret_cast<const uint4*>(src + r * src_row_bytes + 16 * c));
}

}  // namespace

absl::Status CheckReblockFp8RowsParams(const ReblockFp8RowsParams& p) {
  if (p.codes == nullptr) return absl::InvalidArgumentError("ReblockFp8Rows: codes is null");
  if (p.scales == nullptr) return absl::InvalidArgumentError("ReblockFp8Rows: scales is null");
  if (p.out_codes == nullptr)
    return absl::InvalidArgumentError("ReblockFp8Rows: out_codes is null");
  if (p.out_scales == nullptr) {
    return absl::InvalidArgumentError("ReblockFp8Rows: out_scales is null");
  }
  if (absl::Status s = CheckShape("ReblockFp8Rows", "rows", p.rows, p.k); !s.ok()) return s;
  if (p.rows_per_scale != 1 && p.rows_per_scale != 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReblockFp8Rows: rows_per_scale ", p.rows_per_scale, " is not 1 or 32"));
  }
  if (!Aligned16(p.codes))
    return absl::InvalidArgumentError("ReblockFp8Rows: codes not 16-byte aligned");
  if (!Aligned16(p.out_codes)) {
    return absl::InvalidArgumentError("ReblockFp8Rows: out_codes not 16-byte aligned");
  }
  if (!Aligned16(p.out_scales)) {
    return absl::InvalidArgumentError("ReblockFp8Rows: out_scales not 16-byte aligned");
  }
  return absl::OkStatus();
}

absl::Status ReblockFp8Rows(const ReblockFp8RowsParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckReblockFp8RowsParams(p); !s.ok()) return s;
  const int64_t row_tiles = (Fp8LtPaddedRows(p.rows) + kRowsPerPass - 1) / kRowsPerPass;
  ReblockRowsKernel<<<dim3(static_cast<unsigned>(row_tiles),
                           static_cast<unsigned>(p.k / kFp8LtScaleBlock)),
                      kThreads, 0, stream>>>(p.codes, p.scales, p.out_codes, p.out_scales, p.rows,
                                             p.k, p.rows_per_scale);
  return LaunchStatus("ReblockFp8Rows");
}

absl::Status CheckReblockFp8TilesParams(const ReblockFp8TilesParams& p) {
  if (p.codes == nullptr) return absl::InvalidArgumentError("ReblockFp8Tiles: codes is null");
  if (p.scales == nullptr) return absl::InvalidArgumentError("ReblockFp8Tiles: scales is null");
  if (p.out_codes == nullptr) {
    return absl::InvalidArgumentError("ReblockFp8Tiles: out_codes is null");
  }
  if (p.out_scales == nullptr) {
    return absl::InvalidArgumentError("ReblockFp8Tiles: out_scales is null");
  }
  if (absl::Status s = CheckShape("ReblockFp8Tiles", "n", p.n, p.k); !s.ok()) return s;
  if (!Aligned16(p.codes)) {
    return absl::InvalidArgumentError("ReblockFp8Tiles: codes not 16-byte aligned");
  }
  if (!Aligned16(p.out_codes)) {
    return absl::InvalidArgumentError("ReblockFp8Tiles: out_codes not 16-byte aligned");
  }
  if (!Aligned16(p.out_scales)) {
    return absl::InvalidArgumentError("ReblockFp8Tiles: out_scales not 16-byte aligned");
  }
  return absl::OkStatus();
}

absl::Status ReblockFp8Tiles(const ReblockFp8TilesParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckReblockFp8TilesParams(p); !s.ok()) return s;
  const int64_t row_blocks = (p.n + kFp8LtScaleBlock - 1) / kFp8LtScaleBlock;
  ReblockTilesKernel<<<dim3(static_cast<unsigned>(row_blocks),
                            static_cast<unsigned>(p.k / kFp8LtScaleBlock)),
                       kThreads, 0, stream>>>(p.codes, p.scales, p.out_codes, p.out_scales, p.n,
                                              p.k);
  return LaunchStatus("ReblockFp8Tiles");
}

absl::Status CheckCopyRowsOfRoleParams(const CopyRowsOfRoleParams& p) {
  const auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("CopyRowsOfRole: ", what));
  };
  if (p.src == nullptr || p.dst == nullptr || p.row_role == nullptr) return bad("a null pointer");
  if (reinterpret_cast<uintptr_t>(p.src) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.dst) % 16 != 0) {
    return bad("src or dst not 16-byte aligned");
  }
  if (p.elem_bytes != 2 && p.elem_bytes != 4) return bad(absl::StrCat("elem_bytes ", p.elem_bytes));
  if (p.rows < 1 || p.cols < 1) return bad(absl::StrCat("rows ", p.rows, " or cols ", p.cols));
  if (p.cols * p.elem_bytes % 16 != 0) return bad(absl::StrCat("cols ", p.cols, " not 16 bytes"));
  if (p.src_ld < p.cols || p.src_ld * p.elem_bytes % 16 != 0) {
    return bad(absl::StrCat("src_ld ", p.src_ld));
  }
  if (p.dst_ld < p.cols || p.dst_ld * p.elem_bytes % 16 != 0) {
    return bad(absl::StrCat("dst_ld ", p.dst_ld));
  }
  if (p.cols * p.elem_bytes / 16 > int64_t{256} * 65535) return bad("cols above a launch's reach");
  return absl::OkStatus();
}

absl::Status CopyRowsOfRole(const CopyRowsOfRoleParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckCopyRowsOfRoleParams(p); !s.ok()) return s;
  const int64_t chunks = p.cols * p.elem_bytes / 16;
  const unsigned blocks_x = static_cast<unsigned>((chunks + 255) / 256);
  for (int64_t row0 = 0; row0 < p.rows; row0 += 65535) {  // gridDim.y <= 65,535
    const unsigned rows = static_cast<unsigned>(std::min<int64_t>(65535, p.rows - row0));
    CopyRowsOfRoleKernel<<<dim3(blocks_x, rows), 256, 0, stream>>>(
        static_cast<const uint8_t*>(p.src), static_cast<uint8_t*>(p.dst), p.row_role, row0, chunks,
        p.src_ld * p.elem_bytes, p.dst_ld * p.elem_bytes, p.role);
    if (absl::Status s = LaunchStatus("CopyRowsOfRole"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
