// kernels/cuda/decode/rows.cuh — device code of the row glue in rows.h. No
// host dependencies.
#ifndef WEIR_KERNELS_CUDA_DECODE_ROWS_CUH_
#define WEIR_KERNELS_CUDA_DECODE_ROWS_CUH_

#include <cstdint>

#include "kernels/cuda/decode/markov_argmax.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rope_pair.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::decode {

// Blocks stride over tokens; the threads of a block read each embedding
// channel once and write it to every stream.
__global__ void EmbedStreamsKernel(const float* __restrict__ embed,
                                   const int64_t* __restrict__ tokens, float* __restrict__ out,
                                   int32_t* bad_count, int64_t n_tokens, int64_t vocab,
                                   int64_t dim, int copies) {
  GridDependencyPrologue();
  for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    const int64_t id = tokens[t];
    const bool ok = id >= 0 && id < vocab;
    if (!ok && bad_count != nullptr && threadIdx.x == 0) atomicAdd(bad_count, 1);
    float* dst = out + t * copies * dim;  // [copies, dim]
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      const float v = ok ? embed[id * dim + c] : __uint_as_float(0x7FC00000u);
      for (int k = 0; k < copies; ++k) dst[k * dim + c] = v;
    }
  }
}

__global__ void RoundBf16Kernel(float* x, int64_t n) {
  GridDependencyPrologue();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    x[i] = RoundToBf16(x[i]);
  }
}

__global__ void ScaleKernel(float* x, int64_t n, float factor, bool round_bf16) {
  GridDependencyPrologue();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = __fmul_rn(x[i], factor);
    x[i] = round_bf16 ? RoundToBf16(v) : v;
  }
}

// SplitMix64 of (seed, i): the counter-based hash of RandomFill / RandomBytes.
__device__ __forceinline__ uint64_t MixBits(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Writes x (fp32) or, when x is null, bf16 bits (the same values).
__global__ void RandomFillKernel(float* x, uint16_t* bits, int64_t n, uint64_t seed,
                                 float scale) {
  GridDependencyPrologue();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    // 24 random bits -> [-1, 1).
    const float u = static_cast<float>(MixBits(seed, static_cast<uint64_t>(i)) >> 40) *
                        (2.0f / 16777216.0f) -
                    1.0f;
    const float v = RoundToBf16(__fmul_rn(scale, u));
    if (x != nullptr) {
      x[i] = v;
    } else {
      bits[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
    }
  }
}

// bits[i] = the bf16 bits of RoundToBf16(x[i]).
__global__ void ToBf16Kernel(const float* __restrict__ x, uint16_t* __restrict__ bits, int64_t n) {
  GridDependencyPrologue();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    bits[i] = Bf16BitsOf(x[i]);
  }
}

__global__ void RandomBytesKernel(uint8_t* x, int64_t n, uint64_t seed, uint8_t mask) {
  GridDependencyPrologue();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    x[i] = static_cast<uint8_t>(MixBits(seed, static_cast<uint64_t>(i)) >> 56) & mask;
  }
}

// Blocks stride over the row list; the threads of a block copy one row.
// Strides are already resolved (non-zero).
__global__ void CopyRowsKernel(const float* __restrict__ src, float* __restrict__ dst,
                               const int32_t* __restrict__ src_rows,
                               const int32_t* __restrict__ dst_rows, int64_t rows, int64_t width,
                               int64_t src_stride, int64_t dst_stride, int64_t src_capacity,
                               int64_t dst_capacity) {
  GridDependencyPrologue();
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const int64_t s = src_rows != nullptr ? src_rows[i] : i;
    const int64_t d = dst_rows != nullptr ? dst_rows[i] : i;
    if (d < 0 || (dst_capacity > 0 && d >= dst_capacity)) continue;
    const bool zero = s < 0 || (src_capacity > 0 && s >= src_capacity);
    float* out = dst + d * dst_stride;
    const float* in = src + (zero ? 0 : s) * src_stride;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) out[c] = zero ? 0.0f : in[c];
  }
}

// Grid-stride over dst elements [b, a, width].
__global__ void SwapAxesKernel(const float* __restrict__ src, float* __restrict__ dst, int64_t a,
                               int64_t b, int64_t width) {
  GridDependencyPrologue();
  const int64_t n = a * b * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t c = e % width, q = e / width;
    const int64_t i = q % a, j = q / a;
    dst[e] = src[(i * b + j) * width + c];
  }
}

