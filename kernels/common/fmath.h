// kernels/common/fmath.h
//
// Floating-point helpers that give the same bits on the CPU (g++) and on the
// GPU (nvcc device code), so a CUDA kernel can reproduce its CPU reference
// exactly. Header-only; compiled by both compilers.
//
// * Basic operations FMul/FAdd/FSub/FDiv/FSqrt (and the double D* forms) are
//   single IEEE operations, round to nearest even: on the device the explicit
//   __fmul_rn / __fadd_rn / ... intrinsics, which nvcc never fuses into an
//   FMA; on the host the plain operators (x86-64 without -mfma has no FMA to
//   contract into; the kernels/cpu libraries also build with
//   -ffp-contract=off).
// * ExpF, Log1pF, SigmoidF: transcendentals built from those operations only
//   (in double precision, then one rounding to float), so glibc's and CUDA's
//   last-ulp differences do not enter. Accuracy: within 1 ulp of the exact
//   value (nearly always correctly rounded); not bitwise equal to glibc's
//   expf / log1pf.
// * LaneSum: the fixed summation order shared by CPU kernels and warp-wide
//   CUDA reductions. Lane l (0..31) accumulates the terms i = l, l + 32,
//   l + 64, ... in ascending order, starting from +0; then the lanes are
//   combined as a butterfly: for off = 16, 8, 4, 2, 1: lane[l] += lane[l + off]
//   (l < off); the result is lane[0]. A warp computes the same sum with an
//   xor-shuffle butterfly (lane l adds lane l ^ off; addition is commutative,
//   so every lane ends with lane[0]'s value). WarpLaneSum is that device form.
//
// Thread safety: pure functions.

#ifndef WEIR_KERNELS_COMMON_FMATH_H_
#define WEIR_KERNELS_COMMON_FMATH_H_

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define WEIR_FMATH_HD __host__ __device__
#else
#define WEIR_FMATH_HD
#endif

#include <cmath>

