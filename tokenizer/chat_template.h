// tokenizer/chat_template.h
//
// The chat format of the DeepSeek V3.1 / V3.2 / V4 family, rendered natively
// (no Jinja engine). Format, for system S, user U1, assistant A1, user U2:
//
//   <｜begin▁of▁sentence｜>S<｜User｜>U1<｜Assistant｜></think>A1<｜end▁of▁sentence｜>
//   <｜User｜>U2<｜Assistant｜></think>          (line breaks only for reading)
//
// * All system messages are concatenated, separated by "\n\n", right after
//   BOS, wherever they appear.
// * An assistant turn that follows a user turn opens with "<｜Assistant｜></think>";
//   its content loses everything up to and including the first "</think>"
//   (earlier reasoning is not replayed), and it ends with EOS.
// * The generation prompt (after a final user turn) is "<｜Assistant｜>"
//   followed by "</think>" (chat mode) or "<think>" (thinking mode).
// This is what the public V3.1 tokenizer_config.json chat_template produces
// for conversations without tool calls, and what V3.2's encode_messages
// produces in "chat" / "thinking" mode. The result is encoded without adding
// special tokens (BOS is already in the text), as transformers does.
//
// Thread safety: pure functions; thread-safe.

#ifndef WEIR_TOKENIZER_CHAT_TEMPLATE_H_
#define WEIR_TOKENIZER_CHAT_TEMPLATE_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace weir::tokenizer {

inline constexpr char kBosToken[] = "<｜begin▁of▁sentence｜>";
inline constexpr char kEosToken[] = "<｜end▁of▁sentence｜>";
inline constexpr char kPadToken[] = "<｜▁pad▁｜>";
inline constexpr char kUserToken[] = "<｜User｜>";
inline constexpr char kAssistantToken[] = "<｜Assistant｜>";
inline constexpr char kThinkStart[] = "<think>";
inline constexpr char kThinkEnd[] = "</think>";

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  bool thinking = false;
};

// Returns options from request template kwargs. Allow-list: "thinking" and
// "add_generation_prompt", each "true" or "false". INVALID_ARGUMENT for any
// other key or value.
absl::StatusOr<ChatOptions> ParseTemplateKwargs(const std::map<std::string, std::string>& kwargs);

// Returns the prompt text of `messages`. INVALID_ARGUMENT for an unknown
// role, an empty conversation, or content that is not valid UTF-8.
absl::StatusOr<std::string> ApplyChatTemplate(std::span<const ChatMessage> messages,
                                              const ChatOptions& options);

// Returns the ids of the prompt of `messages` under `tokenizer`. Errors as
// ApplyChatTemplate; also INVALID_ARGUMENT if the tokenizer lacks the role
// tokens (they must encode to single special ids).
absl::StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer,
                                                std::span<const ChatMessage> messages,
                                                const ChatOptions& options);

// Returns a Jinja chat_template equivalent to ApplyChatTemplate, for
// tokenizer_config.json files written by weir tools.
std::string DeepSeekChatTemplateJinja();

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_CHAT_TEMPLATE_H_
