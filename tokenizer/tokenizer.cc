#include "tokenizer/tokenizer.h"

#include <deque>
#include <utility>

#include "base/read_file.h"
#include "base/status_macros.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

// Reads a config token field: a string or an object with "content".
std::string ConfigToken(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string json, ReadFile(dir + "/tokenizer.json"));
  // Optional: no file reads as no config.
  const std::string config = ReadFile(dir + "/tokenizer_config.json").value_or("");
  return FromJson(json, config);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json,
                                                               std::string_view config_json) {
  ASSIGN_OR_RETURN(Json j, ParseJson(json, "tokenizer.json"));
  RETURN_IF_ERROR(CheckFields(j,
                              {"version", "truncation", "padding", "added_tokens", "normalizer",
                               "pre_tokenizer", "post_processor", "decoder", "model"},
                              "tokenizer.json"));
  for (const char* f : {"truncation", "padding"}) {
    if (j.contains(f) && !j[f].is_null()) {
      return absl::InvalidArgumentError(std::string("unsupported tokenizer.json field '") + f +
                                        "' (must be null)");
    }
  }
  if (!j.contains("model")) return absl::InvalidArgumentError("tokenizer.json has no 'model'");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const Json null_json;
  auto field = [&](const char* key) -> const Json& {
    auto it = j.find(key);
    return it == j.end() ? null_json : *it;
  };
  ASSIGN_OR_RETURN(t->normalizer_, Normalizer::FromJson(field("normalizer")));
  ASSIGN_OR_RETURN(t->pre_tokenizer_, PreTokenizer::FromJson(field("pre_tokenizer")));
  ASSIGN_OR_RETURN(t->model_, Bpe::FromJson(field("model")));
  ASSIGN_OR_RETURN(t->added_, AddedVocabulary::FromJson(field("added_tokens"), *t->normalizer_));
  if (!field("post_processor").is_null()) {
    RETURN_IF_ERROR(t->LoadPostProcessor(field("post_processor"), 0));
  }
  if (!field("decoder").is_null()) {
    RETURN_IF_ERROR(t->LoadDecoder(field("decoder"), 0));
  }

  t->vocab_size_ = t->model_->vocab_size();
  for (const AddedToken& a : t->added_.tokens()) t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);
  t->decoded_bytes_.resize(t->vocab_size_);
  t->known_.resize(t->vocab_size_, false);
  for (int32_t id = 0; id < t->vocab_size_; ++id) {
    std::optional<std::string> token = t->IdToToken(id);
    if (!token) continue;
    t->known_[id] = true;
    std::optional<std::string> bytes;
    if (t->byte_level_decoder_) bytes = ByteLevelToBytes(*token);
    t->decoded_bytes_[id] = bytes ? std::move(*bytes) : std::move(*token);
  }
  if (!config_json.empty()) {
    RETURN_IF_ERROR(t->LoadConfig(config_json));
  }
  return t;
}

