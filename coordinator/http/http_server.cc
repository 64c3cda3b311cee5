#include "coordinator/http/http_server.h"

#include <httplib.h>

#include <deque>
#include <functional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/api_key.h"
#include "base/grpc_util.h"
#include "base/logging.h"
#include "coordinator/http/connection_watch.h"
#include "coordinator/http/generate_calls.h"
#include "coordinator/http/listen_backlog.h"

namespace weir::coordinator::http {
namespace {

constexpr char kJson[] = "application/json";

// httplib's pool, with a bound on connections waiting for a thread: when it
// is reached, enqueue (on the accept thread) waits, so accepting pauses.
class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(int threads, int max_queued) : max_queued_(std::max(max_queued, 1)) {
    for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Work(); });
  }

  void enqueue(std::function<void()> fn) override {
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return jobs_.size() < static_cast<size_t>(max_queued_) || shutdown_;
    };
    mu_.Await(absl::Condition(&room));
    jobs_.push_back(std::move(fn));
  }

  void shutdown() override {
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Work() {
    while (true) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !jobs_.empty() || shutdown_; };
        mu_.Await(absl::Condition(&ready));
        if (jobs_.empty()) return;  // shutting down, nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  const int max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

void SendJson(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(Dump(body), kJson);
}

void SendError(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.http_status == 429 || error.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(Dump(ErrorBody(error)), kJson);
}

ApiError MakeError(int status, std::string type, std::string message, std::string code,
                   std::string param = "") {
  return ApiError{.http_status = status,
                  .type = std::move(type),
                  .message = std::move(message),
                  .param = std::move(param),
                  .code = std::move(code)};
}

// Headers the client sent (httplib adds REMOTE_ADDR, REMOTE_PORT, LOCAL_ADDR
// and LOCAL_PORT to every request).
size_t ClientHeaderCount(const httplib::Request& req) {
  size_t n = req.headers.size();
  for (const char* added : {"REMOTE_ADDR", "REMOTE_PORT", "LOCAL_ADDR", "LOCAL_PORT"}) {
    n -= std::min(n, req.get_header_value_count(added));
  }
  return n;
}

// The route label of `path` for metrics (a closed set).
std::string RouteOf(const std::string& path) {
  for (const char* route : {"/v1/models", "/v1/completions", "/v1/chat/completions", "/metrics",
                            "/health", "/ready", "/v1/files", "/v1/batches"}) {
    if (path == route) return route;
  }
  for (const char* prefix : {"/v1/models", "/v1/files", "/v1/batches"}) {
    if (absl::StartsWith(path, absl::StrCat(prefix, "/"))) return absl::StrCat(prefix, "/{id}");
  }
  return "other";
}

bool SplitAddress(const std::string& address, std::string& host, int& port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return false;
  }
  host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return !host.empty();
}

// One generation request: its calls, its client, its response.
struct Exchange {
  OpenAiRequest request;
  std::unique_ptr<GenerateCalls> calls;
  std::unique_ptr<ConnectionWatch> watch;
  std::optional<ResponseBuilder> builder;
  absl::Duration poll;
  // Set once a call failed: the error the client gets.
  std::optional<ApiError> error;

  absl::Time next_check = absl::InfinitePast();

  // Waits for the next event; nullopt on a timeout. Checks the client at
  // most every `poll` (also while events keep coming) and cancels every call
  // once it has gone.
  std::optional<GenerateCalls::Event> Next(bool& client_gone) {
    std::optional<GenerateCalls::Event> event = calls->Next(poll);
    const absl::Time now = absl::Now();
    if (now >= next_check) {
      next_check = now + poll;
      if (watch->PeerClosed()) {
        client_gone = true;
        calls->CancelAll();
      }
    }
    return event;
  }

