// tools/bench/alltoall_nccl_main.cc
//
// The MoE dispatch/combine exchange over NcclCommunicator: one process, one
// thread per GPU, ranks joined with NcclCommunicator::MakeUniqueId/Create.
// Each rank holds T tokens of hidden size H (bf16, moved as kUint8 bytes) and
// routes each to its top-k of E experts, drawn uniformly at random (fixed
// seed); expert e lives on rank floor(e * world / E). Dispatch is one
// AllToAllV of the routed token copies (grouped by destination rank); combine
// is the reverse AllToAllV (each copy sent back to the rank that owns the
// token). The same exchange then runs through HostStagedCommunicator on host
// buffers (what the worker's --backend=cuda uses), so the cost of staging is
// visible next to the device path. With one GPU every copy stays on that GPU
// and AllToAllV is a device-to-device self-copy; the output says so.
//
//   tools/bazel build -c opt //tools/bench:alltoall_nccl   (then, on the GPU
//   machine: alltoall_nccl [--gpus=N] [--tokens=128,4096] [--dedup])
//
// Device path timing: per repetition every rank enqueues a one-element
// all-reduce (which lines the GPUs up), then CUDA events around dispatch and
// around combine, all on one stream, without host waits between repetitions;
// a repetition's time is its slowest rank's, and the table shows the median
// over --reps after --warmup. Host-staged timing: Barrier, then wall clock
// around each (synchronous) call; slowest rank, median over --host_reps.
// GB/s = bytes one rank sends in the operation (its own copies included, the
// mean over ranks) / median time. Refuses to run on several GPUs unless
// NCCL_NVLS_ENABLE is 0 or unset (unset is set to 0 here): NVLink multicast
// stays off.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/init.h"
#include "base/status_macros.h"
#include "base/strong_id.h"
#include "kernels/cuda/launch_status.h"
#include "parallel/host_staged_communicator.h"
#include "parallel/nccl_communicator.h"

ABSL_FLAG(int, gpus, 0, "ranks, one GPU each (0 = every visible device)");
ABSL_FLAG(std::vector<std::string>, tokens, std::vector<std::string>({"128", "4096"}),
          "tokens per rank to measure (128 = decode-sized, 4096 = prefill-sized)");
ABSL_FLAG(int64_t, hidden, 7168, "hidden size; each element is bf16 (2 bytes)");
ABSL_FLAG(int, topk, 8, "experts per token");
ABSL_FLAG(int, experts, 256, "routed experts, spread evenly over the ranks");
ABSL_FLAG(uint64_t, seed, 1, "routing seed");
ABSL_FLAG(bool, dedup, false,
          "send a token once per destination rank (DeepEP's normal kernels) instead of once per "
          "token-expert pair (weir's CommunicatorExpertExecutor, DeepEP's low-latency kernels)");
ABSL_FLAG(int, warmup, 3, "untimed repetitions before timing");
ABSL_FLAG(int, reps, 20, "timed repetitions, device path");
ABSL_FLAG(int, host_reps, 10, "timed repetitions, host-staged path");
ABSL_FLAG(bool, host_staged, true, "also measure HostStagedCommunicator on host buffers");

namespace weir::parallel {
namespace {

using ::weir::kernels::cuda::CudaStatus;

using Clock = std::chrono::steady_clock;

// DeepEP's published H800 figures (EP8, 7168 hidden, top-8, FP8 dispatch and
// BF16 combine). Normal kernels, intranode over NVLink, 4096 tokens: GB/s.
constexpr double kDeepEpNormalDispatchGBs = 153.0;
constexpr double kDeepEpNormalCombineGBs = 158.0;
// Low-latency kernels, 128 tokens (over RDMA): microseconds.
constexpr double kDeepEpLowLatencyDispatchUs = 77.0;
constexpr double kDeepEpLowLatencyCombineUs = 114.0;
// Sizes up to this many tokens are compared with the low-latency figures.
constexpr int64_t kDecodeSizedTokens = 512;
constexpr int64_t kBytesPerElement = 2;  // bf16

struct Config {
  int world = 1;
  std::vector<int64_t> tokens;
  int64_t hidden = 0;
  int topk = 0;
  int experts = 0;
  uint64_t seed = 0;
  bool dedup = false;
  int warmup = 0, reps = 0, host_reps = 0;
  bool host_staged = true;
};

// Rows (routed token copies) each rank sends to each rank, for one size.
struct Layout {
  int64_t tokens = 0;
  int64_t row_bytes = 0;
  std::vector<std::vector<int64_t>> rows;  // [src][dst]
};

// Timings of one path (device or host-staged) at one size, on one rank.
struct Samples {
  std::vector<double> dispatch_us, combine_us, enqueue_us;  // [reps]
};

struct RankResult {
  absl::Status status;
  std::vector<Samples> device, host;  // [size]
};

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Device memory freed on destruction.
class DeviceBytes {
 public:
  DeviceBytes() = default;
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() {
    if (data_ != nullptr) cudaFree(data_);
  }
  absl::Status Allocate(int64_t bytes) {
    return CudaStatus(cudaMalloc(&data_, std::max<int64_t>(1, bytes)), "cudaMalloc");
  }
  char* data() const { return data_; }

