// kernels/cuda/grid_dependency.cuh
//
// Programmatic dependent launch (Hopper): every kernel of the project starts
// with GridDependencyPrologue(). In a CUDA graph whose kernel-to-kernel edges
// are programmatic (kernels/cuda/programmatic_graph.h), a kernel may then be
// scheduled while the kernel before it still runs: its blocks become
// resident, and wait in griddepcontrol.wait until every grid it depends on
// has completed and its memory writes are visible. The prologue then lets the
// next kernel be scheduled the same way (griddepcontrol.launch_dependents),
// so one kernel's launch and block start-up overlap the previous kernel's
// tail instead of following it.
//
// Launched the ordinary way (a plain stream, or a graph edge that is not
// programmatic), both instructions return at once: the prologue changes no
// result and no order. Nothing before it may read another kernel's output,
// which is why it is the first statement of every kernel body
// (kernels/cuda/grid_dependency_test checks the sources).
//
// Device code only; no host dependencies.

#ifndef WEIR_KERNELS_CUDA_GRID_DEPENDENCY_CUH_
#define WEIR_KERNELS_CUDA_GRID_DEPENDENCY_CUH_

namespace weir::kernels::cuda {

// Waits until the grids this one depends on have completed and flushed.
__device__ __forceinline__ void GridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the grids that depend on this one be scheduled (they still wait for
// this grid's completion before they read anything).
__device__ __forceinline__ void AllowDependentGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The first statement of every kernel: wait for the inputs, then let the
// next kernel start its launch.
__device__ __forceinline__ void GridDependencyPrologue() {
  GridDependencyWait();
  AllowDependentGrids();
}

// Rows of memory that no kernel of a step writes (weights), which a kernel
// may ask L2 for before it waits: `rows` runs of `bytes` bytes, `stride`
// bytes apart from `base`; thread t < rows asks for run t. `base` and
// `stride` 16-byte aligned and `bytes` a multiple of 16 (else nothing is
// asked). Computed from the kernel's arguments and its block index only:
// nothing another kernel writes may be read before the wait.
struct L2Rows {
  const void* base = nullptr;
  long long stride = 0;
  unsigned bytes = 0;
  int rows = 0;
};

// The prologue of a kernel whose weights are worth fetching early: in a
// graph with programmatic edges its blocks become resident while the kernel
// before it still runs (see above), so at decode sizes the weights stream
// from DRAM into L2 during that kernel's tail instead of after it. The
// request is a hint (cp.async.bulk.prefetch.L2): it changes no value, and
// launched the ordinary way it costs a few instructions.
__device__ __forceinline__ void GridDependencyPrologue(const L2Rows& weights) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned long long base = reinterpret_cast<unsigned long long>(weights.base);
  if (weights.base != nullptr && static_cast<int>(threadIdx.x) < weights.rows && base % 16 == 0 &&
      weights.stride % 16 == 0 && weights.bytes % 16 == 0 && weights.bytes > 0) {
    const unsigned long long row = base + static_cast<unsigned long long>(threadIdx.x) *
                                              static_cast<unsigned long long>(weights.stride);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "r"(weights.bytes)
                 : "memory");
  }
#endif
  GridDependencyPrologue();
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_GRID_DEPENDENCY_CUH_
