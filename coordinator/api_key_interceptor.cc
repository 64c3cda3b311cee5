#include "coordinator/api_key_interceptor.h"

#include <grpc/grpc.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/api_key.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"

namespace weir::coordinator {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr char kMetadataKey[] = "authorization";

class ApiKeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  ApiKeyInterceptor(grpc::experimental::ServerRpcInfo* info, const ApiKeyPolicy& policy)
      : info_(info), policy_(policy) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      std::vector<std::string_view> authorizations;
      if (const auto* metadata = methods->GetRecvInitialMetadata(); metadata != nullptr) {
        auto [begin, end] = metadata->equal_range(kMetadataKey);
        for (auto it = begin; it != end; ++it) {
          authorizations.emplace_back(it->second.data(), it->second.size());
        }
      }
      denied_ = CheckApiKey(info_->method(), authorizations, policy_);
      if (!denied_.ok()) {
        grpc_call_cancel_with_status(info_->server_context()->c_call(),
                                     GRPC_STATUS_UNAUTHENTICATED,
                                     std::string(denied_.message()).c_str(), nullptr);
      }
    }
    if (!denied_.ok()) {
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
        // weir.v1 services are protobuf-generated: the request is a Message,
        // and an empty one does nothing in any public handler. (gRPC's own
        // health service receives a ByteBuffer; it and reflection have no
        // side effects, and their answers never reach the cancelled client.)
        if (void* message = methods->GetRecvMessage();
            message != nullptr && absl::StartsWith(info_->method(), "/weir.v1.")) {
          static_cast<google::protobuf::Message*>(message)->Clear();
        }
      }
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
        methods->ModifySendStatus(
            grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(denied_.message())));
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
  const ApiKeyPolicy& policy_;
  absl::Status denied_;
};

class ApiKeyInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(ApiKeyPolicy policy) : policy_(std::move(policy)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (!MethodNeedsApiKey(info->method(), policy_)) return nullptr;
    return new ApiKeyInterceptor(info, policy_);
  }

 private:
  const ApiKeyPolicy policy_;
};

class ApiKeyClientInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyClientInterceptor(const std::string& value) : value_(value) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* metadata = methods->GetSendInitialMetadata();
      bool present = false;
      auto [begin, end] = metadata->equal_range(kMetadataKey);
      for (auto it = begin; it != end; ++it) present = present || it->second == value_;
      if (!present) metadata->emplace(kMetadataKey, value_);
    }
    methods->Proceed();
  }

 private:
  const std::string& value_;
};

class ApiKeyClientInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyClientInterceptorFactory(std::string api_key)
      : value_(BearerValue(api_key)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new ApiKeyClientInterceptor(value_);
  }

 private:
  const std::string value_;
};

}  // namespace

bool MethodNeedsApiKey(std::string_view method, const ApiKeyPolicy& policy) {
  if (policy.api_key.empty()) return false;
  // The internal control plane: workers and EPLB hold no key.
  if (absl::StartsWith(std::string(method), "/weir.v1.Coordinator/")) return false;
  if (policy.open_health && absl::StartsWith(std::string(method), "/grpc.health.v1.Health/")) return false;
  // Inference, BatchJobs, reflection, and anything else: closed by default.
  return true;
}

absl::Status CheckApiKey(std::string_view method,
                         const std::vector<std::string_view>& authorizations,
                         const ApiKeyPolicy& policy) {
  if (!MethodNeedsApiKey(method, policy)) return absl::OkStatus();
  bool ok = false;
  for (std::string_view value : authorizations) {
    ok = BearerMatches(value, policy.api_key) || ok;  // no short cut: same work each time
  }
  if (ok) return absl::OkStatus();
  return absl::UnauthenticatedError(
      absl::StrCat(authorizations.empty() ? "missing" : "incorrect",
                   " API key: ", std::string(method),
                   " needs the metadata \"authorization: Bearer <key>\" (the coordinator's "
                   "--api_key)"));
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeApiKeyInterceptorFactory(ApiKeyPolicy policy) {
  return std::make_unique<ApiKeyInterceptorFactory>(std::move(policy));
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeApiKeyClientInterceptorFactory(std::string api_key) {
  return std::make_unique<ApiKeyClientInterceptorFactory>(std::move(api_key));
}

}  // namespace weir::coordinator
