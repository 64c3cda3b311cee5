#include "kernels/cuda/programmatic_graph.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fill.h"

namespace weir::kernels::cuda {
namespace {

using testing::DeviceBuffer;

// A chain of in-place kernels, each reading what the one before wrote, over
// more blocks than the GPU holds at once: with programmatic edges every
// kernel is scheduled while its predecessor runs, and only its prologue's
// wait keeps it from reading stale values. Every element must come out
// exactly 2^kKernels, on every replay, as with ordinary edges.
TEST(ProgrammaticGraphTest, AChainOfDependentKernelsKeepsItsOrder) {
  constexpr int kKernels = 48;
  constexpr int64_t kN = int64_t{1} << 24;  // 64 MiB: many waves of blocks
  DeviceBuffer<float> x(kN);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (bool programmatic : {false, true}) {
    SCOPED_TRACE(programmatic ? "programmatic edges" : "ordinary edges");
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    // A memset node first: its edge into the first kernel must stay ordinary.
    ASSERT_EQ(cudaMemsetAsync(x.get(), 0, kN * sizeof(float), stream), cudaSuccess);
    ASSERT_TRUE(FillF32({.out = x.get(), .n = kN, .value = 1.0f}, stream).ok());
    for (int k = 0; k < kKernels; ++k) {
      ASSERT_TRUE(decode::Scale({.x = x.get(), .n = kN, .factor = 2.0f}, stream).ok());
    }
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    // Every kernel node is one of the project's.
    size_t nodes = 0;
    ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
    std::vector<cudaGraphNode_t> all(nodes);
    ASSERT_EQ(cudaGraphGetNodes(graph, all.data(), &nodes), cudaSuccess);
    int kernels = 0;
    for (cudaGraphNode_t node : all) {
      cudaGraphNodeType type;
      ASSERT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
      if (type != cudaGraphNodeTypeKernel) continue;
      cudaKernelNodeParams params{};
      ASSERT_EQ(cudaGraphKernelNodeGetParams(node, &params), cudaSuccess);
      EXPECT_TRUE(IsProjectKernel(params.func));
      ++kernels;
    }
    EXPECT_EQ(kernels, kKernels + 1);
    if (programmatic) {
      absl::StatusOr<int64_t> rewritten = MakeKernelEdgesProgrammatic(graph);
      ASSERT_TRUE(rewritten.ok()) << rewritten.status();
      EXPECT_EQ(*rewritten, kKernels);  // fill -> scale, scale -> scale; not memset -> fill
      // Idempotent: the programmatic edges are left alone.
      absl::StatusOr<int64_t> again = MakeKernelEdgesProgrammatic(graph);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*again, 0);
    }
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
    const float want = std::ldexp(1.0f, kKernels);
    for (int replay = 0; replay < 3; ++replay) {
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const std::vector<float> got = x.Download();
      int64_t wrong = 0;
      for (float v : got) wrong += v != want;
      EXPECT_EQ(wrong, 0) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
  }
  cudaStreamDestroy(stream);
  EXPECT_FALSE(IsProjectKernel(nullptr));
}

}  // namespace
}  // namespace weir::kernels::cuda
