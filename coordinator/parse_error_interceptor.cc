#include "coordinator/parse_error_interceptor.h"

#include "absl/base/call_once.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api_error.h"
#include "google/protobuf/stubs/logging.h"

namespace weir::coordinator {
namespace {

using grpc::experimental::InterceptionHookPoints;

thread_local std::string utf8_error_field;
google::protobuf::LogHandler* previous_handler = nullptr;

void CaptureUtf8Errors(google::protobuf::LogLevel level, const char* filename, int line,
                       const std::string& message) {
  // "String field 'weir.v1.GenerateRequest.text' contains invalid UTF-8 data
  // when parsing a protocol buffer. ..."
  if (absl::StrContains(message, "invalid UTF-8") && absl::StrContains(message, "parsing")) {
    const size_t open = message.find('\'');
    const size_t close = open == std::string::npos ? open : message.find('\'', open + 1);
    utf8_error_field =
        close == std::string::npos ? "a string field" : message.substr(open + 1, close - open - 1);
  }
  if (previous_handler != nullptr) previous_handler(level, filename, line, message);
}

// "weir.v1.GenerateRequest.text" -> "text"; "weir.v1.ChatMessage.content" ->
// "content" (the message name says where).
std::string ShortField(const std::string& field) {
  const size_t dot = field.rfind('.');
  return dot == std::string::npos ? field : field.substr(dot + 1);
}

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      failed_ = true;
      field_ = TakeUtf8ErrorField();
    }
    // A request that does not parse ends INTERNAL in a synchronous handler
    // and UNIMPLEMENTED (no message) in a callback one (gRPC's own status).
    if (failed_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        (methods->GetSendStatus().error_code() == grpc::StatusCode::INTERNAL ||
         methods->GetSendStatus().error_code() == grpc::StatusCode::UNIMPLEMENTED)) {
      absl::Status status;
      if (!field_.empty()) {
        status = WithBadField(
            WithReason(absl::InvalidArgumentError(absl::StrCat(
                           "invalid UTF-8 in ", field_, " (", method_,
                           "): string fields must be valid UTF-8; send other bytes as token ids")),
                       kReasonInvalidUtf8, {{"field", field_}}),
            ShortField(field_), "invalid UTF-8");
      } else {
        status = WithReason(
            absl::InvalidArgumentError(absl::StrCat(
                "the request of ", method_,
                " is not a valid protobuf message (malformed bytes, or a string field holding "
                "invalid UTF-8)")),
            "MALFORMED_REQUEST");
      }
      methods->ModifySendStatus(ToApiStatus(status));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  bool failed_ = false;
  std::string field_;
};

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ParseErrorInterceptor(info->method());
  }
};

}  // namespace

void InstallUtf8ErrorCapture() {
  static absl::once_flag once;
  absl::call_once(once, [] { previous_handler = google::protobuf::SetLogHandler(&CaptureUtf8Errors); });
}

std::string TakeUtf8ErrorField() {
  std::string field;
  field.swap(utf8_error_field);
  return field;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeParseErrorInterceptorFactory() {
  InstallUtf8ErrorCapture();
  return std::make_unique<ParseErrorInterceptorFactory>();
}

}  // namespace weir::coordinator
