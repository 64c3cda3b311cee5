#include "coordinator/http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "coordinator/http/metrics_interceptor.h"

namespace weir::coordinator::http {
namespace {

// Answers Generate by its prompt text: "error:<CODE>" fails before Accepted,
// "slow" streams until cancelled, "fail_after" fails after one delta;
// anything else streams max_new_tokens deltas "t0", "t1", ... then a Final.
class FakeInference final : public v1::Inference::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateEvent>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      last_ = *request;
    }
    const std::string text =
        request->has_chat() ? request->chat().messages(0).content() : request->text();
    if (absl::StartsWith(text, "error:")) {
      grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
      if (text == "error:RESOURCE_EXHAUSTED") code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      if (text == "error:UNAVAILABLE") code = grpc::StatusCode::UNAVAILABLE;
      if (text == "error:INVALID_ARGUMENT") code = grpc::StatusCode::INVALID_ARGUMENT;
      return grpc::Status(code, code == grpc::StatusCode::INVALID_ARGUMENT
                                    ? "sampling.temperature: must be finite and >= 0"
                                    : "refused");
    }
    v1::GenerateEvent accepted;
    accepted.mutable_accepted()->set_server_request_id("weir-9");
    accepted.mutable_accepted()->set_prompt_tokens(3);
    writer->Write(accepted);
    if (text == "slow") {
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (!context->IsCancelled() && absl::Now() < deadline) {
        v1::GenerateEvent delta;
        delta.mutable_delta()->set_text(".");
        delta.mutable_delta()->add_token_ids(1);
        writer->Write(delta);
        absl::SleepFor(absl::Milliseconds(20));
      }
      if (context->IsCancelled()) ++cancelled;
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    const uint32_t n = request->stop().max_new_tokens();
    for (uint32_t i = 0; i < n; ++i) {
      v1::GenerateEvent delta;
      delta.mutable_delta()->set_text(absl::StrCat("t", i));
      delta.mutable_delta()->add_token_ids(i);
      writer->Write(delta);
      if (text == "fail_after") return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker lost");
    }
    v1::GenerateEvent final_event;
    final_event.mutable_final()->set_reason(v1::FINISH_REASON_MAX_TOKENS);
    final_event.mutable_final()->mutable_usage()->set_prompt_tokens(3);
    final_event.mutable_final()->mutable_usage()->set_completion_tokens(n);
    final_event.mutable_final()->mutable_timings()->set_ttft_ms(1);
    final_event.mutable_final()->mutable_timings()->set_total_ms(2);
    writer->Write(final_event);
    return grpc::Status::OK;
  }

  grpc::Status GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                            v1::ModelInfo* info) override {
    info->set_name("fake");
    info->set_max_context_tokens(1000);
    info->set_max_new_tokens_limit(1000);
    info->mutable_features()->set_max_num_samples(1);
    info->mutable_features()->set_max_stop_sequences(4);
    info->mutable_features()->add_structured_output_kinds("json_object");
    return grpc::Status::OK;
  }

  grpc::Status GetServerState(grpc::ServerContext*, const v1::GetServerStateRequest*,
                              v1::ServerState* state) override {
    state->set_lifecycle(v1::LIFECYCLE_READY);
    state->set_steps(5);
    return grpc::Status::OK;
  }

  v1::GenerateRequest last() {
    absl::MutexLock lock(&mu_);
    return last_;
  }

  std::atomic<int> cancelled{0};

 private:
  absl::Mutex mu_;
  v1::GenerateRequest last_ ABSL_GUARDED_BY(mu_);
};

// The fake behind a real gRPC server (with the metrics interceptor) and the
// HTTP server on its in-process channel.
struct Stack {
  FakeInference service;
  Metrics metrics;
  StartedServer grpc;
  std::unique_ptr<HttpServer> http;
  int port = 0;
};

std::unique_ptr<Stack> Start(HttpServerOptions options) {
  auto stack = std::make_unique<Stack>();
  absl::StatusOr<StartedServer> grpc = StartServer(
      {.address = "127.0.0.1:0",
       .configure =
           [&metrics = stack->metrics](grpc::ServerBuilder& builder) {
             builder.experimental().SetInterceptorCreators(MakeMetricsInterceptors(metrics));
           }},
      {&stack->service});
  EXPECT_TRUE(grpc.ok()) << grpc.status();
  stack->grpc = std::move(*grpc);
  options.address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<HttpServer>> http =
      HttpServer::Start(options, stack->grpc.server->InProcessChannel(grpc::ChannelArguments()),
                        &stack->metrics, nullptr);
  EXPECT_TRUE(http.ok()) << http.status();
  stack->http = std::move(*http);
  const std::string& address = stack->http->address();
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &stack->port));
  return stack;
}

Json Body(const httplib::Result& result) {
  EXPECT_TRUE(result) << httplib::to_string(result.error());
  return result ? Json::parse(result->body, nullptr, false) : Json();
}

// The JSON (or "[DONE]") payloads of a server-sent-event body.
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(part, "data: ")) << part;
    out.emplace_back(part.substr(6));
  }
  return out;
}

