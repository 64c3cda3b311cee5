// kernels/cuda/dense/fp8_mma_sm90.cuh — the device building blocks of the FP8
// tensor-core GEMMs (Fp8BlockGemm here, Mxfp4GroupedGemm in kernels/cuda/moe):
// cp.async copies, ldmatrix, e4m3 -> f16 fragment widening, the 32-element
// block sum on the tensor cores, the E8M0 scale decode and e4m3 x scale to
// bf16 (Fp8ToBf16Eight, from fp8_bf16.cuh). No host dependencies. Fragment and shared-memory
// layouts are in fp8_block_gemm_params.h.
//
// Every kernel that folds block sums with BlockSum and ScaleOf in the order of
// fp8_block_gemm_sm90.h gets the same bits as Fp8BlockGemm for the same
// operand values (tested in kernels/cuda/moe/mxfp4_grouped_gemm_sm90_test.cc).
#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_MMA_SM90_CUH_
#define WEIR_KERNELS_CUDA_DENSE_FP8_MMA_SM90_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/dense/fp8_bf16.cuh"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"

namespace weir::kernels::cuda::dense {
namespace fp8_gemm {

using ::weir::kernels::cuda::CpAsync16;
using ::weir::kernels::cuda::CpAsyncCommit;
using ::weir::kernels::cuda::CpAsyncWait;
using ::weir::kernels::cuda::SharedAddress;

// 4 bytes global -> shared (through L1; 4-byte copies have no .cg form).
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}

// 8 bytes global -> shared (through L1), e.g. one row's 8 scale bytes.
__device__ __forceinline__ void CpAsync8(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}

// Shared reads of the ring are ordered after its writes by __syncthreads;
// volatile keeps them from moving across it, and without a memory clobber
// the compiler may still batch them ahead of the arithmetic.
__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                           uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void LdMatrixX2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}

__device__ __forceinline__ uint32_t LoadShared32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// A warp's decoded-scale scratch (fp32 in shared memory): written with
// StoreSharedF32, then __syncwarp, then read in pairs with LoadSharedF32x2
// (8-byte aligned). The ring's barrier orders the next stage's writes after
// these reads.
__device__ __forceinline__ void StoreSharedU32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void StoreSharedF32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}

__device__ __forceinline__ float2 LoadSharedF32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

// Two e4m3 codes (bits 0-7, 8-15) -> f16x2 (exact: every e4m3 value is an f16).
__device__ __forceinline__ uint32_t E4m3x2ToF16x2(uint32_t codes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// 16 bytes of shared memory as four words, in and out.
__device__ __forceinline__ void LoadShared128(uint32_t addr, uint32_t (&v)[4]) {
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr));
}
__device__ __forceinline__ void StoreShared128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c,
                                               uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}

// The f16 wgmma maths' X widening: the 16 e4m3 codes at shared `src` (16 of
// K of one X row) as f16 in the mma B fragment's K slots (WidenB's order):
// the low code pairs of its four words to the 16 bytes at `dst_lo`, the high
// pairs to those at `dst_hi`.
__device__ __forceinline__ void WidenCodesToF16Slots(uint32_t src, uint32_t dst_lo,
                                                     uint32_t dst_hi) {
  uint32_t c[4];
  LoadShared128(src, c);
  StoreShared128(dst_lo, E4m3x2ToF16x2(c[0]), E4m3x2ToF16x2(c[1]), E4m3x2ToF16x2(c[2]),
                 E4m3x2ToF16x2(c[3]));
  StoreShared128(dst_hi, E4m3x2ToF16x2(c[0] >> 16), E4m3x2ToF16x2(c[1] >> 16),
                 E4m3x2ToF16x2(c[2] >> 16), E4m3x2ToF16x2(c[3] >> 16));
}

