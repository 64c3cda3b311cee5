// tools/bench/recovery_main.cc
//
// Recovery benchmark: what a lost worker costs a local cluster (the tiny
// model on CPU workers by default). It starts its own cluster (the
// coordinator built with it, --workers workers, EPLB off), runs one round of
// --requests concurrent greedy streams undisturbed, then --rounds rounds in
// which worker rank (round mod workers) gets --signal (KILL or STOP) once the
// loop has run --after_steps steps of the round. Per round:
//   detect_s   kill -> the step loop notices (the recovery's recorded start:
//              now - the recovery's own duration, read when it is done);
//   replace_s  the replacement itself (ServerState.recoveries.last_seconds:
//              the failed step to the loop running on the new group);
//   serving_s  kill -> GetServerState shows the new recovery and READY;
//   e2e p50 / max of the round's requests and their extra time over the
//   undisturbed round; outputs identical to the undisturbed round.
// The ceiling it is compared with is the undisturbed round in the same run.
//
//   tools/bazel run //tools/bench:recovery
//   tools/bazel run //tools/bench:recovery -- --workers=4 --signal=STOP

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "base/init.h"
#include "proto/inference.grpc.pb.h"
#include "tools/bench/serve_cluster.h"

ABSL_FLAG(int, workers, 4, "Worker processes (DP x EP ranks) of the local cluster.");
ABSL_FLAG(int, requests, 16, "Concurrent greedy streams per round.");
ABSL_FLAG(int, tokens, 128, "Tokens per request (ignore_eos).");
ABSL_FLAG(int, rounds, 3, "Rounds that lose a worker.");
ABSL_FLAG(int, after_steps, 30, "Steps of a round before the signal.");
ABSL_FLAG(std::string, signal, "KILL", "KILL or STOP.");
ABSL_FLAG(std::vector<std::string>, coordinator_flags, {},
          "Further coordinator flags, e.g. --step_timeout_s=5.");
ABSL_FLAG(std::string, coordinator_binary, "", "The coordinator (default: from the runfiles).");

namespace weir::bench {
namespace {

constexpr char kUsage[] = "recovery: what a lost worker costs (tools/bench/recovery_main.cc)";

int Fail(const absl::Status& status) {
  std::cerr << "recovery: " << status << "\n";
  return 1;
}

struct Result {
  bool ok = false;
  std::vector<uint32_t> tokens;
  double seconds = 0;
};

Result Run(v1::Inference::Stub& stub, int i, int tokens) {
  v1::GenerateRequest request;
  for (int t = 0; t < 4 + i % 9; ++t) request.mutable_tokens()->add_ids(5 + 17 * i + t);
  request.mutable_stop()->set_max_new_tokens(tokens);
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0.0f);
  Result out;
  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(600)));
  auto reader = stub.Generate(&context, request);
  v1::GenerateEvent event;
  while (reader->Read(&event)) {
    if (event.has_final()) {
      out.tokens.assign(event.final().full_token_ids().begin(),
                        event.final().full_token_ids().end());
    }
  }
  out.ok = reader->Finish().ok();
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return out;
}

std::optional<v1::ServerState> State(v1::Inference::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  v1::ServerState state;
  if (!stub.GetServerState(&context, v1::GetServerStateRequest(), &state).ok()) {
    return std::nullopt;
  }
  return state;
}

// A child of `parent` whose command line contains `needle`, or -1.
pid_t ChildWith(pid_t parent, const std::string& needle) {
  for (int pid = 2; pid < 4194304; ++pid) {
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    if (!stat) continue;
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
    int ppid = 0;
    if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &ppid) || ppid != parent) continue;
    std::ifstream cmd(absl::StrCat("/proc/", pid, "/cmdline"));
    std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    std::replace(args.begin(), args.end(), '\0', ' ');
    if (args.find(needle) != std::string::npos) return pid;
  }
  return -1;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

