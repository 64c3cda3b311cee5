// End to end over gRPC on real processes: a local cluster (2 CPU workers)
// generates greedily for a mixed batch of concurrent prompts, and every
// output must equal the single-process model's; with zero-overhead
// scheduling on and off, and with a KV pool small enough to force
// preemption. Bad requests get INVALID_ARGUMENT and the server keeps serving.
// Structured output: constrained requests at temperature 1 produce valid
// output and finish with GRAMMAR_TERMINATED (or EOS).

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/grpc_util.h"
#include "coordinator/model_provisioning.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/eplb.grpc.pb.h"
#include "proto/inference.grpc.pb.h"
#include "tests/local_cluster.h"
#include "tests/reference_greedy.h"
#include "worker/model/checkpoint.h"
#include "worker/model/model.h"

namespace weir {
namespace {

using testing_util::CacheDir;
using testing_util::Cluster;
using testing_util::ReferenceGreedy;
using testing_util::Runfile;

std::vector<std::vector<uint32_t>> Prompts() {
  return testing_util::ArithmeticPrompts(32, 7, 31, 13);
}

void ExpectMatchesReference(Cluster& cluster, uint32_t max_new) {
  absl::StatusOr<std::string> dir =
      coordinator::EnsureWeights(Runfile("models/random/tiny"), CacheDir(), 0);
  ASSERT_TRUE(dir.ok()) << dir.status();
  auto checkpoint = model::Checkpoint::Open(*dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  auto reference = model::Model::Create((*checkpoint)->config(), **checkpoint);
  ASSERT_TRUE(reference.ok()) << reference.status();

  const auto prompts = Prompts();
  std::vector<std::vector<uint32_t>> outputs(prompts.size());
  std::vector<grpc::Status> statuses(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { statuses[i] = cluster.Greedy(prompts[i], max_new, outputs[i]); });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    EXPECT_EQ(outputs[i], ReferenceGreedy(**reference, prompts[i], max_new)) << "prompt " << i;
  }
}

TEST(ServeTest, ConcurrentGreedyEqualsSingleProcessZeroOverhead) {
  Cluster cluster({"--workers=2", "--zero_overhead=true"});
  ExpectMatchesReference(cluster, 12);
}

TEST(ServeTest, ConcurrentGreedyEqualsSingleProcessPlainStepping) {
  Cluster cluster({"--workers=2", "--zero_overhead=false", "--max_prefill_tokens=16"});
  ExpectMatchesReference(cluster, 12);
}

v1::ServerState State(Cluster& cluster) {
  grpc::ClientContext context;
  v1::ServerState state;
  EXPECT_TRUE(cluster.stub().GetServerState(&context, v1::GetServerStateRequest(), &state).ok());
  return state;
}

TEST(ServeTest, FourRanksExpertParallelEqualsSingleProcess) {
  // DP4 x EP4: 8 experts over 4 ranks, 2 each, exchanged over UCX every layer.
  Cluster cluster({"--workers=4"});
  ExpectMatchesReference(cluster, 8);
}

// Seeded sampling: the same (seed, prompt) gives the same tokens alone and
// inside a crowd of other requests.
TEST(ServeTest, SeededSamplingIgnoresBatchComposition) {
  Cluster cluster({"--workers=2"});
  auto sample = [&](uint64_t seed, const std::vector<uint32_t>& prompt) {
    v1::GenerateRequest request;
    for (uint32_t t : prompt) request.mutable_tokens()->add_ids(t);
    request.mutable_stop()->set_max_new_tokens(10);
    request.mutable_stop()->set_ignore_eos(true);
    request.mutable_sampling()->set_temperature(1.0f);
    request.mutable_sampling()->set_top_p(0.9f);
    request.mutable_sampling()->set_seed(seed);
    grpc::ClientContext context;
    auto reader = cluster.stub().Generate(&context, request);
    v1::GenerateEvent event;
    std::vector<uint32_t> out;
    while (reader->Read(&event)) {
      if (event.has_final()) out.assign(event.final().full_token_ids().begin(),
                                        event.final().full_token_ids().end());
    }
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  };
  const std::vector<uint32_t> prompt = {17, 99, 4, 250};
  const std::vector<uint32_t> alone = sample(1234, prompt);
  ASSERT_EQ(alone.size(), 10u);
  std::vector<std::vector<uint32_t>> crowd(9);
  std::vector<std::thread> threads;
  for (int i = 0; i < 9; ++i) {
    threads.emplace_back([&, i] {
      crowd[i] = i == 4 ? sample(1234, prompt) : sample(500 + i, {static_cast<uint32_t>(i + 1), 7});
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(crowd[4], alone);
  EXPECT_NE(sample(1235, prompt), alone);  // Another seed, another sample (10 tokens).
}

TEST(ServeTest, FullQueueIsResourceExhausted) {
  Cluster cluster({"--workers=1", "--max_queued_requests=2"});
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateEvent>>> readers;
  v1::GenerateRequest request;
  request.mutable_tokens()->add_ids(3);
  request.mutable_stop()->set_max_new_tokens(60000);  // <= max_new_tokens_limit
  request.mutable_stop()->set_ignore_eos(true);
  v1::GenerateEvent event;
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(cluster.stub().Generate(contexts.back().get(), request));
    ASSERT_TRUE(readers.back()->Read(&event));  // Accepted: admitted.
  }
  std::vector<uint32_t> tokens;
  EXPECT_EQ(cluster.Greedy({3}, 2, tokens).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (auto& context : contexts) context->TryCancel();
  for (auto& reader : readers) {
    while (reader->Read(&event)) {
    }
    reader->Finish();
  }
  // Once the long requests are gone (client cancellation), there is room again.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  grpc::Status status;
  do {
    status = cluster.Greedy({3}, 2, tokens);
  } while (!status.ok() && absl::Now() < deadline);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST(ServeTest, OfflineModeRunsAJsonlBatchAndExits) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  std::ofstream(dir + "/in.jsonl") << "{\"custom_id\": \"a\", \"tokens\": [5, 6], "
                                      "\"max_new_tokens\": 3, \"temperature\": 0}\n"
                                      "{\"custom_id\": \"b\", \"tokens\": [99999]}\n";
  // The offline mode on in.jsonl, with `tail` after the flags.
  auto offline = [&](const std::string& tail) {
    const std::string command =
        Runfile("coordinator/main") + " --listen=127.0.0.1:0 --eplb=false --workers=1" +
        " --model_dir=" + Runfile("models/random/tiny") + " --model_cache_dir=" + CacheDir() +
        " --input=" + dir + "/in.jsonl" + tail;
    return std::system(command.c_str());
  };
  // With --output, and with the results on stdout (redirected to a file: the
  // banner must not land among them).
  for (bool to_stdout : {false, true}) {
    const std::string results = dir + (to_stdout ? "/stdout.jsonl" : "/out.jsonl");
    ASSERT_EQ(
        offline((to_stdout ? " >" + results : " --output=" + results) + " 2>" + dir + "/err.txt"),
        0);
    std::ifstream out(results);
    std::vector<std::string> lines;
    for (std::string line; std::getline(out, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 2u) << (to_stdout ? "stdout" : "--output");
    EXPECT_NE(lines[0].find("\"custom_id\":\"a\""), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("\"finish_reason\":\"MAX_TOKENS\""), std::string::npos) << lines[0];
    EXPECT_NE(lines[1].find("INVALID_ARGUMENT"), std::string::npos) << lines[1];
    // Progress into a file (not a terminal): whole lines, the last one 2 of
    // 2, never a carriage return (a log of one ever-growing line); the
    // banner is there, not in the results.
    std::ifstream err(dir + "/err.txt");
    const std::string log((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    EXPECT_EQ(log.find('\r'), std::string::npos) << log;
    EXPECT_TRUE(log.rfind("2/2 100%", 0) == 0 || log.find("\n2/2 100%") != std::string::npos)
        << log;
    EXPECT_NE(log.find("weir ready at"), std::string::npos) << log;
  }
  // An --output that cannot be written is an error before any request runs
  // (the results are not computed and lost), and the process says why.
  EXPECT_NE(offline(" --output=" + dir + "/missing/dir/out.jsonl 2>" + dir + "/bad.txt"), 0);
  std::ifstream bad_err(dir + "/bad.txt");
  const std::string bad_log((std::istreambuf_iterator<char>(bad_err)),
                            std::istreambuf_iterator<char>());
  EXPECT_NE(bad_log.find("cannot write --output"), std::string::npos) << bad_log;
  EXPECT_EQ(bad_log.find("1/2 "), std::string::npos) << bad_log;  // no request was sent
  EXPECT_EQ(bad_log.find("2/2 "), std::string::npos) << bad_log;
}

TEST(ServeTest, PreemptionKeepsGreedyOutputs) {
  // Each worker's pool holds 8 blocks of 16 positions (the workers size it,
  // the coordinator books what they report): the 16 sequences per rank
  // cannot all stay resident, so the burst queues and preempts.
  Cluster cluster(
      {"--workers=2", "--kv_block_tokens=16", "--worker_flags=--kv_cache_blocks=8"});
  ExpectMatchesReference(cluster, 24);
  v1::ServerState state = State(cluster);
  EXPECT_GT(state.preemptions(), 0u);
  // Idle again: every block is back.
  ASSERT_EQ(state.per_group_size(), 2);
  for (const v1::ServerState::Group& group : state.per_group()) {
    EXPECT_EQ(group.kv_usage(), 0.0f);
    EXPECT_EQ(group.running() + group.waiting(), 0u);
    EXPECT_EQ(group.kv_blocks_total(), 8u);
    EXPECT_EQ(group.kv_blocks_free(), 8u);
    EXPECT_EQ(group.kv_blocks_used(), 0u);
    EXPECT_EQ(group.kv_block_tokens(), 16u);
    EXPECT_EQ(group.seq_slots_total(), 64u);
    EXPECT_EQ(group.seq_slots_free(), 64u);
  }
  // A prompt that could never fit the pool: 130 + 4 positions need 9 blocks.
  std::vector<uint32_t> long_prompt(130, 11), tokens;
  const grpc::Status too_long = cluster.Greedy(long_prompt, 4, tokens);
  EXPECT_EQ(too_long.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(too_long.error_message().find("needs 9 KV blocks; the pool has 8"),
            std::string::npos)
      << too_long.error_message();
  // 8 blocks still serve the longest sequence that fits.
  std::vector<uint32_t> fits(120, 11);
  EXPECT_TRUE(cluster.Greedy(fits, 8, tokens).ok());
}

TEST(ServeTest, BadRequestsFailAloneAndTheServerKeepsServing) {
  Cluster cluster({"--workers=1"});
  std::vector<uint32_t> tokens;
  EXPECT_EQ(cluster.Greedy({5, 4096}, 4, tokens).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(cluster.Greedy({0xFFFFFFFFu}, 4, tokens).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(cluster.Greedy({}, 4, tokens).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest hot;
  hot.mutable_tokens()->add_ids(3);
  hot.mutable_sampling()->set_temperature(-1.0f);
  grpc::ClientContext context;
  auto reader = cluster.stub().Generate(&context, hot);
  v1::GenerateEvent event;
  while (reader->Read(&event)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  ASSERT_TRUE(cluster.Greedy({5, 6, 7}, 5, tokens, &reason).ok());
  EXPECT_EQ(tokens.size(), 5u);
  EXPECT_EQ(reason, v1::FINISH_REASON_MAX_TOKENS);
}

TEST(ServeTest, BatchMixesGoodAndBadItemsInInputOrder) {
  Cluster cluster({"--workers=2"});
  v1::GenerateBatchRequest batch;
  batch.set_ordering(v1::BATCH_ORDERING_INPUT_ORDER);
  batch.mutable_defaults()->mutable_sampling()->set_temperature(0.0f);
  batch.mutable_defaults()->mutable_stop()->set_max_new_tokens(6);
  batch.mutable_defaults()->mutable_stop()->set_ignore_eos(true);
  const auto prompts = Prompts();
  for (int i = 0; i < 10; ++i) {
    v1::BatchItem* item = batch.add_items();
    item->set_custom_id(absl::StrCat("item-", i));
    if (i == 3) {
      item->mutable_request()->mutable_tokens()->add_ids(99999);  // out of vocabulary
    } else {
      for (uint32_t t : prompts[i]) item->mutable_request()->mutable_tokens()->add_ids(t);
    }
  }
  grpc::ClientContext context;
  auto reader = cluster.stub().GenerateBatch(&context, batch);
  v1::BatchEvent event;
  std::vector<std::string> order;
  bool summary = false;
  while (reader->Read(&event)) {
    if (event.has_item_result()) {
      const auto& r = event.item_result();
      order.push_back(r.custom_id());
      if (r.index() == 3) {
        EXPECT_EQ(r.error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      } else {
        ASSERT_TRUE(r.has_result()) << r.custom_id() << ": " << r.error().message();
        std::vector<uint32_t> alone;
        ASSERT_TRUE(cluster.Greedy(prompts[r.index()], 6, alone).ok());
        EXPECT_EQ(std::vector<uint32_t>(r.result().samples(0).full_token_ids().begin(),
                                        r.result().samples(0).full_token_ids().end()),
                  alone)
            << r.custom_id();
      }
    }
    if (event.has_summary()) {
      summary = true;
      EXPECT_EQ(event.summary().counts().completed(), 9u);
      EXPECT_EQ(event.summary().counts().failed(), 1u);
    }
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(summary);
  ASSERT_EQ(order.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(order[i], absl::StrCat("item-", i));

  // Structural errors reject the whole batch before anything runs.
  v1::GenerateBatchRequest duplicate;
  for (int i = 0; i < 2; ++i) {
    v1::BatchItem* item = duplicate.add_items();
    item->set_custom_id("same");
    item->mutable_request()->mutable_tokens()->add_ids(1);
  }
  grpc::ClientContext dup_context;
  auto dup_reader = cluster.stub().GenerateBatch(&dup_context, duplicate);
  while (dup_reader->Read(&event)) {
  }
  EXPECT_EQ(dup_reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(ServeTest, ExpertLoadReachesTheEplbService) {
  Cluster cluster({"--workers=2", "--eplb=true", "--eplb_stat_interval=4"});
  std::vector<uint32_t> tokens;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cluster.Greedy({static_cast<uint32_t>(10 + i), 20, 30}, 12, tokens).ok());
  }
  v1::ServerState state = State(cluster);
  ASSERT_FALSE(state.eplb_address().empty());
  auto eplb = v1::Eplb::NewStub(MakeChannel(state.eplb_address()));
  v1::EplbState eplb_state;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    grpc::ClientContext context;
    eplb_state.Clear();
    ASSERT_TRUE(eplb->GetState(&context, v1::GetEplbStateRequest(), &eplb_state).ok());
  } while (eplb_state.reports_total() == 0 && absl::Now() < deadline);
  // Every 4 steps each of the 2 ranks reports [layers, experts] routed counts.
  EXPECT_GT(eplb_state.reports_total(), 0u);
  ASSERT_EQ(eplb_state.rank_loads_size(), 2);
  uint64_t tokens_routed = 0;
  for (const auto& load : eplb_state.rank_loads()) tokens_routed += load.tokens();
  EXPECT_GT(tokens_routed, 0u);
  EXPECT_GE(eplb_state.balance_ratio(), 1.0);
}

TEST(ServeTest, CancelByRequestIdEndsTheStream) {
  Cluster cluster({"--workers=1"});
  v1::GenerateRequest request;
  request.set_request_id("long-one");
  request.mutable_tokens()->add_ids(9);
  request.mutable_stop()->set_max_new_tokens(60000);  // <= max_new_tokens_limit
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_output()->set_stream_tokens(true);
  grpc::ClientContext context;
  auto reader = cluster.stub().Generate(&context, request);
  v1::GenerateEvent event;
  ASSERT_TRUE(reader->Read(&event));  // Accepted
  ASSERT_TRUE(reader->Read(&event));  // first delta: it is running
  // The same id again while in flight.
  std::vector<uint32_t> ignored;
  {
    grpc::ClientContext dup_context;
    auto dup = cluster.stub().Generate(&dup_context, request);
    while (dup->Read(&event)) {
    }
    EXPECT_EQ(dup->Finish().error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }
  grpc::ClientContext cancel_context;
  v1::CancelRequest cancel;
  cancel.add_request_ids("long-one");
  cancel.add_request_ids("never-sent");
  v1::CancelResponse response;
  ASSERT_TRUE(cluster.stub().Cancel(&cancel_context, cancel, &response).ok());
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).outcome(), v1::CancelResponse::OUTCOME_CANCELLED);
  EXPECT_EQ(response.results(1).outcome(), v1::CancelResponse::OUTCOME_NOT_FOUND);
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&event)) {
    if (event.has_final()) reason = event.final().reason();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(reason, v1::FINISH_REASON_CANCELLED);
  // The cancelled sequence's KV comes back (after the last step that used it).
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  v1::ServerState state;
  do {
    grpc::ClientContext state_context;
    state.Clear();
    ASSERT_TRUE(
        cluster.stub().GetServerState(&state_context, v1::GetServerStateRequest(), &state).ok());
  } while (state.per_group(0).kv_usage() != 0.0f && absl::Now() < deadline);
  EXPECT_EQ(state.per_group(0).kv_usage(), 0.0f);
  EXPECT_EQ(state.per_group(0).running(), 0u);

  // A client that disconnects mid-stream (no Cancel call) frees its KV too.
  auto disconnecting = std::make_unique<grpc::ClientContext>();
  request.set_request_id("goes-away");
  auto gone = cluster.stub().Generate(disconnecting.get(), request);
  ASSERT_TRUE(gone->Read(&event));
  ASSERT_TRUE(gone->Read(&event));
  disconnecting->TryCancel();
  while (gone->Read(&event)) {
  }
  gone->Finish();
  const absl::Time freed_by = absl::Now() + absl::Seconds(5);
  do {
    grpc::ClientContext state_context;
    state.Clear();
    ASSERT_TRUE(
        cluster.stub().GetServerState(&state_context, v1::GetServerStateRequest(), &state).ok());
  } while ((state.per_group(0).kv_usage() != 0.0f || state.per_group(0).running() != 0) &&
           absl::Now() < freed_by);
  EXPECT_EQ(state.per_group(0).kv_usage(), 0.0f);
  EXPECT_EQ(state.per_group(0).running(), 0u);
}

struct Constrained {
  grpc::Status status;
  std::string text;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
};

Constrained GenerateConstrained(Cluster& cluster, const v1::StructuredOutput& constraint,
                                uint64_t seed) {
  v1::GenerateRequest request;
  request.set_text("Answer:");
  *request.mutable_constraint() = constraint;
  request.mutable_stop()->set_max_new_tokens(2000);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_sampling()->set_seed(seed);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(120)));
  auto reader = cluster.stub().Generate(&context, request);
  v1::GenerateEvent event;
  Constrained out;
  while (reader->Read(&event)) {
    if (event.has_final()) {
      out.text = event.final().full_text();
      out.reason = event.final().reason();
    }
  }
  out.status = reader->Finish();
  return out;
}

TEST(ServeTest, StructuredOutputIsValidAndEndsWithTheGrammar) {
  Cluster cluster({"--workers=2"});
  {
    grpc::ClientContext context;
    v1::ModelInfo info;
    ASSERT_TRUE(cluster.stub().GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_GE(info.features().structured_output_kinds_size(), 5);
  }
  // Bounded strings, so random weights still end the output quickly.
  v1::StructuredOutput schema;
  schema.set_json_schema(R"({"type": "object",
      "properties": {"name": {"type": "string", "maxLength": 6},
                     "age": {"type": "integer", "minimum": 0, "maximum": 120},
                     "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                              "maxItems": 3},
                     "ok": {"type": "boolean"}},
      "required": ["name", "age", "tags", "ok"]})");
  v1::StructuredOutput regex;
  regex.set_regex("[0-9]{3}-[a-z]{2,4}");
  std::vector<Constrained> json_out(3), regex_out(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { json_out[i] = GenerateConstrained(cluster, schema, 10 + i); });
    threads.emplace_back([&, i] { regex_out[i] = GenerateConstrained(cluster, regex, 20 + i); });
  }
  for (std::thread& t : threads) t.join();
  auto ended = [](v1::FinishReason r) {
    return r == v1::FINISH_REASON_GRAMMAR_TERMINATED || r == v1::FINISH_REASON_EOS;
  };
  for (const Constrained& c : json_out) {
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_TRUE(ended(c.reason)) << c.reason << ": " << c.text;
    const auto value = nlohmann::json::parse(c.text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(value.is_discarded()) << c.text;
    ASSERT_TRUE(value.is_object()) << c.text;
    EXPECT_EQ(value.size(), 4u) << c.text;
    ASSERT_TRUE(value.contains("name") && value["name"].is_string()) << c.text;
    const std::string name = value["name"].get<std::string>();
    // maxLength counts code points: UTF-8 bytes that do not continue one.
    EXPECT_LE(std::count_if(name.begin(), name.end(), [](char b) { return (b & 0xC0) != 0x80; }),
              6)
        << c.text;
    ASSERT_TRUE(value.contains("age") && value["age"].is_number_integer()) << c.text;
    EXPECT_GE(value["age"].get<int64_t>(), 0);
    EXPECT_LE(value["age"].get<int64_t>(), 120);
    ASSERT_TRUE(value.contains("tags") && value["tags"].is_array()) << c.text;
    EXPECT_LE(value["tags"].size(), 3u);
    for (const auto& tag : value["tags"]) {
      EXPECT_TRUE(tag == "a" || tag == "b" || tag == "c") << c.text;
    }
    EXPECT_TRUE(value.contains("ok") && value["ok"].is_boolean()) << c.text;
  }
  for (const Constrained& c : regex_out) {
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_TRUE(ended(c.reason)) << c.reason << ": " << c.text;
    EXPECT_TRUE(std::regex_match(c.text, std::regex("[0-9]{3}-[a-z]{2,4}"))) << c.text;
  }
}

TEST(ServeTest, InvalidConstraintFailsAloneBeforeAdmission) {
  Cluster cluster({"--workers=1"});
  std::vector<uint32_t> tokens;
  grpc::Status plain;
  std::thread unconstrained([&] { plain = cluster.Greedy({5, 6, 7}, 20, tokens); });
  for (const std::string& bad : {std::string(R"({"type": "object", "properties": )"),
                                 std::string(R"({"type": "string", "format": 5, "allOf": [{}, {}]})")}) {
    v1::StructuredOutput schema;
    schema.set_json_schema(bad);
    Constrained c = GenerateConstrained(cluster, schema, 1);
    EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(c.status.error_message().find("GRAMMAR_"), std::string::npos)
        << c.status.error_message();
  }
  v1::StructuredOutput regex;
  regex.set_regex("(unclosed");
  EXPECT_EQ(GenerateConstrained(cluster, regex, 1).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  unconstrained.join();
  ASSERT_TRUE(plain.ok()) << plain.error_message();
  EXPECT_EQ(tokens.size(), 20u);
}

}  // namespace
}  // namespace weir