// An m16n8k32 e4m3 fragment pair (A: 4 registers of 4 codes, B: 2) widened to
// the two m16n8k16 f16 products that cover K 0-15 and 16-31. A thread's codes
// k = 4t .. 4t+3 (t = lane % 4) land in the f16 slots 2t, 2t+1 and 2t+8,
// 2t+9, the same slots for A and B, so each f16 mma sums the right pairs.
struct F16A {
  uint32_t lo[4], hi[4];  // K 0-15, K 16-31
};
struct F16B {
  uint32_t lo[2], hi[2];
};

__device__ __forceinline__ F16A WidenA(const uint32_t (&a)[4]) {
  return {{E4m3x2ToF16x2(a[0]), E4m3x2ToF16x2(a[1]), E4m3x2ToF16x2(a[0] >> 16),
           E4m3x2ToF16x2(a[1] >> 16)},
          {E4m3x2ToF16x2(a[2]), E4m3x2ToF16x2(a[3]), E4m3x2ToF16x2(a[2] >> 16),
           E4m3x2ToF16x2(a[3] >> 16)}};
}

__device__ __forceinline__ F16B WidenB(uint32_t b0, uint32_t b1) {
  return {{E4m3x2ToF16x2(b0), E4m3x2ToF16x2(b0 >> 16)},
          {E4m3x2ToF16x2(b1), E4m3x2ToF16x2(b1 >> 16)}};
}

// d = A_lo B_lo + A_hi B_hi: the tensor core's fp32 sum of one 32-element K
// block (products exact; K 0-15 from a zero accumulator, then K 16-31 added).
// Hopper has no FP8 mma.sync datapath (ptxas expands the e4m3 form into this
// same f16 pair), so this is the FP8 product at the f16 tensor-core rate.
__device__ __forceinline__ void BlockSum(const F16A& a, const F16B& b, float (&d)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a.lo[0]), "r"(a.lo[1]), "r"(a.lo[2]), "r"(a.lo[3]), "r"(b.lo[0]), "r"(b.lo[1]),
        "f"(0.0f));
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a.hi[0]), "r"(a.hi[1]), "r"(a.hi[2]), "r"(a.hi[3]), "r"(b.hi[0]), "r"(b.hi[1]));
}