 private:
  char* data_ = nullptr;
};

Layout Route(const Config& c, int64_t tokens) {
  Layout layout{.tokens = tokens,
                .row_bytes = c.hidden * kBytesPerElement,
                .rows = std::vector<std::vector<int64_t>>(c.world,
                                                          std::vector<int64_t>(c.world, 0))};
  for (int src = 0; src < c.world; ++src) {
    std::mt19937_64 rng(c.seed * 1000003 + static_cast<uint64_t>(src) * 7919 + tokens);
    std::vector<int> perm(c.experts);
    std::iota(perm.begin(), perm.end(), 0);
    std::vector<char> hit(c.world);
    for (int64_t t = 0; t < tokens; ++t) {
      std::fill(hit.begin(), hit.end(), 0);
      for (int k = 0; k < c.topk; ++k) {  // partial Fisher-Yates: k distinct experts
        std::uniform_int_distribution<int> pick(k, c.experts - 1);
        std::swap(perm[k], perm[pick(rng)]);
        const int owner = static_cast<int>(int64_t{perm[k]} * c.world / c.experts);
        if (!c.dedup || !hit[owner]) ++layout.rows[src][owner];
        hit[owner] = 1;
      }
    }
  }
  return layout;
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

// Counts and offsets (bytes) of one rank's dispatch; combine swaps them.
struct Exchange {
  std::vector<int64_t> send_counts, send_offsets, recv_counts, recv_offsets;
  int64_t send_bytes = 0, recv_bytes = 0;

  Exchange(const Layout& l, int me) {
    const int world = static_cast<int>(l.rows.size());
    for (int p = 0; p < world; ++p) {
      send_counts.push_back(l.rows[me][p] * l.row_bytes);
      recv_counts.push_back(l.rows[p][me] * l.row_bytes);
    }
    send_offsets = Offsets(send_counts);
    recv_offsets = Offsets(recv_counts);
    send_bytes = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
    recv_bytes = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  }
  AllToAllVArgs Dispatch(const void* send, void* recv) const {
    return {.send = send, .send_counts = send_counts, .send_offsets = send_offsets,
            .recv = recv, .recv_counts = recv_counts, .recv_offsets = recv_offsets};
  }
  AllToAllVArgs Combine(const void* send, void* recv) const {
    return {.send = send, .send_counts = recv_counts, .send_offsets = recv_offsets,
            .recv = recv, .recv_counts = send_counts, .recv_offsets = send_offsets};
  }
};

uint8_t RowByte(int src, int dst, int64_t row) {
  return static_cast<uint8_t>((src * 7 + dst * 13 + row) & 0xFF);
}

// Fills `send` (the dispatch send buffer of rank `me`): row j of the block to
// rank p holds RowByte(me, p, j) in every byte.
void FillSend(const Layout& l, const Exchange& x, int me, std::vector<uint8_t>& send) {
  send.assign(x.send_bytes, 0);
  for (size_t p = 0; p < l.rows.size(); ++p) {
    for (int64_t j = 0; j < l.rows[me][p]; ++j) {
      std::memset(send.data() + x.send_offsets[p] + j * l.row_bytes, RowByte(me, p, j),
                  l.row_bytes);
    }
  }
}

// Checks what dispatch delivered (first and last byte of every row) and that
// combine brought back exactly what was sent.
absl::Status CheckRoundTrip(const Layout& l, const Exchange& x, int me,
                            const std::vector<uint8_t>& sent, const std::vector<uint8_t>& got,
                            const std::vector<uint8_t>& back, const char* path) {
  for (size_t p = 0; p < l.rows.size(); ++p) {
    for (int64_t j = 0; j < l.rows[p][me]; ++j) {
      const uint8_t* row = got.data() + x.recv_offsets[p] + j * l.row_bytes;
      const uint8_t want = RowByte(static_cast<int>(p), me, j);
      if (row[0] != want || row[l.row_bytes - 1] != want) {
        return absl::InternalError(absl::StrCat(path, " dispatch: rank ", me, " row ", j,
                                                " from rank ", p, " holds wrong data"));
      }
    }
  }
  if (back != sent) {
    return absl::InternalError(absl::StrCat(path, " combine: rank ", me,
                                            " did not get its rows back"));
  }
  return absl::OkStatus();
}

// Device path at one size: buffers, a checked round trip, then the timed loop.
absl::Status MeasureDevice(NcclCommunicator& comm, cudaStream_t stream, const Config& c,
                           const Layout& l, std::vector<uint8_t>& host_a,
                           std::vector<uint8_t>& host_b, std::vector<uint8_t>& host_c,
                           Samples& out) {
  const int me = comm.rank().value();
  const Exchange x(l, me);
  const ExecContext ctx{.memory = MemoryKind::kDevice, .stream = stream};
  DeviceBytes a, b, align;
  RETURN_IF_ERROR(a.Allocate(x.send_bytes));
  RETURN_IF_ERROR(b.Allocate(x.recv_bytes));
  RETURN_IF_ERROR(align.Allocate(sizeof(float)));
  FillSend(l, x, me, host_a);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(a.data(), host_a.data(), x.send_bytes, cudaMemcpyHostToDevice), "upload"));
  {
    DeviceBytes back;
    RETURN_IF_ERROR(back.Allocate(x.send_bytes));
    RETURN_IF_ERROR(CudaStatus(cudaMemset(back.data(), 0xEE, x.send_bytes), "cudaMemset"));
    RETURN_IF_ERROR(comm.AllToAllV(x.Dispatch(a.data(), b.data()), ctx));
    RETURN_IF_ERROR(comm.AllToAllV(x.Combine(b.data(), back.data()), ctx));
    RETURN_IF_ERROR(comm.Synchronize(ctx));
    host_b.resize(x.recv_bytes);
    host_c.resize(x.send_bytes);
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(host_b.data(), b.data(), x.recv_bytes, cudaMemcpyDeviceToHost), "download"));
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(host_c.data(), back.data(), x.send_bytes, cudaMemcpyDeviceToHost), "download"));
    RETURN_IF_ERROR(CheckRoundTrip(l, x, me, host_a, host_b, host_c, "device"));
  }
  const int total = c.warmup + c.reps;
  std::vector<cudaEvent_t> events(3 * total, nullptr);
  absl::Status status;
  for (cudaEvent_t& e : events) {
    if (status.ok()) status = CudaStatus(cudaEventCreate(&e), "cudaEventCreate");
  }
  std::vector<double> enqueue(total);
  for (int i = 0; i < total && status.ok(); ++i) {
    status = comm.AllReduce(align.data(), align.data(), 1, DataType::kFloat32, ReduceOp::kMax, ctx);
    if (status.ok()) status = CudaStatus(cudaEventRecord(events[3 * i], stream), "cudaEventRecord");
    const Clock::time_point t0 = Clock::now();
    if (status.ok()) status = comm.AllToAllV(x.Dispatch(a.data(), b.data()), ctx);
    enqueue[i] = Micros(Clock::now() - t0);
    if (status.ok()) {
      status = CudaStatus(cudaEventRecord(events[3 * i + 1], stream), "cudaEventRecord");
    }
    if (status.ok()) status = comm.AllToAllV(x.Combine(b.data(), a.data()), ctx);
    if (status.ok()) {
      status = CudaStatus(cudaEventRecord(events[3 * i + 2], stream), "cudaEventRecord");
    }
  }
  if (status.ok()) status = comm.Synchronize(ctx);
  for (int i = c.warmup; i < total && status.ok(); ++i) {
    float d = 0, m = 0;
    status = CudaStatus(cudaEventElapsedTime(&d, events[3 * i], events[3 * i + 1]), "elapsed");
    if (status.ok()) {
      status =
          CudaStatus(cudaEventElapsedTime(&m, events[3 * i + 1], events[3 * i + 2]), "elapsed");
    }
    out.dispatch_us.push_back(d * 1e3);
    out.combine_us.push_back(m * 1e3);
    out.enqueue_us.push_back(enqueue[i]);
  }
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  return status;
}

