// Speculative decoding end to end (--speculative=dspark): real coordinator
// and worker processes over gRPC, 2 ranks of DP x EP, zero-overhead
// stepping. Greedy and seeded sampled outputs, stop tokens included, equal
// those of --speculative=off, also while a small KV pool makes the
// speculating cluster preempt (and its KV books are checked every step);
// bad flag values stop the coordinator with exit code 2. Structured output
// and logprobs speculate too, with the tokens and logprobs of off. On the random tiny
// weights drafts are almost never accepted, so this mostly runs the
// rejection path; with trained weights (models/tiny with a checkpoint) the
// drafts are accepted and the outputs still equal. --speculative=ngram
// (prompt lookup alone) gives off's outputs too, on the trained tiny and on
// a model without DSpark stages.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/inference.grpc.pb.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

using testing_util::CacheDir;
using testing_util::Cluster;
using testing_util::MixedRequest;
using testing_util::Runfile;

struct Outcome {
  grpc::Status status;
  std::vector<uint32_t> tokens;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  uint32_t completion_tokens = 0;
  uint32_t accepted_drafts = 0;
  uint32_t rejected_drafts = 0;
  // With OutputOptions.top_logprobs: one entry per token.
  std::vector<v1::TokenLogprobs> logprobs;
};

Outcome Run(v1::Inference::Stub& stub, const v1::GenerateRequest& request) {
  Outcome out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(240));
  auto reader = stub.Generate(&context, request);
  v1::GenerateEvent event;
  while (reader->Read(&event)) {
    if (!event.has_final()) continue;
    out.tokens.assign(event.final().full_token_ids().begin(), event.final().full_token_ids().end());
    out.reason = event.final().reason();
    out.completion_tokens = event.final().usage().completion_tokens();
    out.accepted_drafts = event.final().usage().accepted_draft_tokens();
    out.rejected_drafts = event.final().usage().rejected_draft_tokens();
    out.logprobs.assign(event.final().logprobs().begin(), event.final().logprobs().end());
  }
  out.status = reader->Finish();
  return out;
}

