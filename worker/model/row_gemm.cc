#include "worker/model/row_gemm.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/common/row_stable.h"

namespace weir::model {
namespace {

using ::weir::kernels::RowStableCombine;
using ::weir::kernels::RowStableLane;
using ::weir::kernels::RowStableStep;

// The four lanes of one output element; `acc += u * v` on V4s is
// RowStableStep on each lane at once (the product rounded, then added: this
// file builds with -ffp-contract=off).
typedef float V4 __attribute__((vector_size(16)));
static_assert(sizeof(V4) == ::weir::kernels::kRowStableLanes * sizeof(float));

inline V4 Load(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float Reduce(V4 a) { return RowStableCombine(a[0], a[1], a[2], a[3]); }

// Weights are fp32, or bf16 bit patterns, widened exactly (bits << 16) as
// they are loaded: the same values, half the bytes to read.
inline V4 LoadW(const float* p) { return Load(p); }
inline V4 LoadW(const uint16_t* p) {
  uint64_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  // Each 32-bit lane i becomes (p[i] << 16) | 0.
  const __m128i wide = _mm_unpacklo_epi16(_mm_setzero_si128(), _mm_cvtsi64_si128(bits));
  return reinterpret_cast<V4>(_mm_castsi128_ps(wide));
}
inline float WAt(const float* p) { return *p; }
inline float WAt(const uint16_t* p) {
  const uint32_t bits = static_cast<uint32_t>(*p) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// Tail of k (in % 4 != 0) is folded into its lane in ascending order, so the
// lane structure is the same as for the vector part.
template <typename W>
inline void Tail(const float* x, const W* w, int64_t k0, int64_t in, V4& acc) {
  for (int64_t k = k0; k < in; ++k) {
    const int l = RowStableLane(k);
    acc[l] = RowStableStep(acc[l], x[k], WAt(w + k));
  }
}

// One output element.
template <typename W>
float Dot(const float* x, const W* w, int64_t in) {
  V4 acc = {0, 0, 0, 0};
  const int64_t k4 = in & ~int64_t{3};
  for (int64_t k = 0; k < k4; k += 4) acc += Load(x + k) * LoadW(w + k);
  Tail(x, w, k4, in, acc);
  return Reduce(acc);
}

// A 2 x 4 tile of outputs: shares loads, same per-element arithmetic as Dot.
template <typename W>
void Tile2x4(const float* x0, const float* x1, const W* w, int64_t in, float* y0, float* y1) {
  const W* w0 = w;
  const W* w1 = w + in;
  const W* w2 = w + 2 * in;
  const W* w3 = w + 3 * in;
  V4 a00 = {0, 0, 0, 0}, a01 = a00, a02 = a00, a03 = a00;
  V4 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  const int64_t k4 = in & ~int64_t{3};
  for (int64_t k = 0; k < k4; k += 4) {
    const V4 u = Load(x0 + k), v = Load(x1 + k);
    const V4 b0 = LoadW(w0 + k), b1 = LoadW(w1 + k), b2 = LoadW(w2 + k), b3 = LoadW(w3 + k);
    a00 += u * b0;
    a01 += u * b1;
    a02 += u * b2;
    a03 += u * b3;
    a10 += v * b0;
    a11 += v * b1;
    a12 += v * b2;
    a13 += v * b3;
  }
  Tail(x0, w0, k4, in, a00);
  Tail(x0, w1, k4, in, a01);
  Tail(x0, w2, k4, in, a02);
  Tail(x0, w3, k4, in, a03);
  Tail(x1, w0, k4, in, a10);
  Tail(x1, w1, k4, in, a11);
  Tail(x1, w2, k4, in, a12);
  Tail(x1, w3, k4, in, a13);
  y0[0] = Reduce(a00);
  y0[1] = Reduce(a01);
  y0[2] = Reduce(a02);
  y0[3] = Reduce(a03);
  y1[0] = Reduce(a10);
  y1[1] = Reduce(a11);
  y1[2] = Reduce(a12);
  y1[3] = Reduce(a13);
}

// A 1 x 4 tile (the last odd row, or decode): same per-element arithmetic.
template <typename W>
void Tile1x4(const float* x0, const W* w, int64_t in, float* y0) {
  const W* w1 = w + in;
  const W* w2 = w + 2 * in;
  const W* w3 = w + 3 * in;
  V4 a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
  const int64_t k4 = in & ~int64_t{3};
  for (int64_t k = 0; k < k4; k += 4) {
    const V4 u = Load(x0 + k);
    a0 += u * LoadW(w + k);
    a1 += u * LoadW(w1 + k);
    a2 += u * LoadW(w2 + k);
    a3 += u * LoadW(w3 + k);
  }
  Tail(x0, w, k4, in, a0);
  Tail(x0, w1, k4, in, a1);
  Tail(x0, w2, k4, in, a2);
  Tail(x0, w3, k4, in, a3);
  y0[0] = Reduce(a0);
  y0[1] = Reduce(a1);
  y0[2] = Reduce(a2);
  y0[3] = Reduce(a3);
}

// AVX2 (x86-64 machines that have it, checked once at run time): a 256-bit
// register holds the four lanes of two outputs, [n: l0..l3 | n + 1: l0..l3],
// so one multiply and one add advance eight lane sums by one term each, the
// same product-then-add as the 128-bit form (no FMA: the target is avx2
// alone). A tile is 4 rows x 4 outputs.
#if defined(__x86_64__)
#define WEIR_ROW_GEMM_AVX2 1

// The two outputs' lane sums of `acc` through the k tail and the combine.
template <typename W>
__attribute__((target("avx2"))) inline void FinishPair(__m256 acc, const float* x, const W* w0,
                                                       const W* w1, int64_t k4, int64_t in,
                                                       float* y) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  V4 a0 = {lanes[0], lanes[1], lanes[2], lanes[3]};
  V4 a1 = {lanes[4], lanes[5], lanes[6], lanes[7]};
  Tail(x, w0, k4, in, a0);
  Tail(x, w1, k4, in, a1);
  y[0] = Reduce(a0);
  y[1] = Reduce(a1);
}

__attribute__((target("avx2"))) inline __m256 PairOf(const float* w0, const float* w1) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(w0)), _mm_loadu_ps(w1), 1);
}
__attribute__((target("avx2"))) inline __m256 PairOf(const uint16_t* w0, const uint16_t* w1) {
  uint64_t lo, hi;
  std::memcpy(&lo, w0, sizeof(lo));
  std::memcpy(&hi, w1, sizeof(hi));
  // Eight bf16 patterns, each widened into the top half of a 32-bit lane.
  const __m128i both = _mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(both), 16));
}