// Host-staged path at one size (host_a already holds the rows to send).
absl::Status MeasureHost(HostStagedCommunicator& comm, const Config& c, const Layout& l,
                         std::vector<uint8_t>& host_a, std::vector<uint8_t>& host_b,
                         std::vector<uint8_t>& host_c, Samples& out) {
  const int me = comm.rank().value();
  const Exchange x(l, me);
  FillSend(l, x, me, host_a);
  host_b.assign(x.recv_bytes, 0);
  host_c.assign(x.send_bytes, 0xEE);
  RETURN_IF_ERROR(comm.AllToAllV(x.Dispatch(host_a.data(), host_b.data())));
  RETURN_IF_ERROR(comm.AllToAllV(x.Combine(host_b.data(), host_c.data())));
  RETURN_IF_ERROR(CheckRoundTrip(l, x, me, host_a, host_b, host_c, "host-staged"));
  for (int i = 0; i < c.warmup + c.host_reps; ++i) {
    RETURN_IF_ERROR(comm.Barrier());
    const Clock::time_point t0 = Clock::now();
    RETURN_IF_ERROR(comm.AllToAllV(x.Dispatch(host_a.data(), host_b.data())));
    const Clock::time_point t1 = Clock::now();
    RETURN_IF_ERROR(comm.AllToAllV(x.Combine(host_b.data(), host_c.data())));
    const Clock::time_point t2 = Clock::now();
    if (i < c.warmup) continue;
    out.dispatch_us.push_back(Micros(t1 - t0));
    out.combine_us.push_back(Micros(t2 - t1));
    out.enqueue_us.push_back(Micros(t1 - t0));  // the call returns when done
  }
  return absl::OkStatus();
}

