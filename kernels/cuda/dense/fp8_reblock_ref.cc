// kernels/cuda/dense/fp8_reblock_ref.cc

#include "kernels/cuda/dense/fp8_reblock_ref.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>

#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr int kStoredBlock = 32;  // the stored scales' K block and tile edge

// Aborts on a broken REQUIRES (a bug in the caller, a test).
void Require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

uint8_t Fp8ReblockCode(uint8_t code, int shift) {
  Require(shift >= 0);
  // Exact in double (and in float once it is at least 2^-149; anything
  // smaller rounds to a signed zero in e4m3 either way).
  const double scaled = std::ldexp(static_cast<double>(E4m3ToFloat(code)), -shift);
  const float value = static_cast<float>(scaled);
  // FloatToE4m3 of -0.0 (or of a negative value rounding to zero) keeps the sign.
  return FloatToE4m3(std::signbit(scaled) && value == 0.0f ? -0.0f : value);
}

bool Fp8ReblockIsExact(uint8_t code, int shift) {
  Require(shift >= 0);
  const int mag = code & 0x7F;
  if (mag == 0x7F || mag == 0) return true;
  const int e = mag >> 3, m = mag & 7;
  const uint32_t q = e == 0 ? static_cast<uint32_t>(m) : static_cast<uint32_t>(8 + m) << (e - 1);
  return shift <= std::countr_zero(q);
}

Fp8Reblocked ReblockFp8RowsRef(const std::vector<uint8_t>& codes,
                               const std::vector<uint8_t>& scales, int64_t rows, int64_t k,
                               int rows_per_scale) {
  Require(rows >= 1 && k > 0 && k % kFp8LtScaleBlock == 0 &&
          (rows_per_scale == 1 || rows_per_scale == kStoredBlock));
  const int64_t k_blocks = k / kStoredBlock, spans = k / kFp8LtScaleBlock;
  const int64_t scale_rows = (rows + rows_per_scale - 1) / rows_per_scale;
  Require(static_cast<int64_t>(codes.size()) == rows * k &&
          static_cast<int64_t>(scales.size()) == scale_rows * k_blocks);
  Fp8Reblocked out;
  out.codes.assign(Fp8LtPaddedRows(rows) * k, 0);
  out.scales.assign(Fp8Vec128ScaleFloats(rows, k), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row_scales = &scales[(r / rows_per_scale) * k_blocks];
    for (int64_t kb = 0; kb < spans; ++kb) {
      const uint8_t* s = row_scales + kb * 4;  // the span's four 32-blocks
      const int big = *std::max_element(s, s + 4);
      out.scales[Fp8Vec128ScaleIndex(r, kb, rows)] = E8m0ToFloat(static_cast<uint8_t>(big));
      for (int64_t c = kb * kFp8LtScaleBlock; c < (kb + 1) * kFp8LtScaleBlock; ++c) {
        const uint8_t code = codes[r * k + c];
        const int shift = big - s[(c / kStoredBlock) % 4];
        out.codes[r * k + c] = Fp8ReblockCode(code, shift);
        out.inexact += Fp8ReblockIsExact(code, shift) ? 0 : 1;
      }
    }
  }
  return out;
}

Fp8Reblocked ReblockFp8TilesRef(const std::vector<uint8_t>& codes,
                                const std::vector<uint8_t>& scales, int64_t n, int64_t k) {
  Require(n >= 1 && k > 0 && k % kFp8LtScaleBlock == 0);
  const int64_t k_blocks = k / kStoredBlock, spans = k / kFp8LtScaleBlock;
  const int64_t tile_rows = (n + kStoredBlock - 1) / kStoredBlock;
  const int64_t row_blocks = (n + kFp8LtScaleBlock - 1) / kFp8LtScaleBlock;
  Require(static_cast<int64_t>(codes.size()) == n * k &&
          static_cast<int64_t>(scales.size()) == tile_rows * k_blocks);
  Fp8Reblocked out;
  out.codes.assign(n * k, 0);
  out.scales.assign(Fp8Blk128ScaleFloats(n, k), 0.0f);
  for (int64_t nb = 0; nb < row_blocks; ++nb) {
    const int64_t t_end = std::min(tile_rows, (nb + 1) * 4);  // only the tiles that exist
    for (int64_t kb = 0; kb < spans; ++kb) {
      int big = 0;
      for (int64_t t = nb * 4; t < t_end; ++t) {
        for (int64_t j = kb * 4; j < kb * 4 + 4; ++j)
          big = std::max<int>(big, scales[t * k_blocks + j]);
      }
      out.scales[Fp8Blk128ScaleIndex(nb, kb, k)] = E8m0ToFloat(static_cast<uint8_t>(big));
      for (int64_t r = nb * kFp8LtScaleBlock; r < std::min(n, (nb + 1) * kFp8LtScaleBlock); ++r) {
        for (int64_t c = kb * kFp8LtScaleBlock; c < (kb + 1) * kFp8LtScaleBlock; ++c) {
          const uint8_t code = codes[r * k + c];
          const int shift = big - scales[(r / kStoredBlock) * k_blocks + c / kStoredBlock];
          out.codes[r * k + c] = Fp8ReblockCode(code, shift);
          out.inexact += Fp8ReblockIsExact(code, shift) ? 0 : 1;
        }
      }
    }
  }
  return out;
}

}  // namespace weir::kernels::cuda::dense
