#include "tools/bench/chat_clients.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "nlohmann/json.hpp"

namespace weir::bench {
namespace {

double MsSince(absl::Time from, absl::Time to) { return absl::ToDoubleMilliseconds(to - from); }

// What both clients saw of one request.
struct Seen {
  absl::Time start;
  std::optional<absl::Time> first_text, last_text;
  uint32_t completion_tokens = 0;
};

RequestRecord Record(const Seen& seen, absl::Time level_start, const ChatSpec& spec,
                     std::string error) {
  RequestRecord record;
  record.start_ms = MsSince(level_start, seen.start);
  record.e2e_ms = MsSince(seen.start, absl::Now());
  record.output_tokens = seen.completion_tokens;
  if (error.empty() && seen.completion_tokens != spec.max_new_tokens) {
    error = absl::StrCat(seen.completion_tokens, " tokens, want ", spec.max_new_tokens);
  }
  if (error.empty() && !seen.first_text.has_value()) error = "no text";
  record.error = std::move(error);
  record.ok = record.error.empty();
  if (!record.ok) return record;
  record.ttft_ms = MsSince(seen.start, *seen.first_text);
  if (seen.completion_tokens > 1) {
    record.itl_ms.push_back(MsSince(*seen.first_text, *seen.last_text) /
                            (seen.completion_tokens - 1));
  }
  return record;
}

}  // namespace

RequestRecord RunChatGrpc(weir::v1::Inference::Stub& stub, const ChatSpec& spec,
                          absl::Duration timeout, absl::Time level_start) {
  v1::GenerateRequest request;
  v1::ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content(spec.text);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stop()->set_max_new_tokens(spec.max_new_tokens);
  request.mutable_stop()->set_ignore_eos(true);
  // As the HTTP server asks: streamed, text without special tokens.
  request.mutable_output()->set_stream_tokens(true);
  request.mutable_output()->set_skip_special_tokens(true);

  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  Seen seen{.start = absl::Now()};
  auto reader = stub.Generate(&context, request);
  v1::GenerateEvent event;
  while (reader->Read(&event)) {
    const absl::Time now = absl::Now();
    if (event.has_delta() && !event.delta().text().empty()) {
      if (!seen.first_text) seen.first_text = now;
      seen.last_text = now;
    } else if (event.has_final()) {
      seen.completion_tokens = event.final().usage().completion_tokens();
    }
  }
  const grpc::Status status = reader->Finish();
  return Record(seen, level_start, spec,
                status.ok() ? "" : FromGrpcStatus(status).ToString());
}

RequestRecord RunChatHttp(httplib::Client& client, const ChatSpec& spec, absl::Duration timeout,
                          absl::Time level_start) {
  const nlohmann::json body = {
      {"model", ""},
      {"messages", {{{"role", "user"}, {"content", spec.text}}}},
      {"max_tokens", spec.max_new_tokens},
      {"temperature", 0},
      {"ignore_eos", true},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}}};
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.set_header("Content-Type", "application/json");
  request.body = body.dump();
  client.set_read_timeout(absl::ToInt64Seconds(timeout), 0);

  Seen seen{.start = absl::Now()};
  std::string pending;  // bytes of an event not complete yet
  bool done = false;
  std::string error;
  size_t received = 0;  // response body bytes, for a failure's message
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    const absl::Time now = absl::Now();
    received += size;
    pending.append(data, size);
    // Events end with a blank line; each is one "data: ..." line here.
    for (size_t end = pending.find("\n\n"); end != std::string::npos;
         end = pending.find("\n\n")) {
      const std::string line = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (!absl::StartsWith(line, "data: ")) continue;
      const absl::string_view payload = absl::string_view(line).substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const nlohmann::json chunk =
          nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (chunk.is_discarded()) {
        error = "unparsable chunk";
        return false;
      }
      if (chunk.contains("error")) {
        error = chunk["error"].value("message", "error event");
        return false;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        seen.completion_tokens = chunk["usage"].value("completion_tokens", 0u);
      }
      if (!chunk.contains("choices")) continue;
      for (const nlohmann::json& choice : chunk["choices"]) {
        const nlohmann::json* delta = choice.contains("delta") ? &choice["delta"] : nullptr;
        if (delta == nullptr || !delta->contains("content") || !(*delta)["content"].is_string() ||
            (*delta)["content"].get_ref<const std::string&>().empty()) {
          continue;
        }
        if (!seen.first_text) seen.first_text = now;
        seen.last_text = now;
      }
    }
    return true;
  };
  httplib::Response response;
  httplib::Error http_error = httplib::Error::Success;
  const bool sent = client.send(request, response, http_error);
  if (error.empty() && !sent) {
    // When and how far: a failure before any byte came back differs from one mid-stream.
    error = absl::StrCat("HTTP: ", httplib::to_string(http_error), " after ",
                         absl::FormatDuration(absl::Trunc(absl::Now() - seen.start,
                                                          absl::Milliseconds(1))),
                         ", ", received, " body bytes");
  }
  if (error.empty() && response.status != 200) error = absl::StrCat("HTTP ", response.status);
  if (error.empty() && !done) error = "no [DONE]";
  return Record(seen, level_start, spec, std::move(error));
}

}  // namespace weir::bench
