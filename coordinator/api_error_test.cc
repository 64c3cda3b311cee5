#include "coordinator/api_error.h"

#include "gtest/gtest.h"
#include "proto/google_rpc.pb.h"

namespace weir::coordinator {
namespace {

google::rpc::Status Details(const grpc::Status& status) {
  google::rpc::Status rpc;
  EXPECT_TRUE(rpc.ParseFromString(status.error_details()));
  return rpc;
}

template <typename Message>
bool Find(const google::rpc::Status& rpc, Message* out) {
  for (const google::protobuf::Any& any : rpc.details()) {
    if (any.type_url() == "type.googleapis.com/" + Message::descriptor()->full_name()) {
      return out->ParseFromString(any.value());
    }
  }
  return false;
}

TEST(ApiErrorTest, ReasonFromPayloadMessageOrCode) {
  EXPECT_EQ(ErrorReason(absl::OkStatus()), "");
  EXPECT_EQ(ErrorReason(WithReason(absl::InvalidArgumentError("x"), kReasonPromptTooLong)),
            "PROMPT_TOO_LONG");
  EXPECT_EQ(ErrorReason(absl::InvalidArgumentError("constraint: GRAMMAR_TOO_COMPLEX: deep")),
            "GRAMMAR_TOO_COMPLEX");
  EXPECT_EQ(ErrorReason(absl::InvalidArgumentError("GRAMMAR_INVALID: bad regex")),
            "GRAMMAR_INVALID");
  EXPECT_EQ(ErrorReason(absl::InvalidArgumentError("stop.max_new_tokens: too big")),
            "INVALID_ARGUMENT");
  EXPECT_EQ(ErrorReason(absl::ResourceExhaustedError("full")), "RESOURCE_EXHAUSTED");
}

TEST(ApiErrorTest, ItemErrorCarriesReasonAndMetadata) {
  v1::ErrorStatus item;
  ToErrorStatus(WithReason(absl::InvalidArgumentError("PROMPT_TOO_LONG: 9 tokens, limit 8"),
                           kReasonPromptTooLong, {{"tokens", "9"}, {"limit", "8"}}),
                &item);
  EXPECT_EQ(item.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(item.reason(), "PROMPT_TOO_LONG");
  EXPECT_EQ(item.metadata().at("tokens"), "9");
  EXPECT_EQ(item.metadata().at("limit"), "8");
  v1::ErrorStatus plain;
  ToErrorStatus(absl::NotFoundError("unknown model"), &plain);
  EXPECT_EQ(plain.reason(), "NOT_FOUND");
}

TEST(ApiErrorTest, ResourceExhaustedCarriesRetryInfo) {
  grpc::Status status = ToApiStatus(absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(), "queue full");
  google::rpc::Status rpc = Details(status);
  EXPECT_EQ(rpc.code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  google::rpc::RetryInfo retry;
  ASSERT_TRUE(Find(rpc, &retry));
  EXPECT_EQ(retry.retry_delay().seconds(), 1);
  google::rpc::ErrorInfo info;
  ASSERT_TRUE(Find(rpc, &info));
  EXPECT_EQ(info.reason(), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(info.domain(), "weir");

  // An explicit delay wins; UNAVAILABLE gets a hint too.
  google::rpc::RetryInfo custom;
  ASSERT_TRUE(Find(Details(ToApiStatus(WithRetryDelay(absl::UnavailableError("not ready"),
                                                       absl::Milliseconds(250)))),
                   &custom));
  EXPECT_EQ(custom.retry_delay().seconds(), 0);
  EXPECT_EQ(custom.retry_delay().nanos(), 250000000);
  // Errors not worth retrying carry no RetryInfo.
  google::rpc::RetryInfo none;
  EXPECT_FALSE(Find(Details(ToApiStatus(absl::InvalidArgumentError("bad"))), &none));
}

TEST(ApiErrorTest, BadFieldAndReasonReachTheDetails) {
  absl::Status status = WithBadField(
      WithReason(absl::InvalidArgumentError("PROMPT_TOO_LONG"), kReasonPromptTooLong,
                 {{"limit", "8"}}),
      "tokens.ids", "9 tokens, limit 8");
  google::rpc::Status rpc = Details(ToApiStatus(status));
  google::rpc::ErrorInfo info;
  ASSERT_TRUE(Find(rpc, &info));
  EXPECT_EQ(info.reason(), "PROMPT_TOO_LONG");
  EXPECT_EQ(info.metadata().at("limit"), "8");
  google::rpc::BadRequest bad;
  ASSERT_TRUE(Find(rpc, &bad));
  ASSERT_EQ(bad.field_violations_size(), 1);
  EXPECT_EQ(bad.field_violations(0).field(), "tokens.ids");
  EXPECT_TRUE(ToApiStatus(absl::OkStatus()).ok());
  EXPECT_EQ(ToApiStatus(absl::OkStatus()).error_details(), "");
}

}  // namespace
}  // namespace weir::coordinator
