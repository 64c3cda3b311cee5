#include "coordinator/api_key_interceptor.h"

#include <atomic>
#include <mutex>

#include "base/api_key.h"
#include "base/grpc_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/inference.grpc.pb.h"

namespace weir::coordinator {
namespace {

const ApiKeyPolicy kPolicy{.api_key = "sekrit", .open_health = true};

TEST(ApiKeyTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("Bearer k", "Bearer k"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer ", "Bearer k"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer kk", "Bearer k"));
  EXPECT_TRUE(BearerMatches("Bearer k", "k"));
  EXPECT_FALSE(BearerMatches("k", "k"));
  EXPECT_FALSE(BearerMatches("Bearer ", ""));
}

TEST(ApiKeyInterceptorTest, WhichMethodsNeedTheKey) {
  EXPECT_TRUE(MethodNeedsApiKey("/weir.v1.Inference/Generate", kPolicy));
  EXPECT_TRUE(MethodNeedsApiKey("/weir.v1.Inference/GetModelInfo", kPolicy));
  EXPECT_TRUE(MethodNeedsApiKey("/weir.v1.BatchJobs/CreateBatchJob", kPolicy));
  EXPECT_TRUE(
      MethodNeedsApiKey("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", kPolicy));
  EXPECT_TRUE(MethodNeedsApiKey("/some.Unknown/Method", kPolicy));  // closed by default
  // Internal control plane and (open) health.
  EXPECT_FALSE(MethodNeedsApiKey("/weir.v1.Coordinator/Register", kPolicy));
  EXPECT_FALSE(MethodNeedsApiKey("/weir.v1.Coordinator/CommitExpertMap", kPolicy));
  EXPECT_FALSE(MethodNeedsApiKey("/weir.v1.Coordinator/GetPlacement", kPolicy));
  EXPECT_FALSE(MethodNeedsApiKey("/grpc.health.v1.Health/Check", kPolicy));
  EXPECT_FALSE(MethodNeedsApiKey("/grpc.health.v1.Health/Watch", kPolicy));
  const ApiKeyPolicy closed_health{.api_key = "sekrit", .open_health = false};
  EXPECT_TRUE(MethodNeedsApiKey("/grpc.health.v1.Health/Check", closed_health));
  EXPECT_FALSE(MethodNeedsApiKey("/weir.v1.Coordinator/Register", closed_health));
  // No key configured: everything is open.
  EXPECT_FALSE(MethodNeedsApiKey("/weir.v1.Inference/Generate", ApiKeyPolicy{}));
}

TEST(ApiKeyInterceptorTest, KeyDecisions) {
  const std::string method = "/weir.v1.Inference/Generate";
  absl::Status missing = CheckApiKey(method, {}, kPolicy);
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(missing.message().find("missing API key"), std::string_view::npos) << missing;
  EXPECT_NE(missing.message().find("authorization: Bearer <key>"), std::string_view::npos);
  absl::Status wrong = CheckApiKey(method, {"Bearer wrong"}, kPolicy);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(wrong.message().find("incorrect API key"), std::string_view::npos) << wrong;
  EXPECT_EQ(CheckApiKey(method, {"sekrit"}, kPolicy).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckApiKey(method, {"Bearer sekri"}, kPolicy).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(CheckApiKey(method, {"Bearer sekrit"}, kPolicy).ok());
  EXPECT_TRUE(CheckApiKey(method, {"Bearer wrong", "Bearer sekrit"}, kPolicy).ok());
  EXPECT_TRUE(CheckApiKey("/weir.v1.Coordinator/Register", {}, kPolicy).ok());
  EXPECT_TRUE(CheckApiKey("/grpc.health.v1.Health/Check", {}, kPolicy).ok());
}

// A fake Inference service that records what its Cancel handler saw.
class FakeInference final : public v1::Inference::Service {
 public:
  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelRequest* request,
                      v1::CancelResponse*) override {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.push_back(request->request_ids_size() > 0 ? request->request_ids(0) : "");
    return grpc::Status::OK;
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> seen_;
};

struct Served {
  FakeInference service;
  StartedServer server;
};

std::unique_ptr<Served> Serve(ApiKeyPolicy policy) {
  auto served = std::make_unique<Served>();
  absl::StatusOr<StartedServer> server = StartServer(
      {.address = "127.0.0.1:0",
       .configure =
           [policy](grpc::ServerBuilder& builder) {
             std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
                 interceptors;
             interceptors.push_back(MakeApiKeyInterceptorFactory(policy));
             builder.experimental().SetInterceptorCreators(std::move(interceptors));
           }},
      {&served->service});
  EXPECT_TRUE(server.ok()) << server.status();
  served->server = std::move(*server);
  return served;
}

grpc::Status CallCancel(grpc::Channel& channel, const std::string& authorization) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  v1::CancelRequest request;
  request.add_request_ids("r1");
  v1::CancelResponse response;
  return v1::Inference::NewStub(channel.shared_from_this())->Cancel(&context, request, &response);
}

TEST(ApiKeyInterceptorTest, ServerRefusesWithoutTheKeyAndTheHandlerDoesNothing) {
  std::unique_ptr<Served> s = Serve(kPolicy);
  std::shared_ptr<grpc::Channel> channel = MakeChannel(s->server.address);
  grpc::Status none = CallCancel(*channel, "");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("missing API key"), std::string::npos)
      << none.error_message();
  EXPECT_EQ(CallCancel(*channel, "Bearer wrong").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(CallCancel(*channel, "Bearer sekrit").ok());
  // Health stays open.
  absl::StatusOr<std::string> health = CheckHealth(*channel, "", std::chrono::seconds(5));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
  // The refused calls' handlers (if they ran at all) saw an empty request.
  s->server.server->Shutdown(DeadlineIn(std::chrono::seconds(2)));
  for (const std::string& id : s->service.seen()) {
    if (id != "r1") {
      EXPECT_EQ(id, "");
    }
  }
  std::vector<std::string> seen = s->service.seen();
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "r1"), 1);
}

TEST(ApiKeyInterceptorTest, ClosedHealthAndTheInProcessClientInterceptor) {
  std::unique_ptr<Served> s = Serve({.api_key = "sekrit", .open_health = false});
  std::shared_ptr<grpc::Channel> channel = MakeChannel(s->server.address);
  absl::StatusOr<std::string> health = CheckHealth(*channel, "", std::chrono::seconds(5));
  EXPECT_FALSE(health.ok());
  // The in-process channel with the client interceptor carries the key.
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> creators;
  creators.push_back(MakeApiKeyClientInterceptorFactory("sekrit"));
  std::shared_ptr<grpc::Channel> keyed = s->server.server->experimental().InProcessChannelWithInterceptors(
      grpc::ChannelArguments(), std::move(creators));
  EXPECT_TRUE(CallCancel(*keyed, "").ok());
  EXPECT_TRUE(CallCancel(*keyed, "Bearer sekrit").ok());
  health = CheckHealth(*keyed, "", std::chrono::seconds(5));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
}

}  // namespace
}  // namespace weir::coordinator
