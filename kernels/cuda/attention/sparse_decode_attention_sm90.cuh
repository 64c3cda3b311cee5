// kernels/cuda/attention/sparse_decode_attention_sm90.cuh — device code of
// SparseDecodeAttention (contract in sparse_decode_attention_sm90.h, design
// in README.md). No host dependencies.
//
// One CTA = one query x 16 heads (one m16 tile), 8 warps in two sets of 4;
// set k walks the tiles k, k + 2, k + 4, ... of the query's list (a fixed
// split: 2 sets whatever the batch) and the sets merge their softmax states
// at the end. Warp w of a set owns dims [128w, 128w + 128) of the 512-dim
// K=V row for both products:
//   * copy:    cp.async of its slice of each listed row, stored form, into a
//              per-warp ring of kStages tiles of 32 rows (no CTA barrier);
//   * dequant: slice -> bf16 [32 rows][128 dims] in shared memory (exact);
//   * QK^T:    partial logits over its 128 dims, Q held in registers as
//              mma A fragments; the 4 partials meet in shared memory and
//              every warp sums them in the same order (one barrier of the
//              set per tile), so the set's warps hold identical logits and
//              softmax state;
//   * P.V:     P straight from the logit registers (the C fragment of
//              m16n8 is the A fragment of the next mma), V by ldmatrix.trans
//              of the same bf16 slice; O [16 heads x 128 dims] in registers.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_SM90_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_SM90_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {
namespace sparse_decode {

inline constexpr int kHeadDim = 512;
inline constexpr int kHeads = 16;  // heads per CTA: one mma m16 tile
inline constexpr int kWarps = 4;  // warps of a set: one per 128-dim slice
inline constexpr int kSets = 2;   // warp sets splitting the tiles of a query
inline constexpr int kThreads = kSets * kWarps * 32;
inline constexpr int kSlice = kHeadDim / kWarps;  // 128 dims per warp
inline constexpr int kTile = 32;                  // list entries per tile (one per lane)
inline constexpr int kStages = 3;                 // copy ring depth (tiles in flight)
inline constexpr int kFp8Row = 512, kFp8ScaleRow = 16;  // window row: codes, UE8M0 scales
inline constexpr int kFp4Row = 256, kFp4ScaleRow = 32;  // compressed row: codes, E4M3 scales
// A stage holds one warp's slice of a tile: codes [32][128] (FP8) or [32][64]
// (FP4) from byte 0, scales [32][4] or [32][8] from kStageCodeBytes.
inline constexpr int kStageCodeBytes = kTile * kFp8Row / kWarps;       // 4096
inline constexpr int kStageBytes = kStageCodeBytes + kTile * kFp4ScaleRow / kWarps;  // + 256
inline constexpr int kSliceBytes = kTile * kSlice * 2;  // bf16 [32][128], 16-byte chunks swizzled
inline constexpr int kPartialBytes = kWarps * 4 * 32 * 16;  // one buffer: [warp][n-tile][lane] float4
inline constexpr int kSetBytes =
    kWarps * (kStages * kStageBytes + kSliceBytes) + 2 * kPartialBytes;  // 101376
inline constexpr int kSharedBytes = kSets * kSetBytes;                  // 202752
static_assert(kWarps * 32 * (kSlice / 8 * 4 + 4) * 4 <= kSharedBytes, "merge area");

struct KernelArgs {
  const float* q;  // [queries, heads, 512]
  const float* sink;
  const uint8_t* win_codes;
  const uint8_t* win_scales;
  const int32_t* win_index;  // [queries, win_width]
  const uint8_t* comp_codes;
  const uint8_t* comp_scales;
  const int32_t* comp_index;  // [queries, comp_width]
  float* out;                 // [queries, heads, 512]
  int64_t win_rows, comp_rows;
  int win_width, comp_width;
  int heads, head_groups;
  float scale_log2;  // softmax scale * log2(e)
  bool round_bf16;   // out through RoundToBf16
  // kWgmma64 only: a query's list in `ranges` ranges of `range_tiles` tiles,
  // one CTA each, the CTAs of a query one cluster (ranges == 1: no cluster).
  int ranges = 1, range_tiles = 0;
  // Non-null: a CTA whose query's role is not `role` returns at once.
  const int32_t* query_role = nullptr;
  int role = 0;
  // kWgmma64: SparseDecodeAttentionParams::grouped (g_width 0: off); g_rows
  // is the launch's queries (the grouped layout's middle axis).
  float* g_out = nullptr;
  uint16_t* g_out_bf16 = nullptr;
  int64_t g_width = 0, g_rows = 0;
  const int64_t* g_positions = nullptr;
  const float* g_cos_sin = nullptr;
  int64_t g_cos_sin_rows = 0;
  int g_rope_dim = 0;
  // kWgmma64's mirror form (SparseDecodeAttentionParams::window_bf16,
  // compressed_bf16): [rows, 512] bf16 bits.
  const uint16_t* win_bf16 = nullptr;
  const uint16_t* comp_bf16 = nullptr;
};

__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// 16 bytes when `bytes` is 16, zeros (nothing read) when it is 0.
__device__ __forceinline__ void CpAsync16OrZero(uint32_t dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}

template <int kBytes>
__device__ __forceinline__ void CpAsyncCa(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(kBytes)
               : "memory");
}