absl::Status Tokenizer::LoadConfig(std::string_view config_json) {
  ASSIGN_OR_RETURN(Json c, ParseJson(config_json, "tokenizer_config.json"));
  if (!c.is_object()) return absl::InvalidArgumentError("tokenizer_config.json must be an object");
  config_.bos_token = ConfigToken(c, "bos_token");
  config_.eos_token = ConfigToken(c, "eos_token");
  if (c.contains("chat_template") && c["chat_template"].is_string()) {
    config_.chat_template = c["chat_template"].get<std::string>();
  }
  for (auto [name, out] : {std::pair{&config_.bos_token, &bos_id_}, {&config_.eos_token, &eos_id_}}) {
    if (name->empty()) continue;
    *out = TokenToId(*name);
    if (!*out) {
      return absl::InvalidArgumentError("tokenizer_config.json: token '" + *name +
                                        "' is not in the vocabulary");
    }
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadPostProcessor(const Json& j, int depth) {
  if (depth > 8) return absl::InvalidArgumentError("post_processor nesting too deep");
  ASSIGN_OR_RETURN(std::string type, GetType(j, "post_processor"));
  if (type == "ByteLevel") {
    // Only adjusts offsets, which weir does not report.
    return CheckFields(j, {"type", "add_prefix_space", "trim_offsets", "use_regex"},
                       "post_processor ByteLevel");
  }
  if (type == "Sequence") {
    RETURN_IF_ERROR(CheckFields(j, {"type", "processors"}, "post_processor Sequence"));
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return absl::InvalidArgumentError("post_processor Sequence needs 'processors'");
    }
    for (const Json& p : j["processors"]) RETURN_IF_ERROR(LoadPostProcessor(p, depth + 1));
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return absl::InvalidArgumentError("unsupported post_processor type '" + type + "'");
  }
  RETURN_IF_ERROR(CheckFields(j, {"type", "single", "pair", "special_tokens"},
                              "post_processor TemplateProcessing"));
  if (has_template_) return absl::InvalidArgumentError("more than one TemplateProcessing");
  has_template_ = true;
  const Json& specials = j.contains("special_tokens") ? j["special_tokens"] : Json::object();
  if (!j.contains("single") || !j["single"].is_array()) {
    return absl::InvalidArgumentError("TemplateProcessing needs an array 'single'");
  }
  bool seen_sequence = false;
  for (const Json& item : j["single"]) {
    if (item.is_object() && item.contains("Sequence")) {
      if (seen_sequence) return absl::InvalidArgumentError("TemplateProcessing: two sequences");
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken") ||
        !item["SpecialToken"].contains("id") || !item["SpecialToken"]["id"].is_string()) {
      return absl::InvalidArgumentError("TemplateProcessing: unsupported item " + item.dump());
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    if (!specials.is_object() || !specials.contains(name) || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array()) {
      return absl::InvalidArgumentError("TemplateProcessing: special token '" + name +
                                        "' has no ids");
    }
    for (const Json& id : specials[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24)) {
        return absl::InvalidArgumentError("TemplateProcessing: bad id for '" + name + "'");
      }
      (seen_sequence ? suffix_ids_ : prefix_ids_).push_back(id.get<int32_t>());
    }
  }
  if (!seen_sequence) return absl::InvalidArgumentError("TemplateProcessing: no sequence $A");
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadDecoder(const Json& j, int depth) {
  if (depth > 8) return absl::InvalidArgumentError("decoder nesting too deep");
  ASSIGN_OR_RETURN(std::string type, GetType(j, "decoder"));
  if (type == "Sequence") {
    RETURN_IF_ERROR(CheckFields(j, {"type", "decoders"}, "decoder Sequence"));
    if (!j.contains("decoders") || !j["decoders"].is_array() || j["decoders"].size() != 1) {
      return absl::InvalidArgumentError("decoder Sequence: only one ByteLevel decoder supported");
    }
    return LoadDecoder(j["decoders"][0], depth + 1);
  }
  if (type != "ByteLevel") {
    return absl::InvalidArgumentError("unsupported decoder type '" + type + "'");
  }
  byte_level_decoder_ = true;
  return CheckFields(j, {"type", "add_prefix_space", "trim_offsets", "use_regex"},
                     "decoder ByteLevel");
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* a = added_.Find(id)) return a->content;
  if (const std::string* s = model_->IdToToken(id)) return *s;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  const int32_t added = added_.FindContent(token);
  if (added >= 0) return added;
  return model_->TokenToId(token);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* a = added_.Find(id);
  return a != nullptr && a->special;
}

const std::string* Tokenizer::DecodedBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_ || !known_[id]) return nullptr;
  return &decoded_bytes_[id];
}

absl::Status Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<std::string_view> pieces;
  std::deque<std::string> arena;
  RETURN_IF_ERROR(pre_tokenizer_->Apply(text, pieces, arena));
  const bool byte_level = pre_tokenizer_->byte_level();
  for (std::string_view piece : pieces) model_->Encode(piece, byte_level, ids);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool add_special_tokens) const {
  std::string repaired;
  if (!IsValidUtf8(text)) {
    repaired = SanitizeUtf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  std::vector<Segment> raw_segments, norm_segments;
  added_.Split(text, /*normalized_set=*/false, raw_segments);
  for (const Segment& seg : raw_segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    std::string_view piece = text.substr(seg.begin, seg.end - seg.begin);
    std::string normalized;
    if (!normalizer_->is_identity()) {
      ASSIGN_OR_RETURN(normalized, normalizer_->Apply(piece));
      piece = normalized;
    }
    added_.Split(piece, /*normalized_set=*/true, norm_segments);
    for (const Segment& sub : norm_segments) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
      } else {
        RETURN_IF_ERROR(EncodeText(piece.substr(sub.begin, sub.end - sub.begin), ids));
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    const std::string* bytes = DecodedBytes(id);
    if (bytes == nullptr || (skip_special_tokens && IsSpecial(id))) continue;
    if (!byte_level_decoder_ && !first) out.push_back(' ');
    out += *bytes;
    first = false;
  }
  return IsValidUtf8(out) ? out : SanitizeUtf8(out);
}

}  // namespace weir::tokenizer