// Columns one block of SwapAxesRowsKernel copies.
constexpr int64_t kSwapChunk = 1024;

// SwapAxesRowsKernel's RoPE (SwapAxesParams' rope fields).
struct SwapRope {
  const int64_t* positions;
  const float* cos_sin;
  int64_t cos_sin_rows;
  int head_dim, rope_dim;
  bool inverse, round_bf16;
};

// One block per (dst row, chunk of kSwapChunk columns): dst row q = j a + i
// is src row i b + j, so the index arithmetic is once per block (the
// element-wise kernel above divides 64-bit indices per element). kRope: a
// thread whose column is in a head's last rope_dim rotates its pair as
// RopeKernel does (reading the partner too) and keeps its own half.
// T = uint16_t: each value leaves as ToBf16Kernel's bits of it.
__device__ __forceinline__ void StoreAs(float* d, float v) { *d = v; }
__device__ __forceinline__ void StoreAs(uint16_t* d, float v) { *d = Bf16BitsOf(v); }

template <bool kRope, typename T = float>
__global__ void SwapAxesRowsKernel(const float* __restrict__ src, T* __restrict__ dst, int64_t a,
                                   int64_t b, int64_t width, SwapRope rope) {
  GridDependencyPrologue();
  const int64_t q = blockIdx.x;
  const int64_t i = q % a, j = q / a;
  const float* s = src + (i * b + j) * width;
  T* d = dst + q * width;
  const int64_t end = min(width, (static_cast<int64_t>(blockIdx.y) + 1) * kSwapChunk);
  int64_t position = 0;
  if constexpr (kRope) position = rope.positions[i];
  for (int64_t c = blockIdx.y * kSwapChunk + threadIdx.x; c < end; c += blockDim.x) {
    if constexpr (kRope) {
      const int k = static_cast<int>(c % rope.head_dim) - (rope.head_dim - rope.rope_dim);
      if (k >= 0) {
        const int64_t c0 = c - (k & 1);
        const float2 cs =
            RopeCosSinAt(rope.cos_sin, rope.cos_sin_rows, position, rope.rope_dim / 2, k >> 1);
        const float2 r = RopeRotatePair(s[c0], s[c0 + 1], cs.x, cs.y, rope.inverse);
        const float v = (k & 1) ? r.y : r.x;
        StoreAs(d + c, rope.round_bf16 ? RoundToBf16(v) : v);
        continue;
      }
    }
    StoreAs(d + c, s[c]);
  }
}

// Grid-stride over (token, channel); each thread runs the CPU's loop for its
// channel: fp32 adds k ascending from +0, then one divide. No FMA involved.
__global__ void StreamMeanKernel(const float* __restrict__ x, float* __restrict__ out,
                                 int64_t tokens, int64_t dim, int copies, int64_t out_stride) {
  GridDependencyPrologue();
  const int64_t n = tokens * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const float divisor = static_cast<float>(copies);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t t = e / dim, c = e % dim;
    const float* xt = x + t * copies * dim + c;
    float sum = 0.0f;
    for (int k = 0; k < copies; ++k) sum = __fadd_rn(sum, xt[k * dim]);
    out[t * out_stride + c] = __fdiv_rn(sum, divisor);
  }
}

// A block of kMarkovThreads per sequence: each thread adds and scans a
// strided share of the row, then MarkovBlockArgmax's tree keeps the larger
// value, the lower index on ties (the first maximum).
__global__ void MarkovArgmaxKernel(float* __restrict__ logits, const float* __restrict__ bias,
                                   int64_t* __restrict__ tokens, int32_t* __restrict__ prev,
                                   int64_t vocab, int block, int step) {
  GridDependencyPrologue();
  const int64_t r = blockIdx.x;
  float* row = logits + (r * block + step) * vocab;
  const float* b = bias + r * vocab;
  float best = 0.0f;
  int64_t best_i = -1;
  for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) {
    const float v = __fadd_rn(row[t], b[t]);
    row[t] = v;
    if (best_i < 0 || best < v) {
      best = v;
      best_i = t;
    }
  }
  const int64_t winner = MarkovBlockArgmax(best, best_i);
  if (threadIdx.x == 0) {
    tokens[r * block + step] = winner;
    prev[r] = static_cast<int32_t>(winner);
  }
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_ROWS_CUH_
