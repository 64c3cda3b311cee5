#include "tools/bench/stream_load.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_callback.h"
#include "proto/google_rpc.pb.h"
#include "proto/inference.grpc.pb.h"

namespace weir::bench {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "?";
  }
}

bool HasRetryInfo(const grpc::Status& status) {
  google::rpc::Status details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) {
    return false;
  }
  for (const auto& any : details.details()) {
    if (any.type_url() == "type.googleapis.com/google.rpc.RetryInfo") return true;
  }
  return false;
}

struct StreamOutcome {
  grpc::Status status;
  uint64_t completion_tokens = 0;
  uint64_t delta_tokens = 0;
  absl::Duration latency;
  std::optional<absl::Duration> ttft;
};

// One Generate call; reports to `done` and deletes itself when it ends.
class Stream final : public grpc::ClientReadReactor<v1::GenerateEvent> {
 public:
  Stream(v1::Inference::Stub& stub, v1::GenerateRequest request, const StreamLoadOptions& options,
         StreamOutcome& outcome, std::function<void()> done)
      : request_(std::move(request)), outcome_(outcome), done_(std::move(done)) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + options.deadline));
    if (!options.api_key.empty()) {
      context_.AddMetadata("authorization", "Bearer " + options.api_key);
    }
    start_ = absl::Now();
    stub.async()->Generate(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (event_.has_delta()) {
      if (!outcome_.ttft.has_value() && event_.delta().token_ids_size() > 0) {
        outcome_.ttft = absl::Now() - start_;
      }
      outcome_.delta_tokens += event_.delta().token_ids_size();
    }
    if (event_.has_final()) outcome_.completion_tokens += event_.final().usage().completion_tokens();
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& status) override {
    outcome_.status = status;
    outcome_.latency = absl::Now() - start_;
    std::function<void()> done = std::move(done_);
    delete this;
    done();
  }

 private:
  grpc::ClientContext context_;
  const v1::GenerateRequest request_;
  v1::GenerateEvent event_;
  StreamOutcome& outcome_;
  std::function<void()> done_;
  absl::Time start_;
};

HealthSeries Summarize(HealthSeries series, std::vector<double>& ms) {
  series.p50_ms = Quantile(ms, 0.5);
  series.p99_ms = Quantile(ms, 0.99);
  series.max_ms = ms.empty() ? 0 : ms.back();
  return series;
}

}  // namespace

double Quantile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t i = std::min(values.size() - 1, static_cast<size_t>(q * (values.size() - 1) + 0.5));
  return values[i];
}

double StreamLoadReport::tokens_per_second() const {
  const double s = absl::ToDoubleSeconds(wall);
  return s > 0 ? static_cast<double>(tokens) / s : 0;
}

StreamLoadReport RunStreamLoad(const StreamLoadOptions& options) {
  const int streams = std::max(options.streams, 0);
  const int channels = options.channels > 0 ? options.channels : std::max(1, (streams + 499) / 500);
  std::vector<std::unique_ptr<v1::Inference::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    // A distinct argument per channel: its own connection, not a shared one.
    args.SetInt("weir.load_channel", c);
    args.SetMaxReceiveMessageSize(64 << 20);
    stubs.push_back(v1::Inference::NewStub(
        grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<StreamOutcome> outcomes(streams);
  std::atomic<int> left{streams};
  absl::Notification all_done;
  if (streams == 0) all_done.Notify();
  const absl::Time start = absl::Now();
  for (int i = 0; i < streams; ++i) {
    v1::GenerateRequest request;
    for (uint32_t t = 0; t < options.prompt_tokens; ++t) {
      request.mutable_tokens()->add_ids(10 + (i * 7 + t * 13) % 1000);
    }
    request.mutable_sampling()->set_temperature(0.0f);
    request.mutable_stop()->set_max_new_tokens(options.max_new_tokens);
    request.mutable_stop()->set_ignore_eos(true);
    request.mutable_output()->set_stream_tokens(true);
    new Stream(*stubs[i % channels], std::move(request), options, outcomes[i], [&] {
      if (left.fetch_sub(1) == 1) all_done.Notify();
    });
  }
  all_done.WaitForNotification();
  StreamLoadReport report;
  report.streams = streams;
  report.wall = absl::Now() - start;
  std::vector<double> latency, ttft;
  for (const StreamOutcome& o : outcomes) {
    const grpc::StatusCode code = o.status.error_code();
    if (code == grpc::StatusCode::OK) {
      ++report.ok;
      report.tokens += o.completion_tokens;
      latency.push_back(absl::ToDoubleMilliseconds(o.latency));
      if (o.ttft.has_value()) ttft.push_back(absl::ToDoubleMilliseconds(*o.ttft));
    } else if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++report.resource_exhausted;
      report.retry_hints += HasRetryInfo(o.status) ? 1 : 0;
    } else {
      ++report.other[CodeName(code)];
      report.other_example.emplace(CodeName(code), o.status.error_message());
    }
  }
  report.p50_ms = Quantile(latency, 0.5);
  report.p99_ms = Quantile(latency, 0.99);
  report.max_ms = latency.empty() ? 0 : latency.back();
  report.ttft_p50_ms = Quantile(ttft, 0.5);
  report.ttft_p99_ms = Quantile(ttft, 0.99);
  return report;
}

std::pair<int, int64_t> ProcessThreadsAndRss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return {-1, -1};
  int threads = -1;
  int64_t rss = -1;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (key == "Threads:") fields >> threads;
    if (key == "VmRSS:") fields >> rss;
  }
  return {threads, rss};
}

std::string ControlAddressOfChildren(pid_t pid) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    int child = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &child)) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string stat_line;
    if (!std::getline(stat, stat_line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after ')'.
    const size_t close = stat_line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat_line.substr(close + 1));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid != pid) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string arg;
    while (std::getline(cmdline, arg, '\0')) {
      if (arg.rfind("--coordinator=", 0) == 0) return arg.substr(14);
    }
  }
  return "";
}

LoadSampler::LoadSampler(SamplerOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

LoadSampler::~LoadSampler() {
  if (thread_.joinable()) Stop();
}

void LoadSampler::Loop() {
  std::shared_ptr<grpc::Channel> public_channel = MakeChannel(options_.public_address);
  std::shared_ptr<grpc::Channel> control_channel =
      options_.control_address.empty() ? nullptr : MakeChannel(options_.control_address);
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(absl::ToDoubleMilliseconds(options_.health_deadline)));
  auto check = [&](grpc::Channel& channel, const std::string& service, HealthSeries& series,
                   std::vector<double>& ms) {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> status = CheckHealth(channel, service, timeout);
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    ++series.checks;
    if (!status.ok() || *status != "SERVING") {
      if (series.not_serving++ == 0) {
        series.first_failure = status.ok() ? *status : status.status().ToString();
      }
    }
  };
  while (true) {
    check(*public_channel, "weir.v1.Inference", report_.public_health, public_ms_);
    if (control_channel != nullptr) {
      check(*control_channel, "weir.v1.Coordinator", report_.control_health, control_ms_);
    }
    if (options_.pid > 0) {
      const auto [threads, rss] = ProcessThreadsAndRss(options_.pid);
      report_.max_threads = std::max(report_.max_threads, threads);
      report_.max_rss_kb = std::max(report_.max_rss_kb, rss);
    }
    absl::MutexLock lock(&mu_);
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopped), options_.interval)) return;
  }
}

SamplerReport LoadSampler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  SamplerReport report = report_;
  report.public_health = Summarize(report.public_health, public_ms_);
  report.control_health = Summarize(report.control_health, control_ms_);
  return report;
}

}  // namespace weir::bench
