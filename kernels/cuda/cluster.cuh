// kernels/cuda/cluster.cuh — thread block clusters (sm_90): a CTA's rank in
// its cluster, the cluster barrier in its arrive / wait halves, and stores
// into another CTA's shared memory (distributed shared memory). Device code
// only; the launch sets the cluster shape (cudaLaunchAttributeClusterDimension).
//
// Rules the PTX ISA sets and the callers keep:
// * Every thread of every CTA of the cluster takes part in each barrier phase
//   (the `.aligned` forms: the whole warp executes the same instruction).
// * A CTA writes another's shared memory only once that CTA has started: an
//   arrive early in the kernel and its wait before the first remote store
//   (ClusterArriveRelaxed / ClusterWait) say so without stalling the loads
//   in between.
// * A store to another CTA is visible to it after a release arrive by the
//   writer and the acquire wait of the reader (ClusterSync).
// * No CTA may exit while another may still access its shared memory.
#ifndef WEIR_KERNELS_CUDA_CLUSTER_CUH_
#define WEIR_KERNELS_CUDA_CLUSTER_CUH_

#include <cstdint>

namespace weir::kernels::cuda {

// This CTA's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ unsigned ClusterCtaRank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// The first half of a barrier phase, without ordering this thread's earlier
// memory accesses (the start-up handshake).
__device__ __forceinline__ void ClusterArriveRelaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}

// The second half: waits until every thread of the cluster has arrived.
__device__ __forceinline__ void ClusterWait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// A whole phase: this thread's earlier accesses (shared memory of any CTA of
// the cluster, global memory) are visible to every thread of the cluster
// after it.
__device__ __forceinline__ void ClusterSync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// The address in CTA `rank`'s shared memory window of what `local` is in
// this CTA's (the same variable of the same kernel).
__device__ __forceinline__ uint32_t ClusterSharedAddress(const void* local, unsigned rank) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

// The same for a shared-window address (SharedAddress, __cvta_generic_to_shared).
__device__ __forceinline__ uint32_t ClusterSharedAddressOf(uint32_t addr, unsigned rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

// One arrival on the mbarrier at ClusterSharedAddress `bar` (another CTA's),
// releasing this thread's earlier memory accesses at cluster scope.
__device__ __forceinline__ void MbarrierArriveCluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
}

// Spins until the phase of parity `phase` of this CTA's mbarrier at `bar`
// has completed, acquiring at cluster scope what the arrivals released
// (arrivals from other CTAs of the cluster: MbarrierArriveCluster).
__device__ __forceinline__ void MbarrierWaitCluster(uint32_t bar, uint32_t phase) {
  for (;;) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(phase)
        : "memory");
    if (done != 0) return;
  }
}

// Stores v at a ClusterSharedAddress.
__device__ __forceinline__ void StoreClusterF32x4(uint32_t addr, float4 v) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_CLUSTER_CUH_