// ---- wgmma (sm_90a's FP8 tensor-core path; Fp8GemmMath::kWgmma and
// Mxfp4GemmMath::kWgmma) ----------------------------------------------------
// wgmma's 128-byte swizzle is applied to shared addresses, so its tiles
// must start on 1024-byte boundaries: where the dynamic shared memory lands
// is up to the toolchain (after any static shared variables), so a wgmma
// kernel is launched with kWgmmaSmemSlack more bytes and moves its base up.
inline constexpr int kWgmmaSmemSlack = 1024;
__device__ __forceinline__ uint8_t* AlignSharedTo1024(uint8_t* base) {
  return base + ((1024u - (SharedAddress(base) & 1023u)) & 1023u);
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// cp.async writes the ring through the generic proxy; wgmma reads it through
// the async proxy. Every thread fences its own landed copies before the
// barrier that publishes the stage.
__device__ __forceinline__ void FenceSharedForAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps a register live and unmoved across the wait (wgmma reads A and writes
// D asynchronously: neither may be touched before wgmma.wait_group).
__device__ __forceinline__ void PinRegister(float& v) { asm volatile("" : "+f"(v)::"memory"); }
__device__ __forceinline__ void PinRegister(uint32_t& v) { asm volatile("" : "+r"(v)::"memory"); }

// The shared-memory descriptor of an 8-row K-major operand stored with the
// 128-byte swizzle (Fp8GemmSwizzledOffset: 128-byte rows, 16-byte chunk c of
// row r at c ^ (r % 8), 1024-byte aligned 8-row atoms), starting `addr`
// bytes into shared memory (an atom plus 32 bytes per K block). Fields:
// start address / 16 (bits 0-13), leading byte offset / 16 (16-29; unused by
// swizzled K-major layouts), stride byte offset / 16 (32-45: the next 8
// rows, 1024 bytes), base offset 0 (the atom is aligned), swizzle mode 1 =
// 128 bytes (62-63). Built in two halves: the low word (address field and
// leading byte offset), which a K block or row group advances by its byte
// offset / 16 (no carry: shared memory < 256 KB), and the constant high
// word; DescriptorOf joins them.
__device__ __forceinline__ uint32_t SwizzledKMajorDescriptorLo(uint32_t addr) {
  return ((addr & 0x3FFFFu) >> 4) | (1u << 16);
}
__device__ __forceinline__ uint64_t DescriptorOf(uint32_t lo) {
  return (uint64_t{(1024u >> 4) | (1u << 30)} << 32) | lo;
}

// Waits until at most `pending` committed wgmma groups of this warpgroup are
// still in flight (0 .. 3; a constant after unrolling, so the switch folds).
__device__ __forceinline__ void WgmmaWait(int pending) {
  switch (pending) {
    case 0:
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      break;
    case 1:
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      break;
    case 2:
      asm volatile("wgmma.wait_group.sync.aligned 2;\n" ::: "memory");
      break;
    default:
      asm volatile("wgmma.wait_group.sync.aligned 3;\n" ::: "memory");
      break;
  }
}

// kBlocks K blocks of wgmma block sums with A in registers, kDepth of them in
// flight a warpgroup: make_a(j, a) makes block j's A registers, issue(j, a, p)
// issues its wgmma group into p (committed here), fold(j, p) folds the sums
// once they are retired, pin(a) keeps a's registers unmoved across the wait
// (wgmma reads them asynchronously). Block j + kDepth's registers are made
// and issued as soon as block j is folded, so the tensor cores run while the
// warps fold.
template <int kDepth, int kBlocks, int kP, typename ARegs, typename MakeA, typename Issue,
          typename Fold, typename Pin>
__device__ __forceinline__ void WgmmaBlocksInFlight(const MakeA& make_a, const Issue& issue,
                                                    const Fold& fold, const Pin& pin) {
  ARegs a[kDepth];
  float p[kDepth][kP];
#pragma unroll
  for (int j = 0; j < kDepth; ++j) make_a(j, a[j]);
  WgmmaFence();
#pragma unroll
  for (int j = 0; j < kDepth; ++j) {
    issue(j, a[j], p[j]);
    WgmmaCommit();
  }
#pragma unroll
  for (int j = 0; j < kBlocks; ++j) {
    WgmmaWait(min(kBlocks, j + kDepth) - 1 - j);
    pin(a[j % kDepth]);
    fold(j, p[j % kDepth]);
    if (j + kDepth < kBlocks) {
      make_a(j + kDepth, a[j % kDepth]);
      WgmmaFence();
      issue(j + kDepth, a[j % kDepth], p[j % kDepth]);
      WgmmaCommit();
    }
  }
}

// d = A B for one K block of 32 over N X rows (N = 8 .. 128): A the
// warpgroup's 64 W rows, either by descriptor (SS: K-major, 128-byte swizzle)
// or as this warp's 16 rows in e4m3 registers (RS: the m16n8k32 A fragment),
// B the N X rows by descriptor (8-row atoms of 1024 bytes one after another).
// The previous d is ignored (scale-d false): each block's sum starts from
// zero, as BlockSum's does. Thread register d[4 i + r] holds the element
// Fp8GemmAccumulatorCoord(lane, r) of X rows 8 i .. 8 i + 7, i.e. exactly the
// registers of N / 8 m64n8k32 products side by side (one instruction instead
// of N / 8 gives every element the same sum: the tests compare the tiles).
template <int N>
struct Wgmma;

template <>
struct Wgmma<8> {
  static __device__ __forceinline__ void SS(uint64_t a_desc, uint64_t b_desc, float (&d)[4]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "l"(a_desc), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc,
                                            float (&d)[4]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
};

template <>
struct Wgmma<16> {
  static __device__ __forceinline__ void SS(uint64_t a_desc, uint64_t b_desc, float (&d)[8]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7])
        : "l"(a_desc), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc,
                                            float (&d)[8]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
};

template <>
struct Wgmma<32> {
  static __device__ __forceinline__ void SS(uint64_t a_desc, uint64_t b_desc, float (&d)[16]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, "
        "1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15])
        : "l"(a_desc), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc,
                                            float (&d)[16]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, "
        "%19}, %20, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
};

template <>
struct Wgmma<64> {
  static __device__ __forceinline__ void SS(uint64_t a_desc, uint64_t b_desc, float (&d)[32]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
          "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
          "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc,
                                            float (&d)[32]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, "
        "%36, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
          "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
          "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
};

template <>
struct Wgmma<128> {
  static __device__ __forceinline__ void SS(uint64_t a_desc, uint64_t b_desc, float (&d)[64]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
          "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
          "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]),
          "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]),
          "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]),
          "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]),
          "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]),
          "=f"(d[63])
        : "l"(a_desc), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc,
                                            float (&d)[64]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
          "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
          "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]),
          "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]),
          "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]),
          "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]),
          "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]),
          "=f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
};

// acc += p * (weight scale x X scale) for a lane's four accumulators of one
// 8-row mma tile and K block (p the block's sum; the scales of weight rows g,
// g + 8 in wf, of X rows 2t, 2t + 1 in xf). Powers of two: exact products, so
// each fma rounds once. Every block sum of Fp8BlockGemm and Mxfp4Grouped*,
// mma or wgmma, is folded with it.
__device__ __forceinline__ void PromoteBlock(float (&acc)[4], const float (&p)[4], float2 wf,
                                             float2 xf) {
  acc[0] = __fmaf_rn(p[0], __fmul_rn(wf.x, xf.x), acc[0]);
  acc[1] = __fmaf_rn(p[1], __fmul_rn(wf.x, xf.y), acc[1]);
  acc[2] = __fmaf_rn(p[2], __fmul_rn(wf.y, xf.x), acc[2]);
  acc[3] = __fmaf_rn(p[3], __fmul_rn(wf.y, xf.y), acc[3]);
}

// True when no byte of `word` is 0x00 or 0xFF: its four E8M0 scales are all
// normal, 2^(c - 127) with bits c << 23 (NormalScaleOf gives ScaleOf's value).
__device__ __forceinline__ bool NormalScales(uint32_t word) {
  const uint32_t zero = (word - 0x01010101u) & ~word & 0x80808080u;
  const uint32_t full = (~word - 0x01010101u) & word & 0x80808080u;
  return (zero | full) == 0u;
}
__device__ __forceinline__ float NormalScaleOf(uint32_t word, int j) {
  return __uint_as_float(((word >> (8 * j)) & 0xFFu) << 23);
}

// The four scales of `word` as ScaleOf gives them: by NormalScaleOf when all
// four are normal (one test a word instead of two selects a scale).
__device__ __forceinline__ void ScalesOf(uint32_t word, float (&s)[4]) {
  if (NormalScales(word)) {
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j] = NormalScaleOf(word, j);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j] = ScaleOf(word, j);
  }
}

// d (+)= A B over one K half of 16 as wgmma m64nNk16 with f16 operands and
// fp32 accumulation (N = 8 .. 128): A this warp's 16 rows of the
// warpgroup's 64 in the mma.sync m16n8k16 A fragment (registers), B the N X
// rows by descriptor (K-major, 128-byte swizzle, 16 f16 = 32 bytes a half);
// `accumulate` false starts from zero; RSZero is the same with scale-d false
// and write-only d (nothing to initialize). Two in a row, from zero then
// accumulating, sum a 32-element block with the bits of BlockSum's mma.sync
// pair when the operands sit in the same K slots
// (tensor_core_sum_probe_test), so the f16 wgmma maths share bits with the
// mma ones. d's registers are Wgmma<N>'s.
template <int N>
struct WgmmaF16;

template <>
struct WgmmaF16<8> {
  static __device__ __forceinline__ void RSZero(const uint32_t (&a)[4], uint64_t b_desc,
                                                float (&d)[4]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc, float (&d)[4],
                                            bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate ? 1 : 0)
        : "memory");
  }
};
template <>
struct WgmmaF16<16> {
  static __device__ __forceinline__ void RSZero(const uint32_t (&a)[4], uint64_t b_desc,
                                                float (&d)[8]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc, float (&d)[8],
                                            bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate ? 1 : 0)
        : "memory");
  }
};
template <>
struct WgmmaF16<32> {
  static __device__ __forceinline__ void RSZero(const uint32_t (&a)[4], uint64_t b_desc,
                                                float (&d)[16]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, "
        "%19}, %20, p, 1, 1, 0;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc, float (&d)[16],
                                            bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, "
        "%19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate ? 1 : 0)
        : "memory");
  }
};
template <>
struct WgmmaF16<64> {
  static __device__ __forceinline__ void RSZero(const uint32_t (&a)[4], uint64_t b_desc,
                                                float (&d)[32]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, "
        "%36, p, 1, 1, 0;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
          "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
          "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc, float (&d)[32],
                                            bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, "
        "%36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate ? 1 : 0)
        : "memory");
  }
};
template <>
struct WgmmaF16<128> {
  static __device__ __forceinline__ void RSZero(const uint32_t (&a)[4], uint64_t b_desc,
                                                float (&d)[64]) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
          "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
          "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]),
          "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]),
          "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]),
          "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]),
          "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]),
          "=f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(0)
        : "memory");
  }
  static __device__ __forceinline__ void RS(const uint32_t (&a)[4], uint64_t b_desc, float (&d)[64],
                                            bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate ? 1 : 0)
        : "memory");
  }
};

