#include "kernels/cuda/programmatic_graph.h"

#include <cstring>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {

bool IsProjectKernel(const void* func) {
  if (func == nullptr) return false;
  const char* name = nullptr;
  if (cudaFuncGetName(&name, func) != cudaSuccess || name == nullptr) {
    cudaGetLastError();  // not a runtime kernel symbol: not ours
    return false;
  }
  // Mangled ("...4weir7kernels...") or plain ("weir::kernels::...").
  return std::strstr(name, "4weir") != nullptr || std::strstr(name, "weir::") != nullptr;
}

absl::StatusOr<int64_t> MakeKernelEdgesProgrammatic(cudaGraph_t graph) {
  size_t count = 0;
  if (absl::Status s =
          CudaStatus(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count), "graph edges");
      !s.ok()) {
    return s;
  }
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  if (absl::Status s = CudaStatus(
          cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count), "graph edges");
      !s.ok()) {
    return s;
  }
  std::unordered_map<cudaGraphNode_t, bool> kernel_node, ours;
  auto is_kernel = [&](cudaGraphNode_t node) {
    auto [it, fresh] = kernel_node.try_emplace(node, false);
    if (fresh) {
      cudaGraphNodeType type;
      it->second =
          cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel;
    }
    return it->second;
  };
  auto is_ours = [&](cudaGraphNode_t node) {
    auto [it, fresh] = ours.try_emplace(node, false);
    if (fresh) {
      cudaKernelNodeParams params{};
      if (cudaGraphKernelNodeGetParams(node, &params) == cudaSuccess) {
        it->second = IsProjectKernel(params.func);
      } else {
        cudaGetLastError();  // a driver-API kernel (a library's): not ours
      }
    }
    return it->second;
  };
  int64_t rewritten = 0;
  for (size_t e = 0; e < count; ++e) {
    const cudaGraphEdgeData& d = data[e];
    if (d.type != cudaGraphDependencyTypeDefault || d.from_port != 0 || d.to_port != 0) continue;
    if (!is_kernel(from[e]) || !is_kernel(to[e]) || !is_ours(to[e])) continue;
    cudaGraphEdgeData programmatic{};
    programmatic.from_port = cudaGraphKernelNodePortProgrammatic;
    programmatic.type = cudaGraphDependencyTypeProgrammatic;
    if (absl::Status s = CudaStatus(
            cudaGraphRemoveDependencies(graph, &from[e], &to[e], &data[e], 1), "remove graph edge");
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            CudaStatus(cudaGraphAddDependencies(graph, &from[e], &to[e], &programmatic, 1),
                       "add programmatic graph edge");
        !s.ok()) {
      return s;
    }
    ++rewritten;
  }
  return rewritten;
}

}  // namespace weir::kernels::cuda
