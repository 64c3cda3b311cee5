// kernels/cuda/cp_async.cuh — the asynchronous global -> shared copies
// (cp.async, sm_80+) every staged kernel uses: the shared-space address of a
// pointer, a 16-byte copy that zero-fills when its source is invalid, and
// the group commit / wait. One copy of the PTX; kernels that need another
// form (a 4- or 8-byte copy, .ca caching) keep it next to their kernel.
// Device code only, no host dependencies.
#ifndef WEIR_KERNELS_CUDA_CP_ASYNC_CUH_
#define WEIR_KERNELS_CUDA_CP_ASYNC_CUH_

#include <cstdint>

namespace weir::kernels::cuda {

// The 32-bit shared-window address of a pointer into shared memory.
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; zero-fills when !valid (then `src`
// is not read, but must still be a valid address).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}

// The same copy to a shared-memory pointer.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  const uint32_t d = SharedAddress(dst);
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes)
               : "memory");
}

// Closes the group of the copies issued since the last commit.
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of the committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// One arrival on the mbarrier at shared address `bar` once every cp.async
// this thread issued so far has landed (noinc: the barrier's expected count
// includes these arrivals).
__device__ __forceinline__ void CpAsyncArriveOn(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_CP_ASYNC_CUH_