// One operand's rows of a pipeline stage as one thread copies them (the W and
// X tiles of Fp8BlockGemm and Bf16Gemm): chunk c = tid + i * kThreads of the
// tile is 16 bytes, row c / 8, bytes 16 (c % 8) of the row's 128 bytes of the
// stage, stored at Fp8GemmSwizzledOffset(row, c % 8). The sources are fixed
// for the whole K loop; rows at or past `rows` point at row 0 and copy
// nothing (zero-filled). A tile of fewer than kChunks x kThreads / 8 rows
// (kTileRows: 8 X rows over 128 threads) leaves the chunks past it uncopied.
template <int kChunks, int kThreads, int kTileRows = kChunks* kThreads / 8>
struct StageRowCopies {
  static_assert(kTileRows * 8 <= kChunks * kThreads, "every chunk of the tile has a thread");
  // Threads whose chunk lies past the tile (only when the tile is smaller
  // than the threads' chunks) copy nothing.
  static constexpr bool kPartial = kTileRows * 8 < kChunks * kThreads;
  const uint8_t* src[kChunks];
  uint32_t dst[kChunks];
  int col[kChunks];
  bool row_ok[kChunks];
  bool in_tile[kChunks];

  // `base`: the operand's first byte; rows of `row_bytes`; this tile's first
  // row `row0` of `rows`.
  __device__ __forceinline__ StageRowCopies(const uint8_t* base, int64_t row_bytes, int64_t row0,
                                            int64_t rows, int tid) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = tid + i * kThreads, row = c >> 3, chunk = c & 7;
      in_tile[i] = !kPartial || row < kTileRows;
      row_ok[i] = row0 + row < rows;
      col[i] = chunk * 16;
      src[i] = base + (row_ok[i] ? (row0 + row) * row_bytes : 0) + col[i];
      dst[i] = Fp8GemmSwizzledOffset(row, chunk);
    }
  }

  // Makes the copies' sources and destinations opaque to the compiler (no
  // instruction of its own): called once before a K loop, it keeps ptxas
  // from recomputing them from the thread index in every stage.
  __device__ __forceinline__ void Keep() {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      asm volatile("" : "+r"(dst[i]));
      asm volatile("" : "+l"(src[i]));
    }
  }

  // Copies the stage starting `offset` bytes into each row into the tile at
  // shared address `tile`; bytes at or past `left` (from `offset`) are
  // zero-filled.
  __device__ __forceinline__ void Copy(uint32_t tile, int64_t offset, int64_t left) const {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if constexpr (kPartial) {
        if (!in_tile[i]) continue;
      }
      const bool valid = row_ok[i] && col[i] < left;
      CpAsync16(tile + dst[i], valid ? src[i] + offset : src[i], valid);
    }
  }
  // Copy with all 128 bytes of the stage inside K. A row past `rows` copies
  // nothing; its source (row 0, `offset` + its column) is still inside the
  // operand, so no select is needed.
  __device__ __forceinline__ void CopyWhole(uint32_t tile, int64_t offset) const {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if constexpr (kPartial) {
        if (!in_tile[i]) continue;
      }
      CpAsync16(tile + dst[i], src[i] + offset, row_ok[i]);
    }
  }
};