__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                           uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                                uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

// d += A (16 x 16 bf16, row) * B (16 x 8 bf16, col), fp32 accumulate
// (kernels/cuda/mma_bf16.cuh).
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  MmaBf16M16N8K16(d, a, b0, b1);
}

__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

__device__ __forceinline__ uint32_t Bf16x2Bits(__nv_bfloat162 v) {
  uint32_t r;
  __builtin_memcpy(&r, &v, sizeof(r));
  return r;
}

__device__ __forceinline__ __nv_bfloat162 Bf16x2(uint32_t bits) {
  __nv_bfloat162 v;
  __builtin_memcpy(&v, &bits, sizeof(bits));
  return v;
}

// Rounds (lo, hi) to bf16 (nearest even); lo in the low half, as the mma
// fragments want the lower column index there.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) { return PackBf16x2(lo, hi); }

// Two e4m3 codes (low byte = lower dim) times a power-of-two scale, as bf16x2.
// Exact: e4m3 fits fp16 and bf16, the scale only moves the exponent.
__device__ __forceinline__ uint32_t Fp8PairToBf16(uint32_t pair, float scale) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return PackBf16(f.x * scale, f.y * scale);
}

// Eight e2m1 codes (element 2k in the low nibble of byte k) times the block's
// E4M3 scale, as four bf16x2 words. Magnitudes come from byte lookup tables
// with prmt (bf16 high and low bytes of 0, .5, 1, 1.5, 2, 3, 4, 6), signs
// from the sign-replicating prmt mode; the product with the scale is exact in
// bf16 (e2m1 x e4m3 has at most 5 significant bits, range [2^-10, 2688]).
__device__ __forceinline__ void Fp4x8ToBf16(uint32_t w, __nv_bfloat162 scale, uint4& out) {
  constexpr uint32_t kHi0 = 0x3F3F3F00u, kHi1 = 0x40404040u;
  constexpr uint32_t kLo0 = 0xC0800000u, kLo1 = 0xC0804000u;
  const uint32_t mag = w & 0x77777777u;  // selector nibbles: magnitude codes
  const uint32_t hi_a = Prmt(kHi0, kHi1, mag), lo_a = Prmt(kLo0, kLo1, mag);
  const uint32_t hi_b = Prmt(kHi0, kHi1, mag >> 16), lo_b = Prmt(kLo0, kLo1, mag >> 16);
  const uint32_t low_signs = w << 4;  // sign of the low nibble of byte k -> msb of byte k
  // Pair k = bytes [lo(e2k), hi(e2k), lo(e2k+1), hi(e2k+1)]; the sign word
  // replicates msb(low_signs.byte k) into byte 1 and msb(w.byte k) into byte 3.
  const uint32_t p0 = Prmt(lo_a, hi_a, 0x5140u) | (Prmt(low_signs, w, 0xC080u) & 0x80008000u);
  const uint32_t p1 = Prmt(lo_a, hi_a, 0x7362u) | (Prmt(low_signs, w, 0xD090u) & 0x80008000u);
  const uint32_t p2 = Prmt(lo_b, hi_b, 0x5140u) | (Prmt(low_signs, w, 0xE0A0u) & 0x80008000u);
  const uint32_t p3 = Prmt(lo_b, hi_b, 0x7362u) | (Prmt(low_signs, w, 0xF0B0u) & 0x80008000u);
  out.x = Bf16x2Bits(__hmul2(Bf16x2(p0), scale));
  out.y = Bf16x2Bits(__hmul2(Bf16x2(p1), scale));
  out.z = Bf16x2Bits(__hmul2(Bf16x2(p2), scale));
  out.w = Bf16x2Bits(__hmul2(Bf16x2(p3), scale));
}

