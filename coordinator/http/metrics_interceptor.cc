#include "coordinator/http/metrics_interceptor.h"

#include <cstring>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"

namespace weir::coordinator::http {
namespace {

constexpr char kGenerate[] = "/weir.v1.Inference/Generate";
constexpr char kGenerateBatch[] = "/weir.v1.Inference/GenerateBatch";

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

std::string ReasonName(v1::FinishReason reason) {
  // "FINISH_REASON_MAX_TOKENS" -> "max_tokens".
  return absl::AsciiStrToLower(v1::FinishReason_Name(reason).substr(14));
}

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(Metrics& metrics, bool batch) : metrics_(metrics), batch_(batch) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      if (const void* message = methods->GetSendMessage(); message != nullptr) {
        if (batch_) {
          OnBatchEvent(*static_cast<const v1::BatchEvent*>(message));
        } else {
          OnEvent(*static_cast<const v1::GenerateEvent*>(message));
        }
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_.CountCall(batch_ ? "GenerateBatch" : "Generate",
                         CodeName(methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  void OnEvent(const v1::GenerateEvent& event) {
    if (event.has_delta() && event.delta().token_ids_size() > 0) {
      const absl::Time now = absl::Now();
      std::optional<absl::Time>& last = last_token_[event.delta().sample_index()];
      const int n = event.delta().token_ids_size();
      // The first delta's first token is TTFT's, not a gap.
      if (last.has_value()) {
        metrics_.ObserveInterToken(absl::ToDoubleSeconds(now - *last) / n, n);
      } else if (n > 1) {
        metrics_.ObserveInterToken(0.0, n - 1);
      }
      last = now;
    } else if (event.has_final()) {
      RecordFinal(event.final(), last_token_.contains(event.final().sample_index()), metrics_);
    }
  }

  void OnBatchEvent(const v1::BatchEvent& event) {
    if (!event.has_item_result()) return;
    const v1::BatchEvent::ItemResult& item = event.item_result();
    if (item.has_error()) {
      metrics_.CountItemError(CodeName(static_cast<grpc::StatusCode>(item.error().code())));
      return;
    }
    for (const v1::GenerateEvent::Final& sample : item.result().samples()) {
      RecordFinal(sample, /*streamed=*/false, metrics_);
    }
  }

  Metrics& metrics_;
  const bool batch_;
  // Per sample index: when its last token was sent.
  absl::flat_hash_map<uint32_t, std::optional<absl::Time>> last_token_;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(Metrics& metrics) : metrics_(metrics) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    if (method == nullptr) return nullptr;
    if (std::strcmp(method, kGenerate) == 0) return new MetricsInterceptor(metrics_, false);
    if (std::strcmp(method, kGenerateBatch) == 0) return new MetricsInterceptor(metrics_, true);
    return nullptr;
  }

 private:
  Metrics& metrics_;
};

}  // namespace

void RecordFinal(const v1::GenerateEvent::Final& final_event, bool streamed, Metrics& metrics) {
  metrics.CountFinish(ReasonName(final_event.reason()));
  const uint32_t tokens = final_event.usage().completion_tokens();
  metrics.AddTokens(final_event.usage().prompt_tokens(), tokens,
                    final_event.usage().accepted_draft_tokens(),
                    final_event.usage().rejected_draft_tokens());
  const v1::Timings& t = final_event.timings();
  if (tokens > 0) metrics.ObserveTimeToFirstToken(t.ttft_ms() / 1e3);
  metrics.ObserveEndToEnd(t.total_ms() / 1e3);
  if (!streamed && tokens > 1 && t.total_ms() >= t.ttft_ms()) {
    metrics.ObserveInterToken((t.total_ms() - t.ttft_ms()) / 1e3 / (tokens - 1), tokens - 1);
  }
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MakeMetricsInterceptors(Metrics& metrics) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<MetricsInterceptorFactory>(metrics));
  return out;
}

}  // namespace weir::coordinator::http
