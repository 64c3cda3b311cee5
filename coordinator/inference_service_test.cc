#include "coordinator/inference_service.h"

#include <cstdlib>
#include <fstream>

#include "base/grpc_util.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server.h"
#include "gtest/gtest.h"
#include "proto/google_rpc.pb.h"

namespace weir::coordinator {
namespace {

// `service` on a local port, called through a stub (the callback handlers
// run as in production).
class Served {
 public:
  explicit Served(InferenceService& service) {
    absl::StatusOr<StartedServer> started =
        StartServer({.address = "127.0.0.1:0"}, {&service});
    EXPECT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
    stub_ = v1::Inference::NewStub(MakeChannel(server_.address));
  }
  ~Served() { server_.server->Shutdown(DeadlineIn(std::chrono::seconds(5))); }

  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (v1::Inference::Stub::*method)(grpc::ClientContext*,
                                                                const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(30)));
    response->Clear();
    return ((*stub_).*method)(&context, request, response);
  }

  // Generate's final status (events are dropped).
  grpc::Status Generate(const v1::GenerateRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(30)));
    auto reader = stub_->Generate(&context, request);
    v1::GenerateEvent event;
    while (reader->Read(&event)) {
    }
    return reader->Finish();
  }

 private:
  StartedServer server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

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
  v1::GetModelInfoRequest request;
  v1::ModelInfo info;
  ASSERT_TRUE(Served(service).Call(&v1::Inference::Stub::GetModelInfo, request, &info).ok());
  EXPECT_EQ(info.name(), "tiny");
  EXPECT_EQ(info.vocab_size(), 4096u);
  EXPECT_EQ(info.max_context_tokens(), 8192u);
  EXPECT_EQ(info.bos_token_id(), 0u);
  ASSERT_EQ(info.eos_token_ids_size(), 1);
  EXPECT_EQ(info.parallelism().ep(), 4u);
  EXPECT_EQ(info.parallelism().num_experts(), 16u);
  EXPECT_GT(info.features().max_request_bytes(), 0u);

  request.set_model("other");
  EXPECT_EQ(Served(service).Call(&v1::Inference::Stub::GetModelInfo, request, &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(InferenceServiceTest, AdvertisedLimitsAreTheEnforcedOnes) {
  ClusterState cluster(1);
  InferenceService service(TinySummary(), cluster, ApiLimits{});
  v1::GetModelInfoRequest request;
  v1::ModelInfo info;
  ASSERT_TRUE(Served(service).Call(&v1::Inference::Stub::GetModelInfo, request, &info).ok());
  // One position of the 8192 is left for the first generated token.
  EXPECT_EQ(info.max_prompt_tokens(), 8191u);
  EXPECT_EQ(info.max_prompt_tokens(), MaxPromptTokens(info.max_context_tokens()));
  EXPECT_EQ(info.max_new_tokens_limit(), MaxNewTokensLimit(info.max_context_tokens()));
  EXPECT_EQ(info.features().max_labels(), 16u);
}

TEST(InferenceServiceTest, NotReadyCarriesARetryHint) {
  ClusterState cluster(1);
  InferenceService service(TinySummary(), cluster, ApiLimits{});
  v1::GenerateRequest request;
  grpc::Status status = Served(service).Generate(request);
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
  v1::GetServerStateRequest request;
  v1::ServerState state;
  ASSERT_TRUE(Served(service).Call(&v1::Inference::Stub::GetServerState, request, &state).ok());
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_READY);
  ASSERT_EQ(state.workers_size(), 2);
  EXPECT_EQ(state.workers(1).pid(), 42);
  EXPECT_EQ(state.per_group(0).state(), v1::LIFECYCLE_READY);

  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(1), WorkerStatus::kDead, "killed by signal 9").ok());
  state.Clear();
  ASSERT_TRUE(Served(service).Call(&v1::Inference::Stub::GetServerState, request, &state).ok());
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_DEGRADED);
  EXPECT_EQ(state.workers(1).state(), v1::WORKER_STATE_DEAD);
  EXPECT_EQ(state.workers(1).detail(), "killed by signal 9");
  EXPECT_EQ(state.per_group(0).state(), v1::LIFECYCLE_DEGRADED);
}

TEST(InferenceServiceTest, GenerateIsUnavailableUntilTheWorkersAreReady) {
  ClusterState cluster(1);
  InferenceService service(TinySummary(), cluster, ApiLimits{});
  v1::GenerateRequest request;
  grpc::Status status = Served(service).Generate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

std::unique_ptr<tokenizer::Tokenizer> TinyTokenizer() {
  const std::string dir = std::string(std::getenv("TEST_SRCDIR")) + "/weir/models/random/tiny/";
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
  v1::TokenizeRequest request;
  v1::TokenizeResponse response;
  request.set_text("hello world, hello weir");
  request.set_return_pieces(true);
  ASSERT_TRUE(Served(service).Call(&v1::Inference::Stub::Tokenize, request, &response).ok());
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
  ASSERT_TRUE(Served(service).Call(&v1::Inference::Stub::Tokenize, chat, &chat_ids).ok());
  EXPECT_GT(chat_ids.count(), 2u);  // BOS, role tokens, text.

  user->set_role("wizard");
  EXPECT_EQ(Served(service).Call(&v1::Inference::Stub::Tokenize, chat, &chat_ids).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  (*chat.mutable_chat()->mutable_template_kwargs())["rm -rf"] = "1";
  user->set_role("user");
  EXPECT_EQ(Served(service).Call(&v1::Inference::Stub::Tokenize, chat, &chat_ids).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::TokenizeRequest empty;
  EXPECT_EQ(Served(service).Call(&v1::Inference::Stub::Tokenize, empty, &chat_ids).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  InferenceService no_tokenizer(TinySummary(), cluster, ApiLimits{});
  EXPECT_EQ(Served(no_tokenizer)
                .Call(&v1::Inference::Stub::Tokenize, request, &response)
                .error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(InferenceServiceTest, CancelValidatesAndReportsUnknownIds) {
  ClusterState cluster(1);
  ApiLimits limits;
  limits.max_cancel_ids = 3;
  InferenceService service(TinySummary(), cluster, limits);
  v1::CancelRequest request;
  v1::CancelResponse response;
  EXPECT_EQ(Served(service).Call(&v1::Inference::Stub::Cancel, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  request.add_request_ids("a");
  request.add_request_ids("a");
  request.add_request_ids("b");
  ASSERT_TRUE(Served(service).Call(&v1::Inference::Stub::Cancel, request, &response).ok());
  ASSERT_EQ(response.results_size(), 2);  // Duplicates answered once.
  EXPECT_EQ(response.results(0).outcome(), v1::CancelResponse::OUTCOME_NOT_FOUND);
  for (int i = 0; i < 4; ++i) request.add_request_ids("x" + std::to_string(i));
  EXPECT_EQ(Served(service).Call(&v1::Inference::Stub::Cancel, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace weir::coordinator
