#include "worker/model/row_gemm.h"

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

// Tail of k (in % 4 != 0) is folded into its lane in ascending order, so the
// lane structure is the same as for the vector part.
inline void Tail(const float* x, const float* w, int64_t k0, int64_t in, V4& acc) {
  for (int64_t k = k0; k < in; ++k) {
    const int l = RowStableLane(k);
    acc[l] = RowStableStep(acc[l], x[k], w[k]);
  }
}

// One output element.
float Dot(const float* x, const float* w, int64_t in) {
  V4 acc = {0, 0, 0, 0};
  const int64_t k4 = in & ~int64_t{3};
  for (int64_t k = 0; k < k4; k += 4) acc += Load(x + k) * Load(w + k);
  Tail(x, w, k4, in, acc);
  return Reduce(acc);
}

// A 2 x 4 tile of outputs: shares loads, same per-element arithmetic as Dot.
void Tile2x4(const float* x0, const float* x1, const float* w, int64_t in, float* y0,
             float* y1) {
  const float* w0 = w;
  const float* w1 = w + in;
  const float* w2 = w + 2 * in;
  const float* w3 = w + 3 * in;
  V4 a00 = {0, 0, 0, 0}, a01 = a00, a02 = a00, a03 = a00;
  V4 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  const int64_t k4 = in & ~int64_t{3};
  for (int64_t k = 0; k < k4; k += 4) {
    const V4 u = Load(x0 + k), v = Load(x1 + k);
    const V4 b0 = Load(w0 + k), b1 = Load(w1 + k), b2 = Load(w2 + k), b3 = Load(w3 + k);
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
void Tile1x4(const float* x0, const float* w, int64_t in, float* y0) {
  const float* w1 = w + in;
  const float* w2 = w + 2 * in;
  const float* w3 = w + 3 * in;
  V4 a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
  const int64_t k4 = in & ~int64_t{3};
  for (int64_t k = 0; k < k4; k += 4) {
    const V4 u = Load(x0 + k);
    a0 += u * Load(w + k);
    a1 += u * Load(w1 + k);
    a2 += u * Load(w2 + k);
    a3 += u * Load(w3 + k);
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

}  // namespace

void RowStableGemm(const float* x, const float* w, float* y, int64_t rows, int64_t out,
                   int64_t in) {
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

}  // namespace weir::model