  // Applies one event to the response; the first failing call cancels the rest.
  void Apply(const GenerateCalls::Event& event, std::string* sse) {
    if (event.ended) {
      if (!event.status.ok() && !error.has_value()) {
        error = ToApiError(event.status, request.endpoint);
        calls->CancelAll();
      }
      return;
    }
    builder->OnEvent(event.call, event.message, sse);
  }
};

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, std::shared_ptr<grpc::Channel> channel,
                       Metrics* metrics, TokenBytes token_bytes)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::Inference::NewStub(channel_)),
      batch_stub_(v1::BatchJobs::NewStub(channel_)),
      metrics_(metrics),
      token_bytes_(std::move(token_bytes)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    HttpServerOptions options, std::shared_ptr<grpc::Channel> channel, Metrics* metrics,
    TokenBytes token_bytes) {
  std::string host;
  int port = 0;
  if (!SplitAddress(options.address, host, port)) {
    return absl::InvalidArgumentError("bad HTTP address \"" + options.address +
                                      "\" (want HOST:PORT)");
  }
  std::unique_ptr<HttpServer> server(
      new HttpServer(std::move(options), std::move(channel), metrics, std::move(token_bytes)));
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    v1::ModelInfo info;
    grpc::Status status = server->stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (!status.ok()) return FromGrpcStatus(status);
    server->served_ = ServedModel::FromModelInfo(info);
    server->served_.max_prompts = server->options_.max_prompts;
  }
  server->batch_ =
      std::make_unique<BatchApi>(*server->batch_stub_, server->served_, server->token_bytes_);
  server->created_ = absl::ToUnixSeconds(absl::Now());
  server->server_ = std::make_unique<httplib::Server>();
  server->Route();
  httplib::Server& s = *server->server_;
  const int bound = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return absl::UnavailableError("cannot listen on " + server->options_.address);
  // Before the accept loop starts, so no connect meets the short queue.
  if (absl::Status raised = RaiseListenBacklog(bound, server->options_.listen_backlog);
      !raised.ok()) {
    WEIR_LOG(WARNING) << "HTTP accept queue left at the library's length: " << raised;
  }
  server->address_ = absl::StrCat(
      server->options_.address.substr(0, server->options_.address.rfind(':')), ":", bound);
  server->thread_ = std::thread([&s] { s.listen_after_bind(); });
  // Stop() is a no-op until the accept loop runs; wait for it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!s.is_running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return server;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpServer::Route() {
  httplib::Server& s = *server_;
  const HttpServerOptions& o = options_;
  s.new_task_queue = [threads = o.threads, queued = o.max_queued_connections] {
    return new BoundedTaskQueue(threads, queued);
  };
  s.set_payload_max_length(o.max_body_bytes);
  s.set_keep_alive_timeout(o.keep_alive_timeout_s);
  s.set_keep_alive_max_count(1000);
  s.set_tcp_nodelay(true);

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (ClientHeaderCount(req) > options_.max_headers) {
      SendError(res, MakeError(431, "invalid_request_error",
                               absl::StrCat("more than ", options_.max_headers, " headers"),
                               "too_many_headers"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!Authorized(req)) {
      SendError(res, MakeError(401, "authentication_error",
                               "Missing or incorrect API key: send \"Authorization: Bearer "
                               "<key>\".",
                               "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad
  // request line, ...) get the OpenAI error body too.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    switch (res.status) {
      case 404:
        SendError(res, MakeError(404, "invalid_request_error",
                                 "Unknown route: " + req.method + " " + req.path, "not_found"));
        return;
      case 413:
        SendError(res, MakeError(413, "invalid_request_error", "The request body is too large",
                                 "request_too_large"));
        return;
      default:
        SendError(res,
                  MakeError(res.status, res.status < 500 ? "invalid_request_error" : "server_error",
                            absl::StrCat("HTTP ", res.status), ""));
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    SendError(res, MakeError(500, "server_error", "internal error", "internal_error"));
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (metrics_ != nullptr) metrics_->CountHttp(RouteOf(req.path), res.status);
  });

  s.Get("/v1/models",
        [this](const httplib::Request& req, httplib::Response& res) { Models(req, res); });
  s.Get("/v1/models/(.+)",
        [this](const httplib::Request& req, httplib::Response& res) { Models(req, res); });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Endpoint::kCompletions, req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Endpoint::kChatCompletions, req, res);
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) { Health("", res); });
  s.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
    Health("weir.v1.Inference", res);
  });
  if (metrics_ != nullptr) {
    s.Get("/metrics",
          [this](const httplib::Request&, httplib::Response& res) { MetricsPage(res); });
  }
  RouteBatches();
}