// Sends `request` on a raw connection, reads `read_bytes` bytes (0: none),
// and closes the connection.
void SendAndHangUp(int port, const std::string& request, size_t read_bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string got;
  char buffer[256];
  while (got.size() < read_bytes) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    got.append(buffer, n);
  }
  close(fd);
}

std::string RawPost(const std::string& path, const std::string& body) {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
                      "Content-Length: ", body.size(), "\r\n\r\n", body);
}

bool WaitFor(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

TEST(HttpServerTest, ModelsHealthAndReadiness) {
  std::unique_ptr<Stack> s = Start({});
  httplib::Client client("127.0.0.1", s->port);
  Json models = Body(client.Get("/v1/models"));
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "fake");
  EXPECT_EQ(models["data"][0]["max_model_len"], 1000);
  EXPECT_EQ(Body(client.Get("/v1/models/fake"))["id"], "fake");
  httplib::Result other = client.Get("/v1/models/gpt-4");
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(Body(other)["error"]["code"], "model_not_found");

  EXPECT_EQ(client.Get("/health")->status, 200);
  EXPECT_EQ(client.Get("/ready")->status, 503);  // no readiness published
  s->grpc.server->GetHealthCheckService()->SetServingStatus("weir.v1.Inference", true);
  EXPECT_EQ(client.Get("/ready")->status, 200);
  s->grpc.server->GetHealthCheckService()->SetServingStatus("weir.v1.Inference", false);
  EXPECT_EQ(client.Get("/ready")->status, 503);
}

TEST(HttpServerTest, CompletionRunsThroughGenerate) {
  std::unique_ptr<Stack> s = Start({});
  httplib::Client client("127.0.0.1", s->port);
  httplib::Result r = client.Post("/v1/completions",
                                  R"({"model": "fake", "prompt": "hi", "max_tokens": 3,
                                      "seed": 7, "stop": "x"})",
                                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const Json body = Body(r);
  EXPECT_EQ(body["id"], "cmpl-weir-9");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "t0t1t2");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"], Json::parse(R"({"prompt_tokens": 3, "completion_tokens": 3,
                                           "total_tokens": 6, "completion_tokens_details":
                                           {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})"));
  const v1::GenerateRequest seen = s->service.last();
  EXPECT_EQ(seen.text(), "hi");
  EXPECT_EQ(seen.stop().max_new_tokens(), 3u);
  EXPECT_EQ(seen.sampling().seed(), 7u);
  EXPECT_EQ(seen.stop().stop_strings(0), "x");
  EXPECT_TRUE(seen.output().stream_tokens());
}

