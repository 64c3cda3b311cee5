// kernels/cpu/swiglu.h
//
// The clamped SwiGLU activation of DeepSeek-V4.1's experts (spec §4.5), the
// one loop every CPU form of the expert runs: for each row r and i in
// [0, inter), with L = limit (<= 0 disables both clamps),
//   g = min(gate, L), u = clamp(up, -L, L),
//   gate = (g / (1 + exp(-g))) * u, then times route_weight[r] when given,
// in fp32, each operation rounded once. `exp` is the caller's exponential:
// std::exp in kernels/cpu (the reference's), fmath::ExpF in the model's CPU
// backend (worker/model/expert_ffn.cc), whose bits the CUDA kernel
// (kernels/cuda/decode/swiglu.h) reproduces.
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_SWIGLU_H_
#define WEIR_KERNELS_CPU_SWIGLU_H_

#include <algorithm>
#include <cstdint>
#include <span>

namespace weir::kernels::cpu {

// gate [rows, inter] <- SwiGLU(gate, up [rows, inter]) [* route_weight [rows]].
// REQUIRES: gate and up hold rows * inter values; route_weight is empty or
// holds rows.
template <typename Exp>
void SwigluRows(std::span<float> gate, std::span<const float> up,
                std::span<const float> route_weight, int64_t rows, int64_t inter, float limit,
                Exp exp) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = r * inter; i < (r + 1) * inter; ++i) {
      float g = gate[i], u = up[i];
      if (limit > 0.0f) {
        u = std::clamp(u, -limit, limit);
        g = std::min(g, limit);
      }
      const float h = (g / (1.0f + exp(-g))) * u;
      gate[i] = route_weight.empty() ? h : route_weight[r] * h;
    }
  }
}

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_SWIGLU_H_