// Runs every request at once (one stream each).
std::vector<Outcome> RunAll(Cluster& cluster, const std::vector<v1::GenerateRequest>& requests) {
  std::vector<Outcome> out(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = Run(cluster.stub(), requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// The recovery tests' mix (greedy, every 4th seeded sampling at 0.9), then
// greedy requests that stop on a token the plain run produced mid-way.
std::vector<v1::GenerateRequest> Mix(int n, uint32_t max_new) {
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < n; ++i) {
    v1::GenerateRequest r = MixedRequest(i, max_new);
    requests.push_back(std::move(r));
  }
  return requests;
}

std::vector<v1::GenerateRequest> StopRequests(const std::vector<v1::GenerateRequest>& mix,
                                              const std::vector<Outcome>& plain) {
  std::vector<v1::GenerateRequest> requests;
  for (size_t i = 0; i < mix.size(); i += 3) {
    if (plain[i].tokens.size() < 8) continue;
    v1::GenerateRequest r = mix[i];
    r.mutable_stop()->add_stop_token_ids(plain[i].tokens[6]);
    requests.push_back(std::move(r));
  }
  return requests;
}

void ExpectSame(const std::vector<Outcome>& spec, const std::vector<Outcome>& plain) {
  ASSERT_EQ(spec.size(), plain.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    ASSERT_TRUE(plain[i].status.ok()) << i << ": " << plain[i].status.error_message();
    ASSERT_TRUE(spec[i].status.ok()) << i << ": " << spec[i].status.error_message();
    EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i;
    EXPECT_EQ(spec[i].reason, plain[i].reason) << "request " << i;
    EXPECT_EQ(spec[i].completion_tokens, spec[i].tokens.size());
    EXPECT_LE(spec[i].accepted_drafts, spec[i].completion_tokens);
    EXPECT_EQ(plain[i].accepted_drafts, 0u);
  }
}

std::string RandomTiny() { return "--model_dir=" + Runfile("models/random/tiny"); }

TEST(SpeculativeTest, OutputsEqualOffWithStopsAndPreemption) {
  const std::vector<v1::GenerateRequest> mix = Mix(24, 20);
  std::vector<Outcome> plain, plain_stops;
  std::vector<v1::GenerateRequest> stops;
  {
    Cluster off({"--workers=2", RandomTiny()});
    plain = RunAll(off, mix);
    stops = StopRequests(mix, plain);
    plain_stops = RunAll(off, stops);
  }
  ASSERT_FALSE(stops.empty());
  for (const Outcome& o : plain_stops) {
    EXPECT_EQ(o.reason, v1::FINISH_REASON_STOP_TOKEN);
  }
  // 8 blocks of 16 positions a rank for 12 sequences a rank: they preempt.
  Cluster spec({"--workers=2", RandomTiny(), "--speculative=dspark", "--verify_length=fixed",
                "--kv_block_tokens=16", "--worker_flags=--kv_cache_blocks=8",
                "--kv_check_every_step=true"});
  ExpectSame(RunAll(spec, mix), plain);
  ExpectSame(RunAll(spec, stops), plain_stops);
  {
    v1::ServerState counted;
    ASSERT_TRUE(spec.State(counted).ok());
    EXPECT_EQ(counted.speculation().accepted_histogram_size(), 6);
  }
  // Once idle (the step after a sequence's last row has returned), every
  // block is back.
  v1::ServerState state;
  float used = 1.0f;
  for (int i = 0; i < 100 && used > 0.0f; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(spec.State(state).ok());
    used = 0.0f;
    for (const v1::ServerState::Group& group : state.per_group()) used += group.kv_usage();
  }
  EXPECT_EQ(used, 0.0f);
  EXPECT_GT(state.preemptions(), 0u);
  EXPECT_GT(state.kv_checks(), 0u);
}

TEST(SpeculativeTest, OneDraftAndOneWorkerEqualOff) {
  const std::vector<v1::GenerateRequest> mix = Mix(6, 16);
  std::vector<Outcome> plain;
  {
    Cluster off({"--workers=1", RandomTiny(), "--zero_overhead=false"});
    plain = RunAll(off, mix);
  }
  Cluster spec({"--workers=1", RandomTiny(), "--speculative=dspark", "--num_draft_tokens=1",
                "--verify_length=fixed"});
  ExpectSame(RunAll(spec, mix), plain);
}

// --speculative_max_batch: a worker step with more speculative rows than the
// limit drafts nothing, so the 6 concurrent sequences decode plainly while
// more than 2 are running (paused steps), and verify drafts once fewer are
// left; the outputs equal off's.
TEST(SpeculativeTest, BatchLimitPausesDraftingWithTheSameOutputs) {
  const std::vector<v1::GenerateRequest> mix = Mix(6, 24);
  std::vector<Outcome> plain;
  {
    Cluster off({"--workers=1", RandomTiny()});
    plain = RunAll(off, mix);
  }
  Cluster spec({"--workers=1", RandomTiny(), "--speculative=dspark", "--verify_length=fixed",
                "--speculative_max_batch=2"});
  ExpectSame(RunAll(spec, mix), plain);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  v1::ServerState state;
  ASSERT_TRUE(spec.State(state).ok());
  ASSERT_TRUE(state.has_speculation());
  EXPECT_GT(state.speculation().paused_steps(), 6u);
  std::printf("batch limit 2 over 6 sequences: %lu paused steps, %lu drafts verified\n",
              static_cast<unsigned long>(state.speculation().paused_steps()),
              static_cast<unsigned long>(state.speculation().verified_drafts()));
}

// --verify_length=confidence on a model directory without verify_cost.json
// (the random tiny): the coordinator asks the CPU workers to measure the
// curve at start (LoadWeightsRequest.measure_verify_cost); with two workers,
// one expert-parallel group, both profile in step (each forward a collective
// over UCX). The outputs equal off's, and the workers' rows report verified
// lengths and paused steps.
TEST(SpeculativeTest, RandomTinyConfidenceMeasuresTheCurveAtStart) {
  ASSERT_FALSE(std::filesystem::exists(Runfile("models/random/tiny") + "/verify_cost.json"));
  const std::vector<v1::GenerateRequest> mix = Mix(8, 24);
  std::vector<Outcome> plain;
  {
    Cluster off({"--workers=2", RandomTiny()});
    plain = RunAll(off, mix);
  }
  Cluster spec({"--workers=2", RandomTiny(), "--speculative=dspark", "--verify_length=confidence"});
  ExpectSame(RunAll(spec, mix), plain);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  v1::ServerState state;
  ASSERT_TRUE(spec.State(state).ok());
  ASSERT_TRUE(state.has_speculation());
  EXPECT_EQ(state.speculation().verify_length(), "confidence");
  uint64_t rows = 0;
  for (uint64_t n : state.speculation().accepted_histogram()) rows += n;
  // Every decode step of the 8 sequences after the first is a verification
  // or a paused step.
  EXPECT_GT(rows + state.speculation().paused_steps(), 8u);
  std::printf("random tiny, measured curve: %lu verifications (%lu drafts verified), %lu paused\n",
              static_cast<unsigned long>(rows),
              static_cast<unsigned long>(state.speculation().verified_drafts()),
              static_cast<unsigned long>(state.speculation().paused_steps()));
}

// Prompts of the kind of text the trained tiny learned (manual pages, Python
// docstrings, licences).
constexpr const char* kCorpusTexts[] = {
    "NAME\n       ls - list directory contents\n\nSYNOPSIS\n",
    "The json module provides an API for converting Python objects to",
    "Permission is hereby granted, free of charge, to any person obtaining",
    "DESCRIPTION\n       The grep utility searches input files for",
};

// One greedy request of `max_new` tokens (EOS ignored) per corpus text.
std::vector<v1::GenerateRequest> GreedyCorpusRequests(uint32_t max_new) {
  std::vector<v1::GenerateRequest> requests;
  for (const char* text : kCorpusTexts) {
    v1::GenerateRequest r;
    r.set_text(text);
    r.mutable_stop()->set_max_new_tokens(max_new);
    r.mutable_stop()->set_ignore_eos(true);
    r.mutable_sampling()->set_temperature(0.0f);
    requests.push_back(std::move(r));
  }
  return requests;
}

// `requests` on `workers` workers of `model_dir` without speculation.
std::vector<Outcome> RunOff(const std::string& model_dir, int workers,
                            const std::vector<v1::GenerateRequest>& requests) {
  Cluster off({absl::StrCat("--workers=", workers), "--model_dir=" + model_dir});
  return RunAll(off, requests);
}

// The trained tiny (models/tiny, issue 19): its drafts are accepted, and the
// outputs still equal off's (greedy, text prompts of its corpus' kind).
TEST(SpeculativeTest, TrainedTinyAcceptsDraftsWithTheSameOutputs) {
  const std::string trained = Runfile("models/tiny");
  if (!std::filesystem::exists(trained + "/model-00001-of-00001.safetensors")) {
    GTEST_SKIP() << "models/tiny has no checkpoint";
  }
  const std::vector<v1::GenerateRequest> requests = GreedyCorpusRequests(40);
  const std::vector<Outcome> plain = RunOff(trained, 2, requests);
  Cluster spec(
      {"--workers=2", "--model_dir=" + trained, "--speculative=dspark", "--verify_length=fixed"});
  const std::vector<Outcome> got = RunAll(spec, requests);
  ExpectSame(got, plain);
  uint32_t accepted = 0, completion = 0;
  uint64_t rejected = 0;
  for (const Outcome& o : got) {
    accepted += o.accepted_drafts;
    rejected += o.rejected_drafts;
    completion += o.completion_tokens;
  }
  for (const Outcome& o : plain) EXPECT_EQ(o.rejected_drafts, 0u);
  EXPECT_GT(rejected, 0u);  // DSpark's stages are weak (models/README.md)
  // Tokens a verification emits = 1 + accepted drafts; over a fifth of the
  // tokens accepted means a mean accepted length above 1.25.
  EXPECT_GT(accepted * 5, completion) << accepted << " of " << completion;
  std::printf("trained tiny: %u of %u tokens were accepted drafts\n", accepted, completion);
  // GetServerState: verifications by accepted drafts (counted before the
  // max_new_tokens cut, so at least the delivered ones). The step loop
  // publishes them after it has sent the step's events, so a client can see
  // its Final a moment before the counts of that step.
  v1::ServerState state;
  uint64_t rows = 0, in_rows = 0;
  // Each verification's drafts are accepted or rejected: the requests'
  // rejected drafts are what the workers verified less what they accepted.
  auto settled = [&] {
    return in_rows >= accepted && state.speculation().verified_drafts() - in_rows == rejected;
  };
  for (int attempt = 0; attempt < 50 && (attempt == 0 || !settled()); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(spec.State(state).ok());
    ASSERT_TRUE(state.has_speculation());
    ASSERT_EQ(state.speculation().accepted_histogram_size(), 6);
    rows = 0;
    in_rows = 0;
    for (int a = 0; a <= 5; ++a) {
      rows += state.speculation().accepted_histogram(a);
      in_rows += a * state.speculation().accepted_histogram(a);
    }
  }
  const v1::ServerState::Speculation& s = state.speculation();
  EXPECT_EQ(s.num_draft_tokens(), 5u);
  EXPECT_EQ(s.method(), "dspark");
  EXPECT_GE(in_rows, accepted);
  EXPECT_LE(in_rows, accepted + 4 * 5);  // at most a cut block per request
  EXPECT_GT(rows, 0u);
  EXPECT_LE(s.verified_drafts(), 5 * rows);
  EXPECT_GT(s.verified_drafts(), 3 * rows);  // full blocks but near the ends
  EXPECT_EQ(s.verify_length(), "fixed");
  EXPECT_DOUBLE_EQ(s.mean_verify_length(), static_cast<double>(s.verified_drafts()) / rows);
  EXPECT_EQ(s.verified_drafts() - in_rows, rejected);
  std::printf("trained tiny: %llu drafts verified, %llu accepted, %llu rejected\n",
              static_cast<unsigned long long>(s.verified_drafts()),
              static_cast<unsigned long long>(in_rows), static_cast<unsigned long long>(rejected));
  // Prompt lookup is on by default with speculation (--ngram_lookup 3): the
  // trained tiny's greedy text repeats itself, so some verifications checked
  // a repeated n-gram's continuation instead of DSpark's block.
  EXPECT_GT(s.lookup_verifications(), 0u);
  EXPECT_LT(s.lookup_verifications(), rows);
  EXPECT_LE(s.lookup_accepted_drafts(), in_rows);
  // With it off, DSpark drafts every block: the same outputs, no lookups.
  Cluster dspark_only({"--workers=2", "--model_dir=" + trained, "--speculative=dspark",
                       "--verify_length=fixed", "--ngram_lookup=0"});
  const std::vector<Outcome> alone = RunAll(dspark_only, requests);
  ExpectSame(alone, plain);
  uint32_t accepted_alone = 0;
  for (const Outcome& o : alone) accepted_alone += o.accepted_drafts;
  v1::ServerState alone_state;
  ASSERT_TRUE(dspark_only.State(alone_state).ok());
  EXPECT_EQ(alone_state.speculation().lookup_verifications(), 0u);
  std::printf(
      "trained tiny: %llu of %llu verifications were prompt lookups (%llu drafts accepted); "
      "accepted drafts %u with lookup, %u with DSpark alone, of %u tokens\n",
      static_cast<unsigned long long>(s.lookup_verifications()),
      static_cast<unsigned long long>(rows),
      static_cast<unsigned long long>(s.lookup_accepted_drafts()), accepted, accepted_alone,
      completion);
}

// --ngram_lookup_tokens=8: lookups propose 8 tokens, more than DSpark's block
// of 5, so the workers' sequences roll back 8 and every speculative row is
// booked for 8 drafts; the outputs still equal off's, and the trained tiny's
// loops get verifications that accept more than a DSpark block could.
TEST(SpeculativeTest, TrainedTinyLongerLookupsEqualOff) {
  const std::string trained = Runfile("models/tiny");
  if (!std::filesystem::exists(trained + "/model-00001-of-00001.safetensors")) {
    GTEST_SKIP() << "models/tiny has no checkpoint";
  }
  const std::vector<v1::GenerateRequest> requests = GreedyCorpusRequests(48);
  const std::vector<Outcome> plain = RunOff(trained, 1, requests);
  Cluster spec({"--workers=1", "--model_dir=" + trained, "--speculative=dspark",
                "--verify_length=fixed", "--ngram_lookup_tokens=8"});
  ExpectSame(RunAll(spec, requests), plain);
  v1::ServerState state;
  ASSERT_TRUE(spec.State(state).ok());
  const v1::ServerState::Speculation& s = state.speculation();
  EXPECT_EQ(s.num_draft_tokens(), 8u);
  ASSERT_EQ(s.accepted_histogram_size(), 9);
  uint64_t beyond_block = 0;
  for (int a = 6; a <= 8; ++a) beyond_block += s.accepted_histogram(a);
  EXPECT_GT(s.lookup_verifications(), 0u);
  EXPECT_GT(beyond_block, 0u) << "no verification accepted more than 5 drafts";
  std::printf(
      "trained tiny, 8-token lookups: %llu lookup verifications accepted %llu drafts; "
      "%llu verifications accepted 6-8\n",
      static_cast<unsigned long long>(s.lookup_verifications()),
      static_cast<unsigned long long>(s.lookup_accepted_drafts()),
      static_cast<unsigned long long>(beyond_block));
}

// --speculative=ngram: prompt lookup alone, no DSpark drafts. On the trained
// tiny every verification is a lookup's, the outputs equal off's, and its
// loops accept drafts; --num_draft_tokens=8 makes a lookup propose 8, after
// matches of 4 .. 1 tokens (--ngram_lookup=1 --ngram_lookup_max=4).
TEST(SpeculativeTest, TrainedTinyNgramAloneEqualsOff) {
  const std::string trained = Runfile("models/tiny");
  if (!std::filesystem::exists(trained + "/model-00001-of-00001.safetensors")) {
    GTEST_SKIP() << "models/tiny has no checkpoint";
  }
  const std::vector<v1::GenerateRequest> requests = GreedyCorpusRequests(48);
  const std::vector<Outcome> plain = RunOff(trained, 2, requests);
  Cluster spec({"--workers=2", "--model_dir=" + trained, "--speculative=ngram",
                "--num_draft_tokens=8", "--ngram_lookup=1", "--ngram_lookup_max=4"});
  const std::vector<Outcome> got = RunAll(spec, requests);
  ExpectSame(got, plain);
  uint32_t accepted = 0, completion = 0;
  for (const Outcome& o : got) {
    accepted += o.accepted_drafts;
    completion += o.completion_tokens;
  }
  EXPECT_GT(accepted, 0u);
  v1::ServerState state;
  uint64_t rows = 0;
  // The counts of a step are published a moment after its events.
  for (int attempt = 0; attempt < 50 && (attempt == 0 || rows == 0 ||
                                         state.speculation().lookup_accepted_drafts() < accepted);
       ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(spec.State(state).ok());
    ASSERT_TRUE(state.has_speculation());
    rows = 0;
    for (uint64_t n : state.speculation().accepted_histogram()) rows += n;
  }
  const v1::ServerState::Speculation& s = state.speculation();
  EXPECT_EQ(s.num_draft_tokens(), 8u);
  EXPECT_EQ(s.method(), "ngram");
  EXPECT_GT(rows, 0u);
  // No DSpark: the drafts verified were all a lookup's; a step whose lookup
  // found no match verified none (and counts at 0 accepted).
  EXPECT_GT(s.lookup_verifications(), 0u);
  EXPECT_LT(s.lookup_verifications(), rows);
  EXPECT_LE(s.verified_drafts(), 8 * s.lookup_verifications());
  EXPECT_GE(s.lookup_accepted_drafts(), accepted);
  // The confidence length: verifications chosen by how far a match reaches,
  // against a curve each worker measures at load; the same outputs.
  Cluster conf({"--workers=2", "--model_dir=" + trained, "--speculative=ngram",
                "--num_draft_tokens=8", "--ngram_lookup=1", "--ngram_lookup_max=4",
                "--verify_length=confidence"});
  ExpectSame(RunAll(conf, requests), plain);
  v1::ServerState conf_state;
  ASSERT_TRUE(conf.State(conf_state).ok());
  EXPECT_EQ(conf_state.speculation().verify_length(), "confidence");
  std::printf(
      "trained tiny, ngram alone: %llu verifications, %llu drafts verified, %llu accepted (%u "
      "of %u delivered tokens)\n",
      static_cast<unsigned long long>(rows), static_cast<unsigned long long>(s.verified_drafts()),
      static_cast<unsigned long long>(s.lookup_accepted_drafts()), accepted, completion);
}

// A model without DSpark stages: --speculative=dspark stops the coordinator
// (exit 2), --speculative=ngram serves it with off's outputs, greedy and
// seeded, over two ranks of DP x EP.
TEST(SpeculativeTest, NgramAloneServesAModelWithoutStages) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/tiny_without_stages";
  std::filesystem::create_directories(dir);
  const std::string from = Runfile("models/random/tiny");
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(from + "/" + file, dir + "/" + file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::ifstream in(from + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [text, edit] :
       {std::pair<std::string, std::string>{"\"num_nextn_predict_layers\": 3",
                                            "\"num_nextn_predict_layers\": 0"},
        {"[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0]",
         "[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1]"}}) {
    const size_t at = config.find(text);
    ASSERT_NE(at, std::string::npos) << text;
    config.replace(at, text.size(), edit);
  }
  std::ofstream(dir + "/config.json") << config;
  const std::string command = "timeout 60 " + Runfile("coordinator/main") +
                              " --listen=127.0.0.1:0 --eplb=false --workers=1 --model_dir=" + dir +
                              " --model_cache_dir=" + CacheDir() +
                              " --speculative=dspark 2>/dev/null";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;

  const std::vector<v1::GenerateRequest> mix = Mix(12, 24);
  std::vector<Outcome> plain;
  {
    Cluster off({"--workers=2", "--model_dir=" + dir});
    plain = RunAll(off, mix);
  }
  Cluster spec({"--workers=2", "--model_dir=" + dir, "--speculative=ngram", "--ngram_lookup=1"});
  ExpectSame(RunAll(spec, mix), plain);
  v1::ServerState state;
  ASSERT_TRUE(spec.State(state).ok());
  ASSERT_TRUE(state.has_speculation());
  EXPECT_EQ(state.speculation().num_draft_tokens(), 5u);
  std::printf("random tiny without stages, ngram alone: %llu lookup verifications\n",
              static_cast<unsigned long long>(state.speculation().lookup_verifications()));
}

// --verify_length=confidence (issue 18 item 1): each row verifies the drafts
// the DSpark confidences and the model's cost curve (models/tiny/
// verify_cost.json) make worth it; the outputs still equal off's, and
// GetServerState reports what the workers verified.
TEST(SpeculativeTest, TrainedTinyConfidenceVerifyLengthEqualsOff) {
  const std::string trained = Runfile("models/tiny");
  if (!std::filesystem::exists(trained + "/model-00001-of-00001.safetensors") ||
      !std::filesystem::exists(trained + "/verify_cost.json")) {
    GTEST_SKIP() << "models/tiny has no checkpoint or no verify_cost.json";
  }
  const char* const texts[] = {
      "NAME\n       ls - list directory contents\n\nSYNOPSIS\n",
      "The json module provides an API for converting Python objects to",
      "GNU GENERAL PUBLIC LICENSE\n   Version 3, 29 June 2007\n\n",
  };
  std::vector<v1::GenerateRequest> requests;
  for (int seeded = 0; seeded < 2; ++seeded) {
    for (const char* text : texts) {
      v1::GenerateRequest r;
      r.set_text(text);
      r.mutable_stop()->set_max_new_tokens(32);
      r.mutable_stop()->set_ignore_eos(true);
      r.mutable_sampling()->set_temperature(seeded ? 0.8f : 0.0f);
      if (seeded) r.mutable_sampling()->set_seed(11);
      requests.push_back(std::move(r));
    }
  }
  const std::vector<Outcome> plain = RunOff(trained, 2, requests);
  Cluster spec({"--workers=2", "--model_dir=" + trained, "--speculative=dspark",
                "--verify_length=confidence"});
  ExpectSame(RunAll(spec, requests), plain);
  // The counts of a step are published a moment after its events.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  v1::ServerState state;
  ASSERT_TRUE(spec.State(state).ok());
  ASSERT_TRUE(state.has_speculation());
  const v1::ServerState::Speculation& s = state.speculation();
  EXPECT_EQ(s.verify_length(), "confidence");
  uint64_t rows = 0;
  for (uint64_t n : s.accepted_histogram()) rows += n;
  ASSERT_GT(rows, 0u);
  EXPECT_LE(s.verified_drafts(), 5 * rows);
  EXPECT_DOUBLE_EQ(s.mean_verify_length(), static_cast<double>(s.verified_drafts()) / rows);
  std::printf(
      "trained tiny, confidence: mean verify length %.2f over %lu verifications, %lu steps with "
      "drafting paused\n",
      s.mean_verify_length(), static_cast<unsigned long>(rows),
      static_cast<unsigned long>(s.paused_steps()));
  // `weir info` prints the policy and the mean verify length.
  const std::string command = Runfile("tools/weir") + " info --server=" + spec.address() + " 2>&1";
  std::string info;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) info.append(buffer, n);
    EXPECT_EQ(pclose(pipe), 0) << info;
  }
  EXPECT_NE(info.find("verify length confidence"), std::string::npos) << info;
  char mean[64];
  std::snprintf(mean, sizeof(mean), "mean verify length %.2f", s.mean_verify_length());
  EXPECT_NE(info.find(mean), std::string::npos) << info;
  // And the steps whose drafting the workers paused (DraftPacer).
  const std::string paused =
      absl::StrCat(s.paused_steps(), " steps with drafting paused (drafts that did not pay)");
  EXPECT_NE(info.find(paused), std::string::npos) << info;
  // And the verifications of prompt lookup drafts (on by default).
  const std::string lookups =
      absl::StrCat(s.lookup_verifications(), " verifications of prompt lookup drafts, ",
                   s.lookup_accepted_drafts(), " of them accepted");
  EXPECT_NE(info.find(lookups), std::string::npos) << info;
}

