// MoeDispatchLsa and MoeReturnLsa against their CPU statement on two GPUs
// (skipped with one: NCCL gives a world of one no symmetric memory), the
// barrier released by the abort word, NcclSymmetricMemory's refusals, and the
// kernels' argument checks.
#include "kernels/cuda/moe/moe_exchange_lsa.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/nccl_communicator.h"
#include "parallel/nccl_symmetric.h"

namespace weir::kernels::cuda {
namespace {

using parallel::NcclCommunicator;
using parallel::NcclSymmetricMemory;

int Devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::vector<std::unique_ptr<NcclCommunicator>> MakeNccl(int world) {
  auto id = NcclCommunicator::MakeUniqueId();
  EXPECT_TRUE(id.ok()) << id.status();
  std::vector<std::unique_ptr<NcclCommunicator>> comms(world);
  if (!id.ok()) return comms;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto comm = NcclCommunicator::Create(Rank(r), world, *id, {.device = DeviceOrdinal(r)});
      EXPECT_TRUE(comm.ok()) << comm.status();
      if (comm.ok()) comms[r] = std::move(*comm);
    });
  }
  for (std::thread& t : threads) t.join();
  return comms;
}

// Runs fn(r) on a thread per rank, each with its device current.
template <typename Fn>
void OnRanks(int world, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      fn(r);
    });
  }
  for (std::thread& t : threads) t.join();
}

