// kernels/cuda/attention/sparse_decode_attention_wg_sm90.cuh — device code of
// SparseDecodeAttention's warpgroup kernel (SparseDecodeKernel::kWgmma64;
// contract in sparse_decode_attention_sm90.h, design in README.md). No host
// dependencies.
//
// One CTA = one query x 64 heads (the wgmma M), so each listed KV row is
// gathered and dequantized once for all heads of its query. 384 threads:
//   * producer warpgroup (warps 0-3, registers lowered to 56): warp w owns
//     rows 16w .. 16w + 15 of every 64-entry tile of the query's list. It
//     cp.asyncs each row in stored form into its private ring of kRawSlots
//     row slots (kRawSlots - 1 rows in flight), dequantizes it exactly to
//     bf16 into the tile's stage of the bf16 ring (kStages tiles, 128-byte
//     swizzle, K-major: the layout wgmma reads), and publishes the tile on
//     `full` with its valid-row mask; rows not listed become 0.
//   * two consumer warpgroups (224 registers): each computes S = Q K^T for
//     its 32 rows of the tile (wgmma m64n32k16, Q and K from shared memory),
//     the two exchange their per-head tile maxima through shared memory so
//     both hold the same running maximum, each writes its half of P (bf16)
//     into a shared tile, and each accumulates O[64 heads][its 256 dims] +=
//     P V over all 64 rows (wgmma m64n256k16, P K-major, V read transposed
//     from the same stage as K). The stage goes back on `empty`.
// The per-head denominators are per-thread partial sums (each scaled by the
// same factors as O), added in a fixed order at the end; the sink enters
// only the final denominator. Nothing depends on other queries: batch
// invariant and deterministic. Two instances of the kernel's template give
// the same bits by other routes: kMirror (the rows copied from bf16 mirrors
// by ProduceMirrorRows instead of dequantized) and kOverlap (the next
// tile's Q K^T issued behind this tile's P V).
#ifndef WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_WG_SM90_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_WG_SM90_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention/sparse_decode_attention_sm90.cuh"
#include "kernels/cuda/cluster.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rope_pair.cuh"
#include "kernels/cuda/rounding.cuh"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda {
namespace sparse_decode_wg {

using sparse_decode::KernelArgs;
// The wgmma and shared-memory building blocks of the dense GEMMs: descriptors
// of K-major operands in 128-byte swizzled atoms, the wgmma fence / commit /
// wait, the async-proxy fence (generic-proxy writes to shared memory, the
// dequantized rows, Q and P, become visible to wgmma: each writer fences
// before the barrier that publishes them) and the register pin.
using dense::fp8_gemm::DescriptorOf;
using dense::fp8_gemm::FenceSharedForAsyncProxy;
using dense::fp8_gemm::StoreSharedU32;
using dense::fp8_gemm::SwizzledKMajorDescriptorLo;
using dense::fp8_gemm::WgmmaCommit;
using dense::fp8_gemm::WgmmaFence;
using dense::fp8_gemm::WgmmaWait;

__device__ __forceinline__ uint64_t KMajorDescriptor(uint32_t addr) {
  return DescriptorOf(SwizzledKMajorDescriptorLo(addr));
}
__device__ __forceinline__ void Pin(float& v) { dense::fp8_gemm::PinRegister(v); }
__device__ __forceinline__ void StoreShared128(uint32_t addr, const uint4& v) {
  dense::fp8_gemm::StoreShared128(addr, v.x, v.y, v.z, v.w);
}

inline constexpr int kHeadDim = 512;
inline constexpr int kHeads = 64;  // heads per CTA: the wgmma M
inline constexpr int kTile = 64;   // list entries per tile
inline constexpr int kStages = 2;  // bf16 tiles in the ring
inline constexpr int kProducerWarps = 4;
inline constexpr int kRowsPerWarp = kTile / kProducerWarps;  // 16
inline constexpr int kConsumerThreads = 256;
inline constexpr int kThreads = kProducerWarps * 32 + kConsumerThreads;
inline constexpr int kMaxRanges = 8;   // a cluster's CTAs (the portable limit)
inline constexpr int kGroup = 4;       // rows a producer warp moves as one cp.async group
inline constexpr int kRingGroups = 3;  // groups in a producer warp's ring
inline constexpr int kRawSlots = kGroup * kRingGroups;  // stored rows in the ring
inline constexpr uint32_t kGroupMask = (1u << kGroup) - 1;
inline constexpr int kRawSlotBytes = 528;    // a window row: 512 codes + 16 scales
inline constexpr int kFp8ScaleAt = 512;      // window scales' byte in a slot
inline constexpr int kFp4ScaleAt = 256;      // compressed scales' byte in a slot
inline constexpr int kAtomBytes = 64 * 128;  // [64 rows][64 bf16]: one 128-byte swizzle column
inline constexpr int kOperandBytes = (kHeadDim / 64) * kAtomBytes;  // [64][512] bf16
// Shared memory, from the 1024-aligned base: Q, the bf16 ring, P, the raw
// rings, the tile maxima / denominators exchange, the valid-row masks, the
// raw slots' row numbers and the mbarriers.
inline constexpr int kQAt = 0;
inline constexpr int kKvAt = kQAt + kOperandBytes;
inline constexpr int kPAt = kKvAt + kStages * kOperandBytes;
inline constexpr int kRawAt = kPAt + kAtomBytes;
inline constexpr int kRedAt = kRawAt + kProducerWarps * kRawSlots * kRawSlotBytes;
inline constexpr int kMaskAt = kRedAt + 2 * kHeads * 4;
inline constexpr int kBarAt = kMaskAt + kStages * 8;
inline constexpr int kUsedBytes = kBarAt + 2 * kStages * 8;
inline constexpr int kSharedBytes = kUsedBytes + 1024;  // + the base's alignment slack
static_assert(kRawSlotBytes % 16 == 0 && kRawAt % 16 == 0 && kBarAt % 8 == 0);
static_assert(kSharedBytes <= 227 * 1024, "Hopper's shared memory per CTA");

// The descriptor of V [16 rows][256 dims] read MN-major from the swizzled
// tile: 64 dims (128 bytes) contiguous, the next 64 dims one atom further
// (leading byte offset kAtomBytes), the next 8 rows 1024 bytes further
// (stride byte offset), 128-byte swizzle.
__device__ __forceinline__ uint64_t MnMajorDescriptor(uint32_t addr) {
  return (uint64_t{(1024u >> 4) | (1u << 30)} << 32) | ((addr & 0x3FFFFu) >> 4) |
         (static_cast<uint32_t>(kAtomBytes >> 4) << 16);
}

// Byte of 16-byte chunk `chunk` (0..7) of row `row` in an atom.
__device__ __forceinline__ uint32_t AtomOffset(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ uint32_t LoadShared8(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t LoadShared32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint2 LoadShared64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
// Lane l holds dims 16 l .. 16 l + 15 of a row: atom l / 4, chunks 2 (l % 4)
// and 2 (l % 4) + 1. Lanes of odd atoms take their second chunk first, so
// each quarter-warp store phase hits 8 distinct chunks; the lane reads its
// codes in that order too, so no register is swapped. FirstChunk(lane) is
// the chunk (0 or 1 of the lane's two) taken first.
__device__ __forceinline__ int FirstChunk(int lane) { return (lane >> 2) & 1; }

// Writes the lane's two chunks of a dequantized row, `first` then `second`
// (chunks FirstChunk(lane) and 1 - FirstChunk(lane)), into a bf16 stage.
__device__ __forceinline__ void StoreDequantRow(uint32_t stage, int lane, int row, uint4 first,
                                                uint4 second) {
  const uint32_t atom = stage + (lane >> 2) * kAtomBytes;
  const int c0 = 2 * (lane & 3), f = FirstChunk(lane);
  StoreShared128(atom + AtomOffset(row, c0 + f), first);
  StoreShared128(atom + AtomOffset(row, c0 + 1 - f), second);
}

// Eight e4m3 codes (two words, low byte = lower dim) times a power-of-two
// scale as four bf16x2 words, or +0 when !ok (a row never copied: its slot
// holds stale or uninitialized bytes, codes and scale alike).
__device__ __forceinline__ uint4 Fp8QuadToBf16(uint32_t w0, uint32_t w1, float scale, bool ok) {
  if (!ok) {
    w0 = w1 = 0u;  // e4m3 0x00 is +0
    scale = 1.0f;
  }
  return make_uint4(
      sparse_decode::Fp8PairToBf16(w0, scale), sparse_decode::Fp8PairToBf16(w0 >> 16, scale),
      sparse_decode::Fp8PairToBf16(w1, scale), sparse_decode::Fp8PairToBf16(w1 >> 16, scale));
}

// Loads from another CTA's shared memory (ClusterSharedAddress).
__device__ __forceinline__ float LoadClusterF32(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float2 LoadClusterF32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n"
               : "=f"(v.x), "=f"(v.y)
               : "r"(addr)
               : "memory");
  return v;
}

// Barrier of the two consumer warpgroups (named barriers 1 - 3).
__device__ __forceinline__ void ConsumerBarrier(int id) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}

// d += A B^T over 16 dims (d = A B^T with kAccumulate false): A = Q [64
// heads][16], B = K [32 rows][16], both K-major with the 128-byte swizzle (by
// descriptor); bf16, fp32 accumulation.
template <bool kAccumulate = true>
__device__ __forceinline__ void WgmmaQk(uint64_t a_desc, uint64_t b_desc, float (&d)[16]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(a_desc), "l"(b_desc), "n"(kAccumulate ? 1 : 0)
      : "memory");
}

