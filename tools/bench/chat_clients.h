// tools/bench/chat_clients.h
//
// The two clients of the HTTP-overhead benchmark: one streamed chat
// generation through gRPC `Generate` (chat input, text returned) and the same
// through the OpenAI-compatible HTTP server (`POST /v1/chat/completions`,
// server-sent events). Both record the request the same way, so the two can
// be compared: TTFT = send -> first message carrying text; the inter-token
// latency is the request's mean, (last text message - first) / (tokens - 1),
// because a token that completes no UTF-8 character sends no HTTP chunk.
//
// Thread safety: the functions are thread-safe; an httplib::Client is not,
// so each thread passes its own.

#ifndef WEIR_TOOLS_BENCH_CHAT_CLIENTS_H_
#define WEIR_TOOLS_BENCH_CHAT_CLIENTS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "httplib.h"
#include "proto/inference.grpc.pb.h"
#include "tools/bench/serve_stats.h"

namespace weir::bench {

struct ChatSpec {
  // One user message.
  std::string text;
  // Greedy, ignore_eos: exactly this many tokens.
  uint32_t max_new_tokens = 32;
};

// itl_ms holds one value per request (its mean inter-token latency); ok only
// if the call succeeded with exactly max_new_tokens tokens (usage).
RequestRecord RunChatGrpc(weir::v1::Inference::Stub& stub, const ChatSpec& spec,
                          absl::Duration timeout, absl::Time level_start);
RequestRecord RunChatHttp(httplib::Client& client, const ChatSpec& spec,
                          absl::Duration timeout, absl::Time level_start);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_CHAT_CLIENTS_H_