bool SameLogprobs(const v1::TokenLogprobs& a, const v1::TokenLogprobs& b) {
  if (a.token_id() != b.token_id() || a.logprob() != b.logprob() || a.rank() != b.rank() ||
      a.top_size() != b.top_size()) {
    return false;
  }
  for (int k = 0; k < a.top_size(); ++k) {
    if (a.top(k).token_id() != b.top(k).token_id() || a.top(k).logprob() != b.top(k).logprob()) {
      return false;
    }
  }
  return true;
}

// Structured output and top_logprobs speculate too (issue 18): on the trained
// tiny, requests under a regex or a JSON schema, with 3 alternatives per
// token, get the tokens, the finish reasons and every token's logprobs of
// --speculative=off, while drafts are accepted under the constraints and a
// small KV pool makes the speculating cluster preempt.
TEST(SpeculativeTest, TrainedTinyWithConstraintsAndLogprobsEqualsOff) {
  const std::string trained = Runfile("models/tiny");
  if (!std::filesystem::exists(trained + "/model-00001-of-00001.safetensors")) {
    GTEST_SKIP() << "models/tiny has no checkpoint";
  }
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 8; ++i) {
    v1::GenerateRequest r;
    r.set_text(kCorpusTexts[i % 4]);
    r.mutable_stop()->set_max_new_tokens(32);
    r.mutable_output()->set_top_logprobs(3);
    if (i % 4 == 3) {
      r.mutable_sampling()->set_temperature(0.7f);
      r.mutable_sampling()->set_seed(11 + i);
    } else {
      r.mutable_sampling()->set_temperature(0.0f);
    }
    if (i < 4) {
      // Lower-case words and a full stop: the kind of text the model drafts well.
      r.mutable_constraint()->set_regex("[a-z ,]{1,60}\\.");
    } else if (i < 7) {
      r.mutable_constraint()->set_json_schema(
          R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
              "size": {"type": "integer"}}, "required": ["name", "size"]})");
    }
    requests.push_back(std::move(r));
  }
  std::vector<Outcome> plain;
  {
    Cluster off({"--workers=2", "--model_dir=" + trained});
    plain = RunAll(off, requests);
  }
  // 5 blocks of 16 positions a rank for 4 sequences a rank: they preempt (a
  // recomputed constrained sequence replays its output through the grammar).
  Cluster spec({"--workers=2", "--model_dir=" + trained, "--speculative=dspark",
                "--verify_length=fixed", "--kv_block_tokens=16",
                "--worker_flags=--kv_cache_blocks=5", "--kv_check_every_step=true"});
  const std::vector<Outcome> got = RunAll(spec, requests);
  ExpectSame(got, plain);
  v1::ServerState state;
  ASSERT_TRUE(spec.State(state).ok());
  EXPECT_GT(state.preemptions(), 0u);
  uint32_t accepted_constrained = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].logprobs.size(), got[i].tokens.size()) << "request " << i;
    ASSERT_EQ(plain[i].logprobs.size(), plain[i].tokens.size()) << "request " << i;
    for (size_t k = 0; k < got[i].tokens.size(); ++k) {
      EXPECT_TRUE(SameLogprobs(got[i].logprobs[k], plain[i].logprobs[k]))
          << "request " << i << " token " << k << ": " << got[i].logprobs[k].ShortDebugString()
          << " vs " << plain[i].logprobs[k].ShortDebugString();
    }
    if (i < 7) accepted_constrained += got[i].accepted_drafts;
    std::printf("request %zu: %zu tokens, %u accepted drafts\n", i, got[i].tokens.size(),
                got[i].accepted_drafts);
  }
  EXPECT_GT(accepted_constrained, 10u);
}