int Main(int argc, char** argv) {
  InitProcess(argc, argv, kUsage, "recovery");
  const int workers = absl::GetFlag(FLAGS_workers), n = absl::GetFlag(FLAGS_requests),
            tokens = absl::GetFlag(FLAGS_tokens), rounds = absl::GetFlag(FLAGS_rounds);
  const int signo = absl::GetFlag(FLAGS_signal) == "STOP" ? SIGSTOP : SIGKILL;
  std::vector<std::string> flags = {"--eplb=false", absl::StrCat("--max_recoveries=", rounds + 5)};
  for (const std::string& f : absl::GetFlag(FLAGS_coordinator_flags)) flags.push_back(f);
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = StartBenchCluster(
      argv[0], "recovery",
      {.coordinator_binary = absl::GetFlag(FLAGS_coordinator_binary), .workers = workers,
       .extra_flags = flags});
  if (!cluster.ok()) return Fail(cluster.status());
  auto stub = v1::Inference::NewStub(MakeChannel((*cluster)->address(), kPublicMaxResponseBytes));

  auto round = [&](const std::function<void()>& during) {
    std::vector<Result> results(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { results[i] = Run(*stub, i, tokens); });
    if (during) during();
    for (std::thread& t : threads) t.join();
    return results;
  };
  const std::vector<Result> base = round({});
  std::vector<double> base_e2e;
  for (const Result& r : base) {
    if (!r.ok) return Fail(absl::InternalError("a request of the undisturbed round failed"));
    base_e2e.push_back(r.seconds);
  }
  std::printf("recovery benchmark: %d workers (DP %d x EP %d), tiny on CPU, %d greedy streams of "
              "%d tokens, signal %s\n",
              workers, workers, workers, n, tokens, absl::GetFlag(FLAGS_signal).c_str());
  std::printf("%-10s %9s %10s %10s %9s %9s %11s %9s %6s\n", "round", "detect_s", "replace_s",
              "serving_s", "e2e_p50", "e2e_max", "extra_p50", "identical", "lost");
  std::printf("%-10s %9s %10s %10s %9.2f %9.2f %11s %9d %6d\n", "baseline", "-", "-", "-",
              Quantile(base_e2e, 0.5), Quantile(base_e2e, 1.0), "-", n, 0);
  for (int k = 0; k < rounds; ++k) {
    const int victim_rank = k % workers;
    absl::Time killed;
    uint64_t recoveries_before = 0;
    double serving_s = -1, detect_s = -1, replace_s = -1;
    const std::vector<Result> got = round([&] {
      std::optional<v1::ServerState> s0 = State(*stub);
      const uint64_t steps0 = s0.has_value() ? s0->steps() : 0;
      recoveries_before = s0.has_value() ? s0->recoveries().count() : 0;
      const absl::Time until = absl::Now() + absl::Seconds(120);
      while (absl::Now() < until) {
        std::optional<v1::ServerState> s = State(*stub);
        if (s.has_value() && s->steps() >= steps0 + absl::GetFlag(FLAGS_after_steps)) break;
        absl::SleepFor(absl::Milliseconds(2));
      }
      const pid_t victim = ChildWith((*cluster)->pid(), absl::StrCat("--rank=", victim_rank));
      if (victim <= 0) return;
      killed = absl::Now();
      kill(victim, signo);
      while (absl::Now() < killed + absl::Seconds(120)) {
        std::optional<v1::ServerState> s = State(*stub);
        if (s.has_value() && s->recoveries().count() > recoveries_before &&
            s->lifecycle() == v1::LIFECYCLE_READY) {
          const absl::Time now = absl::Now();
          serving_s = absl::ToDoubleSeconds(now - killed);
          replace_s = s->recoveries().last_seconds();
          detect_s = std::max(0.0, serving_s - replace_s);
          break;
        }
        absl::SleepFor(absl::Milliseconds(2));
      }
    });
    std::vector<double> e2e, extra;
    int identical = 0, lost = 0;
    for (int i = 0; i < n; ++i) {
      lost += !got[i].ok;
      identical += got[i].ok && got[i].tokens == base[i].tokens;
      e2e.push_back(got[i].seconds);
      extra.push_back(got[i].seconds - base[i].seconds);
    }
    std::printf("%-10s %9.2f %10.2f %10.2f %9.2f %9.2f %11.2f %9d %6d\n",
                absl::StrCat("rank ", victim_rank).c_str(), detect_s, replace_s, serving_s,
                Quantile(e2e, 0.5), Quantile(e2e, 1.0), Quantile(extra, 0.5), identical, lost);
  }
  std::printf("columns: detect_s = kill to the failed step (upper bound: includes the state "
              "polling), replace_s = the group replacement (ServerState.recoveries.last_seconds), "
              "serving_s = kill to GetServerState showing the recovery and READY; e2e of the "
              "round's requests and their p50 extra time over the undisturbed round; identical "
              "= outputs equal to the undisturbed round's; lost = requests that failed\n");
  return (*cluster)->Stop().ok() ? 0 : 1;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) { return weir::bench::Main(argc, argv); }
