// tools/bench/serve_main.cc
//
// Serving benchmark: a load generator over the public gRPC API. By default it
// starts its own local cluster (the coordinator built with it, --workers CPU
// workers on the tiny model); --server=HOST:PORT measures a running one.
//
//   tools/bazel run //tools/bench:serve
//   tools/bazel run //tools/bench:serve -- --concurrency=1,8 --rates=20
//
// Requests: token-id prompts of random length, greedy, ignore_eos, random
// max_new_tokens, streamed token by token; fixed seed. Each level is closed
// loop at a concurrency (--concurrency) or open loop at a Poisson rate
// (--rates). Per level: requests/s, output tokens/s, TTFT / inter-token /
// end-to-end percentiles, per-sequence decode rate, and the coordinator's CPU
// time per step (utime+stime from /proc over GetServerState's step count).
// The baseline is measured in the same run: the single-sequence decode rate
// (concurrency 1, tokens after the first per second of decoding); x_base is a
// level's output tokens/s over it.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/grpc_util.h"
#include "base/init.h"
#include "proto/inference.grpc.pb.h"
#include "tools/bench/serve_client.h"
#include "tools/bench/serve_cluster.h"
#include "tools/bench/serve_stats.h"
#include "tools/bench/serve_workload.h"

ABSL_FLAG(std::string, server, "",
          "HOST:PORT of a running coordinator; empty: start a local cluster.");
ABSL_FLAG(int, workers, 2, "Local cluster: worker processes (DP ranks).");
ABSL_FLAG(std::vector<std::string>, coordinator_flags, {},
          "Local cluster: extra coordinator flags, e.g. --coordinator_flags=--zero_overhead=false");
ABSL_FLAG(std::string, coordinator_binary, "",
          "Local cluster: coordinator executable; default: the one built with this benchmark.");
ABSL_FLAG(int64_t, coordinator_pid, 0,
          "With --server on this machine: the coordinator's pid, for CPU time per step.");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"1", "4", "16", "32"}),
          "Closed-loop levels: clients in flight.");
ABSL_FLAG(std::vector<std::string>, rates, {},
          "Open-loop levels: Poisson arrival rates in requests/s (after the closed-loop ones).");
ABSL_FLAG(int, requests, 0,
          "Requests per level; 0: max(--min_requests, 2 x concurrency), or --min_requests x 4 "
          "for a rate level.");
ABSL_FLAG(int, min_requests, 8, "Fewest requests of an automatically sized level.");
ABSL_FLAG(int, min_prompt_tokens, 16, "Prompt length range (uniform).");
ABSL_FLAG(int, max_prompt_tokens, 128, "Prompt length range (uniform).");
ABSL_FLAG(int, min_output_tokens, 32, "max_new_tokens range (uniform; ignore_eos).");
ABSL_FLAG(int, max_output_tokens, 64, "max_new_tokens range (uniform; ignore_eos).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of prompts, lengths and arrivals.");
ABSL_FLAG(int, warmup_requests, 2, "Requests sent (and not measured) before the first level.");
ABSL_FLAG(int, request_timeout_s, 120, "Deadline of each Generate call.");
ABSL_FLAG(int, startup_timeout_s, 180, "How long the cluster may take to become SERVING.");
ABSL_FLAG(std::string, csv, "",
          "Also write every measured request to this CSV file (tools/bench/plot.py reads it).");

