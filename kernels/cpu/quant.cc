// kernels/cpu/quant.cc

#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cpu {
namespace {

constexpr float kFp8AmaxFloor = 1e-4f;
const float kInv448 = static_cast<float>(1.0 / 448.0);
const float kInv6 = static_cast<float>(1.0 / 6.0);
const float kFp4E8m0AmaxFloor = 6.0f * std::ldexp(1.0f, -126);
const float kFp4E4m3AmaxFloor = 6.0f * std::ldexp(1.0f, -9);
constexpr uint8_t kE4m3NanCode = 0x7F;

absl::Status CheckBlock(size_t n, int block, bool fp4) {
  if (block <= 0 || n % static_cast<size_t>(block) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("length ", n, " is not a multiple of block ", block));
  }
  if (fp4 && (block % 2 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("FP4 block ", block, " must be even"));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(const char* what, size_t got, size_t want) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " has ", got, " entries, expected ", want));
}

// Returns max |x_i| of the block, or NaN if any element is NaN or Inf.
float BlockAmax(const float* x, int block) {
  float amax = 0.0f;
  for (int i = 0; i < block; ++i) {
    if (!std::isfinite(x[i])) return std::numeric_limits<float>::quiet_NaN();
    amax = std::max(amax, std::fabs(x[i]));
  }
  return amax;
}

float Fp4ScaleValue(uint8_t code, Fp4Scale scale) {
  return scale == Fp4Scale::kE8m0 ? E8m0ToFloat(code) : E4m3ToFloat(code);
}

// Returns the scale code of an FP4 block with absolute maximum `amax`.
uint8_t Fp4ScaleCode(float amax, Fp4Scale scale) {
  if (std::isnan(amax)) return scale == Fp4Scale::kE8m0 ? kE8m0Nan : kE4m3NanCode;
  if (scale == Fp4Scale::kE8m0) return Ue8m0CeilCode(std::max(amax, kFp4E8m0AmaxFloor) * kInv6);
  return FloatToE4m3(std::max(amax, kFp4E4m3AmaxFloor) / 6.0f);
}

}  // namespace

absl::Status QuantizeFp8(std::span<const float> x, int block, std::span<uint8_t> codes,
                         std::span<uint8_t> scales) {
  RETURN_IF_ERROR(CheckBlock(x.size(), block, false));
  RETURN_IF_ERROR(CheckSize("codes", codes.size(), x.size()));
  RETURN_IF_ERROR(CheckSize("scales", scales.size(), x.size() / block));
  for (size_t b = 0; b < scales.size(); ++b) {
    const float* xb = x.data() + b * block;
    uint8_t* qb = codes.data() + b * block;
    const float amax = BlockAmax(xb, block);
    if (std::isnan(amax)) {
      scales[b] = kE8m0Nan;
      std::fill(qb, qb + block, kE4m3NanCode);
      continue;
    }
    scales[b] = Ue8m0CeilCode(std::max(amax, kFp8AmaxFloor) * kInv448);
    const float s = E8m0ToFloat(scales[b]);
    for (int i = 0; i < block; ++i) {
      qb[i] = FloatToE4m3(std::clamp(xb[i] / s, -kE4m3Max, kE4m3Max));
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeFp8(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                           int block, std::span<float> out) {
  RETURN_IF_ERROR(CheckBlock(codes.size(), block, false));
  RETURN_IF_ERROR(CheckSize("scales", scales.size(), codes.size() / block));
  RETURN_IF_ERROR(CheckSize("out", out.size(), codes.size()));
  for (size_t i = 0; i < codes.size(); ++i) {
    out[i] = E4m3ToFloat(codes[i]) * E8m0ToFloat(scales[i / block]);
  }
  return absl::OkStatus();
}

absl::Status FakeQuantFp8(std::span<float> x, int block) {
  // QuantizeFp8 then DequantizeFp8, block by block in place: the same codes,
  // scales and products without the two buffers.
  RETURN_IF_ERROR(CheckBlock(x.size(), block, false));
  for (size_t b = 0; b < x.size() / block; ++b) {
    float* xb = x.data() + b * block;
    const float amax = BlockAmax(xb, block);
    if (std::isnan(amax)) {  // code 0x7F and scale 0xFF: NaN either way
      std::fill(xb, xb + block, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const float s = E8m0ToFloat(Ue8m0CeilCode(std::max(amax, kFp8AmaxFloor) * kInv448));
    for (int i = 0; i < block; ++i) {
      xb[i] = E4m3ToFloat(FloatToE4m3(std::clamp(xb[i] / s, -kE4m3Max, kE4m3Max))) * s;
    }
  }
  return absl::OkStatus();
}

absl::Status QuantizeFp4(std::span<const float> x, int block, Fp4Scale scale,
                         std::span<uint8_t> packed, std::span<uint8_t> scales) {
  RETURN_IF_ERROR(CheckBlock(x.size(), block, true));
  RETURN_IF_ERROR(CheckSize("packed", packed.size(), x.size() / 2));
  RETURN_IF_ERROR(CheckSize("scales", scales.size(), x.size() / block));
  for (size_t b = 0; b < scales.size(); ++b) {
    const float* xb = x.data() + b * block;
    uint8_t* pb = packed.data() + b * block / 2;
    scales[b] = Fp4ScaleCode(BlockAmax(xb, block), scale);
    const float s = Fp4ScaleValue(scales[b], scale);
    for (int i = 0; i < block; i += 2) {
      // NaN scale: x/s is NaN and encodes as 0; the NaN scale marks the block.
      const uint8_t lo = FloatToE2m1(std::clamp(xb[i] / s, -kE2m1Max, kE2m1Max));
      const uint8_t hi = FloatToE2m1(std::clamp(xb[i + 1] / s, -kE2m1Max, kE2m1Max));
      pb[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeFp4(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                           int block, Fp4Scale scale, std::span<float> out) {
  RETURN_IF_ERROR(CheckBlock(out.size(), block, true));
  RETURN_IF_ERROR(CheckSize("packed", packed.size(), out.size() / 2));
  RETURN_IF_ERROR(CheckSize("scales", scales.size(), out.size() / block));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t byte = packed[i / 2];
    const uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    out[i] = E2m1ToFloat(code) * Fp4ScaleValue(scales[i / block], scale);
  }
  return absl::OkStatus();
}

absl::Status FakeQuantFp4(std::span<float> x, int block, Fp4Scale scale) {
  // QuantizeFp4 then DequantizeFp4, block by block in place (as FakeQuantFp8).
  RETURN_IF_ERROR(CheckBlock(x.size(), block, true));
  for (size_t b = 0; b < x.size() / block; ++b) {
    float* xb = x.data() + b * block;
    const float s = Fp4ScaleValue(Fp4ScaleCode(BlockAmax(xb, block), scale), scale);
    for (int i = 0; i < block; ++i) {
      xb[i] = E2m1ToFloat(FloatToE2m1(std::clamp(xb[i] / s, -kE2m1Max, kE2m1Max))) * s;
    }
  }
  return absl::OkStatus();
}

void RoundToBf16InPlace(std::span<float> x) {
  for (float& v : x) v = RoundToBf16(v);
}

}  // namespace weir::kernels::cpu
