// KV block accounting under real serving, with the coordinator's debug mode
// --kv_check_every_step on (every rank's books are verified and a mirror of
// what each worker holds is checked after every step's plans and every
// release; a leaked or double-owned block stops the step loop with INTERNAL).
// A local cluster (DP2 x EP2, the tiny model with a skewed router so EPLB
// commits new expert maps while requests decode, 6 KV blocks of 16 positions
// per rank so requests preempt) serves random concurrent requests for a
// fixed time: plain greedy, seeded sampling, stop strings that match
// mid-generation, and cancels mid-stream. At the end every rank's blocks and
// slots are free again, the check ran on every step and never fired (the
// step loop still serves), and preemptions and map commits happened.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/inference.grpc.pb.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

using testing_util::Cluster;
using testing_util::SkewedTinyModel;

constexpr int kClients = 6;
// CI runs about 500 requests in 40 s; WEIR_KV_REQUESTS and WEIR_KV_SECONDS
// make the same test a long run (e.g. 10,000 requests over 20 minutes).
int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}
const int kMaxRequests = EnvInt("WEIR_KV_REQUESTS", 600);
const absl::Duration kTrafficTime = absl::Seconds(EnvInt("WEIR_KV_SECONDS", 40));

v1::ServerState State(Cluster& cluster) {
  grpc::ClientContext context;
  v1::ServerState state;
  EXPECT_TRUE(cluster.stub().GetServerState(&context, v1::GetServerStateRequest(), &state).ok());
  return state;
}

struct Outcome {
  grpc::Status status;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  std::string text;
  std::vector<uint32_t> tokens;
  int deltas = 0;
};

// One Generate stream; with cancel_after_ms >= 0 the client cancels that
// long after the request was accepted (mid-stream: a step takes ~15 ms).
Outcome Generate(Cluster& cluster, const v1::GenerateRequest& request, int cancel_after_ms = -1) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = cluster.stub().Generate(&context, request);
  v1::GenerateEvent event;
  Outcome out;
  std::thread canceller;
  while (reader->Read(&event)) {
    if (event.has_accepted() && cancel_after_ms >= 0 && !canceller.joinable()) {
      canceller = std::thread([&context, cancel_after_ms] {
        absl::SleepFor(absl::Milliseconds(cancel_after_ms));
        context.TryCancel();
      });
    }
    if (event.has_delta()) ++out.deltas;
    if (event.has_final()) {
      out.reason = event.final().reason();
      out.text = event.final().full_text();
      out.tokens.assign(event.final().full_token_ids().begin(),
                        event.final().full_token_ids().end());
    }
  }
  out.status = reader->Finish();
  if (canceller.joinable()) canceller.join();
  return out;
}

// Blocks of 16 positions per rank: a sequence needs at most 4, so three on a
// rank preempt one another often.
constexpr int kBlocksPerRank = 6;

v1::GenerateRequest Request(const std::vector<uint32_t>& prompt, uint32_t max_new) {
  v1::GenerateRequest request;
  for (uint32_t t : prompt) request.mutable_tokens()->add_ids(t);
  request.mutable_stop()->set_max_new_tokens(max_new);
  request.mutable_stop()->set_ignore_eos(true);
  // Greedy unless a case asks for sampling (an unset temperature means 1.0).
  request.mutable_sampling()->set_temperature(0.0f);
  return request;
}

std::vector<uint32_t> RandomPrompt(std::mt19937_64& rng) {
  std::vector<uint32_t> p(3 + rng() % 18);
  for (uint32_t& t : p) t = static_cast<uint32_t>(3 + rng() % 4000);
  return p;
}