// The raw B fragments (X rows) of K step `j` for a warp's kNi 8-row mma
// tiles from the swizzled X tile at shared address `x_base`: two registers a
// tile (ldmatrix x4 per pair of tiles, x2 for an odd last one). Bf16Gemm
// multiplies them as they are; Fp8BlockGemm widens them (WidenB).
template <int kNi>
__device__ __forceinline__ void LoadXFragments(uint32_t x_base, int warp_m0, int lane, int j,
                                               uint32_t (&r)[kNi][2]) {
#pragma unroll
  for (int ni = 0; ni + 1 < kNi; ni += 2) {
    const Fp8GemmRowChunk src = Fp8GemmBLdmatrixSource(lane, j);
    LdMatrixX4(x_base + Fp8GemmSwizzledOffset(warp_m0 + ni * 8 + src.row, src.chunk), r[ni][0],
               r[ni][1], r[ni + 1][0], r[ni + 1][1]);
  }
  if constexpr (kNi % 2 == 1) {
    const Fp8GemmRowChunk src = Fp8GemmBLdmatrixSource(lane & 15, j);
    LdMatrixX2(x_base + Fp8GemmSwizzledOffset(warp_m0 + (kNi - 1) * 8 + src.row, src.chunk),
               r[kNi - 1][0], r[kNi - 1][1]);
  }
}

// Zeroes a warp's accumulators (kMi x kNi mma tiles of 4 floats).
template <int kMi, int kNi>
__device__ __forceinline__ void ZeroAccumulators(float (&acc)[kMi][kNi][4]) {
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.0f;
    }
  }
}

// Calls store(gm, gn, v) for every accumulator element of a warp's tiles
// that lies inside the m x n output; `n_base` / `m_base` are the warp's
// first W row and X row (the epilogue of Bf16Gemm and Fp8BlockGemm).
template <int kMi, int kNi, typename Store>
__device__ __forceinline__ void ForEachOutput(const float (&acc)[kMi][kNi][4], int lane,
                                              int64_t n_base, int64_t m_base, int64_t n, int64_t m,
                                              Store&& store) {
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const Fp8GemmAccCoord c = Fp8GemmAccumulatorCoord(lane, r);
        const int64_t gn = n_base + mi * 16 + c.n;
        const int64_t gm = m_base + ni * 8 + c.m;
        if (gn < n && gm < m) store(gm, gn, acc[mi][ni][r]);
      }
    }
  }
}

}  // namespace fp8_gemm
}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_MMA_SM90_CUH_