TEST(HttpServerTest, StreamingChatSendsChunksUsageAndDone) {
  std::unique_ptr<Stack> s = Start({});
  httplib::Client client("127.0.0.1", s->port);
  httplib::Result r = client.Post(
      "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true,
          "stream_options": {"include_usage": true}})",
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = Events(r->body);
  ASSERT_EQ(events.size(), 6u) << r->body;
  EXPECT_EQ(Json::parse(events[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(Json::parse(events[1])["choices"][0]["delta"]["content"], "t0");
  EXPECT_EQ(Json::parse(events[2])["choices"][0]["delta"]["content"], "t1");
  EXPECT_EQ(Json::parse(events[3])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(Json::parse(events[4])["usage"]["completion_tokens"], 2);
  EXPECT_EQ(events[5], "[DONE]");
}

TEST(HttpServerTest, ErrorsAreOpenAiShapedWithTheirStatus) {
  std::unique_ptr<Stack> s = Start({});
  httplib::Client client("127.0.0.1", s->port);
  auto post = [&](const std::string& prompt, bool stream) {
    return client.Post("/v1/completions", Json{{"prompt", prompt}, {"stream", stream}}.dump(),
                       "application/json");
  };
  httplib::Result busy = post("error:RESOURCE_EXHAUSTED", false);
  EXPECT_EQ(busy->status, 429);
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  EXPECT_EQ(Body(busy)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(post("error:UNAVAILABLE", false)->status, 503);
  // Errors before the first event are plain HTTP errors, also when streaming.
  httplib::Result bad = post("error:INVALID_ARGUMENT", true);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Body(bad)["error"]["param"], "temperature");

  // A failure after tokens were sent: an error event in the stream...
  httplib::Result late = client.Post(
      "/v1/completions", R"({"prompt": "fail_after", "stream": true})", "application/json");
  EXPECT_EQ(late->status, 200);
  const std::vector<std::string> events = Events(late->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(Json::parse(events[events.size() - 2])["error"]["code"], "service_unavailable");
  EXPECT_EQ(events.back(), "[DONE]");
  // ... or the error status without one.
  EXPECT_EQ(post("fail_after", false)->status, 503);

  httplib::Result not_json = client.Post("/v1/completions", "{", "application/json");
  EXPECT_EQ(not_json->status, 400);
  EXPECT_EQ(Body(not_json)["error"]["code"], "invalid_json");
  httplib::Result n =
      client.Post("/v1/completions", R"({"prompt": "x", "n": 2})", "application/json");
  EXPECT_EQ(n->status, 400);
  EXPECT_EQ(Body(n)["error"]["param"], "n");
  httplib::Result model =
      client.Post("/v1/completions", R"({"prompt": "x", "model": "m"})", "application/json");
  EXPECT_EQ(model->status, 404);
  EXPECT_EQ(Body(model)["error"]["code"], "model_not_found");
  httplib::Result route = client.Get("/v1/nothing");
  EXPECT_EQ(route->status, 404);
  EXPECT_EQ(Body(route)["error"]["code"], "not_found");
  // The server still serves.
  EXPECT_EQ(
      client.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json")
          ->status,
      200);
}

TEST(HttpServerTest, BodyAndHeaderLimits) {
  std::unique_ptr<Stack> s = Start({.max_body_bytes = 1024, .max_headers = 8});
  httplib::Client client("127.0.0.1", s->port);
  const std::string big = Json{{"prompt", std::string(2000, 'a')}}.dump();
  httplib::Result too_big = client.Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413);
  EXPECT_EQ(Body(too_big)["error"]["code"], "request_too_large");
  httplib::Headers headers;
  for (int i = 0; i < 10; ++i) headers.emplace(absl::StrCat("X-Extra-", i), "1");
  httplib::Result many = client.Get("/v1/models", headers);
  ASSERT_TRUE(many);
  EXPECT_EQ(many->status, 431);
  EXPECT_EQ(client.Get("/v1/models")->status, 200);
}

TEST(HttpServerTest, ApiKey) {
  std::unique_ptr<Stack> s = Start({.api_key = "sekrit"});
  httplib::Client client("127.0.0.1", s->port);
  httplib::Result none = client.Get("/v1/models");
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(Body(none)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(client.Get("/v1/models", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(client.Get("/v1/models", {{"Authorization", "Bearer sekrit"}})->status, 200);
  EXPECT_EQ(client
                .Post("/v1/completions", {{"Authorization", "Bearer sekri"}}, R"({"prompt": "x"})",
                      "application/json")
                ->status,
            401);
  EXPECT_EQ(client.Get("/health")->status, 200);
  EXPECT_EQ(client.Get("/metrics")->status, 200);

  std::unique_ptr<Stack> closed = Start({.api_key = "sekrit", .open_health_and_metrics = false});
  httplib::Client closed_client("127.0.0.1", closed->port);
  EXPECT_EQ(closed_client.Get("/health")->status, 401);
  EXPECT_EQ(closed_client.Get("/metrics")->status, 401);
  EXPECT_EQ(closed_client.Get("/metrics", {{"Authorization", "Bearer sekrit"}})->status, 200);
}

TEST(HttpServerTest, ClientDisconnectCancelsTheGeneration) {
  std::unique_ptr<Stack> s = Start({.client_poll = absl::Milliseconds(20)});
  // Streaming: hang up after the first bytes of the stream.
  SendAndHangUp(s->port, RawPost("/v1/completions", R"({"prompt": "slow", "stream": true})"), 100);
  EXPECT_TRUE(WaitFor([&] { return s->service.cancelled.load() == 1; }));
  // Not streaming: nothing is written until the end; hang up while waiting.
  const int before = s->service.cancelled.load();
  std::thread hang_up([&] {
    SendAndHangUp(
        s->port,
        RawPost("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "slow"}]})"),
        0);
  });
  hang_up.join();
  EXPECT_TRUE(WaitFor([&] { return s->service.cancelled.load() == before + 1; }));
}

TEST(HttpServerTest, MetricsCountRequestsThroughTheInterceptor) {
  std::unique_ptr<Stack> s = Start({});
  httplib::Client client("127.0.0.1", s->port);
  ASSERT_EQ(
      client.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 4})", "application/json")
          ->status,
      200);
  ASSERT_EQ(
      client
          .Post("/v1/completions", R"({"prompt": "error:RESOURCE_EXHAUSTED"})", "application/json")
          ->status,
      429);
  httplib::Result page = client.Get("/metrics");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_TRUE(
      absl::StartsWith(page->get_header_value("Content-Type"), "text/plain; version=0.0.4"));
  const std::string& text = page->body;
  EXPECT_TRUE(absl::StrContains(text, "weir_requests_total{method=\"Generate\",code=\"OK\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "weir_requests_total{method=\"Generate\",code=\"RESOURCE_EXHAUSTED\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "weir_generation_tokens_total 4\n"));
  EXPECT_TRUE(absl::StrContains(text, "weir_inter_token_latency_seconds_count 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weir_steps_total 5\n"));
  // HTTP requests are counted once their response is written, which the
  // client may see first.
  EXPECT_TRUE(WaitFor([&] {
    return absl::StrContains(
        client.Get("/metrics")->body,
        "weir_http_requests_total{route=\"/v1/completions\",status=\"429\"} 1\n");
  }));
}

}  // namespace
}  // namespace weir::coordinator::http