// d += A B over 16 rows: A = P [64 heads][16 rows] K-major, B = V [16 rows]
// [256 dims] read MN-major (transposed) from the tile QK read as K.
__device__ __forceinline__ void WgmmaPv(uint64_t a_desc, uint64_t b_desc, float (&d)[128]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a_desc), "l"(b_desc), "n"(1)
      : "memory");
}

// With a.g_width (a multiple of kHeadDim, the launcher's condition), the
// index of the head's value 0 in the grouped output: a head lies in one
// group, so its value d is at GroupedHeadBase + d. One division a head
// instead of one a pair.
__device__ __forceinline__ int64_t GroupedHeadBase(const KernelArgs& a, int64_t query, int head) {
  if (a.g_width == 0) return 0;
  const int64_t column = int64_t{head} * kHeadDim;
  return (column / a.g_width * a.g_rows + query) * a.g_width + column % a.g_width;
}

// StoreOutPair with the head's GroupedHeadBase `head_base` (d < kHeadDim).
__device__ __forceinline__ void StoreOutPairAt(const KernelArgs& a, int64_t query, int head, int d,
                                               float2 v, int64_t head_base) {
  if (a.g_width == 0) {
    *reinterpret_cast<float2*>(a.out + (query * a.heads + head) * kHeadDim + d) = v;
    return;
  }
  const int k = d - (kHeadDim - a.g_rope_dim);
  if (k >= 0) {
    const float2 cs =
        RopeCosSinAt(a.g_cos_sin, a.g_cos_sin_rows, a.g_positions[query], a.g_rope_dim / 2, k >> 1);
    const float2 r = RopeRotatePair(v.x, v.y, cs.x, cs.y, /*inverse=*/true);
    v = a.round_bf16 ? make_float2(RoundToBf16(r.x), RoundToBf16(r.y)) : r;
  }
  const int64_t at = head_base + d;
  if (a.g_out_bf16 != nullptr) {
    *reinterpret_cast<uint32_t*>(a.g_out_bf16 + at) =
        static_cast<uint32_t>(Bf16BitsOf(v.x)) | (static_cast<uint32_t>(Bf16BitsOf(v.y)) << 16);
  } else {
    *reinterpret_cast<float2*>(a.g_out + at) = v;
  }
}