absl::Status RunRank(int me, const Config& c, const std::string& id,
                     const std::vector<Layout>& layouts, RankResult& result) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(me), "cudaSetDevice"));
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                   NcclCommunicator::Create(Rank(me), c.world, id,
                                            {.timeout = absl::Seconds(120),
                                             .device = DeviceOrdinal(me)}));
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
  std::vector<uint8_t> host_a, host_b, host_c;
  absl::Status status;
  result.device.resize(layouts.size());
  for (size_t s = 0; s < layouts.size() && status.ok(); ++s) {
    status = MeasureDevice(*comm, stream, c, layouts[s], host_a, host_b, host_c, result.device[s]);
  }
  cudaStreamDestroy(stream);
  RETURN_IF_ERROR(status);
  if (!c.host_staged) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<HostStagedCommunicator> staged,
                   HostStagedCommunicator::Create(std::move(comm)));
  result.host.resize(layouts.size());
  for (size_t s = 0; s < layouts.size(); ++s) {
    RETURN_IF_ERROR(MeasureHost(*staged, c, layouts[s], host_a, host_b, host_c, result.host[s]));
  }
  return absl::OkStatus();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per repetition the slowest rank's time, then the median over repetitions.
double SlowestRankMedian(const std::vector<RankResult>& results, size_t size, bool host,
                         std::vector<double> Samples::*field) {
  const size_t reps = ((host ? results[0].host : results[0].device)[size].*field).size();
  std::vector<double> slowest(reps, 0.0);
  for (const RankResult& r : results) {
    const std::vector<double>& v = (host ? r.host : r.device)[size].*field;
    for (size_t i = 0; i < reps && i < v.size(); ++i) slowest[i] = std::max(slowest[i], v[i]);
  }
  return Median(slowest);
}

