// kernels/cpu/linear.cc

#include "kernels/cpu/linear.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <cblas.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/weight_quant.h"

namespace weir::kernels::cpu {
namespace {

// Weight rows dequantized per sgemm call: bounds the scratch to 256 x in.
constexpr int64_t kRowTile = 256;

absl::Status CheckWeight(const LinearWeight& w) {
  const int64_t n = w.out_features, k = w.in_features;
  if (n <= 0 || k <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: bad weight shape [", n, ", ", k, "]"));
  }
  auto mismatch = [&](const char* what, size_t got, int64_t want) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: ", what, " has ", got, " entries, expected ", want));
  };
  switch (w.format) {
    case WeightFormat::kF32:
      if (static_cast<int64_t>(w.f32.size()) != n * k) return mismatch("f32", w.f32.size(), n * k);
      break;
    case WeightFormat::kBf16:
      if (static_cast<int64_t>(w.bf16.size()) != n * k) {
        return mismatch("bf16", w.bf16.size(), n * k);
      }
      break;
    case WeightFormat::kFp8:
      if (w.block <= 0) return absl::InvalidArgumentError("Linear: FP8 block must be positive");
      if (static_cast<int64_t>(w.data.size()) != n * k) return mismatch("fp8", w.data.size(), n * k);
      if (static_cast<int64_t>(w.scales.size()) != Fp8WeightScaleCount(n, k, w.block)) {
        return mismatch("fp8 scales", w.scales.size(), Fp8WeightScaleCount(n, k, w.block));
      }
      break;
    case WeightFormat::kMxfp4:
      if (k % kMxfp4Block != 0) {
        return absl::InvalidArgumentError(absl::StrCat("Linear: MXFP4 in_features ", k));
      }
      if (static_cast<int64_t>(w.data.size()) != n * k / 2) {
        return mismatch("mxfp4", w.data.size(), n * k / 2);
      }
      if (static_cast<int64_t>(w.scales.size()) != n * k / kMxfp4Block) {
        return mismatch("mxfp4 scales", w.scales.size(), n * k / kMxfp4Block);
      }
      break;
  }
  return absl::OkStatus();
}

// Dequantizes weight rows [r0, r1) into `out` [(r1 - r0), in].
void DequantizeRows(const LinearWeight& w, int64_t r0, int64_t r1, float* out) {
  const int64_t k = w.in_features;
  switch (w.format) {
    case WeightFormat::kF32:
      std::copy(w.f32.data() + r0 * k, w.f32.data() + r1 * k, out);
      break;
    case WeightFormat::kBf16:
      for (int64_t i = r0 * k; i < r1 * k; ++i) *out++ = Bf16BitsToFloat(w.bf16[i]);
      break;
    case WeightFormat::kFp8: {
      const int64_t scale_cols = (k + w.block - 1) / w.block;
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* scale_row = w.scales.data() + (r / w.block) * scale_cols;
        const uint8_t* codes = w.data.data() + r * k;
        for (int64_t c0 = 0; c0 < k; c0 += w.block) {  // one scale per run of `block`
          const float s = E8m0ToFloat(scale_row[c0 / w.block]);
          const int64_t c1 = std::min<int64_t>(k, c0 + w.block);
          for (int64_t c = c0; c < c1; ++c) *out++ = E4m3ToFloat(codes[c]) * s;
        }
      }
      break;
    }
    case WeightFormat::kMxfp4:
      for (int64_t b = r0 * k / kMxfp4Block; b < r1 * k / kMxfp4Block; ++b) {
        const float s = E8m0ToFloat(w.scales[b]);
        const uint8_t* bytes = w.data.data() + b * (kMxfp4Block / 2);
        for (int i = 0; i < kMxfp4Block / 2; ++i) {
          *out++ = E2m1ToFloat(bytes[i] & 0xF) * s;  // element 2i: low nibble
          *out++ = E2m1ToFloat(bytes[i] >> 4) * s;
        }
      }
      break;
  }
}

}  // namespace

absl::Status DequantizeWeight(const LinearWeight& weight, std::span<float> out) {
  RETURN_IF_ERROR(CheckWeight(weight));
  if (static_cast<int64_t>(out.size()) != weight.out_features * weight.in_features) {
    return absl::InvalidArgumentError(absl::StrCat("DequantizeWeight: out has ", out.size()));
  }
  DequantizeRows(weight, 0, weight.out_features, out.data());
  return absl::OkStatus();
}

absl::Status Linear(const LinearWeight& weight, const LinearArgs& args) {
  RETURN_IF_ERROR(CheckWeight(weight));
  const int64_t m = args.rows, n = weight.out_features, k = weight.in_features;
  if (m <= 0 || static_cast<int64_t>(args.x.size()) != m * k ||
      static_cast<int64_t>(args.y.size()) != m * n) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: x ", args.x.size(), " y ",
                                                   args.y.size(), " for rows ", m, " and [", n,
                                                   ", ", k, "]"));
  }
  if (std::max({m, n, k}) > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("Linear: dimension exceeds the BLAS int range");
  }
  bool quantize = args.act_quant == ActQuant::kFp8;
  if (args.act_quant == ActQuant::kAuto) {
    quantize = weight.format == WeightFormat::kFp8 || weight.format == WeightFormat::kMxfp4;
  }
  const float* x = args.x.data();
  std::vector<float> xq;
  if (quantize) {
    xq.assign(args.x.begin(), args.x.end());
    RETURN_IF_ERROR(FakeQuantFp8(xq, kFp8Block)) << "Linear activation (in_features " << k << ")";
    x = xq.data();
  }
  if (weight.format == WeightFormat::kF32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k,
                weight.f32.data(), k, 0.0f, args.y.data(), n);
    return absl::OkStatus();
  }
  std::vector<float> tile(std::min(n, kRowTile) * k);
  for (int64_t r0 = 0; r0 < n; r0 += kRowTile) {
    const int64_t r1 = std::min(n, r0 + kRowTile);
    DequantizeRows(weight, r0, r1, tile.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1 - r0, k, 1.0f, x, k, tile.data(),
                k, 0.0f, args.y.data() + r0, n);
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
