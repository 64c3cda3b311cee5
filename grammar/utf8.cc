// grammar/utf8.cc

#include "grammar/utf8.h"

#include <algorithm>

namespace weir::grammar {
namespace {

int EncodedLength(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// One UTF-8 sequence shape: a byte range per position.
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] (same encoded length) until every byte position of the
// encodings spans a contiguous range, then emits one shape per piece.
void SplitSameLength(uint32_t lo, uint32_t hi, std::vector<ByteRanges>* out) {
  const int n = EncodedLength(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitSameLength(lo, lo | m, out);
        SplitSameLength((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitSameLength(lo, (hi & ~m) - 1, out);
        SplitSameLength(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  ByteRanges shape;
  for (int i = 0; i < n; ++i) shape.emplace_back(uint8_t(a[i]), uint8_t(b[i]));
  out->push_back(std::move(shape));
}

}  // namespace

int32_t DecodeUtf8(std::string_view text, size_t* pos) {
  const uint8_t c = static_cast<uint8_t>(text[*pos]);
  int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || *pos + len > text.size()) {
    ++*pos;
    return -1;
  }
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int i = 1; i < len; ++i) {
    const uint8_t d = static_cast<uint8_t>(text[*pos + i]);
    if ((d & 0xC0) != 0x80) {
      ++*pos;
      return -1;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  if (EncodedLength(cp) != len || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++*pos;
    return -1;
  }
  *pos += len;
  return static_cast<int32_t>(cp);
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<CodepointRange> NormalizeRanges(std::vector<CodepointRange> ranges) {
  std::vector<CodepointRange> split;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi > 0xDFFF) {
      split.emplace_back(lo, 0xD7FF);
      split.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && hi <= 0xDFFF) {
      continue;
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      split.emplace_back(0xE000, hi);
    } else if (hi >= 0xD800 && hi <= 0xDFFF) {
      split.emplace_back(lo, 0xD7FF);
    } else {
      split.emplace_back(lo, hi);
    }
  }
  std::sort(split.begin(), split.end());
  std::vector<CodepointRange> out;
  for (const auto& r : split) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodepointRange> ComplementRanges(const std::vector<CodepointRange>& ranges) {
  std::vector<CodepointRange> norm = NormalizeRanges(ranges);
  std::vector<CodepointRange> out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : norm) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return NormalizeRanges(std::move(out));
}

absl::StatusOr<ExprId> AddCodepointRanges(Grammar& grammar,
                                          const std::vector<CodepointRange>& ranges) {
  std::vector<ByteRanges> shapes;
  for (auto [lo, hi] : NormalizeRanges(ranges)) {
    for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu, kMaxCodepoint}) {
      if (lo > hi) break;
      if (lo > bound) continue;
      const uint32_t piece_hi = std::min(hi, bound);
      SplitSameLength(lo, piece_hi, &shapes);
      lo = piece_hi + 1;
    }
  }
  // Merge all one-byte shapes into a single byte set (the common ASCII case).
  ByteSet ascii;
  std::vector<ExprId> alts;
  for (const ByteRanges& shape : shapes) {
    if (shape.size() == 1) {
      for (int b = shape[0].first; b <= shape[0].second; ++b) ascii.set(b);
      continue;
    }
    std::vector<ExprId> seq;
    for (auto [a, b] : shape) {
      auto id = grammar.AddByteRange(a, b);
      if (!id.ok()) return id.status();
      seq.push_back(*id);
    }
    auto id = grammar.AddSeq(std::move(seq));
    if (!id.ok()) return id.status();
    alts.push_back(*id);
  }
  if (ascii.any()) {
    auto id = grammar.AddBytes(ascii);
    if (!id.ok()) return id.status();
    alts.insert(alts.begin(), *id);
  }
  return grammar.AddAlt(std::move(alts));
}

}  // namespace weir::grammar
