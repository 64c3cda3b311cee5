// Many concurrent Generate streams against one coordinator: how many it
// holds, what admission refuses (RESOURCE_EXHAUSTED with a retry hint), the
// tokens/s and latency it keeps, its threads and RSS, and how the control
// plane's health answers meanwhile (the liveness margin of workers and EPLB).
//
//   tools/bazel run -c opt //tools/bench:streams -- --levels=2000,10000
//
// Each level starts all its streams at once, waits for every one, then waits
// for the step loop to be idle before the next level.

#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "base/init.h"
#include "grpcpp/client_context.h"
#include "proto/inference.grpc.pb.h"
#include "tools/bench/serve_cluster.h"
#include "tools/bench/stream_load.h"

ABSL_FLAG(std::string, levels, "2000,4000,10000,30000", "Concurrent streams, one run each.");
ABSL_FLAG(int, workers, 2, "Workers of the local cluster.");
ABSL_FLAG(std::vector<std::string>, coordinator_flags, {},
          "Extra coordinator flags (comma-separated), e.g. --max_queued_requests=8192.");
ABSL_FLAG(std::string, coordinator_binary, "", "The coordinator (default: from the runfiles).");
ABSL_FLAG(std::string, server, "", "Use this running coordinator instead of starting one.");
ABSL_FLAG(int, coordinator_pid, 0, "With --server: its pid, for threads and RSS.");
ABSL_FLAG(std::string, control, "auto",
          "The control-plane address to watch; auto = a local child's --coordinator; off.");
ABSL_FLAG(int, prompt_tokens, 8, "Prompt tokens of each stream.");
ABSL_FLAG(int, max_new_tokens, 8, "Tokens each stream generates (greedy, ignore_eos).");
ABSL_FLAG(int, channels, 0, "Client channels; 0 = one per 500 streams.");
ABSL_FLAG(int, deadline_s, 900, "Deadline of each stream.");
ABSL_FLAG(int, idle_s, 10, "Health and threads sampled this long before the first level.");

namespace weir::bench {
namespace {

constexpr char kUsage[] =
    "streams: concurrent Generate streams against a coordinator (threads, RSS, "
    "RESOURCE_EXHAUSTED, tokens/s, latency, control-plane health)";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "streams: %s\n", status.ToString().c_str());
  return 1;
}