namespace weir::bench {
namespace {


constexpr char kUsage[] =
    "Serving benchmark over gRPC: requests/s, output tokens/s, TTFT and inter-token latency\n"
    "percentiles, coordinator CPU per step.\n"
    "  serve [--workers=2] [--concurrency=1,4,16,32] [--rates=R,...] [--server=HOST:PORT]";

struct Level {
  std::string name;
  int concurrency = 0;  // closed loop if > 0
  double rate = 0;      // open loop otherwise
  int index = 0;        // seeds the level's prompts
};

// Process CPU and step counters around a level.
struct Counters {
  std::optional<double> coordinator_cpu_s;
  std::optional<double> workers_cpu_s;
  uint64_t steps = 0;
};

absl::StatusOr<std::vector<Level>> ParseLevels() {
  std::vector<Level> levels;
  bool has_one = false;
  for (const std::string& v : absl::GetFlag(FLAGS_concurrency)) {
    int c = 0;
    if (!absl::SimpleAtoi(v, &c) || c < 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad --concurrency value '", v, "'"));
    }
    has_one |= c == 1;
    levels.push_back(Level{.name = absl::StrCat("c=", c), .concurrency = c});
  }
  for (const std::string& v : absl::GetFlag(FLAGS_rates)) {
    double r = 0;
    if (!absl::SimpleAtod(v, &r) || !(r > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("bad --rates value '", v, "'"));
    }
    levels.push_back(Level{.name = absl::StrFormat("rate=%g", r), .rate = r});
  }
  // The baseline (concurrency 1) runs first, whether asked for or not.
  std::stable_partition(levels.begin(), levels.end(),
                        [](const Level& l) { return l.concurrency == 1; });
  if (!has_one) levels.insert(levels.begin(), Level{.name = "c=1 (base)", .concurrency = 1});
  for (size_t i = 0; i < levels.size(); ++i) levels[i].index = static_cast<int>(i);
  return levels;
}

int RequestsFor(const Level& level) {
  const int fixed = absl::GetFlag(FLAGS_requests);
  if (fixed > 0) return fixed;
  const int min = std::max(1, absl::GetFlag(FLAGS_min_requests));
  return level.concurrency > 0 ? std::max(min, 2 * level.concurrency) : 4 * min;
}

Counters ReadCounters(v1::Inference::Stub& stub, pid_t coordinator, bool local) {
  Counters counters;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  v1::ServerState state;
  if (stub.GetServerState(&context, v1::GetServerStateRequest(), &state).ok()) {
    counters.steps = state.steps();
  }
  if (coordinator > 0) {
    absl::StatusOr<double> cpu = ProcessCpuSeconds(coordinator);
    if (cpu.ok()) counters.coordinator_cpu_s = *cpu;
  }
  if (local) {
    double sum = 0;
    bool all = state.workers_size() > 0;
    for (const auto& worker : state.workers()) {
      absl::StatusOr<double> cpu = ProcessCpuSeconds(static_cast<pid_t>(worker.pid()));
      all &= cpu.ok();
      if (cpu.ok()) sum += *cpu;
    }
    if (all) counters.workers_cpu_s = sum;
  }
  return counters;
}

std::string PerStep(const std::optional<double>& before, const std::optional<double>& after,
                    uint64_t steps) {
  if (!before || !after || steps == 0) return "n/a";
  return absl::StrFormat("%.3f", (*after - *before) * 1000.0 / static_cast<double>(steps));
}

void PrintHeader() {
  std::printf("%-11s %5s %4s %7s %9s %6s %23s %20s %15s %8s %6s %9s %9s\n", "level", "reqs",
              "fail", "req/s", "out_tok/s", "x_base", "TTFT_ms p50/p90/p99", "ITL_ms p50/p90/p99",
              "E2E_ms p50/p99", "seq_tok/s", "steps", "coord_ms", "work_ms");
  std::fflush(stdout);
}

void PrintRow(const Level& level, const LevelSummary& s, double baseline, uint64_t steps,
              const std::string& coord_ms, const std::string& work_ms) {
  const std::string ttft = absl::StrFormat("%.1f/%.1f/%.1f", s.ttft_p50, s.ttft_p90, s.ttft_p99);
  const std::string itl = absl::StrFormat("%.2f/%.2f/%.2f", s.itl_p50, s.itl_p90, s.itl_p99);
  const std::string e2e = absl::StrFormat("%.0f/%.0f", s.e2e_p50, s.e2e_p99);
  std::printf("%-11s %5d %4d %7.2f %9.1f %6.2f %23s %20s %15s %8.1f %6llu %9s %9s\n",
              level.name.c_str(), s.requests, s.failed, s.requests_per_s, s.output_tokens_per_s,
              baseline > 0 ? s.output_tokens_per_s / baseline : 0.0, ttft.c_str(), itl.c_str(),
              e2e.c_str(), s.decode_tokens_per_s_per_seq, static_cast<unsigned long long>(steps),
              coord_ms.c_str(), work_ms.c_str());
  std::fflush(stdout);
}

int Fail(const absl::Status& status) {
  std::cerr << "serve: " << status << "\n";
  return 1;
}

int Run(int argc, char** argv) {
  InitProcess(argc, argv, kUsage, "serve");
  absl::StatusOr<std::vector<Level>> levels = ParseLevels();
  if (!levels.ok()) return Fail(levels.status());

  // The server: our own local cluster, or the one named by --server.
  std::unique_ptr<LocalCluster> cluster;
  std::string address = absl::GetFlag(FLAGS_server);
  pid_t coordinator_pid = static_cast<pid_t>(absl::GetFlag(FLAGS_coordinator_pid));
  std::string work_dir;
  const absl::Duration startup = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
  if (address.empty()) {
    absl::StatusOr<std::unique_ptr<LocalCluster>> started = StartBenchCluster(
        argv[0], "serve",
        {.coordinator_binary = absl::GetFlag(FLAGS_coordinator_binary),
         .workers = absl::GetFlag(FLAGS_workers),
         .extra_flags = absl::GetFlag(FLAGS_coordinator_flags),
         .startup_timeout = startup});
    if (!started.ok()) return Fail(started.status());
    cluster = std::move(*started);
    work_dir = cluster->work_dir();
    address = cluster->address();
    coordinator_pid = cluster->pid();
  } else {
    absl::Status serving = WaitForServing(address, "weir.v1.Inference", startup);
    if (!serving.ok()) return Fail(serving);
  }
  const bool local = cluster != nullptr || coordinator_pid > 0;

  auto channel = MakeChannel(address, kPublicMaxResponseBytes);
  auto stub = v1::Inference::NewStub(channel);
  v1::ModelInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    grpc::Status status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (!status.ok()) return Fail(FromGrpcStatus(status));
  }
  WorkloadOptions workload{.min_prompt_tokens = absl::GetFlag(FLAGS_min_prompt_tokens),
                           .max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens),
                           .min_output_tokens = absl::GetFlag(FLAGS_min_output_tokens),
                           .max_output_tokens = absl::GetFlag(FLAGS_max_output_tokens),
                           .vocab_size = info.vocab_size(),
                           .seed = absl::GetFlag(FLAGS_seed)};
  workload.excluded_ids.assign(info.eos_token_ids().begin(), info.eos_token_ids().end());
  if (info.has_bos_token_id()) workload.excluded_ids.push_back(info.bos_token_id());
  if (info.has_pad_token_id()) workload.excluded_ids.push_back(info.pad_token_id());
  if (info.max_context_tokens() > 0 &&
      static_cast<uint32_t>(workload.max_prompt_tokens + workload.max_output_tokens) >
          info.max_context_tokens()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "longest prompt + output (", workload.max_prompt_tokens + workload.max_output_tokens,
        ") exceeds the model's context of ", info.max_context_tokens(), " tokens")));
  }
  std::printf(
      "weir serve benchmark: model %s at %s (%d workers), prompts %d-%d tokens, outputs %d-%d "
      "tokens (greedy, ignore_eos, streamed), seed %llu\n",
      info.name().c_str(), address.c_str(),
      cluster != nullptr ? absl::GetFlag(FLAGS_workers) : static_cast<int>(info.parallelism().dp()),
      workload.min_prompt_tokens, workload.max_prompt_tokens, workload.min_output_tokens,
      workload.max_output_tokens, static_cast<unsigned long long>(workload.seed));

  ClientOptions client{.request_timeout = absl::Seconds(absl::GetFlag(FLAGS_request_timeout_s))};
  // Unique per run, so a shared server never sees a duplicate id in flight.
  const std::string run_id = absl::StrCat("bench", getpid(), "-", absl::ToUnixMillis(absl::Now()));

  if (const int n = absl::GetFlag(FLAGS_warmup_requests); n > 0) {
    absl::StatusOr<std::vector<RequestSpec>> warmup = MakeRequests(workload, -1, n);
    if (!warmup.ok()) return Fail(warmup.status());
    client.id_prefix = run_id + "-warmup";
    LevelRun run = RunClosedLoop(*stub, *warmup, std::min(n, 2), client);
    for (const RequestRecord& r : run.records) {
      if (!r.ok) {
        absl::Status alive = cluster != nullptr ? cluster->CheckAlive() : absl::OkStatus();
        return Fail(absl::UnavailableError(absl::StrCat(
            "warm-up request failed: ", r.error, alive.ok() ? "" : "\n" + alive.ToString())));
      }
    }
  }

  std::ofstream csv;
  if (!absl::GetFlag(FLAGS_csv).empty()) {
    csv.open(absl::GetFlag(FLAGS_csv));
    if (!csv) {
      return Fail(absl::InvalidArgumentError("cannot write --csv " + absl::GetFlag(FLAGS_csv)));
    }
    csv << CsvHeader();
  }
  PrintHeader();
  double baseline = 0;
  int exit_code = 0;
  for (const Level& level : *levels) {
    const int n = RequestsFor(level);
    absl::StatusOr<std::vector<RequestSpec>> specs = MakeRequests(workload, level.index, n);
    if (!specs.ok()) return Fail(specs.status());
    client.id_prefix = absl::StrCat(run_id, "-", level.index);
    const Counters before = ReadCounters(*stub, coordinator_pid, local);
    LevelRun run;
    if (level.concurrency > 0) {
      run = RunClosedLoop(*stub, *specs, level.concurrency, client);
    } else {
      absl::StatusOr<std::vector<double>> arrivals =
          PoissonArrivals(level.rate, workload.seed, level.index, n);
      if (!arrivals.ok()) return Fail(arrivals.status());
      run = RunOpenLoop(*stub, *specs, *arrivals, client);
    }
    const Counters after = ReadCounters(*stub, coordinator_pid, local);
    const LevelSummary summary = Summarize(run.records, run.wall_s);
    if (csv.is_open()) {
      for (const RequestRecord& r : run.records) csv << CsvRow(level.name, level.concurrency, r);
      csv.flush();
    }
    const uint64_t steps = after.steps - std::min(after.steps, before.steps);
    if (baseline == 0 && level.concurrency == 1) baseline = summary.decode_tokens_per_s_per_seq;
    PrintRow(level, summary, baseline, steps,
             PerStep(before.coordinator_cpu_s, after.coordinator_cpu_s, steps),
             PerStep(before.workers_cpu_s, after.workers_cpu_s, steps));
    if (summary.failed > 0) {
      std::fprintf(stderr, "serve: %s: %d of %d requests failed, first: %s\n", level.name.c_str(),
                   summary.failed, summary.requests, summary.first_error.c_str());
      exit_code = 1;
      if (cluster != nullptr) {
        absl::Status alive = cluster->CheckAlive();
        if (!alive.ok()) return Fail(alive);
      }
      if (summary.failed == summary.requests) {
        return Fail(absl::UnavailableError("every request of the level failed; stopping"));
      }
    }
  }
  std::printf(
      "baseline: single-sequence decode %.1f tokens/s (concurrency 1); x_base = out_tok/s / "
      "baseline.\nseq_tok/s: per-sequence decode rate; coord_ms / work_ms: CPU ms per step of the "
      "coordinator / all workers together (utime+stime).\n",
      baseline);
  if (cluster != nullptr) {
    absl::Status stopped = cluster->Stop();
    if (!stopped.ok()) {
      std::fprintf(stderr, "serve: %s; log in %s\n", stopped.ToString().c_str(), work_dir.c_str());
      return 1;
    }
    std::filesystem::remove_all(work_dir);
  }
  return exit_code;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) { return weir::bench::Run(argc, argv); }
