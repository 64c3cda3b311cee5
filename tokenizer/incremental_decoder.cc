#include "tokenizer/incremental_decoder.h"

#include <algorithm>
#include <utility>

#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

// Returns the start of a trailing sequence that is a proper prefix of a
// well-formed UTF-8 character (and so may still complete), or s.size().
size_t IncompleteTailStart(std::string_view s) {
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const auto b0 = static_cast<unsigned char>(s[n - k]);
    if ((b0 & 0xC0) == 0x80) continue;  // continuation byte: look further back
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 3;
      lo = b0 == 0xE0 ? 0xA0 : 0x80;
      hi = b0 == 0xED ? 0x9F : 0xBF;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 4;
      lo = b0 == 0xF0 ? 0x90 : 0x80;
      hi = b0 == 0xF4 ? 0x8F : 0xBF;
    } else {
      return n;
    }
    if (static_cast<int>(k) >= need) return n;  // complete (or invalid): nothing to hold
    for (size_t j = 1; j < k; ++j) {
      const auto b = static_cast<unsigned char>(s[n - k + j]);
      if (j == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return n;
    }
    return n - k;
  }
  return n;
}

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer,
                                       IncrementalDecoderOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  auto& stops = options_.stop_strings;
  stops.erase(std::remove(stops.begin(), stops.end(), std::string()), stops.end());
}

std::string IncrementalDecoder::Add(int32_t id) {
  if (stopped_) return "";
  ++num_ids_;
  const std::string* bytes = tokenizer_.DecodedBytes(id);
  if (bytes == nullptr || (options_.skip_special_tokens && tokenizer_.IsSpecial(id))) return "";
  if (!tokenizer_.byte_level_decoder() && !first_token_) bytes_.push_back(' ');
  first_token_ = false;
  bytes_ += *bytes;
  return Drain(/*flush=*/false);
}

std::string IncrementalDecoder::Finish() {
  if (stopped_) return "";
  return Drain(/*flush=*/true);
}

std::string IncrementalDecoder::Drain(bool flush) {
  const size_t cut = flush ? bytes_.size() : IncompleteTailStart(bytes_);
  if (cut > 0) {
    std::string_view ready(bytes_.data(), cut);
    text_ += IsValidUtf8(ready) ? std::string(ready) : SanitizeUtf8(ready);
    bytes_.erase(0, cut);
  }
  // Earliest stop string in the held text.
  size_t best = std::string::npos;
  for (size_t i = 0; i < options_.stop_strings.size(); ++i) {
    const size_t pos = text_.find(options_.stop_strings[i]);
    if (pos < best) {
      best = pos;
      stop_index_ = static_cast<int>(i);
    }
  }
  std::string out;
  if (best != std::string::npos) {
    stopped_ = true;
    const size_t end =
        best + (options_.include_stop_in_output ? options_.stop_strings[stop_index_].size() : 0);
    out = text_.substr(0, end);
    text_.clear();
    bytes_.clear();
    return out;
  }
  // Hold the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  if (!flush) {
    for (const std::string& stop : options_.stop_strings) {
      for (size_t len = std::min(stop.size() - 1, text_.size()); len > hold; --len) {
        if (text_.compare(text_.size() - len, len, stop, 0, len) == 0) {
          hold = len;
          break;
        }
      }
    }
  }
  out = text_.substr(0, text_.size() - hold);
  text_.erase(0, text_.size() - hold);
  return out;
}

}  // namespace weir::tokenizer
