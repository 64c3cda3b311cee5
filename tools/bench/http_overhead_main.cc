// http_overhead: what the OpenAI-compatible HTTP front door adds to streaming.
//
// Starts its own local cluster (coordinator with --http_listen, workers, EPLB),
// then at each concurrency runs streamed greedy chat requests, half through
// gRPC `Generate` and half (the same messages) through
// `POST /v1/chat/completions` (SSE), side by side in one closed loop, so both
// see the same batches; `--rounds` times. Prints TTFT, inter-token and
// end-to-end latency per protocol and HTTP's ITL against gRPC's. `--csv=PATH` writes every
// request (tools/bench/plot.py draws latency CDFs from it).
//
//   bazel run //tools/bench:http_overhead -- [--concurrency=1,64] [--rounds=2]

#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
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
#include "proto/inference.grpc.pb.h"
#include "tools/bench/chat_clients.h"
#include "tools/bench/serve_cluster.h"
#include "tools/bench/serve_stats.h"

ABSL_FLAG(int, workers, 2, "Worker processes (DP ranks) of the local cluster.");
ABSL_FLAG(std::vector<std::string>, coordinator_flags, {},
          "Further flags for the local coordinator.");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"1", "64"}),
          "Closed-loop client counts.");
ABSL_FLAG(int, min_requests, 16,
          "Requests per level and round (half per protocol): max(this, 2 x concurrency).");
ABSL_FLAG(int, rounds, 2, "Times each level runs.");
ABSL_FLAG(int, max_new_tokens, 32, "Tokens per request (greedy, ignore_eos).");
ABSL_FLAG(int, prompt_words, 40, "Words of each chat message.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the messages.");
ABSL_FLAG(std::string, csv, "", "Also write every request to this CSV file.");
ABSL_FLAG(int, request_timeout_s, 300, "Deadline of each request.");
ABSL_FLAG(bool, http_only, false,
          "Every request over HTTP (the HTTP server alone under the level's concurrency; "
          "the gRPC rows stay empty).");