void HttpServer::RouteBatches() {
  httplib::Server& s = *server_;
  auto reply = [](httplib::Response& res, const HttpReply& r) {
    res.status = r.status;
    if (r.status == 429 || r.status == 503) res.set_header("Retry-After", "1");
    res.set_content(r.body, r.content_type);
  };
  s.Post("/v1/files", [this, reply](const httplib::Request& req, httplib::Response& res) {
    if (!req.is_multipart_form_data() || !req.has_file("file")) {
      SendError(res, MakeError(400, "invalid_request_error",
                               "send multipart/form-data with a file and its purpose",
                               "invalid_file", "file"));
      return;
    }
    const httplib::MultipartFormData file = req.get_file_value("file");
    reply(res,
          batch_->UploadFile(file.filename, req.get_file_value("purpose").content, file.content));
  });
  s.Get("/v1/files", [this, reply](const httplib::Request&, httplib::Response& res) {
    reply(res, batch_->ListFiles());
  });
  s.Get("/v1/files/([^/]+)", [this, reply](const httplib::Request& req, httplib::Response& res) {
    reply(res, batch_->GetFile(req.matches[1]));
  });
  s.Get("/v1/files/([^/]+)/content",
        [this, reply](const httplib::Request& req, httplib::Response& res) {
          reply(res, batch_->FileContent(req.matches[1]));
        });
  s.Delete("/v1/files/([^/]+)", [this, reply](const httplib::Request& req, httplib::Response& res) {
    reply(res, batch_->DeleteFile(req.matches[1]));
  });
  s.Post("/v1/batches", [this, reply](const httplib::Request& req, httplib::Response& res) {
    reply(res, batch_->CreateBatch(req.body, req.get_header_value("Authorization")));
  });
  s.Get("/v1/batches", [this, reply](const httplib::Request& req, httplib::Response& res) {
    int limit = 20;
    if (req.has_param("limit") && !absl::SimpleAtoi(req.get_param_value("limit"), &limit)) {
      limit = 0;  // refused by ListBatches
    }
    reply(res, batch_->ListBatches(req.get_param_value("after"), limit,
                                   req.get_header_value("Authorization")));
  });
  s.Get("/v1/batches/([^/]+)", [this, reply](const httplib::Request& req, httplib::Response& res) {
    reply(res, batch_->GetBatch(req.matches[1], req.get_header_value("Authorization")));
  });
  s.Post("/v1/batches/([^/]+)/cancel",
         [this, reply](const httplib::Request& req, httplib::Response& res) {
           reply(res, batch_->CancelBatch(req.matches[1], req.get_header_value("Authorization")));
         });
}

bool HttpServer::Authorized(const httplib::Request& req) const {
  if (options_.api_key.empty()) return true;
  if (options_.open_health_and_metrics &&
      (req.path == "/health" || req.path == "/ready" || req.path == "/metrics")) {
    return true;
  }
  return BearerMatches(req.get_header_value("Authorization"), options_.api_key);
}

void HttpServer::Models(const httplib::Request& req, httplib::Response& res) const {
  const Json model = {{"id", served_.name},   {"object", "model"},
                      {"created", created_},  {"owned_by", "weir"},
                      {"root", served_.name}, {"max_model_len", served_.max_context_tokens}};
  if (req.matches.size() < 2) {
    SendJson(res, 200, Json{{"object", "list"}, {"data", Json::array({model})}});
  } else if (req.matches[1] == served_.name) {
    SendJson(res, 200, model);
  } else {
    SendError(res, MakeError(404, "invalid_request_error",
                             "The model `" + std::string(req.matches[1]) + "` does not exist",
                             "model_not_found", "model"));
  }
}

void HttpServer::Health(const std::string& service, httplib::Response& res) const {
  absl::StatusOr<std::string> status = CheckHealth(*channel_, service, std::chrono::seconds(2));
  const std::string name = status.ok() ? *status : "UNKNOWN";
  SendJson(res, name == "SERVING" ? 200 : 503, Json{{"status", name}});
}