void PrintRows(const Config& c, const std::vector<Layout>& layouts,
               const std::vector<RankResult>& results) {
  std::printf("\n%-12s %6s %8s %9s %6s %9s %9s %9s %9s %8s   %s\n", "path", "tokens", "copies",
              "MB/rank", "peer%", "disp_us", "disp_GB/s", "comb_us", "comb_GB/s", "enq_us",
              "vs DeepEP H800 EP8 (disp/comb, >1 = faster)");
  for (int host = 0; host <= (c.host_staged ? 1 : 0); ++host) {
    for (size_t s = 0; s < layouts.size(); ++s) {
      const Layout& l = layouts[s];
      int64_t rows = 0, peer_rows = 0;
      for (int src = 0; src < c.world; ++src) {
        for (int dst = 0; dst < c.world; ++dst) {
          rows += l.rows[src][dst];
          if (src != dst) peer_rows += l.rows[src][dst];
        }
      }
      const double bytes = static_cast<double>(rows) * l.row_bytes / c.world;  // mean per rank
      const double disp = SlowestRankMedian(results, s, host == 1, &Samples::dispatch_us);
      const double comb = SlowestRankMedian(results, s, host == 1, &Samples::combine_us);
      const double enq = SlowestRankMedian(results, s, host == 1, &Samples::enqueue_us);
      const double disp_gbs = bytes / (disp * 1e3), comb_gbs = bytes / (comb * 1e3);
      std::string ref;
      if (l.tokens <= kDecodeSizedTokens) {
        ref = absl::StrCat("low-latency ", kDeepEpLowLatencyDispatchUs, "/",
                           kDeepEpLowLatencyCombineUs, " us: ");
        char ratio[64];
        std::snprintf(ratio, sizeof(ratio), "%.2f/%.2f", kDeepEpLowLatencyDispatchUs / disp,
                      kDeepEpLowLatencyCombineUs / comb);
        ref += ratio;
      } else {
        ref = absl::StrCat("normal ", kDeepEpNormalDispatchGBs, "/", kDeepEpNormalCombineGBs,
                           " GB/s: ");
        char ratio[64];
        std::snprintf(ratio, sizeof(ratio), "%.2f/%.2f", disp_gbs / kDeepEpNormalDispatchGBs,
                      comb_gbs / kDeepEpNormalCombineGBs);
        ref += ratio;
      }
      std::printf("%-12s %6lld %8lld %9.2f %6.1f %9.1f %9.1f %9.1f %9.1f %8.1f   %s\n",
                  host == 1 ? "host-staged" : "nccl-device", static_cast<long long>(l.tokens),
                  static_cast<long long>(rows / c.world), bytes / 1e6,
                  rows > 0 ? 100.0 * peer_rows / rows : 0.0, disp, disp_gbs, comb, comb_gbs, enq,
                  ref.c_str());
    }
  }
  std::printf(
      "\ncopies = routed rows a rank sends (mean); MB/rank = their bytes; peer%% = share that "
      "leaves the GPU (the rest is the self block, a device copy). GB/s = MB/rank / median time "
      "of the slowest rank. enq_us: device path = host time to enqueue one dispatch; "
      "host-staged = the whole synchronous dispatch call.\n"
      "DeepEP references (published, H800, EP8, 7168 hidden, top-8, FP8 dispatch / BF16 "
      "combine): normal kernels intranode over NVLink at 4096 tokens 153 GB/s dispatch, 158 GB/s "
      "combine; low-latency kernels at 128 tokens 77 us dispatch, 114 us combine (over RDMA). "
      "This run moves bf16 in both directions%s.\n",
      c.world == 8 ? "" : absl::StrCat("; the references are EP8, this run is EP", c.world).c_str());
}

absl::StatusOr<Config> ParseFlags() {
  Config c;
  c.hidden = absl::GetFlag(FLAGS_hidden);
  c.topk = absl::GetFlag(FLAGS_topk);
  c.experts = absl::GetFlag(FLAGS_experts);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.dedup = absl::GetFlag(FLAGS_dedup);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.reps = absl::GetFlag(FLAGS_reps);
  c.host_reps = absl::GetFlag(FLAGS_host_reps);
  c.host_staged = absl::GetFlag(FLAGS_host_staged);
  for (const std::string& v : absl::GetFlag(FLAGS_tokens)) {
    int64_t t = 0;
    if (!absl::SimpleAtoi(v, &t) || t < 1 || t > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("bad --tokens value '", v, "'"));
    }
    c.tokens.push_back(t);
  }
  if (c.tokens.empty()) return absl::InvalidArgumentError("--tokens is empty");
  if (c.hidden < 1 || c.hidden > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError("--hidden must be in [1, 2^20]");
  }
  if (c.experts < 1 || c.topk < 1 || c.topk > c.experts) {
    return absl::InvalidArgumentError("need 1 <= --topk <= --experts");
  }
  if (c.warmup < 0 || c.reps < 1 || c.host_reps < 1) {
    return absl::InvalidArgumentError("need --warmup >= 0, --reps >= 1, --host_reps >= 1");
  }
  for (int64_t t : c.tokens) {
    if (t * c.topk * c.hidden * kBytesPerElement > (int64_t{16} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(t, " tokens need over 16 GiB per buffer"));
    }
  }
  return c;
}

