#include "tokenizer/chat_template.h"

#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

absl::StatusOr<bool> ParseBool(const std::string& key, const std::string& value) {
  if (value == "true") return true;
  if (value == "false") return false;
  return absl::InvalidArgumentError("template kwarg '" + key + "' must be true or false");
}

}  // namespace

absl::StatusOr<ChatOptions> ParseTemplateKwargs(const std::map<std::string, std::string>& kwargs) {
  ChatOptions options;
  for (const auto& [key, value] : kwargs) {
    absl::StatusOr<bool> b = ParseBool(key, value);
    if (!b.ok()) return b.status();
    if (key == "thinking") {
      options.thinking = *b;
    } else if (key == "add_generation_prompt") {
      options.add_generation_prompt = *b;
    } else {
      return absl::InvalidArgumentError("template kwarg '" + key + "' is not allowed");
    }
  }
  return options;
}

absl::StatusOr<std::string> ApplyChatTemplate(std::span<const ChatMessage> messages,
                                              const ChatOptions& options) {
  if (messages.empty()) return absl::InvalidArgumentError("chat has no messages");
  std::string system;
  bool first_system = true;
  for (const ChatMessage& m : messages) {
    if (!IsValidUtf8(m.content)) {
      return absl::InvalidArgumentError("chat message content is not valid UTF-8");
    }
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError("unsupported chat role '" + m.role + "'");
    }
    if (m.role != "system") continue;
    if (!first_system) system += "\n\n";
    system += m.content;
    first_system = false;
  }
  std::string out = kBosToken + system;
  bool last_user = false;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out += kUserToken;
      out += m.content;
      last_user = true;
    } else if (m.role == "assistant") {
      if (last_user) {
        out += kAssistantToken;
        out += kThinkEnd;
      }
      std::string_view content = m.content;
      const size_t think_end = content.find(kThinkEnd);
      if (think_end != std::string_view::npos) {
        content.remove_prefix(think_end + std::char_traits<char>::length(kThinkEnd));
      }
      out += content;
      out += kEosToken;
      last_user = false;
    }
  }
  if (options.add_generation_prompt && last_user) {
    out += kAssistantToken;
    out += options.thinking ? kThinkStart : kThinkEnd;
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer,
                                                std::span<const ChatMessage> messages,
                                                const ChatOptions& options) {
  for (const char* t : {kBosToken, kEosToken, kUserToken, kAssistantToken}) {
    std::optional<int32_t> id = tokenizer.TokenToId(t);
    if (!id || !tokenizer.IsSpecial(*id)) {
      return absl::InvalidArgumentError(std::string("tokenizer has no special token ") + t);
    }
  }
  absl::StatusOr<std::string> text = ApplyChatTemplate(messages, options);
  if (!text.ok()) return text.status();
  return tokenizer.Encode(*text, /*add_special_tokens=*/false);
}

std::string DeepSeekChatTemplateJinja() {
  return "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
         "{% endif %}{% if not thinking is defined %}{% set thinking = false %}{% endif %}"
         "{% set ns = namespace(system_prompt='', is_first_sp=true, is_last_user=false) %}"
         "{%- for message in messages %}{%- if message['role'] == 'system' %}"
         "{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}"
         "{% set ns.is_first_sp = false %}{%- else %}"
         "{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}"
         "{%- endif %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}"
         "{%- for message in messages %}{%- if message['role'] == 'user' %}"
         "{%- set ns.is_last_user = true %}{{ '<｜User｜>' + message['content'] }}{%- endif %}"
         "{%- if message['role'] == 'assistant' %}{%- if ns.is_last_user %}"
         "{{ '<｜Assistant｜></think>' }}{%- endif %}{%- set ns.is_last_user = false %}"
         "{%- set content = message['content'] %}{%- if '</think>' in content %}"
         "{%- set content = content.split('</think>', 1)[1] %}{%- endif %}"
         "{{ content + '<｜end▁of▁sentence｜>' }}{%- endif %}{%- endfor %}"
         "{%- if add_generation_prompt and ns.is_last_user %}{{ '<｜Assistant｜>' }}"
         "{%- if thinking %}{{ '<think>' }}{%- else %}{{ '</think>' }}{%- endif %}{%- endif %}";
}

}  // namespace weir::tokenizer