// Rows x0..x0 + (rows - 1) * in (1 <= rows <= 4) against w's 4 rows.
template <int kRows, typename W>
__attribute__((target("avx2"))) void TileAvx2(const float* x0, const W* w, int64_t in, float* y0,
                                              int64_t out) {
  const W* w0 = w;
  const W* w1 = w + in;
  const W* w2 = w + 2 * in;
  const W* w3 = w + 3 * in;
  // Outputs (0, 1) and (2, 3) of each row, in registers: the row loops are
  // unrolled (-O2 would keep the arrays in memory otherwise).
  __m256 lo[kRows], hi[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  const int64_t k4 = in & ~int64_t{3};
  for (int64_t k = 0; k < k4; k += 4) {
    const __m256 b01 = PairOf(w0 + k, w1 + k);
    const __m256 b23 = PairOf(w2 + k, w3 + k);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 u = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(x0 + r * in + k));
      lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(u, b01));
      hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(u, b23));
    }
  }
  for (int r = 0; r < kRows; ++r) {
    FinishPair(lo[r], x0 + r * in, w0, w1, k4, in, y0 + r * out);
    FinishPair(hi[r], x0 + r * in, w2, w3, k4, in, y0 + r * out + 2);
  }
}

template <typename W>
__attribute__((target("avx2"))) void RowStableGemmAvx2(const float* x, const W* w, float* y,
                                                       int64_t rows, int64_t out, int64_t in) {
  const int64_t n4 = out & ~int64_t{3};
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    for (int64_t n = 0; n < n4; n += 4)
      TileAvx2<4>(x + m * in, w + n * in, in, y + m * out + n, out);
  }
  const int64_t left = rows - m;
  for (int64_t n = 0; n < n4 && left > 0; n += 4) {
    const float* xm = x + m * in;
    float* ym = y + m * out + n;
    if (left == 3) TileAvx2<3>(xm, w + n * in, in, ym, out);
    if (left == 2) TileAvx2<2>(xm, w + n * in, in, ym, out);
    if (left == 1) TileAvx2<1>(xm, w + n * in, in, ym, out);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = n4; n < out; ++n) y[r * out + n] = Dot(x + r * in, w + n * in, in);
  }
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// The 128-bit tiles: rows in pairs (2 x 4), the odd last row (1 x 4).
template <typename W>
void GemmSse(const float* x, const W* w, float* y, int64_t rows, int64_t out, int64_t in) {
  const int64_t n4 = out & ~int64_t{3};
  int64_t m = 0;
  for (; m + 2 <= rows; m += 2) {
    const float* x0 = x + m * in;
    const float* x1 = x0 + in;
    float* y0 = y + m * out;
    float* y1 = y0 + out;
    for (int64_t n = 0; n < n4; n += 4) Tile2x4(x0, x1, w + n * in, in, y0 + n, y1 + n);
    for (int64_t n = n4; n < out; ++n) {
      y0[n] = Dot(x0, w + n * in, in);
      y1[n] = Dot(x1, w + n * in, in);
    }
  }
  for (; m < rows; ++m) {
    for (int64_t n = 0; n < n4; n += 4) Tile1x4(x + m * in, w + n * in, in, y + m * out + n);
    for (int64_t n = n4; n < out; ++n) y[m * out + n] = Dot(x + m * in, w + n * in, in);
  }
}

// The AVX2 tiles where the CPU has them, else the 128-bit ones.
template <typename W>
void Dispatch(const float* x, const W* w, float* y, int64_t rows, int64_t out, int64_t in) {
#ifdef WEIR_ROW_GEMM_AVX2
  if (HasAvx2()) return RowStableGemmAvx2(x, w, y, rows, out, in);
#endif
  GemmSse(x, w, y, rows, out, in);
}

}  // namespace

void RowStableGemm(const float* x, const float* w, float* y, int64_t rows, int64_t out,
                   int64_t in) {
  Dispatch(x, w, y, rows, out, in);
}

bool RowStableGemmUsesAvx2() {
#ifdef WEIR_ROW_GEMM_AVX2
  return HasAvx2();
#else
  return false;
#endif
}

void RowStableGemmSse(const float* x, const float* w, float* y, int64_t rows, int64_t out,
                      int64_t in) {
  GemmSse(x, w, y, rows, out, in);
}

void RowStableGemmBf16W(const float* x, const uint16_t* w, float* y, int64_t rows, int64_t out,
                        int64_t in) {
  Dispatch(x, w, y, rows, out, in);
}

void RowStableGemmBf16WSse(const float* x, const uint16_t* w, float* y, int64_t rows, int64_t out,
                           int64_t in) {
  GemmSse(x, w, y, rows, out, in);
}

}  // namespace weir::model