void HttpServer::MetricsPage(httplib::Response& res) const {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  v1::ServerState state;
  const bool ok = stub_->GetServerState(&context, v1::GetServerStateRequest(), &state).ok();
  res.status = 200;
  res.set_content(metrics_->Render(ok ? &state : nullptr),
                  "text/plain; version=0.0.4; charset=utf-8");
}

void HttpServer::Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    SendError(res, MakeError(400, "invalid_request_error", "The request body is not valid JSON",
                             "invalid_json"));
    return;
  }
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, body, served_);
  if (!parsed.ok()) {
    SendError(res, ToApiError(parsed.status(), endpoint));
    return;
  }
  auto exchange = std::make_shared<Exchange>();
  exchange->request = std::move(*parsed);
  exchange->poll = options_.client_poll;
  exchange->watch =
      std::make_unique<ConnectionWatch>(req.local_port, req.remote_addr, req.remote_port);
  exchange->calls = std::make_unique<GenerateCalls>(*stub_, exchange->request.calls,
                                                    req.get_header_value("Authorization"));

  // Head: wait until every call was accepted (or failed), so validation and
  // admission errors are the response's status.
  const size_t num_calls = exchange->request.calls.size();
  std::vector<GenerateCalls::Event> early;
  std::vector<bool> started(num_calls, false);
  size_t num_started = 0;
  std::string first_id;
  bool client_gone = false;
  while (num_started < num_calls && !exchange->calls->done()) {
    std::optional<GenerateCalls::Event> event = exchange->Next(client_gone);
    if (client_gone) {
      res.status = 499;  // nginx's "client closed request"; nobody reads it
      return;
    }
    if (!event.has_value()) continue;
    if (event->ended && !event->status.ok()) {
      exchange->calls->CancelAll();
      SendError(res, ToApiError(event->status, endpoint));
      return;
    }
    if (!started[event->call]) {
      started[event->call] = true;
      ++num_started;
      if (first_id.empty() && event->message.has_accepted()) {
        first_id = event->message.accepted().server_request_id();
      }
    }
    early.push_back(std::move(*event));
  }
  const bool chat = endpoint == Endpoint::kChatCompletions;
  exchange->builder.emplace(exchange->request, absl::StrCat(chat ? "chatcmpl-" : "cmpl-", first_id),
                            absl::ToUnixSeconds(absl::Now()), served_.name, token_bytes_);

  if (!exchange->request.stream) {
    for (const GenerateCalls::Event& event : early) exchange->Apply(event, nullptr);
    while (!exchange->calls->done()) {
      std::optional<GenerateCalls::Event> event = exchange->Next(client_gone);
      if (client_gone) {
        res.status = 499;
        return;
      }
      if (event.has_value()) exchange->Apply(*event, nullptr);
    }
    if (exchange->error.has_value()) {
      SendError(res, *exchange->error);
    } else {
      SendJson(res, 200, exchange->builder->Response());
    }
    return;
  }

  std::string head;
  for (const GenerateCalls::Event& event : early) exchange->Apply(event, &head);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [exchange, head = std::move(head)](size_t offset, httplib::DataSink& sink) mutable {
        // Runs once, on this request's thread, after the status line went out.
        auto write = [&](const std::string& data) {
          if (data.empty() || sink.write(data.data(), data.size())) return true;
          exchange->calls->CancelAll();
          return false;
        };
        if (!write(head)) return false;
        bool client_gone = false;
        bool error_sent = false;
        while (!exchange->calls->done()) {
          std::optional<GenerateCalls::Event> event = exchange->Next(client_gone);
          if (client_gone) return false;
          if (!event.has_value()) continue;
          std::string out;
          exchange->Apply(*event, &out);
          if (exchange->error.has_value() && !error_sent) {
            out += ResponseBuilder::StreamError(*exchange->error);
            error_sent = true;
          }
          if (!write(out)) return false;
        }
        if (!error_sent && !write(exchange->builder->StreamTail())) return false;
        sink.done();
        return true;
      });
}

}  // namespace weir::coordinator::http
