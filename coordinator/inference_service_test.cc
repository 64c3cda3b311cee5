#include "coordinator/inference_service.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"
#include "proto/google_rpc.pb.h"

namespace weir::coordinator {
namespace {

ModelSummary TinySummary() {
  ModelSummary m;
  m.name = "tiny";
  m.revision = "0123456789abcdef";
  m.vocab_size = 4096;
  m.max_context_tokens = 8192;
  m.num_layers = 8;
  m.num_routed_experts = 16;
  m.bos_token_id = 0;
  m.eos_token_ids = {1};
  return m;
}

TEST(InferenceServiceTest, ModelInfoComesFromConfigAndLayout) {
  ClusterState cluster(4);
  InferenceService service(TinySummary(), cluster, ApiLimits{});
  grpc::ServerContext context;
  v1::GetModelInfoRequest request;
  v1::ModelInfo info;
  ASSERT_TRUE(service.GetModelInfo(&context, &request, &info).ok());
  EXPECT_EQ(info.name(), "tiny");
  EXPECT_EQ(info.vocab_size(), 4096u);
  EXPECT_EQ(info.max_context_tokens(), 8192u);
  EXPECT_EQ(info.bos_token_id(), 0u);
  ASSERT_EQ(info.eos_token_ids_size(), 1);
  EXPECT_EQ(info.parallelism().ep(), 4u);
  EXPECT_EQ(info.parallelism().num_experts(), 16u);
  EXPECT_GT(info.features().max_request_bytes(), 0u);

  request.set_model("other");
  EXPECT_EQ(service.GetModelInfo(&context, &request, &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(InferenceServiceTest, AdvertisedLimitsAreTheEnforcedOnes) {
  ClusterState cluster(1);
  InferenceService service(TinySummary(), cluster, ApiLimits{});
  grpc::ServerContext context;
  v1::GetModelInfoRequest request;
  v1::ModelInfo info;
  ASSERT_TRUE(service.GetModelInfo(&context, &request, &info).ok());
  // One position of the 8192 is left for the first generated token.
  EXPECT_EQ(info.max_prompt_tokens(), 8191u);
  EXPECT_EQ(info.max_prompt_tokens(), MaxPromptTokens(info.max_context_tokens()));
  EXPECT_EQ(info.max_new_tokens_limit(), MaxNewTokensLimit(info.max_context_tokens()));
  EXPECT_EQ(info.features().max_labels(), 16u);
}

TEST(InferenceServiceTest, NotReadyCarriesARetryHint) {
  ClusterState cluster(1);
  InferenceService service(TinySummary(), cluster, ApiLimits{});
  grpc::ServerContext context;
  v1::GenerateRequest request;
  grpc::Status status = service.Generate(&context, &request, nullptr);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(status.error_details()));
  bool retry = false, reason = false;
  for (const auto& any : details.details()) {
    retry |= any.type_url() == "type.googleapis.com/google.rpc.RetryInfo";
    google::rpc::ErrorInfo info;
    if (any.type_url() == "type.googleapis.com/google.rpc.ErrorInfo" &&
        info.ParseFromString(any.value())) {
      reason = info.reason() == "NOT_READY";
    }
  }
  EXPECT_TRUE(retry);
  EXPECT_TRUE(reason);
}

TEST(InferenceServiceTest, ServerStateReflectsWorkers) {
  ClusterState cluster(2);
  InferenceService service(TinySummary(), cluster, ApiLimits{});
  ASSERT_TRUE(cluster.RegisterWorker("127.0.0.1:7001", "h", 41, 0).ok());
  ASSERT_TRUE(cluster.RegisterWorker("127.0.0.1:7002", "h", 42, 1).ok());
  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(0), WorkerStatus::kReady, "").ok());
  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(1), WorkerStatus::kReady, "").ok());
  cluster.set_lifecycle(ClusterLifecycle::kReady);
  grpc::ServerContext context;
  v1::GetServerStateRequest request;
  v1::ServerState state;
  ASSERT_TRUE(service.GetServerState(&context, &request, &state).ok());
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_READY);
  ASSERT_EQ(state.workers_size(), 2);
  EXPECT_EQ(state.workers(1).pid(), 42);
  EXPECT_EQ(state.per_group(0).state(), v1::LIFECYCLE_READY);

  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(1), WorkerStatus::kDead, "killed by signal 9").ok());
  state.Clear();
  ASSERT_TRUE(service.GetServerState(&context, &request, &state).ok());
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_DEGRADED);
  EXPECT_EQ(state.workers(1).state(), v1::WORKER_STATE_DEAD);
  EXPECT_EQ(state.workers(1).detail(), "killed by signal 9");
  EXPECT_EQ(state.per_group(0).state(), v1::LIFECYCLE_DEGRADED);
}

