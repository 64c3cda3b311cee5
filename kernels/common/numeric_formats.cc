// kernels/common/numeric_formats.cc

#include "kernels/common/numeric_formats.h"

#include <bit>
#include <cmath>

namespace weir::kernels {

uint8_t Ue8m0CeilCode(float v) {
  if (std::isnan(v) || v < 0.0f) return kE8m0Nan;
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t exponent_field = (bits >> 23) & 0xFFu;
  const uint32_t code = exponent_field + ((bits & 0x7FFFFFu) != 0 ? 1u : 0u);
  return code >= 0xFFu ? kE8m0Nan : static_cast<uint8_t>(code);
}

}  // namespace weir::kernels
