// parallel/nccl_communicator_test.cc
//
// NcclCommunicator on a GPU machine (tag `gpu`). The shared conformance checks
// (collective_checks.h) run on host data through HostStagedCommunicator,
// which copies every buffer to device memory, runs the NCCL collective on a
// stream, waits with Synchronize() and copies the results back, so each check
// compares NCCL's device result with the contract's answer (and checks the
// host-staged communicator the worker uses).
// World 1 always runs; world 2 in one process needs two GPUs (NCCL rejects two
// ranks of one communicator on the same GPU: "Duplicate GPU detected").

#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "parallel/collective_checks.h"
#include "parallel/host_staged_communicator.h"

namespace weir::parallel {
namespace {

constexpr ExecContext kHostCtx = {.memory = MemoryKind::kHost};

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Creates world `n` on threads, rank r on device r % DeviceCount().
std::vector<absl::StatusOr<std::unique_ptr<NcclCommunicator>>> CreateWorld(int n) {
  absl::StatusOr<std::string> id = NcclCommunicator::MakeUniqueId();
  EXPECT_TRUE(id.ok()) << id.status();
  std::vector<absl::StatusOr<std::unique_ptr<NcclCommunicator>>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      NcclOptions options{.timeout = absl::Seconds(20),
                          .device = DeviceOrdinal(r % std::max(1, DeviceCount()))};
      comms[r] = NcclCommunicator::Create(Rank(r), n, id.value_or(""), options);
    });
  }
  for (std::thread& t : threads) t.join();
  return comms;
}

TEST(NcclCommunicatorTest, OneRankMatchesTheContract) {
  ASSERT_GT(DeviceCount(), 0) << "no usable CUDA device";
  auto comms = CreateWorld(1);
  ASSERT_TRUE(comms[0].ok()) << comms[0].status();
  // A small staging size, so the larger checks grow the buffers.
  auto staged = HostStagedCommunicator::Create(std::move(*comms[0]), {.staging_bytes = 4096});
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_TRUE(CheckEveryCollective(**staged, 7).ok());
  // Larger than NCCL's small-message protocols.
  EXPECT_TRUE(CheckAllToAllV(**staged, 8, 1 << 20).ok());
  EXPECT_TRUE(CheckAllReduce(**staged, 9, DataType::kFloat32, ReduceOp::kSum, 3 << 20, true).ok());
  EXPECT_GT((*staged)->bytes_staged(), 3 << 20);
  // Device memory is the NcclCommunicator's business.
  EXPECT_EQ((*staged)->Barrier({.memory = MemoryKind::kDevice}).code(),
            absl::StatusCode::kUnimplemented);
}

TEST(NcclCommunicatorTest, TwoRanksOnTwoDevicesMatchTheContract) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs (NCCL rejects duplicate GPUs)";
  auto comms = CreateWorld(2);
  for (auto& c : comms) ASSERT_TRUE(c.ok()) << c.status();
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto staged = HostStagedCommunicator::Create(std::move(*comms[r]));
      results[r] = staged.ok() ? CheckEveryCollective(**staged, 11) : staged.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(NcclCommunicatorTest, RejectsBadArgumentsAndHostMemory) {
  auto comms = CreateWorld(1);
  ASSERT_TRUE(comms[0].ok()) << comms[0].status();
  NcclCommunicator& c = **comms[0];
  const ExecContext dev = {.memory = MemoryKind::kDevice};
  std::vector<int64_t> one = {4}, two = {4, 4}, neg = {-1};
  float* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 64 * sizeof(float)), cudaSuccess);
  const auto code = [](absl::Status s) { return s.code(); };
  using absl::StatusCode;
  EXPECT_EQ(code(c.AllToAllV({.send = buf, .send_counts = one, .send_offsets = one, .recv = buf,
                              .recv_counts = two, .recv_offsets = two},
                             dev)),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.AllToAllV({.send = buf, .send_counts = neg, .send_offsets = one, .recv = buf,
                              .recv_counts = neg, .recv_offsets = one},
                             dev)),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.AllReduce(nullptr, buf, 4, DataType::kFloat32, ReduceOp::kSum, dev)),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.AllGather(buf, buf, -1, DataType::kFloat32, dev)),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.Broadcast(buf, 4, DataType::kFloat32, Rank(1), dev)),
            StatusCode::kInvalidArgument);
  const P2POp lone_send = {P2POp::Kind::kSend, Rank(0), buf, 4, DataType::kFloat32};
  EXPECT_EQ(code(c.GroupSendRecv({&lone_send, 1}, dev)), StatusCode::kInvalidArgument);
  const P2POp to_two = {P2POp::Kind::kSend, Rank(2), buf, 4, DataType::kFloat32};
  EXPECT_EQ(code(c.GroupSendRecv({&to_two, 1}, dev)), StatusCode::kInvalidArgument);
  // Valid arguments, host memory.
  EXPECT_EQ(code(c.AllReduce(buf, buf, 4, DataType::kFloat32, ReduceOp::kSum, kHostCtx)),
            StatusCode::kUnimplemented);
  EXPECT_EQ(code(c.Broadcast(buf, 4, DataType::kFloat32, Rank(0), kHostCtx)),
            StatusCode::kUnimplemented);
  EXPECT_EQ(code(c.Barrier(kHostCtx)), StatusCode::kUnimplemented);
  // Still usable after rejected calls.
  EXPECT_TRUE(c.Barrier(dev).ok());
  cudaFree(buf);

  absl::StatusOr<std::string> id = NcclCommunicator::MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(id->size(), 128u);
  EXPECT_EQ(NcclCommunicator::Create(Rank(1), 1, *id, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(Rank(0), 0, *id, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(Rank(0), 1, "short", {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(Rank(0), 1, *id, {.device = DeviceOrdinal(1 << 20)})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(NcclCommunicatorTest, MissingPeerTimesOutInsteadOfHanging) {
  alarm(120);  // A hang in NCCL's abort path fails the binary instead of the run.
  absl::StatusOr<std::string> id = NcclCommunicator::MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time start = absl::Now();
  // Rank 1 of 2 never joins: initialisation must give up after the timeout.
  auto comm = NcclCommunicator::Create(Rank(0), 2, *id, {.timeout = absl::Seconds(2)});
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnavailable) << comm.status();
  // Not a timing check: the bound only catches a hung abort (alarm above).
  EXPECT_LT(took, absl::Seconds(90)) << "abort took too long";
  alarm(0);
}

}  // namespace
}  // namespace weir::parallel