namespace weir::bench {
namespace {


constexpr char kUsage[] =
    "HTTP vs gRPC streaming overhead on a local cluster.\n"
    "  http_overhead [--concurrency=1,64] [--rounds=2] [--csv=PATH]";

enum class Protocol { kGrpc, kHttp };
const char* Name(Protocol p) { return p == Protocol::kGrpc ? "grpc" : "http"; }

std::vector<ChatSpec> Messages(int n, int words, uint32_t tokens, uint64_t seed) {
  static const char* kWords[] = {"river", "stone",  "light", "north", "glass", "paper",
                                 "quiet", "orange", "seven", "cloud", "metal", "garden",
                                 "music", "winter", "table", "signal"};
  std::mt19937_64 rng(seed);
  std::vector<ChatSpec> specs(n);
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<std::string> text;
    for (int w = 0; w < words; ++w) text.push_back(kWords[rng() % 16]);
    specs[i].text = absl::StrJoin(text, " ");
    specs[i].max_new_tokens = tokens;
  }
  // Requests 2k (gRPC) and 2k + 1 (HTTP) send the same message.
  for (size_t i = 1; i < specs.size(); i += 2) specs[i] = specs[i - 1];
  return specs;
}

// One closed-loop level: `concurrency` threads share the requests; request i
// goes over gRPC if i is even, HTTP if odd (specs come in equal pairs), so at
// any concurrency both protocols run side by side on the same batches.
// Request i goes over HTTP (else gRPC).
bool OverHttp(size_t i) { return absl::GetFlag(FLAGS_http_only) || i % 2 == 1; }

std::vector<RequestRecord> RunLevel(const std::vector<ChatSpec>& specs, int concurrency,
                                    v1::Inference::Stub& stub, const std::string& http_host,
                                    int http_port) {
  std::vector<RequestRecord> records(specs.size());
  std::atomic<size_t> next{0};
  const absl::Time start = absl::Now();
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_request_timeout_s));
  std::vector<std::thread> threads;
  for (int c = 0; c < concurrency; ++c) {
    threads.emplace_back([&] {
      httplib::Client client(http_host, http_port);
      for (size_t i = next++; i < specs.size(); i = next++) {
        records[i] = OverHttp(i) ? RunChatHttp(client, specs[i], timeout, start)
                                 : RunChatGrpc(stub, specs[i], timeout, start);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return records;
}

int Fail(const absl::Status& status) {
  std::cerr << "http_overhead: " << status << "\n";
  return 1;
}

int Run(int argc, char** argv) {
  InitProcess(argc, argv, kUsage, "http_overhead");
  std::vector<int> levels;
  for (const std::string& v : absl::GetFlag(FLAGS_concurrency)) {
    int c = 0;
    if (!absl::SimpleAtoi(v, &c) || c < 1) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("bad --concurrency value '", v, "'")));
    }
    levels.push_back(c);
  }
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (rounds < 1) return Fail(absl::InvalidArgumentError("--rounds must be >= 1"));

  LocalClusterOptions options{.workers = absl::GetFlag(FLAGS_workers),
                              .startup_timeout = absl::Seconds(180)};
  options.extra_flags.push_back("--http_listen=127.0.0.1:0");
  // One HTTP thread per open connection: room for every client. Before
  // --coordinator_flags, which may override it (the last one wins).
  options.extra_flags.push_back("--http_threads=256");
  for (const std::string& flag : absl::GetFlag(FLAGS_coordinator_flags)) {
    options.extra_flags.push_back(flag);
  }
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster =
      StartBenchCluster(argv[0], "http", options);
  if (!cluster.ok()) return Fail(cluster.status());
  const std::string work_dir = (*cluster)->work_dir();
  std::string http_address;
  std::ifstream(work_dir + "/address.http") >> http_address;
  std::pair<std::string, std::string> host_port =
      absl::StrSplit(http_address, absl::MaxSplits(':', 1));
  int http_port = 0;
  if (!absl::SimpleAtoi(host_port.second, &http_port)) {
    return Fail(absl::InternalError(absl::StrCat("no HTTP address in ", work_dir, "/address.http")));
  }
  auto stub = v1::Inference::NewStub(MakeChannel((*cluster)->address(), kPublicMaxResponseBytes));

  const int tokens = absl::GetFlag(FLAGS_max_new_tokens);
  std::printf(
      "weir HTTP overhead: gRPC %s vs HTTP %s (%d workers); chat messages of %d words, %d "
      "tokens each (greedy, ignore_eos, streamed); %d round(s), gRPC and HTTP side by side\n",
      (*cluster)->address().c_str(), http_address.c_str(), options.workers,
      absl::GetFlag(FLAGS_prompt_words), tokens, rounds);
  std::printf("%-6s %-5s %5s %4s %17s %27s %10s %9s\n", "level", "proto", "reqs", "fail",
              "TTFT_ms p50/p90", "ITL_ms p50/p90/mean (req)", "E2E_ms p50", "out_tok/s");
  std::ofstream csv;
  if (!absl::GetFlag(FLAGS_csv).empty()) {
    csv.open(absl::GetFlag(FLAGS_csv));
    csv << CsvHeader();
  }
  // Warm-up: both paths once.
  RunLevel(Messages(2, 8, 4, 99), 1, *stub, host_port.first, http_port);
  std::vector<std::string> verdicts;
  int failed = 0;
  for (size_t l = 0; l < levels.size(); ++l) {
    const int c = levels[l];
    const int n = std::max(absl::GetFlag(FLAGS_min_requests), 2 * c);
    const std::vector<ChatSpec> specs =
        Messages(n, absl::GetFlag(FLAGS_prompt_words), tokens, absl::GetFlag(FLAGS_seed) + l);
    std::vector<RequestRecord> by[2];
    double wall = 0;
    for (int r = 0; r < rounds; ++r) {
      const absl::Time start = absl::Now();
      std::vector<RequestRecord> records = RunLevel(specs, c, *stub, host_port.first, http_port);
      wall += absl::ToDoubleSeconds(absl::Now() - start);
      for (size_t i = 0; i < records.size(); ++i) {
        const RequestRecord& record = records[i];
        const Protocol p = OverHttp(i) ? Protocol::kHttp : Protocol::kGrpc;
        // The level column names the protocol; itl_mean_ms is the request's ITL.
        if (csv.is_open()) csv << CsvRow(Name(p), c, record);
        by[static_cast<int>(p)].push_back(record);
      }
      if (absl::Status alive = (*cluster)->CheckAlive(); !alive.ok()) return Fail(alive);
    }
    double itl_p50[2] = {0, 0};
    for (Protocol p : {Protocol::kGrpc, Protocol::kHttp}) {
      const int k = static_cast<int>(p);
      std::vector<double> ttft, itl, e2e;
      int fails = 0;
      int64_t out = 0;
      std::vector<std::string> errors;  // the first few
      for (const RequestRecord& record : by[k]) {
        if (!record.ok) {
          ++fails;
          if (errors.size() < 5) errors.push_back(record.error);
          continue;
        }
        ttft.push_back(record.ttft_ms);
        itl.insert(itl.end(), record.itl_ms.begin(), record.itl_ms.end());
        e2e.push_back(record.e2e_ms);
        out += record.output_tokens;
      }
      double mean = 0;
      for (double v : itl) mean += v;
      if (!itl.empty()) mean /= static_cast<double>(itl.size());
      itl_p50[k] = Percentile(itl, 0.5);
      std::printf("c=%-4d %-5s %5zu %4d %17s %27s %10.0f %9.1f\n", c, Name(p), by[k].size(), fails,
                  absl::StrFormat("%.1f/%.1f", Percentile(ttft, 0.5), Percentile(ttft, 0.9))
                      .c_str(),
                  absl::StrFormat("%.2f/%.2f/%.2f", itl_p50[k], Percentile(itl, 0.9), mean).c_str(),
                  Percentile(e2e, 0.5), wall > 0 ? out / wall : 0.0);
      std::fflush(stdout);
      for (const std::string& e : errors) std::fprintf(stderr, "  failed: %s\n", e.c_str());
      failed += fails;
    }
    verdicts.push_back(absl::StrFormat("c=%d %+.1f%%", c, itl_p50[0] > 0
                                                               ? 100.0 * (itl_p50[1] / itl_p50[0] - 1)
                                                               : 0.0));
  }
  std::printf("HTTP vs gRPC, inter-token latency p50: %s (target: <= +5%%)\n",
              absl::StrJoin(verdicts, ", ").c_str());
  if (absl::Status stopped = (*cluster)->Stop(); !stopped.ok()) return Fail(stopped);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) { return weir::bench::Run(argc, argv); }