// The coordinator's exit code with `flags`; one that starts serving instead
// is stopped after 60 s (timeout's 124), so a refusal that went missing
// fails the test instead of hanging it.
int ExitCode(const std::string& flags) {
  const std::string command = "timeout 60 " + Runfile("coordinator/main") +
                              " --listen=127.0.0.1:0 --eplb=false --workers=1 " + RandomTiny() +
                              " --model_cache_dir=" + CacheDir() + " " + flags + " 2>/dev/null";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SpeculativeTest, BadFlagValuesExitWithCode2) {
  EXPECT_EQ(ExitCode("--speculative=eagle"), 2);
  EXPECT_EQ(ExitCode("--speculative=dspark --num_draft_tokens=6"), 2);  // block is 5
  EXPECT_EQ(ExitCode("--speculative=dspark --num_draft_tokens=-1"), 2);
  EXPECT_EQ(ExitCode("--num_draft_tokens=3"), 2);                 // without --speculative=dspark
  // (--backend=cuda speculates on the workers' device decoders: no refusal.)
  EXPECT_EQ(ExitCode("--speculative=dspark --verify_length=longest"), 2);
  EXPECT_EQ(ExitCode("--verify_length=confidence"), 2);  // without --speculative=dspark
  EXPECT_EQ(ExitCode("--speculative_max_batch=4"), 2);   // without --speculative=dspark
  EXPECT_EQ(ExitCode("--speculative=dspark --speculative_max_batch=-1"), 2);
  EXPECT_EQ(ExitCode("--speculative=ngram --ngram_lookup=0"), 2);  // lookup is the mode
  EXPECT_EQ(ExitCode("--speculative=ngram --num_draft_tokens=17"), 2);
  EXPECT_EQ(ExitCode("--speculative=ngram --ngram_lookup_tokens=8"), 2);     // --num_draft_tokens
  EXPECT_EQ(ExitCode("--speculative=dspark --ngram_lookup=3 --ngram_lookup_max=2"), 2);
  EXPECT_EQ(ExitCode("--ngram_lookup_max=4"), 2);  // without speculation
  // (The random tiny has no verify_cost.json: its CPU workers measure one at
  // start, RandomTinyConfidenceMeasuresTheCurveAtStart.)
}

}  // namespace
}  // namespace weir