// Barrier of the 4 warps of warp set `set` (named barriers 1 and 2; 0 is
// __syncthreads).
__device__ __forceinline__ void SetBarrier(int set) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + set), "n"(kWarps * 32) : "memory");
}

// Byte offset of 16-byte chunk `chunk` (0..15) of row `row` in a bf16 slice
// [32][128]: chunks permuted within each group of 8 by row % 8, so the 8 rows
// an ldmatrix phase reads (same logical chunk) hit 8 different bank groups.
__device__ __forceinline__ uint32_t SliceOffset(int row, int chunk) {
  return static_cast<uint32_t>(row * (kSlice * 2) + ((chunk ^ (row & 7)) << 4));
}

__global__ void __launch_bounds__(kThreads, 1)
    SparseDecodeAttentionKernel(const __grid_constant__ KernelArgs a) {
  GridDependencyPrologue();
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int set = static_cast<int>(threadIdx.x) / (kWarps * 32);
  const int warp = (static_cast<int>(threadIdx.x) >> 5) % kWarps;  // slice within the set
  const int g = lane >> 2, t = lane & 3;  // mma fragment row group / column pair
  const int64_t query = blockIdx.x / a.head_groups;
  const int head0 = static_cast<int>(blockIdx.x % a.head_groups) * kHeads;
  if (a.query_role != nullptr && a.query_role[query] != a.role) return;  // the other launch's

  uint8_t* const set_smem = smem + set * kSetBytes;
  uint8_t* const stages = set_smem + warp * (kStages * kStageBytes);
  uint8_t* const slice = set_smem + kWarps * kStages * kStageBytes + warp * kSliceBytes;
  float4* const partials =
      reinterpret_cast<float4*>(set_smem + kWarps * (kStages * kStageBytes + kSliceBytes));
  const uint32_t stages_addr = SharedAddress(stages);
  const uint32_t slice_addr = SharedAddress(slice);

  // Q of heads head0 + g and head0 + g + 8 over this warp's dims, as the A
  // fragments of the 8 k-steps: {row g, k 2t..2t+1}, {g+8, 2t}, {g, 2t+8}, {g+8, 2t+8}.
  uint32_t qf[kSlice / 16][4];
  {
    const bool lo_ok = head0 + g < a.heads, hi_ok = head0 + g + 8 < a.heads;
    const float* q_lo = lo_ok ? a.q + (query * a.heads + head0 + g) * kHeadDim : a.q;
    const float* q_hi = hi_ok ? a.q + (query * a.heads + head0 + g + 8) * kHeadDim : a.q;
    const float2 zero = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int ks = 0; ks < kSlice / 16; ++ks) {
      const int d = warp * kSlice + ks * 16 + 2 * t;
      const float2 v0 = lo_ok ? *reinterpret_cast<const float2*>(q_lo + d) : zero;
      const float2 v1 = hi_ok ? *reinterpret_cast<const float2*>(q_hi + d) : zero;
      const float2 v2 = lo_ok ? *reinterpret_cast<const float2*>(q_lo + d + 8) : zero;
      const float2 v3 = hi_ok ? *reinterpret_cast<const float2*>(q_hi + d + 8) : zero;
      qf[ks][0] = PackBf16(v0.x, v0.y);
      qf[ks][1] = PackBf16(v1.x, v1.y);
      qf[ks][2] = PackBf16(v2.x, v2.y);
      qf[ks][3] = PackBf16(v3.x, v3.y);
    }
  }

  float o[kSlice / 8][4];  // O [16 heads x 128 dims]: C fragments of 16 n-tiles