namespace weir::kernels::fmath {

WEIR_FMATH_HD inline float FMul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
WEIR_FMATH_HD inline float FAdd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
WEIR_FMATH_HD inline float FSub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
WEIR_FMATH_HD inline float FDiv(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
WEIR_FMATH_HD inline float FSqrt(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
WEIR_FMATH_HD inline double DMul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
WEIR_FMATH_HD inline double DAdd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
WEIR_FMATH_HD inline double DSub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
WEIR_FMATH_HD inline double DDiv(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
// Nearest float to a double (ties to even).
WEIR_FMATH_HD inline float ToFloat(double a) {
#ifdef __CUDA_ARCH__
  return __double2float_rn(a);
#else
  return static_cast<float>(a);
#endif
}

// The float with the given bits.
WEIR_FMATH_HD inline float FloatFromBits(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}
inline constexpr uint32_t kInfBits = 0x7F800000u;
inline constexpr uint32_t kNegInfBits = 0xFF800000u;
inline constexpr uint32_t kNanBits = 0x7FC00000u;

// The overloads LaneSum uses.
WEIR_FMATH_HD inline float Add(float a, float b) { return FAdd(a, b); }
WEIR_FMATH_HD inline double Add(double a, double b) { return DAdd(a, b); }

namespace internal {

WEIR_FMATH_HD inline double FromBits(uint64_t bits) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
#endif
}
WEIR_FMATH_HD inline uint64_t ToBits(double d) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(d));
  return bits;
#endif
}

// 2^52 + 2^51: adding and subtracting it rounds |v| < 2^51 to an integer
// (ties to even) with two IEEE additions.
inline constexpr double kRoundMagic = 6755399441055744.0;
// ln 2 split so that k * kLn2Hi is exact for |k| < 2^20 (fdlibm's split).
inline constexpr double kLn2Hi = 6.93147180369123816490e-01;
inline constexpr double kLn2Lo = 1.90821492927058770002e-10;
inline constexpr double kLn2 = 6.93147180559945286227e-01;
inline constexpr double kInvLn2 = 1.44269504088896338700e+00;
inline constexpr double kSqrt2 = 1.41421356237309514547e+00;

// exp(r) for |r| <= 0.35: Taylor series to r^14 (truncation < 1e-17), Horner.
WEIR_FMATH_HD inline double ExpSmall(double r) {
  constexpr double c[15] = {1.0,
                            1.0,
                            1.0 / 2,
                            1.0 / 6,
                            1.0 / 24,
                            1.0 / 120,
                            1.0 / 720,
                            1.0 / 5040,
                            1.0 / 40320,
                            1.0 / 362880,
                            1.0 / 3628800,
                            1.0 / 39916800,
                            1.0 / 479001600,
                            1.0 / 6227020800,
                            1.0 / 87178291200};
  double p = c[14];
  for (int i = 13; i >= 0; --i) p = DAdd(DMul(p, r), c[i]);
  return p;
}

// ln(u) for a positive normal finite double u: u = m * 2^e with m in
// [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172.
WEIR_FMATH_HD inline double LogPositive(double u) {
  const uint64_t bits = ToBits(u);
  int e = static_cast<int>((bits >> 52) & 0x7FF) - 1023;
  double m = FromBits((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);  // [1, 2)
  if (m > kSqrt2) {
    m = DMul(m, 0.5);
    ++e;
  }
  const double s = DDiv(DSub(m, 1.0), DAdd(m, 1.0));
  const double s2 = DMul(s, s);
  // 1 + s2/3 + s2^2/5 + ... + s2^11/23 (truncation < 1e-18 relative).
  double p = DDiv(1.0, 23.0);
  for (int k = 10; k >= 0; --k) p = DAdd(DMul(p, s2), DDiv(1.0, 2.0 * k + 1.0));
  return DAdd(DMul(static_cast<double>(e), kLn2), DMul(DMul(2.0, s), p));
}

}  // namespace internal

// e^x as a float. NaN stays NaN; overflow gives +inf, underflow +0 (or the
// nearest subnormal).
WEIR_FMATH_HD inline float ExpF(float x) {
  if (x != x) return x;
  if (x > 89.0f) return FloatFromBits(kInfBits);
  if (x < -104.0f) return 0.0f;
  const double xd = x;
  const double k = DSub(DAdd(DMul(xd, internal::kInvLn2), internal::kRoundMagic),
                        internal::kRoundMagic);
  const double r = DSub(DSub(xd, DMul(k, internal::kLn2Hi)), DMul(k, internal::kLn2Lo));
  const double scale = internal::FromBits(static_cast<uint64_t>(static_cast<int64_t>(k) + 1023)
                                          << 52);
  return ToFloat(DMul(internal::ExpSmall(r), scale));
}

// ln(1 + x) as a float, for x > -1 (accurate for small |x| too). NaN and
// x < -1 give NaN, x == -1 gives -inf, +inf gives +inf.
WEIR_FMATH_HD inline float Log1pF(float x) {
  if (x != x || x < -1.0f) return FloatFromBits(kNanBits);
  if (x == -1.0f) return FloatFromBits(kNegInfBits);
  if (x == FloatFromBits(kInfBits)) return x;
  const double y = x;
  const double u = DAdd(1.0, y);
  if (u == 1.0) return x;
  // ln(u) - ((u - 1) - y) / u corrects the rounding of 1 + y.
  return ToFloat(DSub(internal::LogPositive(u), DDiv(DSub(DSub(u, 1.0), y), u)));
}

// 1 / (1 + e^-v).
WEIR_FMATH_HD inline float SigmoidF(float v) { return FDiv(1.0f, FAdd(1.0f, ExpF(-v))); }

inline constexpr int kLanes = 32;

// The fixed-order sum of term(i), i in [0, n) (see the file comment).
// `term` returns T (float or double) and must itself use the operations above.
template <typename T, typename Term>
inline T LaneSum(int64_t n, Term term) {
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = T(0);
  const int64_t full = n / kLanes * kLanes;
  for (int64_t i0 = 0; i0 < full; i0 += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = Add(acc[l], term(i0 + l));
  }
  for (int64_t i = full; i < n; ++i) acc[i - full] = Add(acc[i - full], term(i));
  for (int off = kLanes / 2; off > 0; off /= 2) {
    for (int l = 0; l < off; ++l) acc[l] = Add(acc[l], acc[l + off]);
  }
  return acc[0];
}

// LaneSum of a[i] * b[i].
inline float LaneDot(const float* a, const float* b, int64_t n) {
  return LaneSum<float>(n, [&](int64_t i) { return FMul(a[i], b[i]); });
}

// LaneSum in double of a[i]^2 (each product is exact in double).
inline double LaneSumSquares(const float* a, int64_t n) {
  return LaneSum<double>(n, [&](int64_t i) {
    const double v = a[i];
    return DMul(v, v);
  });
}

#ifdef __CUDACC__
// LaneSum over a full warp: every lane of the warp calls it with the same n
// and term; every lane returns the sum.
template <typename T, typename Term>
__device__ inline T WarpLaneSum(int64_t n, Term term) {
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  T acc = T(0);
  // Unrolled so the terms' loads of several steps are in flight before their
  // additions (which stay in order: the same sum).
#pragma unroll 8
  for (int64_t i = lane; i < n; i += kLanes) acc = Add(acc, term(i));
  for (int off = kLanes / 2; off > 0; off /= 2) {
    acc = Add(acc, __shfl_xor_sync(0xffffffffu, acc, off));
  }
  return acc;
}
#endif

}  // namespace weir::kernels::fmath

#undef WEIR_FMATH_HD

#endif  // WEIR_KERNELS_COMMON_FMATH_H_
