// coordinator/api_error.h
//
// The public API's error details (api.md §2.4): a machine-readable reason
// (google.rpc.ErrorInfo, e.g. PROMPT_TOO_LONG{tokens, limit}), the offending
// field (google.rpc.BadRequest) and a retry hint (google.rpc.RetryInfo). They
// ride as absl::Status payloads from where an error is found to the RPC edge:
// ToApiStatus packs them into the google.rpc.Status of the
// `grpc-status-details-bin` trailer, ToErrorStatus into a batch item's
// ErrorStatus.
//
//   return WithReason(absl::InvalidArgumentError("PROMPT_TOO_LONG: ..."),
//                     kReasonPromptTooLong, {{"tokens", "70000"}, {"limit", "65535"}});
//   ...
//   return ToApiStatus(built.status());  // at the RPC edge
//
// Thread safety: pure functions.

#ifndef WEIR_COORDINATOR_API_ERROR_H_
#define WEIR_COORDINATOR_API_ERROR_H_

#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"
#include "proto/common.pb.h"

namespace weir::coordinator {

// ErrorInfo reasons the coordinator names (others fall back to the code's name).
inline constexpr char kReasonPromptTooLong[] = "PROMPT_TOO_LONG";
inline constexpr char kReasonGrammarInvalid[] = "GRAMMAR_INVALID";
inline constexpr char kReasonGrammarTooComplex[] = "GRAMMAR_TOO_COMPLEX";
inline constexpr char kReasonQueueFull[] = "QUEUE_FULL";
// Not admitted within GenerateRequest.max_queue_time (RESOURCE_EXHAUSTED).
inline constexpr char kReasonQueueTimeout[] = "QUEUE_TIMEOUT";
inline constexpr char kReasonNotReady[] = "NOT_READY";
inline constexpr char kReasonInvalidUtf8[] = "INVALID_UTF8";
// ErrorInfo.domain of every weir error.
inline constexpr char kErrorDomain[] = "weir";
// The retry hint of RESOURCE_EXHAUSTED and UNAVAILABLE errors that set none.
inline constexpr absl::Duration kDefaultRetryDelay = absl::Seconds(1);

// Returns `status` carrying ErrorInfo{reason, metadata} (replacing any).
// OK stays OK.
absl::Status WithReason(absl::Status status, std::string_view reason,
                        const std::map<std::string, std::string>& metadata = {});

// Returns `status` naming `field` (a path such as "stop.max_new_tokens") as
// the bad one, with `description` (a BadRequest field violation).
absl::Status WithBadField(absl::Status status, std::string_view field,
                          std::string_view description);

// Returns `status` carrying RetryInfo{delay}.
absl::Status WithRetryDelay(absl::Status status, absl::Duration delay);

// The reason of `status`: its ErrorInfo's if set; else a known reason its
// message names (the grammar engine writes "GRAMMAR_INVALID: ..."); else the
// canonical code name ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", ...).
// Empty for OK.
std::string ErrorReason(const absl::Status& status);

// Fills a batch item's error from `status`: code, message, the reason
// (ErrorReason, never empty) and its ErrorInfo metadata.
void ToErrorStatus(const absl::Status& status, v1::ErrorStatus* out);

// The RPC status of `status`: same code and message; the binary details are
// a google.rpc.Status holding an ErrorInfo (reason as ErrorReason, domain
// kErrorDomain), the BadRequest if any, and a RetryInfo for
// RESOURCE_EXHAUSTED and UNAVAILABLE (kDefaultRetryDelay unless set). OK
// maps to OK without details.
grpc::Status ToApiStatus(const absl::Status& status);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_API_ERROR_H_