#pragma unroll
  for (int n = 0; n < kSlice / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // heads g, g + 8 (log2 domain)
  float row_sum[2] = {0.0f, 0.0f};

  const int win_tiles = (a.win_width + kTile - 1) / kTile;
  const int tiles = win_tiles + (a.comp_width + kTile - 1) / kTile;
  // This set's k-th tile is tile set + kSets * k; it has `mine` of them.
  const int mine = (tiles - set + kSets - 1) / kSets;

  // This lane's list entry (row `lane`) of the set's k-th tile, or -1:
  // padding, past the list, or outside the pool.
  auto fetch_index = [&](int k) -> int32_t {
    if (k >= mine) return -1;
    const int i = set + kSets * k;
    const bool fp8 = i < win_tiles;
    const int width = fp8 ? a.win_width : a.comp_width;
    const int entry = (fp8 ? i : i - win_tiles) * kTile + lane;
    if (entry >= width) return -1;
    const int32_t v = __ldg((fp8 ? a.win_index : a.comp_index) + query * width + entry);
    return (v >= 0 && v < (fp8 ? a.win_rows : a.comp_rows)) ? v : -1;
  };
  // Starts the copies of the set's k-th tile (this warp's slice of its valid
  // rows) into ring stage k % kStages; returns the tile's valid-row mask
  // (same in every warp of the set).
  auto issue = [&](int k, int32_t idx) -> uint32_t {
    const uint32_t mask = __ballot_sync(0xFFFFFFFFu, idx >= 0);
    if (k >= mine || mask == 0) return mask;
    const uint32_t stage = stages_addr + (k % kStages) * kStageBytes;
    if (set + kSets * k < win_tiles) {
#pragma unroll
      for (int j = 0; j < kTile * 8 / 32; ++j) {  // 8 chunks of 16 bytes per row slice
        const int row = j * 4 + (lane >> 3), part = lane & 7;
        const int32_t r = __shfl_sync(0xFFFFFFFFu, idx, row);
        if (r >= 0) {
          CpAsync16(stage + row * (kFp8Row / kWarps) + part * 16,
                    a.win_codes + static_cast<int64_t>(r) * kFp8Row + warp * (kFp8Row / kWarps) +
                        part * 16);
        }
      }
      if (idx >= 0) {
        CpAsyncCa<4>(stage + kStageCodeBytes + lane * 4,
                     a.win_scales + static_cast<int64_t>(idx) * kFp8ScaleRow + warp * 4);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kTile * 4 / 32; ++j) {  // 4 chunks of 16 bytes per row slice
        const int row = j * 8 + (lane >> 2), part = lane & 3;
        const int32_t r = __shfl_sync(0xFFFFFFFFu, idx, row);
        if (r >= 0) {
          CpAsync16(stage + row * (kFp4Row / kWarps) + part * 16,
                    a.comp_codes + static_cast<int64_t>(r) * kFp4Row + warp * (kFp4Row / kWarps) +
                        part * 16);
        }
      }
      if (idx >= 0) {
        CpAsyncCa<8>(stage + kStageCodeBytes + lane * 8,
                     a.comp_scales + static_cast<int64_t>(idx) * kFp4ScaleRow + warp * 8);
      }
    }
    return mask;
  };

  // Prologue: kStages - 1 tiles in flight, the next tile's index fetched.
  uint32_t masks[kStages];  // masks[j]: the set's tile k + j
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    masks[j] = issue(j, fetch_index(j));
    CpAsyncCommit();
  }
  int32_t next_idx = fetch_index(kStages - 1);
  int processed = 0;

  for (int k = 0; k < mine; ++k) {
    __syncwarp();  // every lane is done with tile k - 1's stage and the slice
    masks[kStages - 1] = issue(k + kStages - 1, next_idx);
    CpAsyncCommit();  // one group per iteration, possibly empty
    next_idx = fetch_index(k + kStages);
    const uint32_t mask = masks[0];
#pragma unroll
    for (int j = 0; j + 1 < kStages; ++j) masks[j] = masks[j + 1];
    if (mask == 0) continue;  // uniform over the set: its warps read the same list
    CpAsyncWait<kStages - 1>();
    __syncwarp();

    // Dequantize the stage into the bf16 slice; rows not listed become 0.
    {
      const uint8_t* stage = stages + (k % kStages) * kStageBytes;
      const bool fp8 = set + kSets * k < win_tiles;
#pragma unroll 4
      for (int j = 0; j < kTile / 2; ++j) {
        const int row = 2 * j + (lane >> 4), c = lane & 15;  // c: chunk of 8 dims
        uint4 v;
        if (fp8) {  // warp-uniform
          const uint2 codes =
              *reinterpret_cast<const uint2*>(stage + row * (kFp8Row / kWarps) + c * 8);
          const float s = E8m0ToFloat(stage[kStageCodeBytes + row * 4 + (c >> 2)]);
          v.x = Fp8PairToBf16(codes.x, s);
          v.y = Fp8PairToBf16(codes.x >> 16, s);
          v.z = Fp8PairToBf16(codes.y, s);
          v.w = Fp8PairToBf16(codes.y >> 16, s);
        } else {
          const uint32_t codes =
              *reinterpret_cast<const uint32_t*>(stage + row * (kFp4Row / kWarps) + c * 4);
          const float s = E4m3ToFloat(stage[kStageCodeBytes + row * 8 + (c >> 1)]);
          Fp4x8ToBf16(codes, __float2bfloat162_rn(s), v);
        }
        // Unlisted rows were never copied: whatever the stage holds becomes 0
        // (a select, not a branch).
        if (!((mask >> row) & 1u)) v = make_uint4(0u, 0u, 0u, 0u);
        *reinterpret_cast<uint4*>(slice + SliceOffset(row, c)) = v;
      }
    }
    __syncwarp();

    // Partial logits over this warp's 128 dims: S[16 heads x 32 rows].
    float s[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kp = 0; kp < kSlice / 32; ++kp) {
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const int row = n * 8 + (lane & 7), chunk = kp * 4 + (lane >> 3);
        uint32_t b0, b1, b2, b3;  // B fragments of k-steps 2kp (b0, b1) and 2kp + 1
        LdMatrixX4(slice_addr + SliceOffset(row, chunk), b0, b1, b2, b3);
        MmaBf16(s[n], qf[2 * kp], b0, b1);
        MmaBf16(s[n], qf[2 * kp + 1], b2, b3);
      }
    }

    // Full logits: the set's 4 partials summed in warp order by each of its warps.
    const int buf = processed & 1;
    ++processed;
    float4* const part = partials + buf * (kWarps * 4 * 32);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      part[(warp * 4 + n) * 32 + lane] = make_float4(s[n][0], s[n][1], s[n][2], s[n][3]);
    }
    SetBarrier(set);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      float4 acc = warp == 0 ? make_float4(s[n][0], s[n][1], s[n][2], s[n][3]) : part[n * 32 + lane];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) {
        const float4 v =
            warp == w ? make_float4(s[n][0], s[n][1], s[n][2], s[n][3]) : part[(w * 4 + n) * 32 + lane];
        acc.x += v.x;
        acc.y += v.y;
        acc.z += v.z;
        acc.w += v.w;
      }
      // Scaled to the log2 domain; unlisted rows -inf. Elements 0, 1: head g,
      // rows 8n + 2t, +1; elements 2, 3: head g + 8, same rows.
      const bool ok0 = (mask >> (n * 8 + 2 * t)) & 1u, ok1 = (mask >> (n * 8 + 2 * t + 1)) & 1u;
      s[n][0] = ok0 ? acc.x * a.scale_log2 : -INFINITY;
      s[n][1] = ok1 ? acc.y * a.scale_log2 : -INFINITY;
      s[n][2] = ok0 ? acc.z * a.scale_log2 : -INFINITY;
      s[n][3] = ok1 ? acc.w * a.scale_log2 : -INFINITY;
    }

    // Online softmax (fmaxf: a NaN logit never becomes the maximum, as the
    // reference's std::max). Rows are reduced over the 4 lanes of a quad.
    float alpha[2], m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = -INFINITY;