// Writes out's values d and d + 1 (d even) of `head` for `query`: to out, or
// with a.g_width to the grouped projection's input: each head's last
// g_rope_dim values (whole pairs, d even) rotated back at the query's position
// and rounded when round_bf16 (SwapAxesRowsKernel's RoPE arithmetic, through
// rope_pair.cuh), then [group, query, column] as fp32 or as ToBf16's bits.
__device__ __forceinline__ void StoreOutPair(const KernelArgs& a, int64_t query, int head, int d,
                                             float2 v) {
  StoreOutPairAt(a, query, head, d, v, GroupedHeadBase(a, query, head));
}

// The producer of the mirror form (kMirror; KernelArgs::win_bf16 /
// comp_bf16): warp `warp` copies its 16 rows of each tile, already bf16, into
// the stage (two 16-byte copies a lane a row, straight into the swizzled
// atoms; a row not listed is zero-filled, nothing read), one cp.async group a
// tile; a tile is published before the next one's stage is waited for, its
// copies in flight while the consumers work on the tile before.
__device__ __forceinline__ void ProduceMirrorRows(const KernelArgs& a, uint8_t* smem, uint32_t base,
                                                  int warp, int lane, int64_t query, int tile0,
                                                  int tiles, int entries, uint32_t full0,
                                                  uint32_t empty0) {
  // Lane k < 16: the pool row of the warp's row k in tile t, or -1.
  auto row_at = [&](int t) -> int32_t {
    const int e = (tile0 + t) * kTile + warp * kRowsPerWarp + (lane & (kRowsPerWarp - 1));
    if (t >= tiles || lane >= kRowsPerWarp || e >= entries) return -1;
    const bool fp8 = e < a.win_width;
    const int32_t v = fp8 ? __ldg(a.win_index + query * a.win_width + e)
                          : __ldg(a.comp_index + query * a.comp_width + (e - a.win_width));
    return (v >= 0 && v < (fp8 ? a.win_rows : a.comp_rows)) ? v : -1;
  };
  // Any readable address for the zero-filled copies (nothing is read).
  const uint16_t* const dummy = a.win_bf16 != nullptr ? a.win_bf16 : a.comp_bf16;
  auto publish = [&](int t, uint32_t valid) {
    const int s = t % kStages;
    if (lane == 0) {
      reinterpret_cast<volatile uint16_t*>(smem + kMaskAt + 8 * s)[warp] =
          static_cast<uint16_t>(valid);
    }
    FenceSharedForAsyncProxy();
    MbarrierArrive(full0 + 8 * s);
  };
  int32_t cur = row_at(0);
  uint32_t prev_valid = 0;
#pragma unroll 1
  for (int t = 0; t < tiles; ++t) {
    const int32_t next = row_at(t + 1);  // the next tile's index loads, in flight
    // Tile t - 1 is published before tile t's stage is waited for: a consumer
    // may hold that stage until it has seen tile t - 1 (wgmma_overlap).
    if (t > 0) {
      CpAsyncWait<0>();  // this lane's copies of tile t - 1 have landed
      publish(t - 1, prev_valid);
    }
    const int s = t % kStages;
    if (t >= kStages) MbarrierWait(empty0 + 8 * s, ((t / kStages) - 1) & 1);
    const uint32_t valid = __ballot_sync(0xFFFFFFFFu, cur >= 0) & 0xFFFFu;
    const uint32_t stage = base + kKvAt + s * kOperandBytes;
    const int e0 = (tile0 + t) * kTile + warp * kRowsPerWarp;
#pragma unroll 4
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int32_t r = __shfl_sync(0xFFFFFFFFu, cur, k);
      const uint16_t* const pool = e0 + k < a.win_width ? a.win_bf16 : a.comp_bf16;
      const uint16_t* const src = r >= 0 ? pool + static_cast<int64_t>(r) * kHeadDim : dummy;
      const uint32_t bytes = r >= 0 ? 16u : 0u;
      const int row = warp * kRowsPerWarp + k;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int c = lane + 32 * h;  // the row's 16-byte chunk: dims 8 c .. 8 c + 7
        sparse_decode::CpAsync16OrZero(stage + (c >> 3) * kAtomBytes + AtomOffset(row, c & 7),
                                       src + 8 * c, bytes);
      }
    }
    CpAsyncCommit();
    prev_valid = valid;
    cur = next;
  }
  if (tiles > 0) {
    CpAsyncWait<0>();
    publish(tiles - 1, prev_valid);
  }
}

