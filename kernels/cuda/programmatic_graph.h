// kernels/cuda/programmatic_graph.h
//
// Programmatic dependent launch for captured graphs: MakeKernelEdgesProgrammatic
// turns the full-completion edges between kernel nodes of a graph into
// programmatic edges wherever the downstream kernel is one of the project's
// (its name is in namespace weir; every such kernel starts with
// GridDependencyPrologue, kernels/cuda/grid_dependency.cuh). The downstream
// kernel may then be scheduled while the upstream one runs; its blocks wait
// in the prologue until the upstream grid has completed and flushed, so the
// results and their order are unchanged while each kernel's launch latency
// overlaps the previous kernel's tail.
//
// Edges into other kernels (cuBLASLt, NCCL: they have no such wait), edges
// from or to other node kinds (copies, memsets, events) and edges that are
// already programmatic are left as they are.
//
// Thread safety: the graph must not be used by another thread meanwhile.

#ifndef WEIR_KERNELS_CUDA_PROGRAMMATIC_GRAPH_H_
#define WEIR_KERNELS_CUDA_PROGRAMMATIC_GRAPH_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace weir::kernels::cuda {

// Rewrites the qualifying edges of `graph` (not yet instantiated) and returns
// how many it rewrote; INTERNAL with the CUDA error if an edge query or
// rewrite fails (the graph may then be partly rewritten: destroy it).
absl::StatusOr<int64_t> MakeKernelEdgesProgrammatic(cudaGraph_t graph);

// Whether `func` (a kernel's host symbol, as cudaKernelNodeParams::func) is
// one of the project's kernels, by its name.
bool IsProjectKernel(const void* func);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_PROGRAMMATIC_GRAPH_H_