// Raises the open-file limit to its hard limit (a stream is no fd, but a
// connection is, and the coordinator started from here inherits it).
void RaiseFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// Waits until nothing is queued or running (the previous level's leftovers).
void WaitIdle(v1::Inference::Stub& stub, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    v1::ServerState state;
    if (stub.GetServerState(&context, v1::GetServerStateRequest(), &state).ok()) {
      uint32_t busy = state.admission().queued_requests();
      for (const auto& group : state.per_group()) busy += group.running() + group.waiting();
      if (busy == 0) return;
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
}

std::string Ms(double ms) { return absl::StrFormat("%.0f", ms); }

int Main(int argc, char** argv) {
  InitProcess(argc, argv, kUsage, "streams");
  RaiseFileLimit();
  std::vector<int> levels;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_levels), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n <= 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--levels: bad count \"", part, "\"")));
    }
    levels.push_back(n);
  }
  std::unique_ptr<LocalCluster> cluster;
  std::string address = absl::GetFlag(FLAGS_server);
  pid_t pid = static_cast<pid_t>(absl::GetFlag(FLAGS_coordinator_pid));
  std::string work_dir;
  if (address.empty()) {
    absl::StatusOr<std::unique_ptr<LocalCluster>> started = StartBenchCluster(
        argv[0], "streams",
        {.coordinator_binary = absl::GetFlag(FLAGS_coordinator_binary),
         .workers = absl::GetFlag(FLAGS_workers),
         .extra_flags = absl::GetFlag(FLAGS_coordinator_flags)});
    if (!started.ok()) return Fail(started.status());
    cluster = std::move(*started);
    work_dir = cluster->work_dir();
    address = cluster->address();
    pid = cluster->pid();
  } else if (absl::Status serving = WaitForServing(address, "weir.v1.Inference", absl::Minutes(2));
             !serving.ok()) {
    return Fail(serving);
  }
  std::string control = absl::GetFlag(FLAGS_control);
  if (control == "auto") control = pid > 0 ? ControlAddressOfChildren(pid) : "";
  if (control == "off") control.clear();
  auto stub = v1::Inference::NewStub(MakeChannel(address));

  // Idle: the control plane's health latency without load, the baseline.
  SamplerOptions sampler_options{
      .public_address = address, .control_address = control, .pid = pid};
  LoadSampler idle_sampler(sampler_options);
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_idle_s)));
  const SamplerReport idle = idle_sampler.Stop();
  std::printf("coordinator %s (pid %d), control plane %s\n", address.c_str(), pid,
              control.empty() ? "(not watched)" : control.c_str());
  std::printf("idle: threads %d, RSS %.0f MiB, control health p50 %.1f ms max %.1f ms, public "
              "health p50 %.1f ms max %.1f ms\n\n",
              idle.max_threads, idle.max_rss_kb / 1024.0, idle.control_health.p50_ms,
              idle.control_health.max_ms, idle.public_health.p50_ms, idle.public_health.max_ms);
  std::printf("| streams | ok | RESOURCE_EXHAUSTED (retry hint) | other | tokens/s | p50 ms | "
              "p99 ms | TTFT p50 ms | wall s | coord threads max | coord RSS max MiB | control "
              "health p50 / max ms (not SERVING) | public health p50 / max ms (not SERVING) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (int streams : levels) {
    WaitIdle(*stub, absl::Minutes(5));
    LoadSampler sampler(sampler_options);
    const StreamLoadReport load = RunStreamLoad(
        {.address = address,
         .streams = streams,
         .channels = absl::GetFlag(FLAGS_channels),
         .prompt_tokens = static_cast<uint32_t>(absl::GetFlag(FLAGS_prompt_tokens)),
         .max_new_tokens = static_cast<uint32_t>(absl::GetFlag(FLAGS_max_new_tokens)),
         .deadline = absl::Seconds(absl::GetFlag(FLAGS_deadline_s))});
    const SamplerReport watched = sampler.Stop();
    std::vector<std::string> other;
    for (const auto& [code, count] : load.other) {
      other.push_back(absl::StrCat(code, " ", count, " (", load.other_example.at(code), ")"));
    }
    std::printf("| %d | %d | %d (%d) | %s | %.1f | %s | %s | %s | %.1f | %d | %.0f | %.1f / %.1f "
                "(%d) | %.1f / %.1f (%d) |\n",
                streams, load.ok, load.resource_exhausted, load.retry_hints,
                other.empty() ? "0" : absl::StrJoin(other, "; ").c_str(),
                load.tokens_per_second(), Ms(load.p50_ms).c_str(), Ms(load.p99_ms).c_str(),
                Ms(load.ttft_p50_ms).c_str(), absl::ToDoubleSeconds(load.wall),
                watched.max_threads, watched.max_rss_kb / 1024.0, watched.control_health.p50_ms,
                watched.control_health.max_ms, watched.control_health.not_serving,
                watched.public_health.p50_ms, watched.public_health.max_ms,
                watched.public_health.not_serving);
    std::fflush(stdout);
    if (cluster != nullptr) {
      if (absl::Status alive = cluster->CheckAlive(); !alive.ok()) return Fail(alive);
    }
  }
  if (cluster != nullptr) {
    if (absl::Status stopped = cluster->Stop(); !stopped.ok()) {
      std::fprintf(stderr, "streams: %s; log in %s\n", stopped.ToString().c_str(),
                   work_dir.c_str());
      return 1;
    }
    std::filesystem::remove_all(work_dir);
  }
  return 0;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) { return weir::bench::Main(argc, argv); }