template <typename T>
T* Upload(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(host.size(), 1) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> Download(const void* p, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

struct Shape {
  int64_t tokens, valid, dim;
  int topk, per_rank;
};

// One rank's inputs: physical slots (some -1 or out of range), weights, x.
struct RankInput {
  std::vector<int32_t> slots;
  std::vector<float> weight, x;
};

RankInput Random(const Shape& s, int world, std::mt19937& rng) {
  RankInput in;
  std::uniform_real_distribution<float> u(-1, 1);
  const int physical = world * s.per_rank;
  for (int64_t i = 0; i < s.tokens * s.topk; ++i) {
    const uint32_t draw = rng() % 23;
    in.slots.push_back(draw == 0   ? -1
                       : draw == 1 ? physical + 3
                                   : static_cast<int32_t>(rng() % physical));
    in.weight.push_back(u(rng) * 3);
  }
  for (int64_t i = 0; i < s.tokens * s.dim; ++i) in.x.push_back(u(rng));
  return in;
}

// The symmetric windows of one rank: recv_x, recv_slot, recv_weight, ret,
// barrier (the decoder's order).
std::unique_ptr<NcclSymmetricMemory> Windows(NcclCommunicator& comm, const Shape& s, int world) {
  const size_t rows = static_cast<size_t>(world * s.tokens);
  const size_t sizes[] = {rows * s.dim * 4, rows * s.topk * 4, rows * s.topk * 4,
                          static_cast<size_t>(s.tokens * s.topk * s.dim) * 4,
                          MoeLsaBarrierBytes(world)};
  auto m = NcclSymmetricMemory::Create(comm, sizes, 0);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Dispatch, then return, on every rank; both checked against the CPU
// statement bit for bit, `rounds` times over the same windows (the
// barriers' epochs advance).
void CheckExchange(int world, const Shape& s, int rounds) {
  auto comms = MakeNccl(world);
  for (auto& c : comms) ASSERT_NE(c, nullptr);
  std::vector<std::unique_ptr<NcclSymmetricMemory>> mem(world);
  OnRanks(world, [&](int r) { mem[r] = Windows(*comms[r], s, world); });
  for (auto& m : mem) ASSERT_NE(m, nullptr);
  std::mt19937 rng(world * 7919 + s.tokens);
  const int64_t tk = s.tokens * s.topk;
  for (int round = 0; round < rounds; ++round) {
    std::vector<RankInput> in(world);
    for (int r = 0; r < world; ++r) in[r] = Random(s, world, rng);
    std::vector<std::vector<int32_t>> return_row(world);
    std::vector<absl::Status> status(world);
    // Dispatch.
    OnRanks(world, [&](int r) {
      int32_t* slots = Upload(in[r].slots);
      float* weight = Upload(in[r].weight);
      float* x = Upload(in[r].x);
      int64_t* valid = Upload(std::vector<int64_t>{s.valid});
      int32_t* rr = Upload(std::vector<int32_t>(tk, 12345));
      status[r] = MoeDispatchLsa({.slots = slots,
                                  .route_weight = weight,
                                  .x = x,
                                  .valid_tokens = valid,
                                  .recv_x = mem[r]->window(0),
                                  .recv_slot = mem[r]->window(1),
                                  .recv_weight = mem[r]->window(2),
                                  .return_row = rr,
                                  .barrier = mem[r]->window(4),
                                  .comm = &mem[r]->dev_comm(),
                                  .tokens = s.tokens,
                                  .dim = s.dim,
                                  .topk = s.topk,
                                  .slots_per_rank = s.per_rank},
                                 nullptr);
      return_row[r] = Download<int32_t>(rr, tk);
      for (void* p : {static_cast<void*>(slots), static_cast<void*>(weight), static_cast<void*>(x),
                      static_cast<void*>(valid), static_cast<void*>(rr)}) {
        cudaFree(p);
      }
    });
    for (int r = 0; r < world; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
    const int physical = world * s.per_rank;
    auto dest_of = [&](int src, int64_t t, int k) {
      const int32_t slot = t < s.valid ? in[src].slots[t * s.topk + k] : -1;
      return slot >= 0 && slot < physical ? slot / s.per_rank : -1;
    };
    int64_t rows_sent = 0, mismatches = 0;
    for (int p = 0; p < world; ++p) {
      ASSERT_EQ(cudaSetDevice(p), cudaSuccess);
      const auto slot = Download<int32_t>(mem[p]->local(1), world * tk);
      const auto weight = Download<float>(mem[p]->local(2), world * tk);
      const auto x = Download<float>(mem[p]->local(0), world * s.tokens * s.dim);
      for (int src = 0; src < world; ++src) {
        for (int64_t t = 0; t < s.tokens; ++t) {
          bool needed = false;
          for (int k = 0; k < s.topk; ++k) {
            const int dest = dest_of(src, t, k);
            const int64_t at = (src * s.tokens + t) * s.topk + k;
            const int32_t want_slot = dest == p ? in[src].slots[t * s.topk + k] % s.per_rank : -1;
            const float want_w = dest == p ? in[src].weight[t * s.topk + k] : 0.0f;
            mismatches += slot[at] != want_slot;
            mismatches += std::memcmp(&weight[at], &want_w, 4) != 0;
            needed |= dest == p;
            if (p == 0) {
              const int32_t want_rr = dest >= 0 ? static_cast<int32_t>(t * s.topk + k) : -1;
              mismatches += return_row[src][t * s.topk + k] != want_rr;
            }
          }
          if (!needed) continue;
          ++rows_sent;
          mismatches +=
              std::memcmp(&x[(src * s.tokens + t) * s.dim], &in[src].x[t * s.dim], s.dim * 4) != 0;
        }
      }
    }
    // Return: each rank numbers its received pairs in a random order.
    std::vector<std::vector<int32_t>> pair_row(world);
    std::vector<std::vector<float>> y(world);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int p = 0; p < world; ++p) {
      ASSERT_EQ(cudaSetDevice(p), cudaSuccess);
      const auto slot = Download<int32_t>(mem[p]->local(1), world * tk);
      std::vector<int32_t> order;
      for (int64_t i = 0; i < world * tk; ++i) {
        if (slot[i] >= 0) order.push_back(static_cast<int32_t>(i));
      }
      std::shuffle(order.begin(), order.end(), rng);
      pair_row[p].assign(world * tk, -1);
      for (size_t g = 0; g < order.size(); ++g) pair_row[p][order[g]] = static_cast<int32_t>(g);
      for (size_t i = 0; i < std::max<size_t>(order.size(), 1) * s.dim; ++i) {
        y[p].push_back(u(rng));
      }
    }
    OnRanks(world, [&](int r) {
      float* yg = Upload(y[r]);
      int32_t* pr = Upload(pair_row[r]);
      status[r] = MoeReturnLsa({.y_grouped = yg,
                                .pair_row = pr,
                                .ret = mem[r]->window(3),
                                .barrier = mem[r]->window(4),
                                .comm = &mem[r]->dev_comm(),
                                .tokens = s.tokens,
                                .dim = s.dim,
                                .topk = s.topk},
                               nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaFree(yg);
      cudaFree(pr);
    });
    for (int r = 0; r < world; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
    int64_t pairs_back = 0;
    for (int src = 0; src < world; ++src) {
      ASSERT_EQ(cudaSetDevice(src), cudaSuccess);
      const auto ret = Download<float>(mem[src]->local(3), tk * s.dim);
      for (int64_t t = 0; t < s.tokens; ++t) {
        for (int k = 0; k < s.topk; ++k) {
          const int dest = dest_of(src, t, k);
          if (dest < 0) continue;
          ++pairs_back;
          const int32_t g = pair_row[dest][(src * s.tokens + t) * s.topk + k];
          mismatches += g < 0 || std::memcmp(&ret[(t * s.topk + k) * s.dim], &y[dest][g * s.dim],
                                             s.dim * 4) != 0;
        }
      }
    }
    std::printf(
        "world %d, tokens %lld (%lld valid), dim %lld, topk %d, round %d: %lld rows "
        "dispatched (fixed blocks: %lld), %lld pairs returned, %lld mismatches\n",
        world, static_cast<long long>(s.tokens), static_cast<long long>(s.valid),
        static_cast<long long>(s.dim), s.topk, round, static_cast<long long>(rows_sent),
        static_cast<long long>(world * world * s.tokens), static_cast<long long>(pairs_back),
        static_cast<long long>(mismatches));
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(rows_sent, 0);
  }
  OnRanks(world, [&](int r) { mem[r].reset(); });
}

TEST(MoeExchangeLsaTest, TwoRanksMatchTheStatement) {
  if (Devices() < 2) GTEST_SKIP() << Devices() << " CUDA device(s); two are needed";
  CheckExchange(2, {.tokens = 37, .valid = 33, .dim = 256, .topk = 6, .per_rank = 5}, 3);
  CheckExchange(2, {.tokens = 520, .valid = 511, .dim = 64, .topk = 8, .per_rank = 16}, 2);
  // A dim that is not a multiple of 4 (scalar copies).
  CheckExchange(2, {.tokens = 300, .valid = 300, .dim = 130, .topk = 2, .per_rank = 4}, 2);
}

// A peer that never comes: the barrier leaves once the abort word is raised.
TEST(MoeExchangeLsaTest, AbortReleasesTheBarrier) {
  if (Devices() < 2) GTEST_SKIP() << Devices() << " CUDA device(s); two are needed";
  const Shape s{.tokens = 8, .valid = 8, .dim = 64, .topk = 2, .per_rank = 2};
  auto comms = MakeNccl(2);
  for (auto& c : comms) ASSERT_NE(c, nullptr);
  std::vector<std::unique_ptr<NcclSymmetricMemory>> mem(2);
  OnRanks(2, [&](int r) { mem[r] = Windows(*comms[r], s, 2); });
  for (auto& m : mem) ASSERT_NE(m, nullptr);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  int32_t* abort_host = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&abort_host), 4, cudaHostAllocMapped),
            cudaSuccess);
  *abort_host = 0;
  void* abort_dev = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&abort_dev, abort_host, 0), cudaSuccess);
  RankInput in;
  std::mt19937 rng(5);
  in = Random(s, 2, rng);
  int32_t* slots = Upload(in.slots);
  float* weight = Upload(in.weight);
  float* x = Upload(in.x);
  int32_t* rr = Upload(std::vector<int32_t>(s.tokens * s.topk));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(MoeDispatchLsa({.slots = slots,
                              .route_weight = weight,
                              .x = x,
                              .recv_x = mem[0]->window(0),
                              .recv_slot = mem[0]->window(1),
                              .recv_weight = mem[0]->window(2),
                              .return_row = rr,
                              .barrier = mem[0]->window(4),
                              .abort = static_cast<const int32_t*>(abort_dev),
                              .comm = &mem[0]->dev_comm(),
                              .tokens = s.tokens,
                              .dim = s.dim,
                              .topk = s.topk,
                              .slots_per_rank = s.per_rank},
                             stream)
                  .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);  // waiting for rank 1
  *abort_host = 1;
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  for (void* p : {static_cast<void*>(slots), static_cast<void*>(weight), static_cast<void*>(x),
                  static_cast<void*>(rr)}) {
    cudaFree(p);
  }
  cudaFreeHost(abort_host);
  OnRanks(2, [&](int r) { mem[r].reset(); });
}

