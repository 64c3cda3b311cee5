#include "coordinator/jsonl_batch.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace weir::coordinator {
namespace {

using Json = nlohmann::json;

absl::Status LineError(int line, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", why));
}

absl::Status ParseLine(const Json& j, int line, v1::BatchItem& item) {
  if (!j.is_object()) return LineError(line, "not a JSON object");
  v1::GenerateRequest& r = *item.mutable_request();
  int inputs = 0;
  for (const auto& [key, value] : j.items()) {
    auto need = [&](bool ok, const char* type) -> absl::Status {
      return ok ? absl::OkStatus() : LineError(line, absl::StrCat("\"", key, "\" must be ", type));
    };
    absl::Status s;
    if (key == "custom_id") {
      if (!(s = need(value.is_string(), "a string")).ok()) return s;
      item.set_custom_id(value.get<std::string>());
    } else if (key == "text") {
      if (!(s = need(value.is_string(), "a string")).ok()) return s;
      r.set_text(value.get<std::string>());
      ++inputs;
    } else if (key == "tokens") {
      if (!(s = need(value.is_array(), "an array of token ids")).ok()) return s;
      for (const Json& id : value) {
        if (!id.is_number_unsigned()) return LineError(line, "\"tokens\" holds a non-id");
        r.mutable_tokens()->add_ids(static_cast<uint32_t>(std::min<uint64_t>(
            id.get<uint64_t>(), UINT32_MAX)));
      }
      ++inputs;
    } else if (key == "messages") {
      if (!(s = need(value.is_array(), "an array of messages")).ok()) return s;
      for (const Json& m : value) {
        if (!m.is_object() || !m.contains("role") || !m.contains("content") ||
            !m["role"].is_string() || !m["content"].is_string()) {
          return LineError(line, "each message needs string \"role\" and \"content\"");
        }
        v1::ChatMessage* message = r.mutable_chat()->add_messages();
        message->set_role(m["role"].get<std::string>());
        message->set_content(m["content"].get<std::string>());
      }
      ++inputs;
    } else if (key == "max_new_tokens") {
      if (!(s = need(value.is_number_unsigned(), "a non-negative integer")).ok()) return s;
      r.mutable_stop()->set_max_new_tokens(
          static_cast<uint32_t>(std::min<uint64_t>(value.get<uint64_t>(), UINT32_MAX)));
    } else if (key == "ignore_eos") {
      if (!(s = need(value.is_boolean(), "a boolean")).ok()) return s;
      r.mutable_stop()->set_ignore_eos(value.get<bool>());
    } else if (key == "stop") {
      if (!(s = need(value.is_array(), "an array of strings")).ok()) return s;
      for (const Json& stop : value) {
        if (!stop.is_string()) return LineError(line, "\"stop\" holds a non-string");
        r.mutable_stop()->add_stop_strings(stop.get<std::string>());
      }
    } else if (key == "temperature" || key == "top_p" || key == "min_p") {
      if (!(s = need(value.is_number(), "a number")).ok()) return s;
      const float v = value.get<float>();
      if (key == "temperature") r.mutable_sampling()->set_temperature(v);
      if (key == "top_p") r.mutable_sampling()->set_top_p(v);
      if (key == "min_p") r.mutable_sampling()->set_min_p(v);
    } else if (key == "top_k") {
      if (!(s = need(value.is_number_integer(), "an integer")).ok()) return s;
      r.mutable_sampling()->set_top_k(static_cast<int32_t>(value.get<int64_t>()));
    } else if (key == "seed") {
      if (!(s = need(value.is_number_unsigned(), "a non-negative integer")).ok()) return s;
      r.mutable_sampling()->set_seed(value.get<uint64_t>());
    } else {
      return LineError(line, "unknown key \"" + key + "\"");
    }
  }
  if (inputs != 1) return LineError(line, "give exactly one of text, tokens, messages");
  if (item.custom_id().empty()) item.set_custom_id(absl::StrCat("line-", line));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::GenerateBatchRequest> ParseBatchJsonl(std::string_view text) {
  v1::GenerateBatchRequest batch;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == absl::string_view::npos) continue;
    Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return LineError(line_number, "malformed JSON");
    if (absl::Status s = ParseLine(j, line_number, *batch.add_items()); !s.ok()) return s;
  }
  if (batch.items_size() == 0) return absl::InvalidArgumentError("no requests in the input");
  return batch;
}

std::string FormatResultJsonl(const v1::BatchEvent::ItemResult& result) {
  Json j;
  j["custom_id"] = result.custom_id();
  if (result.has_error()) {
    j["error"] = {{"code", absl::StatusCodeToString(
                               static_cast<absl::StatusCode>(result.error().code()))},
                  {"message", result.error().message()}};
  } else if (result.result().samples_size() > 0) {
    const v1::GenerateEvent::Final& f = result.result().samples(0);
    j["text"] = f.full_text();
    j["token_ids"] = std::vector<uint32_t>(f.full_token_ids().begin(), f.full_token_ids().end());
    std::string reason = v1::FinishReason_Name(f.reason());
    constexpr std::string_view kPrefix = "FINISH_REASON_";
    if (reason.rfind(kPrefix, 0) == 0) reason = reason.substr(kPrefix.size());
    j["finish_reason"] = reason;
    j["usage"] = {{"prompt_tokens", f.usage().prompt_tokens()},
                  {"completion_tokens", f.usage().completion_tokens()}};
  }
  // Invalid UTF-8 cannot reach here (proto strings are valid), but never throw.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace weir::coordinator