int Main() {
  absl::StatusOr<Config> parsed = ParseFlags();
  if (!parsed.ok()) return std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str()), 2;
  Config c = *parsed;
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess || visible < 1) {
    return std::fprintf(stderr, "alltoall_nccl: no usable CUDA device\n"), 1;
  }
  const int gpus = absl::GetFlag(FLAGS_gpus);
  if (gpus < 0 || gpus > visible) {
    return std::fprintf(stderr, "--gpus=%d, but %d device(s) are visible\n", gpus, visible), 2;
  }
  c.world = gpus == 0 ? visible : gpus;
  if (c.experts < c.world) {
    return std::fprintf(stderr, "--experts=%d is fewer than the %d ranks\n", c.experts, c.world),
           2;
  }

  // NVLink multicast (NVLS) must stay off: set an unset variable to 0 before
  // NCCL reads it, and refuse any other value on several GPUs.
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  std::string nvls_note;
  if (nvls == nullptr) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    nvls_note = "unset, set to 0 here";
  } else {
    nvls_note = absl::StrCat("'", nvls, "'");
    if (std::string(nvls) != "0" && c.world > 1) {
      std::fprintf(stderr,
                   "alltoall_nccl: NCCL_NVLS_ENABLE=%s on %d GPUs; NVLink multicast must stay "
                   "off: run with NCCL_NVLS_ENABLE=0\n",
                   nvls, c.world);
      return 2;
    }
  }

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("alltoall_nccl: MoE dispatch/combine over NcclCommunicator, one thread per GPU\n");
  std::printf("world %d (%d of %d visible GPUs, device 0: %s); NCCL_NVLS_ENABLE %s\n", c.world,
              c.world, visible, prop.name, nvls_note.c_str());
  if (c.world == 1) {
    std::printf("world of 1: every routed copy stays on this GPU, so each AllToAllV is a "
                "device-to-device self-copy (cudaMemcpyAsync); no NVLink traffic is measured\n");
  }
  std::printf("routing: hidden %lld bf16 (%lld B/row, moved as kUint8), top-%d of %d experts "
              "(~%d per rank), uniform, seed %llu, one copy per %s\n",
              static_cast<long long>(c.hidden), static_cast<long long>(c.hidden * kBytesPerElement),
              c.topk, c.experts, c.experts / c.world, static_cast<unsigned long long>(c.seed),
              c.dedup ? "token and destination rank" : "token-expert pair");
  std::printf("timing: device path median of %d after %d warm-up (CUDA events, slowest rank); "
              "host-staged median of %d (wall clock, slowest rank)%s\n",
              c.reps, c.warmup, c.host_reps, c.host_staged ? "" : " [skipped]");
  std::fflush(stdout);

  std::vector<Layout> layouts;
  for (int64_t t : c.tokens) layouts.push_back(Route(c, t));
  absl::StatusOr<std::string> id = NcclCommunicator::MakeUniqueId();
  if (!id.ok()) return std::fprintf(stderr, "%s\n", id.status().ToString().c_str()), 1;
  std::vector<RankResult> results(c.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world; ++r) {
    threads.emplace_back([&, r] { results[r].status = RunRank(r, c, *id, layouts, results[r]); });
  }
  for (std::thread& t : threads) t.join();
  bool failed = false;
  for (int r = 0; r < c.world; ++r) {
    if (!results[r].status.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, results[r].status.ToString().c_str());
      failed = true;
    }
  }
  if (failed) return 1;
  PrintRows(c, layouts, results);
  return 0;
}

}  // namespace
}  // namespace weir::parallel

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "MoE dispatch/combine all-to-all-v over NCCL, one thread per GPU",
                    "alltoall_nccl");
  return weir::parallel::Main();
}