TEST(InferenceServiceTest, GenerateIsUnavailableUntilTheWorkersAreReady) {
  ClusterState cluster(1);
  InferenceService service(TinySummary(), cluster, ApiLimits{});
  grpc::ServerContext context;
  v1::GenerateRequest request;
  grpc::Status status = service.Generate(&context, &request, nullptr);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

std::unique_ptr<tokenizer::Tokenizer> TinyTokenizer() {
  const std::string dir = std::string(std::getenv("TEST_SRCDIR")) + "/weir/models/tiny/";
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  auto tok = tokenizer::Tokenizer::FromJson(read(dir + "tokenizer.json"),
                                            read(dir + "tokenizer_config.json"));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(InferenceServiceTest, TokenizeTextAndChat) {
  ClusterState cluster(1);
  InferenceService service(TinySummary(), cluster, ApiLimits{}, TinyTokenizer(), "xxh64:1");
  grpc::ServerContext context;
  v1::TokenizeRequest request;
  v1::TokenizeResponse response;
  request.set_text("hello world, hello weir");
  request.set_return_pieces(true);
  ASSERT_TRUE(service.Tokenize(&context, &request, &response).ok());
  ASSERT_GT(response.count(), 0u);
  EXPECT_EQ(response.ids_size(), static_cast<int>(response.count()));
  std::string joined;
  for (const std::string& piece : response.pieces()) joined += piece;
  EXPECT_EQ(joined, "hello world, hello weir");

  v1::TokenizeRequest chat;
  v1::ChatMessage* user = chat.mutable_chat()->add_messages();
  user->set_role("user");
  user->set_content("hi");
  v1::TokenizeResponse chat_ids;
  ASSERT_TRUE(service.Tokenize(&context, &chat, &chat_ids).ok());
  EXPECT_GT(chat_ids.count(), 2u);  // BOS, role tokens, text.

  user->set_role("wizard");
  EXPECT_EQ(service.Tokenize(&context, &chat, &chat_ids).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  (*chat.mutable_chat()->mutable_template_kwargs())["rm -rf"] = "1";
  user->set_role("user");
  EXPECT_EQ(service.Tokenize(&context, &chat, &chat_ids).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::TokenizeRequest empty;
  EXPECT_EQ(service.Tokenize(&context, &empty, &chat_ids).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  InferenceService no_tokenizer(TinySummary(), cluster, ApiLimits{});
  EXPECT_EQ(no_tokenizer.Tokenize(&context, &request, &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(InferenceServiceTest, CancelValidatesAndReportsUnknownIds) {
  ClusterState cluster(1);
  ApiLimits limits;
  limits.max_cancel_ids = 3;
  InferenceService service(TinySummary(), cluster, limits);
  grpc::ServerContext context;
  v1::CancelRequest request;
  v1::CancelResponse response;
  EXPECT_EQ(service.Cancel(&context, &request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  request.add_request_ids("a");
  request.add_request_ids("a");
  request.add_request_ids("b");
  ASSERT_TRUE(service.Cancel(&context, &request, &response).ok());
  ASSERT_EQ(response.results_size(), 2);  // Duplicates answered once.
  EXPECT_EQ(response.results(0).outcome(), v1::CancelResponse::OUTCOME_NOT_FOUND);
  for (int i = 0; i < 4; ++i) request.add_request_ids("x" + std::to_string(i));
  EXPECT_EQ(service.Cancel(&context, &request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace weir::coordinator