// A world of one has no peers and NCCL gives it no symmetric memory: refused
// before any NCCL call, and the communicator stays usable.
TEST(MoeExchangeLsaTest, AWorldOfOneIsRefusedAndTheCommunicatorStaysUsable) {
  if (Devices() < 1) GTEST_SKIP() << "no CUDA device";
  auto comms = MakeNccl(1);
  ASSERT_NE(comms[0], nullptr);
  EXPECT_EQ(NcclSymmetricMemory::Create(*comms[0], {}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const size_t zero[] = {16, 0};
  EXPECT_EQ(NcclSymmetricMemory::Create(*comms[0], zero, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const size_t one[] = {16};
  EXPECT_EQ(NcclSymmetricMemory::Create(*comms[0], one, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto refused = NcclSymmetricMemory::Create(*comms[0], one, 0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_TRUE(comms[0]->Barrier({.memory = parallel::MemoryKind::kDevice}).ok());
}

// Every unsupported argument is refused before a launch (a device
// communicator and windows stand-ins: nothing reaches the device).
TEST(MoeExchangeLsaTest, RefusesBadArguments) {
  ncclDevComm comm{};
  comm.rank = 0;
  comm.nRanks = 2;
  comm.lsaRank = 0;
  comm.lsaSize = 2;
  int32_t i32[4] = {};
  float f32[4] = {};
  ncclWindow_t window = reinterpret_cast<ncclWindow_t>(&f32[0]);  // never dereferenced
  const MoeDispatchLsaParams ok{.slots = i32,
                                .route_weight = f32,
                                .x = f32,
                                .recv_x = window,
                                .recv_slot = window,
                                .recv_weight = window,
                                .return_row = i32,
                                .barrier = window,
                                .comm = &comm,
                                .tokens = 4,
                                .dim = 32,
                                .topk = 2,
                                .slots_per_rank = 2};
  EXPECT_TRUE(SupportsMoeDispatchLsa(ok));
  std::vector<std::pair<std::string, MoeDispatchLsaParams>> bad;
  auto with = [&](const std::string& what, auto change) {
    MoeDispatchLsaParams p = ok;
    change(p);
    bad.emplace_back(what, p);
  };
  with("no comm", [](MoeDispatchLsaParams& p) { p.comm = nullptr; });
  with("no barrier", [](MoeDispatchLsaParams& p) { p.barrier = nullptr; });
  with("no recv_x", [](MoeDispatchLsaParams& p) { p.recv_x = nullptr; });
  with("no x", [](MoeDispatchLsaParams& p) { p.x = nullptr; });
  with("no tokens", [](MoeDispatchLsaParams& p) { p.tokens = 0; });
  with("topk past the table", [](MoeDispatchLsaParams& p) { p.topk = 600; });
  ncclDevComm split = comm;  // a world larger than its LSA team (two nodes)
  split.lsaSize = 1;
  with("world past the LSA team", [&](MoeDispatchLsaParams& p) { p.comm = &split; });
  for (const auto& [what, p] : bad) {
    EXPECT_FALSE(SupportsMoeDispatchLsa(p)) << what;
    EXPECT_EQ(MoeDispatchLsa(p, nullptr).code(), absl::StatusCode::kInvalidArgument) << what;
  }
  const MoeReturnLsaParams ret{.y_grouped = f32,
                               .pair_row = i32,
                               .ret = window,
                               .barrier = window,
                               .comm = &comm,
                               .tokens = 4,
                               .dim = 32,
                               .topk = 2};
  EXPECT_TRUE(SupportsMoeReturnLsa(ret));
  for (auto change : {+[](MoeReturnLsaParams& p) { p.ret = nullptr; },
                      +[](MoeReturnLsaParams& p) { p.barrier = nullptr; },
                      +[](MoeReturnLsaParams& p) { p.comm = nullptr; },
                      +[](MoeReturnLsaParams& p) { p.dim = 0; }}) {
    MoeReturnLsaParams p = ret;
    change(p);
    EXPECT_EQ(MoeReturnLsa(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace weir::kernels::cuda