template <bool kMirror, bool kOverlap>
__global__ void __launch_bounds__(kThreads, 1)
    SparseDecodeAttentionWgKernel(const __grid_constant__ KernelArgs a) {
  GridDependencyPrologue();
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* const smem =
      smem_raw + ((1024u - (SharedAddress(smem_raw) & 1023u)) & 1023u);  // 1024-aligned
  const uint32_t base = SharedAddress(smem);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  // Block x: ((query, head group), range); the ranges of a (query, head
  // group) are one cluster, rank = range.
  const int64_t qg = blockIdx.x / a.ranges;
  const int rank = a.ranges > 1 ? static_cast<int>(ClusterCtaRank()) : 0;
  const int64_t query = qg / a.head_groups;
  const int head0 = static_cast<int>(qg % a.head_groups) * kHeads;
  // The other launch's query: every CTA of its cluster returns here, before
  // any cluster barrier.
  if (a.query_role != nullptr && a.query_role[query] != a.role) return;
  const int entries = a.win_width + a.comp_width;
  const int all_tiles = (entries + kTile - 1) / kTile;
  const int tile0 = min(rank * a.range_tiles, all_tiles);   // this CTA's tiles: tile0 ..
  const int tiles = min(all_tiles - tile0, a.range_tiles);  // .. tile0 + tiles - 1
  const uint32_t full0 = base + kBarAt, empty0 = full0 + 8 * kStages;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(full0 + 8 * s, kProducerWarps * 32);
      MbarrierInit(empty0 + 8 * s, 256);
    }
    FenceMbarrierInit();
  }
  __syncthreads();

  if (warp < kProducerWarps) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    if constexpr (kMirror) {
      ProduceMirrorRows(a, smem, base, warp, lane, query, tile0, tiles, entries, full0, empty0);
      if (a.ranges > 1) {  // the consumers' two cluster barrier phases (below)
        ClusterSync();
        ClusterSync();
      }
      return;
    }
    // Warp `warp`'s stream: its row j is entry (j / 16) * 64 + 16 warp + j % 16.
    // Rows go through the ring in groups of kGroup (one cp.async group each,
    // kRingGroups groups in the ring); a group is one tile's, and one pool
    // kind unless the window width cuts it.
    const int rows = tiles * kRowsPerWarp;
    const int groups = rows / kGroup;
    const uint32_t raw = base + kRawAt + warp * kRawSlots * kRawSlotBytes;
    auto entry_of = [&](int j) {
      return (tile0 + j / kRowsPerWarp) * kTile + warp * kRowsPerWarp + j % kRowsPerWarp;
    };
    // Pool row of stream row j, or -1 (padding, past the list, outside the pool).
    auto row_of = [&](int j) -> int32_t {
      const int e = entry_of(j);
      if (j >= rows || e >= entries) return -1;
      const bool fp8 = e < a.win_width;
      const int32_t v = fp8 ? __ldg(a.win_index + query * a.win_width + e)
                            : __ldg(a.comp_index + query * a.comp_width + (e - a.win_width));
      return (v >= 0 && v < (fp8 ? a.win_rows : a.comp_rows)) ? v : -1;
    };
    // Lane l: row_of(32 c + l) of the current chunk c of 32 stream rows, and
    // of the next chunk (loaded a chunk ahead, so the index loads overlap).
    int32_t rows32 = row_of(lane), next32 = row_of(32 + lane);
    uint32_t listed = 0;  // bit k: the row in ring slot k is listed (uniform)
    int issue_ring = 0;   // ring position of the next group issued
    // Starts the copies of group g (stream rows kGroup g ..) into ring
    // position issue_ring; commits one group (empty past the stream).
    auto issue_group = [&](int g) {
      if (g < groups) {
        const int j0 = kGroup * g;
        if (j0 % 32 == 0 && j0 > 0) {
          rows32 = next32;
          next32 = row_of(j0 + 32 + lane);
        }
        const int slot0 = issue_ring * kGroup;
        uint32_t bits = 0;
#pragma unroll
        for (int k = 0; k < kGroup; ++k) {
          const int j = j0 + k;
          const int32_t r = __shfl_sync(0xFFFFFFFFu, rows32, j % 32);
          bits |= static_cast<uint32_t>(r >= 0) << k;
          const uint32_t dst = raw + (slot0 + k) * kRawSlotBytes;
          if (r < 0) continue;
          if (entry_of(j) < a.win_width) {
            sparse_decode::CpAsync16(dst + 16 * lane,
                                     a.win_codes + static_cast<int64_t>(r) * 512 + 16 * lane);
            if (lane < 4) {
              sparse_decode::CpAsyncCa<4>(dst + kFp8ScaleAt + 4 * lane,
                                          a.win_scales + static_cast<int64_t>(r) * 16 + 4 * lane);
            }
          } else if (lane < 16) {
            sparse_decode::CpAsync16(dst + 16 * lane,
                                     a.comp_codes + static_cast<int64_t>(r) * 256 + 16 * lane);
          } else if (lane < 20) {
            sparse_decode::CpAsyncCa<8>(
                dst + kFp4ScaleAt + 8 * (lane - 16),
                a.comp_scales + static_cast<int64_t>(r) * 32 + 8 * (lane - 16));
          }
        }
        listed = (listed & ~(kGroupMask << slot0)) | (bits << slot0);
        issue_ring = issue_ring == kRingGroups - 1 ? 0 : issue_ring + 1;
      }
      CpAsyncCommit();
    };
#pragma unroll 1
    for (int g = 0; g < kRingGroups - 1; ++g) issue_group(g);
    uint32_t valid = 0;                  // the valid rows of the warp's 16 in the current tile
    int ring = 0;                        // ring position of group g
    const int first = FirstChunk(lane);  // the lane's chunk read and stored first
