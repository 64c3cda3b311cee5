#include "worker/worker_service.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "worker/model/tiny_checkpoint.h"

namespace weir::worker {
namespace {

constexpr uint64_t kEpoch = 1234;

// The tiny model with generated weights, made once per test binary.
std::string TinyModelDir() {
  static const std::string dir = [] {
    const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/tiny";
    auto opened = model::GenerateAndOpenCheckpoint(
        std::string(std::getenv("TEST_SRCDIR")) + "/weir/models/random/tiny/config.json", out, 1);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return out;
  }();
  return dir;
}

// A worker service behind a real gRPC server on a free loopback port.
struct Harness {
  bool serving = false;
  std::string stop_reason;
  WorkerService service;
  StartedServer server;
  std::unique_ptr<v1::Worker::Stub> stub;

  explicit Harness(int rank, WorkerOptions options = {})
      : service(WorkerHooks{.set_serving = [this](bool s) { serving = s; },
                            .request_stop = [this](const std::string& why) { stop_reason = why; }},
                options) {
    server = *StartServer({.address = "127.0.0.1:0"}, {&service});
    service.SetIdentity(kEpoch, rank);
    stub = v1::Worker::NewStub(MakeChannel(server.address));
  }
  ~Harness() { server.server->Shutdown(); }

  grpc::Status Init(int rank, int world) {
    v1::InitRequest request;
    request.set_coordinator_epoch(kEpoch);
    request.set_rank(rank);
    request.mutable_layout()->set_world_size(world);
    for (int r = 0; r < world; ++r) {
      v1::PeerInfo* peer = request.add_peers();
      peer->set_rank(r);
      peer->set_address("127.0.0.1:" + std::to_string(9000 + r));
    }
    grpc::ClientContext context;
    v1::InitResponse response;
    return stub->Init(&context, request, &response);
  }

