// kernels/cuda/moe/mxfp4_fp8_tiles.h
//
// Mxfp4ToFp8Tiles on the device: routed experts' MXFP4 weights rewritten in
// the FP8 form with 32 x 32 tile scales that Fp8BlockGemm reads, value for
// value where that form can hold them. Its specification is
// kernels/cpu/weight_quant.h Mxfp4ToFp8Tiles, bit for bit: in each tile (32
// weight rows x one 32-column K block) the largest row scale E is the tile's
// scale and every element the e4m3 code of e2m1 x 2^(e_row - E); a tile with
// a NaN scale or a code that does not survive the shift is inexact (codes 0).
// The prefill form of the experts (kernels/cuda/moe/README.md, "Not done" P):
// an expert all of whose tiles are exact can run the dense FP8 kernel's
// tiles with the MXFP4 kernel's bits.
//
// Thread safety: stateless; safe from any thread. Capturable in CUDA graphs.

#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_FP8_TILES_H_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_FP8_TILES_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct Mxfp4Fp8TilesParams {
  const uint8_t* const* w = nullptr;         // device [experts] -> packed e2m1 [n, k / 2]
  const uint8_t* const* w_scales = nullptr;  // device [experts] -> E8M0 [n, k / 32]
  uint8_t* codes = nullptr;                  // device out [experts, n, k] e4m3
  uint8_t* tile_scales = nullptr;            // device out [experts, ceil(n / 32), k / 32]
  // device out [experts]: the expert's inexact tiles (0: it converted
  // exactly). An expert with a null weight or scale pointer, or weights not
  // 16-byte aligned, counts every tile and nothing of it is written.
  int32_t* inexact = nullptr;
  int64_t n = 0;
  int64_t k = 0;  // multiple of 32
  int experts = 0;
  // Elements between experts' codes / tile scales (0: packed, n k and
  // ceil(n / 32) k / 32): e.g. w1 and w3 converted into one [2 n, k] weight an
  // expert by two calls, the second at codes + n k. Codes strides are
  // multiples of 16.
  int64_t codes_expert_stride = 0;
  int64_t tile_scales_expert_stride = 0;
  // Tile rows (32 weight rows each) one CTA converts in turn, building its
  // code tables once for all of them: more than 1 spreads that work over
  // more tiles (a prefill step converts every local expert). The same codes,
  // scales and counts whatever it is; >= 1.
  int tile_rows_per_cta = 1;
  // The row-major form: a CTA of 256 threads converts one tile row x 8 K
  // blocks, a thread a (row, K block), so a warp reads 128 and writes 256
  // contiguous bytes of each of 4 rows; the default form gives a warp one
  // tile, 16 bytes of each of 32 rows. The same codes, scales and counts
  // (mxfp4_fp8_tiles_test, H100). mxfp4_grouped_gemm_bench, V4.1's 48 local
  // experts (2.6 GB moved), H100: 2.899 -> 1.109 ms, 0.30 -> 0.78 of copy.
  // The decoder passes DeviceDecoderOptions::coalesced_tile_conversion (on).
  bool coalesced = false;
};

// Enqueues the conversion on `stream` (the inexact counts are zeroed first,
// on the same stream). INVALID_ARGUMENT for null outputs or pointer arrays,
// n, k or experts not positive, k not a multiple of 32, codes (or their
// stride) not 16-byte aligned, a stride below an expert's size, or a grid
// past the launch limits; INTERNAL with the CUDA error if a launch fails.
absl::Status Mxfp4ToFp8Tiles(const Mxfp4Fp8TilesParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_FP8_TILES_H_
