// parallel/nccl_communicator_test.cc
//
// NcclCommunicator on a GPU machine (tag `gpu`). The shared conformance checks
// (collective_checks.h) run on host data; StagedCommunicator copies every
// buffer to device memory, runs the NCCL collective on a stream, waits with
// Synchronize() and copies the results back, so each check compares NCCL's
// device result with the contract's answer.
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

namespace weir::parallel {
namespace {

constexpr ExecContext kHostCtx = {.memory = MemoryKind::kHost};

// Host-memory facade over an NcclCommunicator: stages buffers through device
// memory. Buffers of one call are mapped by host address, so aliasing
// (in-place AllReduce, AllGather from its own block) carries over.
class StagedCommunicator final : public Communicator {
 public:
  explicit StagedCommunicator(NcclCommunicator& comm) : comm_(comm) {
    cudaSetDevice(comm.device().value());
    EXPECT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  ~StagedCommunicator() override { cudaStreamDestroy(stream_); }

  Rank rank() const override { return comm_.rank(); }
  int world_size() const override { return comm_.world_size(); }

  absl::Status AllToAllV(const AllToAllVArgs& a, const ExecContext&) override {
    int64_t send_end = 0, recv_end = 0;
    for (size_t p = 0; p < a.send_counts.size(); ++p) {
      send_end = std::max(send_end, a.send_offsets[p] + a.send_counts[p]);
      recv_end = std::max(recv_end, a.recv_offsets[p] + a.recv_counts[p]);
    }
    const size_t es = DataTypeSize(a.dtype);
    AllToAllVArgs d = a;
    d.send = Stage(a.send, send_end * es, true);
    d.recv = Stage(a.recv, recv_end * es, true);
    return Finish(comm_.AllToAllV(d, Ctx()));
  }
  absl::Status AllReduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op,
                         const ExecContext&) override {
    const size_t bytes = count * DataTypeSize(dtype);
    void* s = Stage(send, bytes, true);
    void* r = Stage(recv, bytes, false);
    return Finish(comm_.AllReduce(s, r, count, dtype, op, Ctx()));
  }
  absl::Status AllGather(const void* send, void* recv, int64_t count, DataType dtype,
                         const ExecContext&) override {
    const size_t bytes = count * DataTypeSize(dtype);
    std::byte* r = static_cast<std::byte*>(Stage(recv, bytes * world_size(), false));
    const auto* own = static_cast<const std::byte*>(recv) + bytes * rank().value();
    void* s = (send == own && count > 0) ? r + bytes * rank().value() : Stage(send, bytes, true);
    if (s != nullptr && send == own) cudaMemcpy(s, send, bytes, cudaMemcpyHostToDevice);
    return Finish(comm_.AllGather(s, r, count, dtype, Ctx()));
  }
  absl::Status Broadcast(void* data, int64_t count, DataType dtype, Rank root,
                         const ExecContext&) override {
    void* d = Stage(data, count * DataTypeSize(dtype), true);
    return Finish(comm_.Broadcast(d, count, dtype, root, Ctx()));
  }
  absl::Status Barrier(const ExecContext&) override { return comm_.Barrier(Ctx()); }
  absl::Status GroupSendRecv(std::span<const P2POp> ops, const ExecContext&) override {
    std::vector<P2POp> d(ops.begin(), ops.end());
    for (P2POp& op : d) op.data = Stage(op.data, op.count * DataTypeSize(op.dtype), true);
    return Finish(comm_.GroupSendRecv(d, Ctx()));
  }

 private:
  struct Staged {
    void* device = nullptr;
    size_t bytes = 0;
  };
  ExecContext Ctx() const { return {.memory = MemoryKind::kDevice, .stream = stream_}; }

  // Returns a device copy of `host` [bytes] (uploaded when `upload`, else
  // poisoned), the same one for the same address within a call.
  void* Stage(const void* host, size_t bytes, bool upload) {
    if (host == nullptr || bytes == 0) return nullptr;
    Staged& s = staged_[host];
    if (s.device != nullptr) return s.device;
    s.bytes = bytes;
    EXPECT_EQ(cudaMalloc(&s.device, bytes), cudaSuccess);
    if (upload) {
      EXPECT_EQ(cudaMemcpy(s.device, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      EXPECT_EQ(cudaMemset(s.device, 0xA5, bytes), cudaSuccess);
    }
    return s.device;
  }
  // Waits for the stream, copies every staged buffer back (sends are
  // unchanged by the contract, so copying them back is harmless) and frees.
  absl::Status Finish(absl::Status status) {
    if (status.ok()) status = comm_.Synchronize(Ctx());
    for (auto& [host, s] : staged_) {
      if (status.ok()) {
        cudaMemcpy(const_cast<void*>(host), s.device, s.bytes, cudaMemcpyDeviceToHost);
      }
      cudaFree(s.device);
    }
    staged_.clear();
    return status;
  }

  NcclCommunicator& comm_;
  cudaStream_t stream_ = nullptr;
  std::map<const void*, Staged> staged_;
};

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
  StagedCommunicator staged(**comms[0]);
  EXPECT_TRUE(CheckEveryCollective(staged, 7).ok());
  // Larger than NCCL's small-message protocols.
  EXPECT_TRUE(CheckAllToAllV(staged, 8, 1 << 20).ok());
  EXPECT_TRUE(CheckAllReduce(staged, 9, DataType::kFloat32, ReduceOp::kSum, 3 << 20, true).ok());
}

TEST(NcclCommunicatorTest, TwoRanksOnTwoDevicesMatchTheContract) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs (NCCL rejects duplicate GPUs)";
  auto comms = CreateWorld(2);
  for (auto& c : comms) ASSERT_TRUE(c.ok()) << c.status();
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      StagedCommunicator staged(**comms[r]);
      results[r] = CheckEveryCollective(staged, 11);
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
  EXPECT_LT(took, absl::Seconds(15)) << "abort took too long";
  alarm(0);
}

}  // namespace
}  // namespace weir::parallel