  grpc::Status Load(const std::string& dir, v1::LoadWeightsResponse* response,
                    uint32_t kv_block_tokens = 0) {
    v1::LoadWeightsRequest request;
    request.set_coordinator_epoch(kEpoch);
    request.set_model_dir(dir);
    request.set_kv_block_tokens(kv_block_tokens);
    grpc::ClientContext context;
    return stub->LoadWeights(&context, request, response);
  }
};

TEST(WorkerServiceTest, InitThenLoadMakesItServing) {
  Harness h(/*rank=*/0);
  v1::LoadWeightsResponse loaded;
  EXPECT_EQ(h.Load(TinyModelDir(), &loaded).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(h.Init(/*rank=*/1, 2).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(h.Init(0, 1).ok());
  ASSERT_TRUE(h.Init(0, 1).ok());  // Same layout again: idempotent.
  // A different layout after Init is refused.
  EXPECT_EQ(h.Init(0, 4).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(h.serving);
  EXPECT_EQ(h.Load("/nonexistent", &loaded).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_FALSE(h.serving);
  ASSERT_TRUE(h.Load(TinyModelDir(), &loaded).ok());
  EXPECT_TRUE(h.serving);
  EXPECT_EQ(loaded.revision().size(), 16u);
  EXPECT_GT(loaded.bytes_loaded(), 0u);
}

TEST(WorkerServiceTest, ConfidenceVerifyLengthNeedsAGoodCostCurve) {
  Harness h(/*rank=*/0);
  ASSERT_TRUE(h.Init(0, 1).ok());
  auto load = [&](const std::string& policy, bool measure = false) {
    v1::LoadWeightsRequest request;
    request.set_coordinator_epoch(kEpoch);
    request.set_model_dir(TinyModelDir());
    request.set_num_draft_tokens(5);
    request.set_verify_length(policy);
    request.set_measure_verify_cost(measure);
    grpc::ClientContext context;
    v1::LoadWeightsResponse response;
    return h.stub->LoadWeights(&context, request, &response).error_code();
  };
  const std::string curve = TinyModelDir() + "/verify_cost.json";
  std::filesystem::remove(curve);
  EXPECT_EQ(load("longest"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(load("confidence"), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(h.serving);
  std::ofstream(curve) << R"({"points": [{"batch": 1, "draft_ms": 0, "step_ms": [1, 2]}]})";
  EXPECT_EQ(load("confidence"), grpc::StatusCode::INVALID_ARGUMENT);  // draft_ms 0
  // A curve for fewer drafts than the worker makes.
  std::ofstream(curve) << R"({"points": [{"batch": 1, "draft_ms": 1, "step_ms": [1, 2]}]})";
  EXPECT_EQ(load("confidence"), grpc::StatusCode::INVALID_ARGUMENT);
  std::ofstream(curve)
      << R"({"points": [{"batch": 1, "draft_ms": 1, "step_ms": [1, 2, 3, 4, 5, 6]}]})";
  EXPECT_EQ(load("confidence"), grpc::StatusCode::OK);
  EXPECT_TRUE(h.serving);
  EXPECT_EQ(load("fixed"), grpc::StatusCode::OK);
  // Asked to measure, the worker profiles the model now and ignores the
  // file (a bad one here).
  std::ofstream(curve) << "not json";
  EXPECT_EQ(load("confidence"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(load("confidence", /*measure=*/true), grpc::StatusCode::OK);
  EXPECT_TRUE(h.serving);
  std::filesystem::remove(curve);
  EXPECT_EQ(load("confidence", /*measure=*/true), grpc::StatusCode::OK);
  // Lookups longer than DSpark's block: the curve measured at load covers
  // them (a verification of 1 + 8 positions, rolled back 8).
  v1::LoadWeightsRequest longer;
  longer.set_coordinator_epoch(kEpoch);
  longer.set_model_dir(TinyModelDir());
  longer.set_num_draft_tokens(5);
  longer.set_ngram_lookup(3);
  longer.set_ngram_lookup_tokens(8);
  longer.set_verify_length("confidence");
  longer.set_measure_verify_cost(true);
  grpc::ClientContext context;
  v1::LoadWeightsResponse response;
  EXPECT_EQ(h.stub->LoadWeights(&context, longer, &response).error_code(), grpc::StatusCode::OK);
}

// Prompt lookup alone (num_draft_tokens 0, coordinator --speculative=ngram):
// the tokens a lookup proposes must be given; then the model loads, with
// either verify length.
TEST(WorkerServiceTest, PromptLookupAloneNeedsItsTokens) {
  Harness h(/*rank=*/0);
  ASSERT_TRUE(h.Init(0, 1).ok());
  auto load = [&](uint32_t lookup_tokens, const std::string& policy) {
    v1::LoadWeightsRequest request;
    request.set_coordinator_epoch(kEpoch);
    request.set_model_dir(TinyModelDir());
    request.set_ngram_lookup(3);
    request.set_ngram_lookup_tokens(lookup_tokens);
    request.set_verify_length(policy);
    grpc::ClientContext context;
    v1::LoadWeightsResponse response;
    return h.stub->LoadWeights(&context, request, &response).error_code();
  };
  EXPECT_EQ(load(0, "fixed"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(load(0, "confidence"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(load(17, "fixed"), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(h.serving);
  EXPECT_EQ(load(8, "fixed"), grpc::StatusCode::OK);
  EXPECT_TRUE(h.serving);
  // The confidence length measures its curve at load, without a draft pass
  // (the model directory's curve, with one, is not read).
  EXPECT_EQ(load(8, "confidence"), grpc::StatusCode::OK);
}

TEST(WorkerServiceTest, ForeignEpochIsFenced) {
  Harness h(0);
  v1::InitRequest request;
  request.set_coordinator_epoch(kEpoch + 1);
  grpc::ClientContext context;
  v1::InitResponse response;
  EXPECT_EQ(h.stub->Init(&context, request, &response).error_code(), grpc::StatusCode::ABORTED);
}

// The group epoch (one per bring-up): an Init at a newer one drops the
// loaded model (LoadWeights again before steps); every call of another
// epoch is refused FAILED_PRECONDITION naming both.
TEST(WorkerServiceTest, OlderGroupEpochIsFenced) {
  Harness h(0);
  auto init = [&](uint64_t group_epoch) {
    v1::InitRequest request;
    request.set_coordinator_epoch(kEpoch);
    request.set_group_epoch(group_epoch);
    request.set_rank(0);
    request.mutable_layout()->set_world_size(1);
    request.add_peers()->set_address("127.0.0.1:9000");
    grpc::ClientContext context;
    v1::InitResponse response;
    return h.stub->Init(&context, request, &response);
  };
  auto load = [&](uint64_t group_epoch) {
    v1::LoadWeightsRequest request;
    request.set_coordinator_epoch(kEpoch);
    request.set_group_epoch(group_epoch);
    request.set_model_dir(TinyModelDir());
    grpc::ClientContext context;
    v1::LoadWeightsResponse response;
    return h.stub->LoadWeights(&context, request, &response);
  };
  auto step = [&](uint64_t group_epoch) {
    grpc::ClientContext context;
    auto stream = h.stub->Steps(&context);
    v1::StepPlan plan;
    plan.set_coordinator_epoch(kEpoch);
    plan.set_group_epoch(group_epoch);
    plan.set_step_id(0);
    plan.set_type(v1::STEP_TYPE_DECODE);
    stream->Write(plan);
    stream->WritesDone();
    v1::StepResult result;
    bool answered = false;
    while (stream->Read(&result)) answered = true;
    const grpc::Status status = stream->Finish();
    return answered && status.ok() ? grpc::Status::OK : status;
  };
  ASSERT_TRUE(init(1).ok());
  ASSERT_TRUE(load(1).ok());
  ASSERT_TRUE(step(1).ok());
  ASSERT_TRUE(init(2).ok());  // a new group: the model is dropped
  EXPECT_FALSE(h.serving);
  EXPECT_EQ(step(2).error_code(), grpc::StatusCode::FAILED_PRECONDITION);  // before LoadWeights
  grpc::Status old_load = load(1);
  EXPECT_EQ(old_load.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(old_load.error_message().find("group epoch 1"), std::string::npos)
      << old_load.error_message();
  EXPECT_NE(old_load.error_message().find("group epoch 2"), std::string::npos)
      << old_load.error_message();
  ASSERT_TRUE(load(2).ok());
  EXPECT_TRUE(h.serving);
  EXPECT_TRUE(step(2).ok());
  const grpc::Status old_step = step(1);
  EXPECT_EQ(old_step.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(old_step.error_message().find("fenced"), std::string::npos)
      << old_step.error_message();
  const grpc::Status old_init = init(1);
  EXPECT_EQ(old_init.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(old_init.error_message().find("group epoch 2"), std::string::npos)
      << old_init.error_message();
  EXPECT_TRUE(step(2).ok());  // the current epoch still runs
  v1::PrepareExpertMapRequest prepare;
  prepare.set_coordinator_epoch(kEpoch);
  prepare.set_group_epoch(1);
  grpc::ClientContext context;
  v1::PrepareExpertMapResponse prepared;
  EXPECT_EQ(h.stub->PrepareExpertMap(&context, prepare, &prepared).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

// Two ranks over UCX in this process (a collective timeout of an hour: only
// an abort ends a wait for a peer within a test).
struct TwoRanks {
  std::unique_ptr<Harness> ranks[2];

  TwoRanks() {
    WorkerOptions options;
    options.collective_timeout = absl::Hours(1);
    for (int r = 0; r < 2; ++r) ranks[r] = std::make_unique<Harness>(r, options);
  }

  grpc::Status Init(int rank, uint64_t group_epoch, v1::InitResponse& response) {
    v1::InitRequest request;
    request.set_coordinator_epoch(kEpoch);
    request.set_group_epoch(group_epoch);
    request.set_rank(rank);
    request.mutable_layout()->set_world_size(2);
    for (int r = 0; r < 2; ++r) {
      v1::PeerInfo* peer = request.add_peers();
      peer->set_rank(r);
      peer->set_address(ranks[r]->server.address);
    }
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(120)));
    return ranks[rank]->stub->Init(&context, request, &response);
  }

  // Init of both ranks at `group_epoch`, then LoadWeights of both at once
  // (connecting is collective).
  void BringUp(uint64_t group_epoch) {
    v1::InitResponse inits[2];
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(Init(r, group_epoch, inits[r]).ok()) << r;
    v1::LoadWeightsRequest request;
    request.set_coordinator_epoch(kEpoch);
    request.set_group_epoch(group_epoch);
    request.set_model_dir(TinyModelDir());
    for (int r = 0; r < 2; ++r) {
      v1::PeerInfo* peer = request.add_peers();
      peer->set_rank(r);
      peer->set_address(ranks[r]->server.address);
      peer->set_tensor_address(inits[r].tensor_address());
      peer->set_staging_address(inits[r].staging_address());
    }
    grpc::Status loaded[2];
    std::vector<std::thread> calls;
    for (int r = 0; r < 2; ++r) {
      calls.emplace_back([&, r] {
        grpc::ClientContext context;
        context.set_deadline(DeadlineIn(std::chrono::seconds(300)));
        v1::LoadWeightsResponse response;
        loaded[r] = ranks[r]->stub->LoadWeights(&context, request, &response);
      });
    }
    for (std::thread& call : calls) call.join();
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(loaded[r].ok()) << r << ": " << loaded[r].error_message();
  }
};

// A plan of `group_epoch` with one prefill row: its forward runs the MoE
// exchange with the other rank.
v1::StepPlan PrefillPlan(uint64_t group_epoch, uint64_t step_id) {
  v1::StepPlan plan;
  plan.set_coordinator_epoch(kEpoch);
  plan.set_group_epoch(group_epoch);
  plan.set_step_id(step_id);
  v1::StepRow* row = plan.add_rows();
  row->set_seq_slot(0);
  for (int t = 0; t < 4; ++t) row->add_input_tokens(5 + t);
  row->add_new_blocks(0);
  row->set_sample(true);
  row->mutable_sampling()->set_temperature(0.0f);
  return plan;
}

// What rank 0's old stream ended with: the error of the step it answered
// (if it answered one) and the stream's status.
struct StreamEnd {
  grpc::Status status;
  std::optional<v1::ErrorStatus> step_error;
};
StreamEnd DrainStream(grpc::ClientReaderWriter<v1::StepPlan, v1::StepResult>& stream) {
  StreamEnd end;
  v1::StepResult result;
  while (stream.Read(&result)) end.step_error = result.error();
  end.status = stream.Finish();
  return end;
}

// Rank 0 runs a step that rank 1 never joins, so its MoE exchange waits for
// rank 1 (for the hour of the collective timeout). An Init at a newer group
// epoch ends that wait, as a survivor of a lost peer needs: the group's
// communicators are aborted and its Steps stream cancelled, so Init returns
// (well within the test's deadline), and the new group loads and steps.
TEST(WorkerServiceTest, NewerGroupEpochInitEndsACollectiveBlockedOnALostPeer) {
  TwoRanks group;
  group.BringUp(1);
  Harness& survivor = *group.ranks[0];
  grpc::ClientContext steps_context;
  auto stream = survivor.stub->Steps(&steps_context);
  ASSERT_TRUE(stream->Write(PrefillPlan(1, 0)));
  // Most likely inside the exchange by then; the Init below must work either way.
  absl::SleepFor(absl::Seconds(1));
  v1::InitResponse init;
  const grpc::Status newer = group.Init(0, 2, init);
  ASSERT_TRUE(newer.ok()) << newer.error_message();
  const StreamEnd end = DrainStream(*stream);
  EXPECT_FALSE(end.status.ok());
  if (end.step_error.has_value()) {  // the step was in its exchange: ABORTED
    EXPECT_EQ(end.step_error->code(), grpc::StatusCode::ABORTED) << end.step_error->message();
    EXPECT_NE(end.step_error->message().find("group epoch 2 replaces 1"), std::string::npos)
        << end.step_error->message();
  }
  EXPECT_FALSE(survivor.serving);
  // The group of epoch 2 (rank 1 re-initialised too) loads and steps.
  group.BringUp(2);
  std::vector<std::thread> steps;
  v1::StepResult results[2];
  bool answered[2] = {false, false};
  for (int r = 0; r < 2; ++r) {
    steps.emplace_back([&, r] {
      grpc::ClientContext context;
      context.set_deadline(DeadlineIn(std::chrono::seconds(120)));
      auto s = group.ranks[r]->stub->Steps(&context);
      answered[r] = s->Write(PrefillPlan(2, 0)) && s->Read(&results[r]);
      s->WritesDone();
      s->Finish();
    });
  }
  for (std::thread& t : steps) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(answered[r]) << r;
    EXPECT_EQ(results[r].error().code(), 0) << r << ": " << results[r].error().message();
    ASSERT_EQ(results[r].rows_size(), 1) << r;
    EXPECT_EQ(results[r].rows(0).tokens_size(), 1) << r;
  }
}

// Fence (the worker learned it was replaced): a step blocked in an exchange
// returns, the stream ends, health is NOT_SERVING, and every later call is
// refused naming the reason.
TEST(WorkerServiceTest, FenceEndsTheBlockedStreamAndRefusesEverything) {
  TwoRanks group;
  group.BringUp(1);
  Harness& stale = *group.ranks[1];
  grpc::ClientContext steps_context;
  auto stream = stale.stub->Steps(&steps_context);
  ASSERT_TRUE(stream->Write(PrefillPlan(1, 0)));
  absl::SleepFor(absl::Seconds(1));
  EXPECT_TRUE(stale.serving);
  stale.service.Fence("rank 1 is held by the worker at 10.0.0.9:5000");
  const StreamEnd end = DrainStream(*stream);
  EXPECT_FALSE(end.status.ok());
  if (end.step_error.has_value()) {
    EXPECT_EQ(end.step_error->code(), grpc::StatusCode::ABORTED) << end.step_error->message();
  }
  EXPECT_FALSE(stale.serving);
  v1::InitResponse init;
  const grpc::Status refused = group.Init(1, 2, init);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("fenced off: rank 1 is held by the worker at"),
            std::string::npos)
      << refused.error_message();
}

TEST(WorkerServiceTest, StepsRunInOrderAndRefuseGaps) {
  Harness h(0);
  ASSERT_TRUE(h.Init(0, 1).ok());
  v1::LoadWeightsResponse loaded;
  ASSERT_TRUE(h.Load(TinyModelDir(), &loaded).ok());
  grpc::ClientContext context;
  auto stream = h.stub->Steps(&context);
  v1::StepResult result;
  for (uint64_t step = 0; step < 3; ++step) {
    v1::StepPlan plan;
    plan.set_coordinator_epoch(kEpoch);
    plan.set_step_id(step);
    plan.set_type(v1::STEP_TYPE_DECODE);
    if (step >= 1) {
      v1::StepRow* row = plan.add_rows();
      row->set_seq_slot(0);
      row->set_start_pos(step == 1 ? 0 : 3);
      if (step == 1) {
        for (uint32_t t : {5u, 6u, 7u}) row->add_input_tokens(t);
        row->add_new_blocks(0);  // 64 positions a block: enough for both steps
      } else {
        row->set_remap(0);  // The token step 1 sampled.
      }
      row->set_sample(true);
      row->mutable_sampling()->set_temperature(0.0f);
    }
    ASSERT_TRUE(stream->Write(plan));
    ASSERT_TRUE(stream->Read(&result));
    EXPECT_EQ(result.step_id(), step);
    EXPECT_EQ(result.error().code(), 0) << result.error().message();
    EXPECT_EQ(result.rows_size(), step >= 1 ? 1 : 0);
    if (step >= 1) {
      EXPECT_EQ(result.rows(0).tokens_size(), 1);
    }
  }
  // Expert load on demand: [layers, experts] counts of the rows so far, then reset.
  v1::StepPlan load_plan;
  load_plan.set_coordinator_epoch(kEpoch);
  load_plan.set_step_id(3);
  load_plan.set_return_expert_load(true);
  ASSERT_TRUE(stream->Write(load_plan));
  ASSERT_TRUE(stream->Read(&result));
  ASSERT_GT(result.expert_load_size(), 0);
  uint64_t routed = 0;
  for (uint64_t c : result.expert_load()) routed += c;
  // 4 tokens (3 prompt + 1 decode) x top-k experts x layers, all counted once.
  EXPECT_GT(routed, 0u);
  EXPECT_EQ(routed % 4, 0u);
  load_plan.set_step_id(4);
  ASSERT_TRUE(stream->Write(load_plan));
  ASSERT_TRUE(stream->Read(&result));
  uint64_t after = 0;
  for (uint64_t c : result.expert_load()) after += c;
  EXPECT_EQ(after, 0u);  // Reset by the previous report.

  // A bad row (slot out of range) is that row's error, not the step's; the
  // stream goes on.
  v1::StepPlan bad;
  bad.set_coordinator_epoch(kEpoch);
  bad.set_step_id(5);
  bad.add_rows()->set_seq_slot(100000);
  ASSERT_TRUE(stream->Write(bad));
  ASSERT_TRUE(stream->Read(&result));
  EXPECT_EQ(result.error().code(), 0) << result.error().message();
  ASSERT_EQ(result.rows_size(), 1);
  EXPECT_EQ(result.rows(0).error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::StepPlan gap;
  gap.set_coordinator_epoch(kEpoch);
  gap.set_step_id(9);
  ASSERT_TRUE(stream->Write(gap));
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&result));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(WorkerServiceTest, ExpertMapPrepareCommitIsVersioned) {
  Harness h(0);
  ASSERT_TRUE(h.Init(0, 1).ok());
  v1::LoadWeightsResponse loaded;
  ASSERT_TRUE(h.Load(TinyModelDir(), &loaded).ok());
  // An empty map is malformed; a commit of a version never prepared is refused.
  v1::PrepareExpertMapRequest prepare;
  prepare.set_coordinator_epoch(kEpoch);
  prepare.mutable_map()->set_version(1);
  grpc::ClientContext c1;
  v1::PrepareExpertMapResponse prepared;
  EXPECT_EQ(h.stub->PrepareExpertMap(&c1, prepare, &prepared).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext c2;
  v1::CommitExpertMapRequest commit;
  commit.set_version(1);
  v1::CommitExpertMapResponse committed;
  EXPECT_EQ(h.stub->CommitExpertMap(&c2, commit, &committed).error_code(),
            grpc::StatusCode::ABORTED);
}

// The tiny model's expert map of one rank, version `version`, experts reversed.
v1::ExpertMap ReversedMap(uint64_t version) {
  v1::ExpertMap map;
  map.set_version(version);
  map.set_num_layers(12);
  map.set_num_logical(8);
  map.set_num_physical(8);
  map.set_slots_per_rank(8);
  for (int l = 0; l < 12; ++l) {
    for (int p = 0; p < 8; ++p) map.add_physical_to_logical(7 - p);
  }
  return map;
}

TEST(WorkerServiceTest, StepCommitsOnlyAPreparedMapAndRefusesAfterAMiss) {
  Harness h(0);
  ASSERT_TRUE(h.Init(0, 1).ok());
  v1::LoadWeightsResponse loaded;
  ASSERT_TRUE(h.Load(TinyModelDir(), &loaded).ok());
  v1::PrepareExpertMapRequest prepare;
  prepare.set_coordinator_epoch(kEpoch);
  *prepare.mutable_map() = ReversedMap(1);
  grpc::ClientContext c1;
  v1::PrepareExpertMapResponse prepared;
  ASSERT_TRUE(h.stub->PrepareExpertMap(&c1, prepare, &prepared).ok());
  EXPECT_EQ(prepared.prepared_version(), 1u);

  grpc::ClientContext context;
  auto stream = h.stub->Steps(&context);
  v1::StepResult result;
  auto step = [&](uint64_t id, uint64_t commit_version) {
    v1::StepPlan plan;
    plan.set_coordinator_epoch(kEpoch);
    plan.set_step_id(id);
    plan.set_commit_expert_map(commit_version);
    v1::StepRow* row = plan.add_rows();
    row->set_seq_slot(static_cast<int>(id));
    row->add_new_blocks(static_cast<int>(id));
    for (uint32_t t : {5u, 6u, 7u}) row->add_input_tokens(t);
    row->set_sample(true);
    row->mutable_sampling()->set_temperature(0.0f);
    EXPECT_TRUE(stream->Write(plan));
    EXPECT_TRUE(stream->Read(&result));
  };
  step(0, 0);  // the stream is open (its handler runs) once a step came back
  EXPECT_EQ(result.error().code(), 0) << result.error().message();
  EXPECT_EQ(result.expert_map_version(), 0u);
  // With a stream open, commits ride on the plans only.
  grpc::ClientContext c2;
  v1::CommitExpertMapRequest commit;
  commit.set_version(1);
  v1::CommitExpertMapResponse committed;
  EXPECT_EQ(h.stub->CommitExpertMap(&c2, commit, &committed).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  step(1, 1);  // the prepared map: switched before the step runs
  EXPECT_EQ(result.error().code(), 0) << result.error().message();
  EXPECT_EQ(result.expert_map_version(), 1u);
  step(2, 1);  // the committed version again: a no-op
  EXPECT_EQ(result.error().code(), 0) << result.error().message();
  EXPECT_EQ(result.expert_map_version(), 1u);
  step(3, 2);  // never prepared: this step fails...
  EXPECT_EQ(result.error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(result.error().message().find("expert map 2"), std::string::npos)
      << result.error().message();
  step(4, 0);  // ...and so does every later one
  EXPECT_EQ(result.error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(WorkerServiceTest, LoadReportsTheKvPoolAndStepsUseItsBlocks) {
  // 4 slots and a budget of the slots plus 10 blocks of 16 positions.
  WorkerOptions options{.max_slots = 4};
  Harness probe(0, options);
  ASSERT_TRUE(probe.Init(0, 1).ok());
  v1::LoadWeightsResponse defaults;
  ASSERT_TRUE(probe.Load(TinyModelDir(), &defaults).ok());
  const v1::KvCacheInfo& d = defaults.kv_cache();
  EXPECT_EQ(d.block_tokens(), 64u);  // the worker's default
  EXPECT_EQ(std::vector<uint32_t>(d.compress_ratios().begin(), d.compress_ratios().end()),
            (std::vector<uint32_t>{2, 2, 1}));
  EXPECT_EQ(d.num_seq_slots(), 4u);
  // Packed entries (stored form): KV 64 + 8 bytes, index keys 32 + 2.
  EXPECT_EQ(d.block_bytes(), (32u + 32u + 64u) * (72u + 34u));
  EXPECT_EQ(d.num_blocks(), (options.kv_cache_bytes - 4 * d.slot_bytes()) / d.block_bytes());

  const uint64_t block16 = d.block_bytes() / 4;
  options.kv_cache_bytes = static_cast<int64_t>(4 * d.slot_bytes() + 10 * block16 + 100);
  Harness h(0, options);
  ASSERT_TRUE(h.Init(0, 1).ok());
  v1::LoadWeightsResponse loaded;
  EXPECT_EQ(h.Load(TinyModelDir(), &loaded, /*kv_block_tokens=*/3).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // ratio 2 does not divide 3
  ASSERT_TRUE(h.Load(TinyModelDir(), &loaded, 16).ok());
  EXPECT_EQ(loaded.kv_cache().block_tokens(), 16u);
  EXPECT_EQ(loaded.kv_cache().num_blocks(), 10u);
  // A budget that does not hold the slots and a block is refused.
  WorkerOptions tight{.max_slots = 4, .kv_cache_bytes = 1000};
  Harness small(0, tight);
  ASSERT_TRUE(small.Init(0, 1).ok());
  v1::LoadWeightsResponse refused;
  EXPECT_EQ(small.Load(TinyModelDir(), &refused).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);

  grpc::ClientContext context;
  auto stream = h.stub->Steps(&context);
  v1::StepResult result;
  auto step = [&](uint64_t id, int slot, int positions, std::vector<int> blocks) {
    v1::StepPlan plan;
    plan.set_coordinator_epoch(kEpoch);
    plan.set_step_id(id);
    v1::StepRow* row = plan.add_rows();
    row->set_seq_slot(slot);
    for (int t = 0; t < positions; ++t) row->add_input_tokens(5 + t);
    for (int b : blocks) row->add_new_blocks(b);
    row->set_sample(true);
    row->mutable_sampling()->set_temperature(0.0f);
    EXPECT_TRUE(stream->Write(plan));
    EXPECT_TRUE(stream->Read(&result));
  };
  step(0, 0, 20, {3, 7});  // 20 positions: two blocks of 16
  EXPECT_EQ(result.error().code(), 0) << result.error().message();
  // A row with bad blocks fails alone (its row error), the step goes on.
  auto row_error = [&result]() -> v1::ErrorStatus {
    EXPECT_EQ(result.error().code(), 0) << result.error().message();
    EXPECT_EQ(result.rows_size(), 1);
    return result.rows_size() == 1 ? result.rows(0).error() : v1::ErrorStatus();
  };
  step(1, 1, 20, {9});  // one block short
  EXPECT_EQ(row_error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(row_error().message().find("need 2 KV blocks"), std::string::npos)
      << row_error().message();
  step(2, 1, 4, {10});  // a block outside the pool of 10
  EXPECT_EQ(row_error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  step(3, 1, 4, {7});  // slot 0 holds block 7
  EXPECT_EQ(row_error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(row_error().message().find("still held by slot 0"), std::string::npos)
      << row_error().message();
  step(4, 1, 4, {9});
  EXPECT_EQ(result.error().code(), 0) << result.error().message();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(WorkerServiceTest, ShutdownStopsOnce) {
  Harness h(0);
  grpc::ClientContext context;
  v1::ShutdownRequest request;
  request.set_reason("test over");
  v1::ShutdownResponse response;
  ASSERT_TRUE(h.stub->Shutdown(&context, request, &response).ok());
  EXPECT_EQ(h.stop_reason, "test over");
}

}  // namespace
}  // namespace weir::worker