// A stop string the greedy output of a prompt reaches mid-generation: 2..4
// bytes of its text starting near the middle, on UTF-8 boundaries.
std::string StopStringOf(const std::string& text) {
  auto boundary = [&](size_t i) {
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  const size_t begin = boundary(text.size() / 2);
  size_t end = boundary(std::min(text.size(), begin + 2));
  if (end - begin < 2) end = boundary(std::min(text.size(), begin + 4));
  return begin < end ? text.substr(begin, end - begin) : "";
}

TEST(KvAccountingTest, RandomServingWithStopsCancelsPreemptionAndEplbNeverLeaks) {
  Cluster cluster({"--workers=2", "--model_dir=" + SkewedTinyModel("tiny_skewed_tokenizer", /*with_tokenizer=*/true), "--num_redundant_experts=2",
                   "--kv_check_every_step=true", "--kv_block_tokens=16",
                   "--kv_blocks_per_rank=" + std::to_string(kBlocksPerRank), "--eplb=true",
                   "--eplb_stat_interval=2",
                   "--eplb_flags=--rearrange_interval=3 --min_window_rounds=2 "
                   "--gain_threshold=0.02"});
  const absl::Time start = absl::Now();

  // Stop strings: the greedy outputs of a few prompts (outputs are the same
  // under any batch, preemption or expert map), cut mid-generation.
  struct StopCase {
    std::vector<uint32_t> prompt;
    std::string stop;
  };
  std::vector<StopCase> stop_cases;
  {
    std::mt19937_64 rng(11);
    for (int i = 0; i < 16; ++i) {
      const std::vector<uint32_t> prompt = RandomPrompt(rng);
      const Outcome full = Generate(cluster, Request(prompt, 32));
      ASSERT_TRUE(full.status.ok()) << full.status.error_message();
      const std::string stop = StopStringOf(full.text);
      if (stop.empty() || full.text.find(stop) + stop.size() >= full.text.size()) continue;
      // Kept only if the detokenized stream really ends on it.
      v1::GenerateRequest request = Request(prompt, 32);
      request.mutable_stop()->add_stop_strings(stop);
      if (Generate(cluster, request).reason != v1::FINISH_REASON_STOP_SEQUENCE) continue;
      stop_cases.push_back({prompt, stop});
    }
  }
  ASSERT_GE(stop_cases.size(), 4u);

  std::atomic<int> issued{0};
  std::mutex mu;
  int completed = 0, stopped = 0, stop_missed = 0, cancel_late = 0, cancelled = 0, sampled = 0, failed = 0;
  const absl::Time traffic_end = absl::Now() + kTrafficTime;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(100 + c);
      while (absl::Now() < traffic_end && issued.fetch_add(1) < kMaxRequests) {
        const uint64_t kind = rng() % 10;
        if (kind < 3) {  // a stop string mid-generation
          const StopCase& sc = stop_cases[rng() % stop_cases.size()];
          v1::GenerateRequest request = Request(sc.prompt, 32);
          request.mutable_stop()->add_stop_strings(sc.stop);
          const Outcome out = Generate(cluster, request);
          std::lock_guard lock(mu);
          EXPECT_TRUE(out.status.ok()) << out.status.error_message();
          // Greedy outputs do not depend on batching, preemption or the
          // expert map, so the request ends on the stop string it ended on
          // alone.
          EXPECT_EQ(out.reason, v1::FINISH_REASON_STOP_SEQUENCE)
              << "stop " << sc.stop << ": " << out.reason;
          stopped += out.reason == v1::FINISH_REASON_STOP_SEQUENCE;
          stop_missed += out.reason != v1::FINISH_REASON_STOP_SEQUENCE;
          failed += !out.status.ok();
        } else if (kind < 5) {  // cancelled mid-stream
          const Outcome out =
              Generate(cluster, Request(RandomPrompt(rng), 40), static_cast<int>(rng() % 200));
          std::lock_guard lock(mu);
          EXPECT_TRUE(out.status.ok() || out.status.error_code() == grpc::StatusCode::CANCELLED)
              << out.status.error_message();
          cancelled += out.status.error_code() == grpc::StatusCode::CANCELLED;
          cancel_late += out.status.ok();
          failed += !out.status.ok() && out.status.error_code() != grpc::StatusCode::CANCELLED;
        } else {  // runs to max_new_tokens (greedy or seeded sampling)
          v1::GenerateRequest request =
              Request(RandomPrompt(rng), 1 + static_cast<uint32_t>(rng() % 40));
          const bool sample = rng() % 2 == 0;
          if (sample) {
            request.mutable_sampling()->set_temperature(1.0f);
            request.mutable_sampling()->set_seed(rng());
          }
          const Outcome out = Generate(cluster, request);
          std::lock_guard lock(mu);
          EXPECT_TRUE(out.status.ok()) << out.status.error_message();
          EXPECT_EQ(out.reason, v1::FINISH_REASON_MAX_TOKENS);
          EXPECT_EQ(out.tokens.size(), request.stop().max_new_tokens());
          completed += out.status.ok();
          sampled += sample;
          failed += !out.status.ok();
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const int total = completed + stopped + stop_missed + cancelled + cancel_late + failed;

  // Idle again: every rank's blocks and slots return (deferred releases
  // complete when the last in-flight step returns).
  v1::ServerState state;
  for (int i = 0; i < 100; ++i) {
    state = State(cluster);
    bool idle = true;
    for (const auto& g : state.per_group()) {
      idle &= g.kv_blocks_used() == 0 && g.running() + g.waiting() == 0 &&
              g.seq_slots_free() == g.seq_slots_total();
    }
    if (idle) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(state.per_group_size(), 2);
  for (const v1::ServerState::Group& g : state.per_group()) {
    EXPECT_EQ(g.kv_blocks_total(), static_cast<uint64_t>(kBlocksPerRank));
    EXPECT_EQ(g.kv_blocks_used(), 0u) << "group " << g.id();
    EXPECT_EQ(g.kv_blocks_free(), static_cast<uint64_t>(kBlocksPerRank))
        << "group " << g.id();
    EXPECT_EQ(g.seq_slots_free(), g.seq_slots_total()) << "group " << g.id();
    EXPECT_EQ(g.running() + g.waiting(), 0u);
  }
  // The check ran (at least twice per step) and never fired: a failed check
  // stops the step loop, and then nothing is served.
  EXPECT_GE(state.kv_checks(), state.steps());
  std::vector<uint32_t> tokens;
  const grpc::Status after = cluster.Greedy({5, 6, 7}, 4, tokens);
  EXPECT_TRUE(after.ok()) << after.error_message();
  EXPECT_EQ(failed, 0);
  EXPECT_GT(state.preemptions(), 0u);
  EXPECT_GE(state.expert_map_version(), 1u) << "EPLB committed no map";
  EXPECT_GT(stopped, 0);
  EXPECT_GT(cancelled, 0);
  std::printf(
      "%d requests in %.1f s (%d to max tokens, %d sampled; %d ended on a stop string, %d "
      "stop-string requests ran to length; %d cancelled mid-stream, %d "
      "finished before their cancel); %llu steps, %llu KV checks, %llu preemptions, expert map version %llu\n",
      total, absl::ToDoubleSeconds(absl::Now() - start), completed, sampled, stopped, stop_missed, cancelled, cancel_late,
      static_cast<unsigned long long>(state.steps()),
      static_cast<unsigned long long>(state.kv_checks()),
      static_cast<unsigned long long>(state.preemptions()),
      static_cast<unsigned long long>(state.expert_map_version()));
}

}  // namespace
}  // namespace weir