#pragma unroll 1
    for (int g = 0; g < groups; ++g) {
      issue_group(g + kRingGroups - 1);  // into the slots group g - 1 used
      const int j0 = kGroup * g, t = j0 / kRowsPerWarp, i0 = j0 % kRowsPerWarp;
      const int s = t % kStages;
      if (i0 == 0 && t >= kStages) MbarrierWait(empty0 + 8 * s, ((t / kStages) - 1) & 1);
      CpAsyncWait<kRingGroups - 1>();  // this lane's copies of group g have landed
      __syncwarp();                    // ... and every lane's
      const int slot0 = ring * kGroup;
      const uint32_t bits = (listed >> slot0) & kGroupMask;
      valid |= bits << i0;
      const uint32_t stage = base + kKvAt + s * kOperandBytes;
      const int row0 = warp * kRowsPerWarp + i0;
      const uint32_t src0 = raw + slot0 * kRawSlotBytes;
      const int e0 = entry_of(j0);
      // Rows not listed were never copied: their slot's bytes become 0 (a
      // select, not a branch).
      if (e0 + kGroup <= a.win_width) {  // all window rows (uniform)
#pragma unroll
        for (int k = 0; k < kGroup; k += 2) {
          uint4 v[2][2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t src = src0 + (k + h) * kRawSlotBytes;
            const uint2 c0 = LoadShared64(src + 16 * lane + 8 * first);
            const uint2 c1 = LoadShared64(src + 16 * lane + 8 * (1 - first));
            const float sc = E8m0ToFloat(LoadShared8(src + kFp8ScaleAt + (lane >> 1)));
            const bool ok = (bits >> (k + h)) & 1u;
            v[h][0] = Fp8QuadToBf16(c0.x, c0.y, sc, ok);
            v[h][1] = Fp8QuadToBf16(c1.x, c1.y, sc, ok);
          }
          StoreDequantRow(stage, lane, row0 + k, v[0][0], v[0][1]);
          StoreDequantRow(stage, lane, row0 + k + 1, v[1][0], v[1][1]);
        }
      } else if (e0 >= a.win_width) {  // all compressed rows (uniform)
#pragma unroll
        for (int k = 0; k < kGroup; k += 2) {
          uint4 v[2][2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t src = src0 + (k + h) * kRawSlotBytes;
            const uint32_t c0 = LoadShared32(src + 8 * lane + 4 * first);
            const uint32_t c1 = LoadShared32(src + 8 * lane + 4 * (1 - first));
            const bool ok = (bits >> (k + h)) & 1u;
            const __nv_bfloat162 sc = __float2bfloat162_rn(
                ok ? E4m3ToFloat(LoadShared8(src + kFp4ScaleAt + lane)) : 1.0f);
            sparse_decode::Fp4x8ToBf16(ok ? c0 : 0u, sc, v[h][0]);
            sparse_decode::Fp4x8ToBf16(ok ? c1 : 0u, sc, v[h][1]);
          }
          StoreDequantRow(stage, lane, row0 + k, v[0][0], v[0][1]);
          StoreDequantRow(stage, lane, row0 + k + 1, v[1][0], v[1][1]);
        }
      } else {  // the group the window width cuts: row by row
#pragma unroll 1
        for (int k = 0; k < kGroup; ++k) {
          const uint32_t src = src0 + k * kRawSlotBytes;
          const bool ok = (bits >> k) & 1u;
          uint4 lo, hi;
          if (e0 + k < a.win_width) {
            const uint2 c0 = LoadShared64(src + 16 * lane + 8 * first);
            const uint2 c1 = LoadShared64(src + 16 * lane + 8 * (1 - first));
            const float sc = E8m0ToFloat(LoadShared8(src + kFp8ScaleAt + (lane >> 1)));
            lo = Fp8QuadToBf16(c0.x, c0.y, sc, ok);
            hi = Fp8QuadToBf16(c1.x, c1.y, sc, ok);
          } else {
            const uint32_t c0 = LoadShared32(src + 8 * lane + 4 * first);
            const uint32_t c1 = LoadShared32(src + 8 * lane + 4 * (1 - first));
            const __nv_bfloat162 sc = __float2bfloat162_rn(
                ok ? E4m3ToFloat(LoadShared8(src + kFp4ScaleAt + lane)) : 1.0f);
            sparse_decode::Fp4x8ToBf16(ok ? c0 : 0u, sc, lo);
            sparse_decode::Fp4x8ToBf16(ok ? c1 : 0u, sc, hi);
          }
          StoreDequantRow(stage, lane, row0 + k, lo, hi);
        }
      }
      ring = ring == kRingGroups - 1 ? 0 : ring + 1;
      if (i0 + kGroup == kRowsPerWarp) {
        if (lane == 0) {
          reinterpret_cast<volatile uint16_t*>(smem + kMaskAt + 8 * s)[warp] =
              static_cast<uint16_t>(valid);
        }
        valid = 0;
        FenceSharedForAsyncProxy();
        MbarrierArrive(full0 + 8 * s);
      }
      __syncwarp();  // every lane has read group g's slots before they are refilled
    }
    CpAsyncWait<0>();
    if (a.ranges > 1) {  // the consumers' two cluster barrier phases (below)
      ClusterSync();
      ClusterSync();
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int wg = warp / 4 - 1;  // consumer warpgroup: rows 32 wg .. of a tile, dims 256 wg ..
  const int cw = warp % 4;      // heads 16 cw .. 16 cw + 15 of the wgmma tiles
  const int ctid = tid - 128;
  // Q -> bf16 [64 heads][512] K-major, swizzled; heads past `heads` are 0.
  // A thread's 16 chunks of q in two rounds of 8, each round's loads issued
  // before its first chunk is widened (ncu: staging q waited on its loads for
  // 11 % of the mirror form's samples when the loop kept 4 in flight). A head
  // past `heads` loads head heads - 1's chunk and writes zeros.
  constexpr int kQChunks = kHeads * 64 / 256;  // 8-dim chunks a thread
  constexpr int kQRound = 8;
#pragma unroll
  for (int r0 = 0; r0 < kQChunks; r0 += kQRound) {
    float2 x[kQRound][4];
#pragma unroll
    for (int u = 0; u < kQRound; ++u) {
      const int c = (r0 + u) * 256 + ctid, h = c >> 6, ch = c & 63;  // head, 8-dim chunk
      const int head = min(head0 + h, a.heads - 1);
      const float2* src = reinterpret_cast<const float2*>(
          a.q + (query * a.heads + head) * kHeadDim + 8 * ch);  // q is 8-byte aligned
#pragma unroll
      for (int e = 0; e < 4; ++e) x[u][e] = src[e];
    }
#pragma unroll
    for (int u = 0; u < kQRound; ++u) {
      const int c = (r0 + u) * 256 + ctid, h = c >> 6, ch = c & 63;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (head0 + h < a.heads) {
        v = make_uint4(sparse_decode::PackBf16(x[u][0].x, x[u][0].y),
                       sparse_decode::PackBf16(x[u][1].x, x[u][1].y),
                       sparse_decode::PackBf16(x[u][2].x, x[u][2].y),
                       sparse_decode::PackBf16(x[u][3].x, x[u][3].y));
      }
      StoreShared128(base + kQAt + (ch >> 3) * kAtomBytes + AtomOffset(h, ch & 7), v);
    }
  }
  FenceSharedForAsyncProxy();
  ConsumerBarrier(1);

  float o[128];  // O[head][dim]: o[4 i + r] at head 16 cw + lane / 4 + 8 (r / 2), dim 256 wg + 8 i
                 // + 2 (lane % 4) + r % 2
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};  // heads lo, hi (log2 domain)
  float l_run[2] = {0.0f, 0.0f};            // this thread's share of the denominators
  const int h_lo = cw * 16 + (lane >> 2), h_hi = h_lo + 8;
  float* const red = reinterpret_cast<float*>(smem + kRedAt);  // [2 warpgroups][64 heads]
  const uint32_t p_tile = base + kPAt;
  // One listed tile after its S = Q K^T has landed in sc: the scaled and
  // masked logits, the running maxima (exchanged between the warpgroups),
  // P into the shared tile, O rescaled, and O += P V issued and committed
  // (not waited). `logits_read` runs once the logits are out of sc (kOverlap
  // issues the next tile's S into it there).
  auto softmax_then_pv = [&](uint32_t kv, uint64_t mask, const float(&sc)[16], auto&& logits_read) {
    // The logits in registers of their own: sc stays an accumulator only
    // (with kOverlap the next tile's S is issued into it while P V runs).
    float lg[16];
    // Scaled logits, -inf for rows not listed; the tile's maximum per head
    // over both warpgroups' rows (fmaxf: a NaN logit never becomes it).
    const uint32_t mine = static_cast<uint32_t>(mask >> (32 * wg));
    float m_tile[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = 8 * i + 2 * (lane & 3) + (r & 1);
        const float x = ((mine >> row) & 1u) ? sc[4 * i + r] * a.scale_log2 : -INFINITY;
        lg[4 * i + r] = x;
        m_tile[r >> 1] = fmaxf(m_tile[r >> 1], x);
      }
    }
    logits_read();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_tile[r] = fmaxf(m_tile[r], __shfl_xor_sync(0xFFFFFFFFu, m_tile[r], 1));
      m_tile[r] = fmaxf(m_tile[r], __shfl_xor_sync(0xFFFFFFFFu, m_tile[r], 2));
    }
    if ((lane & 3) == 0) {
      red[wg * kHeads + h_lo] = m_tile[0];
      red[wg * kHeads + h_hi] = m_tile[1];
    }
    ConsumerBarrier(2);
    float alpha[2], m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = r == 0 ? h_lo : h_hi;
      const float m_new = fmaxf(m_run[r], fmaxf(red[h], red[kHeads + h]));
      m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = exp2f(m_run[r] - m_use[r]);
      m_run[r] = m_new;
    }
    // P rounded to bf16; the denominators sum the rounded values. Written
    // into the P tile [64 heads][64 rows] (K-major, one swizzled atom) at
    // this warpgroup's 32 rows.
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const __nv_bfloat162 p = __floats2bfloat162_rn(exp2f(lg[4 * i + 2 * r] - m_use[r]),
                                                       exp2f(lg[4 * i + 2 * r + 1] - m_use[r]));
        const float2 pf = __bfloat1622float2(p);
        sum[r] += pf.x + pf.y;
        const int h = r == 0 ? h_lo : h_hi;
        StoreSharedU32(p_tile + AtomOffset(h, 4 * wg + i) + 4 * (lane & 3),
                       sparse_decode::Bf16x2Bits(p));
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + sum[r];
    if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
    }
    FenceSharedForAsyncProxy();
    ConsumerBarrier(3);  // both halves of P are in place

    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kTile / 16; ++k) {
      WgmmaPv(KMajorDescriptor(p_tile + 32 * k),
              MnMajorDescriptor(kv + 4 * wg * kAtomBytes + 16 * k * 128), o);
    }
    WgmmaCommit();
  };
  // S = Q K^T of the tile in stage `kv` into sc, issued and committed.
  // kOverlap: the first product writes sc instead of adding to zeros (sc may
  // not be written by other instructions while P V is in flight: ptxas would
  // serialize every wgmma); the sums are the same.
  auto issue_qk = [&](uint32_t kv, float(&sc)[16]) {
    if constexpr (!kOverlap) {
#pragma unroll
      for (int i = 0; i < 16; ++i) sc[i] = 0.0f;
    }
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kHeadDim / 16; ++k) {
      const uint32_t at = (k >> 2) * kAtomBytes + (k & 3) * 32;
      const uint64_t qd = KMajorDescriptor(base + kQAt + at),
                     kd = KMajorDescriptor(kv + at + wg * 32 * 128);
      if (kOverlap && k == 0) {
        WgmmaQk<false>(qd, kd, sc);
      } else {
        WgmmaQk(qd, kd, sc);
      }
    }
    WgmmaCommit();
  };
  float sc[16];  // S[head][row]: sc[4 i + r] at head h_lo / h_hi, row 32 wg + 8 i + 2 (lane % 4)
                 // + r % 2
  if constexpr (!kOverlap) {
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
      const int s = t % kStages;
      MbarrierWait(full0 + 8 * s, (t / kStages) & 1);
      const uint64_t mask = *reinterpret_cast<volatile uint64_t*>(smem + kMaskAt + 8 * s);
      if (mask == 0) {  // uniform: the whole tile is padding
        MbarrierArrive(empty0 + 8 * s);
        continue;
      }
      const uint32_t kv = base + kKvAt + s * kOperandBytes;
      issue_qk(kv, sc);
      WgmmaWait(0);
#pragma unroll
      for (int i = 0; i < 16; ++i) Pin(sc[i]);
      softmax_then_pv(kv, mask, sc, [] {});
      WgmmaWait(0);
#pragma unroll
      for (int i = 0; i < 128; ++i) Pin(o[i]);
      MbarrierArrive(empty0 + 8 * s);
    }
  } else {
    // The next tile's S = Q K^T is issued as soon as this tile's logits are
    // out of sc, so the tensor cores compute it while this tile's softmax,
    // P and rescale run on the CUDA cores (and beside its P V); both are
    // waited for once, after P V is issued. Every accumulator takes the same
    // instructions in the same order as above (the first product of S writes
    // instead of adding to zeros), so the bits are the same. The look-ahead
    // waits for tile t + 1 while tile t's stage is held, which is safe: t + 1
    // lives in the other stage, given back at the end of tile t - 1. A tile
    // that lists no row goes back at once; the search past it waits until
    // tile t's stage is back (the producer fills t + 2 into it).
    const auto stage_of = [&](int t) { return base + kKvAt + (t % kStages) * kOperandBytes; };
    auto find_listed = [&](int t, uint64_t& mask) {
      for (; t < tiles; ++t) {
        const int s = t % kStages;
        MbarrierWait(full0 + 8 * s, (t / kStages) & 1);
        mask = *reinterpret_cast<volatile uint64_t*>(smem + kMaskAt + 8 * s);
        if (mask != 0) return t;
        MbarrierArrive(empty0 + 8 * s);  // uniform: the whole tile is padding
      }
      return tiles;
    };
    // O's zeros are made here, before the first wgmma (left to the
    // compiler they may sink into its stage, which makes ptxas serialize).
#pragma unroll
    for (int i = 0; i < 128; ++i) Pin(o[i]);
    uint64_t mask = 0;
    int t = find_listed(0, mask);
    if (t < tiles) issue_qk(stage_of(t), sc);
#pragma unroll 1
    while (t < tiles) {
      WgmmaWait(0);  // S of tile t
#pragma unroll
      for (int i = 0; i < 16; ++i) Pin(sc[i]);
      int next = tiles;
      uint64_t next_mask = 0;
      softmax_then_pv(stage_of(t), mask, sc, [&] {
        if (t + 1 < tiles) {
          const int s1 = (t + 1) % kStages;
          MbarrierWait(full0 + 8 * s1, ((t + 1) / kStages) & 1);
          next_mask = *reinterpret_cast<volatile uint64_t*>(smem + kMaskAt + 8 * s1);
          if (next_mask != 0) {
            next = t + 1;
            issue_qk(stage_of(next), sc);
          } else {
            MbarrierArrive(empty0 + 8 * s1);  // uniform: the whole tile is padding
          }
        }
      });
      WgmmaWait(0);  // P V of tile t, and S of tile `next` when issued above
#pragma unroll
      for (int i = 0; i < 128; ++i) Pin(o[i]);
      MbarrierArrive(empty0 + 8 * (t % kStages));
      if (next == tiles && t + 1 < tiles) {  // tile t + 1 listed nothing
        next = find_listed(t + 2, next_mask);
        if (next < tiles) issue_qk(stage_of(next), sc);
      }
      t = next;
      mask = next_mask;
    }
  }

  // Denominators: the quad's shares, then both warpgroups', in fixed order
  // (red is free: both warpgroups passed the last tile's barrier 3, after
  // which nobody reads it).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xFFFFFFFFu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xFFFFFFFFu, l_run[r], 2);
  }
  if ((lane & 3) == 0) {
    red[wg * kHeads + h_lo] = l_run[0];
    red[wg * kHeads + h_hi] = l_run[1];
  }
  ConsumerBarrier(2);
  // This CTA's state (O [64 heads][512] fp32 over Q and the first stage,
  // which every wgmma is done with; m, l per head in the P tile). With one
  // range it is the output's: out = O / (l + exp(sink - m)), written by a
  // compact loop over (head, pair). Unrolled over the thread's 64 pairs, that
  // epilogue (a division, the grouped RoPE and three store forms a pair) was
  // about 150 KB of straight-line code that the consumer warps of every CTA
  // fetched again: ncu had them waiting on instruction fetch about as long
  // as their tile loop ran (README "Known limits").
  // With ranges, the cluster folds the ranges' states in rank order:
  //   m = max_r m_r, w_r = 2^(m_r - m), l = sum_r l_r w_r, O = sum_r O_r w_r,
  // each CTA for its share of the heads, and out = O / (l + exp(sink - m)).
  // Every range starts from m = -inf, l = 0, O = 0, so a query's bits depend
  // on the list widths alone (they set the ranges), never on the batch.
  float* const state_o = reinterpret_cast<float*>(smem + kQAt);
  float* const state_ml = reinterpret_cast<float*>(smem + kPAt);  // [m 64][l 64]
  static_assert(kHeads * kHeadDim * 4 <= kPAt - kQAt && kPAt == kKvAt + kStages * kOperandBytes);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = r == 0 ? h_lo : h_hi;
    float* const row = state_o + h * kHeadDim + 256 * wg + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      *reinterpret_cast<float2*>(row + 8 * i) = make_float2(o[4 * i + 2 * r], o[4 * i + 2 * r + 1]);
    }
    if (wg == 0 && (lane & 3) == 0) {
      state_ml[h] = m_run[r];
      state_ml[kHeads + h] = red[h] + red[kHeads + h];
    }
  }
  if (a.ranges == 1) {
    // Per head, once: whether a row was listed (else its output is 0), the
    // denominator and the grouped output's base.
    float* const denom_of = state_ml + 2 * kHeads;                               // [64]
    int* const any_of = reinterpret_cast<int*>(state_ml + 3 * kHeads);           // [64]
    int64_t* const base_of = reinterpret_cast<int64_t*>(state_ml + 4 * kHeads);  // [64]
    ConsumerBarrier(1);
    if (ctid < kHeads && head0 + ctid < a.heads) {
      const int h = ctid, head = head0 + h;
      const float m = state_ml[h];
      const bool any = m != -INFINITY;
      any_of[h] = any;
      denom_of[h] =
          any ? state_ml[kHeads + h] + exp2f(a.sink[head] * 1.4426950408889634f - m) : 1.0f;
      base_of[h] = GroupedHeadBase(a, query, head);
    }
    ConsumerBarrier(1);
    // A thread takes 2 adjacent dims of a head at a time.
#pragma unroll 2
    for (int e = ctid; e < kHeads * (kHeadDim / 2); e += kConsumerThreads) {
      const int h = e / (kHeadDim / 2), d = 2 * (e % (kHeadDim / 2));
      const int head = head0 + h;
      if (head >= a.heads) continue;
      const float denom = denom_of[h];
      const float2 x = *reinterpret_cast<const float2*>(state_o + h * kHeadDim + d);
      float2 v = any_of[h] != 0 ? make_float2(x.x / denom, x.y / denom) : make_float2(0.0f, 0.0f);
      if (a.round_bf16) v = make_float2(RoundToBf16(v.x), RoundToBf16(v.y));
      StoreOutPairAt(a, query, head, d, v, base_of[h]);
    }
    return;
  }
  ClusterSync();  // every range's state is in its CTA's shared memory
  // The ranges' m and l, gathered once (rank order) next to this CTA's own.
  float* const gathered = state_ml + 2 * kHeads;  // [rank][m 64, l 64]
  for (int i = ctid; i < a.ranges * 2 * kHeads; i += kConsumerThreads) {
    gathered[i] =
        LoadClusterF32(ClusterSharedAddress(state_ml + i % (2 * kHeads), i / (2 * kHeads)));
  }
  ConsumerBarrier(1);
  // This CTA's heads: [rank * 64 / ranges, (rank + 1) * 64 / ranges); a thread
  // takes 2 adjacent dims of a head at a time.
  const int h_begin = rank * kHeads / a.ranges, h_end = (rank + 1) * kHeads / a.ranges;
  for (int e = h_begin * (kHeadDim / 2) + ctid; e < h_end * (kHeadDim / 2); e += kConsumerThreads) {
    const int h = e / (kHeadDim / 2), d = 2 * (e % (kHeadDim / 2));
    const int head = head0 + h;
    if (head >= a.heads) continue;
    float m = -INFINITY;
    for (int r = 0; r < a.ranges; ++r) m = fmaxf(m, gathered[r * 2 * kHeads + h]);
    const float m_use = m == -INFINITY ? 0.0f : m;
    float l = 0.0f;
    float2 acc = make_float2(0.0f, 0.0f);
    for (int r = 0; r < a.ranges; ++r) {
      const float w = exp2f(gathered[r * 2 * kHeads + h] - m_use);
      l += gathered[r * 2 * kHeads + kHeads + h] * w;
      const float2 v = LoadClusterF32x2(ClusterSharedAddress(state_o + h * kHeadDim + d, r));
      acc.x += v.x * w;
      acc.y += v.y * w;
    }
    const bool any = m != -INFINITY;
    const float denom = any ? l + exp2f(a.sink[head] * 1.4426950408889634f - m) : 1.0f;
    float2 v = any ? make_float2(acc.x / denom, acc.y / denom) : make_float2(0.0f, 0.0f);
    if (a.round_bf16) v = make_float2(RoundToBf16(v.x), RoundToBf16(v.y));
    StoreOutPair(a, query, head, d, v);
  }
  ClusterSync();  // no CTA leaves while another may read its state
}

}  // namespace sparse_decode_wg
}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_WG_SM90_CUH_
