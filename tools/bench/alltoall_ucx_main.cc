// tools/bench/alltoall_ucx_main.cc
//
// All-to-all-v over UCX between local processes: latency and bandwidth for
// 2..16 ranks and a range of block sizes, next to the memcpy bandwidth of the
// same number of bytes measured in this run (one process, before the ranks
// start) as the ceiling.
//
//   tools/bazel run -c opt //tools/bench:alltoall_ucx -- --ranks=2,4,8,16 --transports=sm,tcp
//
// Columns: bytes/peer = block each rank sends to each other rank; lat_us = mean
// time of one all-to-all-v (slowest rank); rank_GB/s = bytes one rank sends to
// its peers per second; agg_GB/s = all ranks together; memcpy_GB/s = one core
// copying (ranks-1) x bytes/peer; agg/memcpy = agg_GB/s / memcpy_GB/s.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/init.h"
#include "base/status_macros.h"
#include "parallel/file_rendezvous.h"
#include "parallel/fork_ranks.h"
#include "parallel/ucx_communicator.h"

ABSL_FLAG(std::vector<std::string>, ranks, std::vector<std::string>({"2", "4", "8", "16"}),
          "world sizes (processes) to measure");
ABSL_FLAG(std::vector<std::string>, sizes,
          std::vector<std::string>({"64", "1024", "16384", "262144", "1048576"}),
          "block sizes in bytes per peer");
ABSL_FLAG(std::vector<std::string>, transports, std::vector<std::string>({"sm", "tcp"}),
          "UCX transport sets: sm (sm,self) and/or tcp (tcp,self)");
ABSL_FLAG(int64_t, bytes_per_point, int64_t{128} << 20,
          "total bytes moved per measurement (sets the iteration count)");

namespace weir::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Bytes per second of memcpy of `bytes`-sized blocks, repeated for >= 0.1 s.
double MemcpyBandwidth(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes);
  int64_t reps = 0;
  const Clock::time_point start = Clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 16; ++i, ++reps) {
      std::memcpy(dst.data(), src.data(), bytes);
      src[reps % bytes] = static_cast<char>(reps);  // keep the copies observable
    }
    elapsed = Seconds(Clock::now() - start);
  } while (elapsed < 0.1);
  if (dst[0] == 42 && dst[bytes - 1] == 43) std::puts("");  // defeat dead-store elimination
  return static_cast<double>(bytes) * reps / elapsed;
}

int64_t Iterations(int64_t block, int world) {
  const int64_t per_iter = std::max<int64_t>(1, block * world * (world - 1));
  return std::clamp<int64_t>(absl::GetFlag(FLAGS_bytes_per_point) / per_iter, 20, 300);
}

// Runs on every rank: measures each size and prints a row on rank 0.
absl::Status RunRank(UcxCommunicator& comm, const std::string& tls,
                     const std::vector<int64_t>& sizes, const std::vector<double>& memcpy_bw) {
  const int n = comm.world_size(), me = comm.rank().value();
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int64_t block = sizes[s];
    std::vector<int64_t> counts(n, block), offsets(n);
    for (int p = 0; p < n; ++p) offsets[p] = p * block;
    std::vector<uint8_t> send(n * block), recv(n * block, 0);
    for (int p = 0; p < n; ++p) std::memset(send.data() + p * block, (me * 31 + p) & 0xFF, block);
    const AllToAllVArgs args{.send = send.data(),
                             .send_counts = counts,
                             .send_offsets = offsets,
                             .recv = recv.data(),
                             .recv_counts = counts,
                             .recv_offsets = offsets};
    RETURN_IF_ERROR(comm.AllToAllV(args));  // warm-up, and a correctness check
    for (int p = 0; p < n; ++p) {
      if (block > 0 && (recv[p * block] != ((p * 31 + me) & 0xFF) ||
                        recv[p * block + block - 1] != ((p * 31 + me) & 0xFF))) {
        return absl::InternalError(absl::StrCat("wrong data from rank ", p));
      }
    }
    const int64_t iters = Iterations(block, n);
    RETURN_IF_ERROR(comm.Barrier());
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < iters; ++i) RETURN_IF_ERROR(comm.AllToAllV(args));
    double elapsed = Seconds(Clock::now() - start);
    RETURN_IF_ERROR(comm.AllReduce(&elapsed, &elapsed, 1, DataType::kFloat64, ReduceOp::kMax));
    if (me == 0) {
      const double lat = elapsed / iters;
      const double rank_bw = static_cast<double>(block) * (n - 1) / lat;
      std::printf("%-4s %5d %10lld %6lld %10.1f %9.3f %9.3f %11.3f %10.3f\n", tls.c_str(), n,
                  static_cast<long long>(block), static_cast<long long>(iters), lat * 1e6,
                  rank_bw / 1e9, rank_bw * n / 1e9, memcpy_bw[s] / 1e9, rank_bw * n / memcpy_bw[s]);
      std::fflush(stdout);
    }
  }
  return comm.Barrier();
}