#pragma unroll
      for (int n = 0; n < 4; ++n) m = fmaxf(m, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 2));
      const float m_new = fmaxf(row_max[r], m);
      m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = exp2f(row_max[r] - m_use[r]);
      row_max[r] = m_new;
    }
    uint32_t pa[2][4];  // P as the A fragments of the two 16-row k-steps
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const __nv_bfloat162 p = __floats2bfloat162_rn(exp2f(s[n][2 * r] - m_use[r]),
                                                       exp2f(s[n][2 * r + 1] - m_use[r]));
        const float2 pf = __bfloat1622float2(p);
        sum[r] += pf.x + pf.y;  // the denominator sums the rounded weights
        pa[n >> 1][(n & 1) * 2 + r] = Bf16x2Bits(p);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xFFFFFFFFu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xFFFFFFFFu, sum[r], 2);
      row_sum[r] = row_sum[r] * alpha[r] + sum[r];
    }
    // Rescale O only when some running maximum moved (x1 is exact either way).
    if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < kSlice / 8; ++n) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
      }
    }

    // O += P V over this warp's dims: V by ldmatrix.trans of the same slice.
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
      for (int np = 0; np < kSlice / 16; ++np) {
        const int row = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), chunk = np * 2 + (lane >> 4);
        uint32_t b0, b1, b2, b3;  // B fragments of n-tiles 2np (b0, b1) and 2np + 1
        LdMatrixX4Trans(slice_addr + SliceOffset(row, chunk), b0, b1, b2, b3);
        MmaBf16(o[2 * np], pa[kk], b0, b1);
        MmaBf16(o[2 * np + 1], pa[kk], b2, b3);
      }
    }
  }
  CpAsyncWait<0>();  // nothing may be in flight at exit (all groups are empty by now)

  // Merge: set 1 hands its state (same fragment layout) to set 0 through
  // shared memory, which both sets are done with; set 0 combines
  //   m = max(m0, m1), O = O0 2^(m0-m) + O1 2^(m1-m), l likewise,
  // always in this order, then writes out = O / (l + exp(sink - m)).
  float* const merge = reinterpret_cast<float*>(smem);  // [warp][lane][64 O + 4 m/l]
  constexpr int kMergeFloats = kSlice / 8 * 4 + 4;
  float* const mine_state = merge + (warp * 32 + lane) * kMergeFloats;
  __syncthreads();
  if (set == 1) {
#pragma unroll
    for (int n = 0; n < kSlice / 8; ++n) {
      *reinterpret_cast<float4*>(mine_state + 4 * n) = make_float4(o[n][0], o[n][1], o[n][2], o[n][3]);
    }
    *reinterpret_cast<float4*>(mine_state + kSlice / 2) =
        make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]);
  }
  __syncthreads();
  if (set == 1) return;
  float f0[2], f1[2];
  {
    const float4 ml = *reinterpret_cast<const float4*>(mine_state + kSlice / 2);
    const float other_max[2] = {ml.x, ml.y}, other_sum[2] = {ml.z, ml.w};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m = fmaxf(row_max[r], other_max[r]);
      const float m_use = m == -INFINITY ? 0.0f : m;
      f0[r] = exp2f(row_max[r] - m_use);
      f1[r] = exp2f(other_max[r] - m_use);
      row_sum[r] = row_sum[r] * f0[r] + other_sum[r] * f1[r];
      row_max[r] = m;
    }
  }
