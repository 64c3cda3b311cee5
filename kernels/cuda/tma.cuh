// kernels/cuda/tma.cuh — the Tensor Memory Accelerator (sm_90) as the
// tensor-core GEMMs use it: a tile of a row-major byte matrix copied from
// global to shared memory by one instruction of one thread, in the 128-byte
// swizzle the wgmma descriptors read (Fp8GemmSwizzledOffset: 16-byte chunk c
// of row r at c ^ (r % 8) inside 1024-byte groups of 8 rows), completion
// counted on an mbarrier. Host side: the tensor map (its encoder reached
// through the runtime, so nothing links libcuda). Device side: the mbarrier
// init / arrive / expect / wait and the 3-D tile load.
//
// Included by .cu files only. Thread safety: EncodeTmaRowsMap is safe from
// any thread (the driver entry point is looked up once).
#ifndef WEIR_KERNELS_CUDA_TMA_CUH_
#define WEIR_KERNELS_CUDA_TMA_CUH_

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace weir::kernels::cuda {

// The tensor map of a byte matrix [groups][rows][row_bytes] (rows row_stride
// bytes apart, groups group_stride apart; both multiples of 16, base 16-byte
// aligned) read in boxes of box_rows rows x 128 bytes with the 128-byte
// swizzle; reads past any edge fill zeros. INTERNAL when the driver has no
// encoder or refuses the map (the message carries its code).
inline absl::Status EncodeTmaRowsMap(CUtensorMap* map, const void* base, uint64_t row_bytes,
                                     uint64_t rows, uint64_t groups, uint64_t row_stride,
                                     uint64_t group_stride, uint32_t box_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return absl::InternalError("TMA: no cuTensorMapEncodeTiled in the driver");
  const cuuint64_t dims[3] = {row_bytes, rows, groups};
  const cuuint64_t strides[2] = {row_stride, group_stride};
  const cuuint32_t box[3] = {128, box_rows, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), dims,
                            strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return absl::InternalError("TMA: cuTensorMapEncodeTiled failed with code " +
                               std::to_string(static_cast<int>(r)));
  }
  return absl::OkStatus();
}

// ---- device ----------------------------------------------------------------

// mbarrier at shared address `bar` expecting `count` arrivals a phase.
__device__ __forceinline__ void MbarrierInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialized barriers visible to the async proxy (the TMA unit).
__device__ __forceinline__ void FenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also expects `bytes` more of transactions this phase.
__device__ __forceinline__ void MbarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// One plain arrival on `bar` (release: this thread's earlier memory accesses
// happen before the phase completes for its waiters).
__device__ __forceinline__ void MbarrierArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Spins until the phase of parity `phase` of `bar` has completed.
__device__ __forceinline__ void MbarrierWait(uint32_t bar, uint32_t phase) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
}

// The box at (byte c0, row c1, group c2) of `map` (a __grid_constant__
// parameter's address) into shared `dst` (1024-byte aligned), counted on `bar`.
__device__ __forceinline__ void TmaLoadRows(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// TmaLoadRows into the same shared address `dst` of every CTA of the
// cluster whose rank's bit is set in `ctas`, each copy counted on the
// mbarrier at `bar` of its own CTA (a cluster launch; every receiving CTA
// expects the box's bytes on its barrier).
__device__ __forceinline__ void TmaLoadRowsMulticast(uint32_t dst, const CUtensorMap* map,
                                                     uint32_t bar, int c0, int c1, int c2,
                                                     uint16_t ctas) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(ctas)
      : "memory");
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_TMA_CUH_
