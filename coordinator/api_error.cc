#include "coordinator/api_error.h"

#include <optional>
#include <vector>

#include "absl/strings/cord.h"
#include "proto/google_rpc.pb.h"

namespace weir::coordinator {
namespace {

constexpr char kErrorInfoUrl[] = "type.googleapis.com/google.rpc.ErrorInfo";
constexpr char kBadRequestUrl[] = "type.googleapis.com/google.rpc.BadRequest";
constexpr char kRetryInfoUrl[] = "type.googleapis.com/google.rpc.RetryInfo";

// Reasons other components write at the start of their messages.
constexpr const char* kNamedReasons[] = {kReasonGrammarTooComplex, kReasonGrammarInvalid,
                                         kReasonPromptTooLong, "NUMERICAL_ERROR"};

template <typename Message>
std::optional<Message> Payload(const absl::Status& status, const char* url) {
  auto cord = status.GetPayload(url);
  if (!cord.has_value()) return std::nullopt;
  Message message;
  if (!message.ParseFromString(std::string(*cord))) return std::nullopt;
  return message;
}

void SetPayload(absl::Status& status, const char* url, const google::protobuf::Message& message) {
  status.SetPayload(url, absl::Cord(message.SerializeAsString()));
}

void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t nanos = absl::ToInt64Nanoseconds(d);
  out->set_seconds(nanos / 1000000000);
  out->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

}  // namespace

absl::Status WithReason(absl::Status status, std::string_view reason,
                        const std::map<std::string, std::string>& metadata) {
  if (status.ok()) return status;
  google::rpc::ErrorInfo info;
  info.set_reason(std::string(reason));
  info.set_domain(kErrorDomain);
  for (const auto& [key, value] : metadata) (*info.mutable_metadata())[key] = value;
  SetPayload(status, kErrorInfoUrl, info);
  return status;
}

absl::Status WithBadField(absl::Status status, std::string_view field,
                          std::string_view description) {
  if (status.ok()) return status;
  google::rpc::BadRequest bad =
      Payload<google::rpc::BadRequest>(status, kBadRequestUrl).value_or(google::rpc::BadRequest());
  google::rpc::BadRequest::FieldViolation* violation = bad.add_field_violations();
  violation->set_field(std::string(field));
  violation->set_description(std::string(description));
  SetPayload(status, kBadRequestUrl, bad);
  return status;
}

absl::Status WithRetryDelay(absl::Status status, absl::Duration delay) {
  if (status.ok()) return status;
  google::rpc::RetryInfo retry;
  SetDuration(delay, retry.mutable_retry_delay());
  SetPayload(status, kRetryInfoUrl, retry);
  return status;
}

std::string ErrorReason(const absl::Status& status) {
  if (status.ok()) return "";
  if (auto info = Payload<google::rpc::ErrorInfo>(status, kErrorInfoUrl);
      info.has_value() && !info->reason().empty()) {
    return info->reason();
  }
  const absl::string_view message = status.message();
  size_t best = absl::string_view::npos;
  std::string named;
  for (const char* reason : kNamedReasons) {
    const size_t at = message.find(reason);
    if (at < best) {
      best = at;
      named = reason;
    }
  }
  if (!named.empty()) return named;
  return absl::StatusCodeToString(status.code());
}

void ToErrorStatus(const absl::Status& status, v1::ErrorStatus* out) {
  out->set_code(static_cast<int>(status.code()));
  out->set_message(std::string(status.message()));
  out->set_reason(ErrorReason(status));
  if (auto info = Payload<google::rpc::ErrorInfo>(status, kErrorInfoUrl); info.has_value()) {
    out->mutable_metadata()->insert(info->metadata().begin(), info->metadata().end());
  }
}

grpc::Status ToApiStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  absl::Status full = status;
  if (!full.GetPayload(kErrorInfoUrl).has_value()) full = WithReason(full, ErrorReason(status));
  if ((status.code() == absl::StatusCode::kResourceExhausted ||
       status.code() == absl::StatusCode::kUnavailable) &&
      !full.GetPayload(kRetryInfoUrl).has_value()) {
    full = WithRetryDelay(full, kDefaultRetryDelay);
  }
  google::rpc::Status rpc;
  rpc.set_code(static_cast<int>(status.code()));
  rpc.set_message(std::string(status.message()));
  // ErrorInfo first, then the others in a fixed order.
  for (const char* url : {kErrorInfoUrl, kBadRequestUrl, kRetryInfoUrl}) {
    auto payload = full.GetPayload(url);
    if (!payload.has_value()) continue;
    google::protobuf::Any* any = rpc.add_details();
    any->set_type_url(url);
    any->set_value(std::string(*payload));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      rpc.SerializeAsString());
}

}  // namespace weir::coordinator
