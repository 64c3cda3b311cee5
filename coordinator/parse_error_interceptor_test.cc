#include "coordinator/parse_error_interceptor.h"

#include "base/grpc_util.h"
#include "coordinator/inference_service.h"
#include "gtest/gtest.h"
#include "proto/google_rpc.pb.h"

namespace weir::coordinator {
namespace {

ModelSummary Summary() {
  ModelSummary m;
  m.name = "tiny";
  m.vocab_size = 4096;
  m.max_context_tokens = 8192;
  m.eos_token_ids = {1};
  return m;
}

// A coordinator's public server (no driver, no tokenizer), with or without
// the interceptor.
struct Server {
  explicit Server(bool intercept) : cluster(1), service(Summary(), cluster, ApiLimits{}) {
    ServerOptions options{.address = "127.0.0.1:0"};
    if (intercept) {
      options.configure = [](grpc::ServerBuilder& builder) {
        std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
        f.push_back(MakeParseErrorInterceptorFactory());
        builder.experimental().SetInterceptorCreators(std::move(f));
      };
    }
    absl::StatusOr<StartedServer> started = StartServer(options, {&service});
    EXPECT_TRUE(started.ok()) << started.status();
    server = std::move(started->server);
    stub = v1::Inference::NewStub(MakeChannel(started->address));
  }
  ~Server() { server->Shutdown(); }

  ClusterState cluster;
  InferenceService service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Inference::Stub> stub;
};

google::rpc::ErrorInfo Info(const grpc::Status& status) {
  google::rpc::Status rpc;
  google::rpc::ErrorInfo info;
  EXPECT_TRUE(rpc.ParseFromString(status.error_details()));
  for (const auto& any : rpc.details()) {
    if (any.type_url() == "type.googleapis.com/google.rpc.ErrorInfo") {
      EXPECT_TRUE(info.ParseFromString(any.value()));
    }
  }
  return info;
}

TEST(ParseErrorInterceptorTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  Server server(/*intercept=*/true);
  // The C++ client serializes invalid UTF-8 anyway (it only logs), like a
  // client whose proto says `bytes`.
  v1::TokenizeRequest tokenize;
  tokenize.set_text("caf\xc3");
  v1::TokenizeResponse tokens;
  grpc::ClientContext c1;
  grpc::Status status = server.stub->Tokenize(&c1, tokenize, &tokens);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("invalid UTF-8 in weir.v1.TokenizeRequest.text"),
            std::string::npos)
      << status.error_message();
  google::rpc::ErrorInfo info = Info(status);
  EXPECT_EQ(info.reason(), "INVALID_UTF8");
  EXPECT_EQ(info.metadata().at("field"), "weir.v1.TokenizeRequest.text");

  // A server-streaming call, and a nested field.
  v1::GenerateRequest generate;
  v1::ChatMessage* message = generate.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("\xff\xfe");
  grpc::ClientContext c2;
  auto reader = server.stub->Generate(&c2, generate);
  v1::GenerateEvent event;
  EXPECT_FALSE(reader->Read(&event));
  status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("weir.v1.ChatMessage.content"), std::string::npos)
      << status.error_message();

  // A valid request goes on as before (no driver: UNAVAILABLE).
  generate.mutable_chat()->mutable_messages(0)->set_content("fine");
  grpc::ClientContext c3;
  auto ok_reader = server.stub->Generate(&c3, generate);
  EXPECT_FALSE(ok_reader->Read(&event));
  EXPECT_EQ(ok_reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(ParseErrorInterceptorTest, WithoutItGrpcAnswersUnimplemented) {
  // What the interceptor fixes: gRPC's own answer to a callback handler's
  // request that does not parse, UNIMPLEMENTED with no message (a
  // synchronous handler's is INTERNAL).
  Server server(/*intercept=*/false);
  v1::TokenizeRequest tokenize;
  tokenize.set_text("\xff");
  v1::TokenizeResponse tokens;
  grpc::ClientContext context;
  grpc::Status status = server.stub->Tokenize(&context, tokenize, &tokens);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  TakeUtf8ErrorField();
}

}  // namespace
}  // namespace weir::coordinator