#pragma unroll
  for (int n = 0; n < kSlice / 8; ++n) {
    const float4 v = *reinterpret_cast<const float4*>(mine_state + 4 * n);
    o[n][0] = o[n][0] * f0[0] + v.x * f1[0];
    o[n][1] = o[n][1] * f0[0] + v.y * f1[0];
    o[n][2] = o[n][2] * f0[1] + v.z * f1[1];
    o[n][3] = o[n][3] * f0[1] + v.w * f1[1];
  }

  // out = O / (sum + exp(sink - max)); a head without a listed row gets 0.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int head = head0 + g + 8 * r;
    if (head >= a.heads) continue;
    float* const dst = a.out + (query * a.heads + head) * kHeadDim + warp * kSlice + 2 * t;
    const bool any = row_max[r] != -INFINITY;
    const float denom =
        any ? row_sum[r] + exp2f(a.sink[head] * 1.4426950408889634f - row_max[r]) : 1.0f;
#pragma unroll
    for (int n = 0; n < kSlice / 8; ++n) {
      float2 v =
          any ? make_float2(o[n][2 * r] / denom, o[n][2 * r + 1] / denom) : make_float2(0.0f, 0.0f);
      if (a.round_bf16) v = make_float2(RoundToBf16(v.x), RoundToBf16(v.y));
      *reinterpret_cast<float2*>(dst + n * 8) = v;
    }
  }
}

}  // namespace sparse_decode
}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_SM90_CUH_