int Main() {
  std::vector<int64_t> sizes;
  std::vector<int> worlds;
  for (const std::string& v : absl::GetFlag(FLAGS_sizes)) {
    int64_t x = 0;
    if (!absl::SimpleAtoi(v, &x) || x < 0)
      return std::fprintf(stderr, "bad size %s\n", v.c_str()), 2;
    sizes.push_back(x);
  }
  for (const std::string& v : absl::GetFlag(FLAGS_ranks)) {
    int x = 0;
    if (!absl::SimpleAtoi(v, &x) || x < 2 || x > 64) {
      return std::fprintf(stderr, "bad rank count %s\n", v.c_str()), 2;
    }
    worlds.push_back(x);
  }
  std::printf("%-4s %5s %10s %6s %10s %9s %9s %11s %10s\n", "tls", "ranks", "bytes/peer", "iters",
              "lat_us", "rank_GB/s", "agg_GB/s", "memcpy_GB/s", "agg/memcpy");
  const char* tmp = std::getenv("TMPDIR");
  for (const std::string& tls : absl::GetFlag(FLAGS_transports)) {
    if (tls != "sm" && tls != "tcp")
      return std::fprintf(stderr, "bad transport %s\n", tls.c_str()), 2;
    for (int world : worlds) {
      std::vector<double> memcpy_bw;
      for (int64_t block : sizes)
        memcpy_bw.push_back(MemcpyBandwidth(std::max<int64_t>(1, block * (world - 1))));
      std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/alltoall_ucx_XXXXXX");
      if (mkdtemp(dir.data()) == nullptr) return std::perror("mkdtemp"), 1;
      absl::StatusOr<std::vector<int>> outcome = ForkRanks(
          world,
          [&](int rank) {
            auto ctx = UcxContext::Create({.transports = absl::StrCat(tls, ",self")});
            absl::Status st = ctx.status();
            if (st.ok()) {
              auto table =
                  ExchangeThroughDirectory(dir, rank, world, (*ctx)->address(), absl::Seconds(60));
              st = table.status();
              if (st.ok()) {
                auto comm = UcxCommunicator::Create(
                    **ctx, Rank(rank), *table,
                    {.timeout = absl::Seconds(120), .peer_failure_detection = tls == "tcp"});
                st = comm.ok() ? RunRank(**comm, tls, sizes, memcpy_bw) : comm.status();
              }
            }
            if (!st.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, st.ToString().c_str());
            return st.ok() ? 0 : 1;
          },
          absl::Minutes(10));
      if (!outcome.ok() ||
          std::any_of(outcome->begin(), outcome->end(), [](int c) { return c != 0; })) {
        std::fprintf(stderr, "%s with %d ranks failed\n", tls.c_str(), world);
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace weir::parallel

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "all-to-all-v bandwidth and latency over UCX", "alltoall_ucx");
  return weir::parallel::Main();
}
