// grammar/json_schema_exclusive.cc
//
// What keeps a generated document valid where the grammar alone would not:
// oneOf (exactly one branch) is compiled as anyOf, which is only correct when
// no value can match two branches, so the branches must be provably disjoint
// (a conservative check: by JSON type, by const/enum values, or by a required
// property whose schemas are disjoint); and extra properties next to declared
// ones must not repeat a declared name (a parser keeps the last duplicate).
// const/enum next to `type` keep only the values of that type.

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "grammar/json_schema_converter.h"
#include "grammar/utf8.h"

namespace weir::grammar::internal {
namespace {

// JSON Schema types as a bit set; kInt is the integral numbers (1 and 1.0),
// kFrac the others, so "number" = kInt | kFrac.
enum Kind : uint8_t {
  kNull = 1,
  kBool = 2,
  kInt = 4,
  kFrac = 8,
  kString = 16,
  kArray = 32,
  kObject = 64,
  kAllKinds = 127,
};

constexpr int kMaxAnalysisDepth = 64;

uint8_t KindOf(const Json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBool;
  if (v.is_number_integer()) return kInt;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return d == static_cast<double>(static_cast<int64_t>(d)) ? kInt : kFrac;
  }
  if (v.is_string()) return kString;
  if (v.is_array()) return kArray;
  return kObject;
}

uint8_t KindsOfType(const std::string& type) {
  if (type == "null") return kNull;
  if (type == "boolean") return kBool;
  if (type == "integer") return kInt;
  if (type == "number") return kInt | kFrac;
  if (type == "string") return kString;
  if (type == "array") return kArray;
  if (type == "object") return kObject;
  return 0;
}

// The kinds `s`'s own `type` keyword (or the keywords ConvertBody infers a
// type from) allows; kAllKinds without either.
uint8_t TypeKinds(const Json& s) {
  if (auto it = s.find("type"); it != s.end()) {
    if (it->is_string()) return KindsOfType(it->get<std::string>());
    uint8_t kinds = 0;
    if (it->is_array()) {
      for (const Json& t : *it) {
        if (t.is_string()) kinds |= KindsOfType(t.get<std::string>());
      }
    }
    return kinds;
  }
  if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
    return kObject;
  }
  if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return kArray;
  if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength")) return kString;
  return kAllKinds;
}

}  // namespace

bool SchemaConverter::ValueHasType(const Json& s, const Json& value) {
  return (KindOf(value) & TypeKinds(s)) != 0;
}

const Json* SchemaConverter::Resolve(const Json& s) const {
  const Json* at = &s;
  for (int hops = 0; hops < kMaxAnalysisDepth && at->is_object(); ++hops) {
    if (auto it = at->find("$ref"); it != at->end() && it->is_string()) {
      const std::string ref = it->get<std::string>();
      if (ref == "#") {
        at = &root_;
        continue;
      }
      if (ref.size() < 2 || ref[0] != '#') return nullptr;
      try {
        const nlohmann::json_pointer<std::string> pointer(ref.substr(1));
        if (!root_.contains(pointer)) return nullptr;
        at = &root_.at(pointer);
      } catch (const std::exception&) {
        return nullptr;
      }
      continue;
    }
    if (auto it = at->find("allOf"); it != at->end() && it->is_array() && it->size() == 1) {
      at = &(*it)[0];
      continue;
    }
    return at;
  }
  return at->is_object() || at->is_boolean() ? at : nullptr;
}

uint8_t SchemaConverter::Kinds(const Json& schema, int depth) const {
  if (depth > kMaxAnalysisDepth) return kAllKinds;
  const Json* s = Resolve(schema);
  if (s == nullptr) return kAllKinds;
  if (s->is_boolean()) return s->get<bool>() ? kAllKinds : 0;
  if (auto it = s->find("const"); it != s->end()) return KindOf(*it) & TypeKinds(*s);
  if (auto it = s->find("enum"); it != s->end() && it->is_array()) {
    uint8_t kinds = 0;
    for (const Json& v : *it) kinds |= KindOf(v);
    return kinds & TypeKinds(*s);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (auto it = s->find(key); it != s->end() && it->is_array()) {
      uint8_t kinds = 0;
      for (const Json& branch : *it) kinds |= Kinds(branch, depth + 1);
      return kinds;
    }
  }
  return TypeKinds(*s);
}

bool SchemaConverter::Disjoint(const Json& schema_a, const Json& schema_b, int depth) const {
  if (depth > kMaxAnalysisDepth) return false;
  const Json* a = Resolve(schema_a);
  const Json* b = Resolve(schema_b);
  if (a == nullptr || b == nullptr) return false;
  const uint8_t common = Kinds(*a, depth + 1) & Kinds(*b, depth + 1);
  if (common == 0) return true;
  if (!a->is_object() || !b->is_object()) return false;
  // Finite value sets: disjoint when no value is in both (JSON equality: 1 == 1.0).
  auto values = [](const Json& s) -> std::vector<Json> {
    if (auto it = s.find("const"); it != s.end()) return {*it};
    if (auto it = s.find("enum"); it != s.end() && it->is_array()) {
      return std::vector<Json>(it->begin(), it->end());
    }
    return {};
  };
  const std::vector<Json> va = values(*a), vb = values(*b);
  if (!va.empty() && !vb.empty()) {
    for (const Json& x : va) {
      if (!ValueHasType(*a, x)) continue;
      for (const Json& y : vb) {
        if (ValueHasType(*b, y) && x == y) return false;
      }
    }
    return true;
  }
  // Objects told apart by a property both require (a discriminator).
  if (common != kObject) return false;
  auto required = [](const Json& s) {
    std::vector<std::string> names;
    if (auto it = s.find("required"); it != s.end() && it->is_array()) {
      for (const Json& n : *it) {
        if (n.is_string()) names.push_back(n.get<std::string>());
      }
    }
    return names;
  };
  auto property = [](const Json& s, const std::string& name) -> const Json* {
    auto props = s.find("properties");
    if (props == s.end() || !props->is_object()) return nullptr;
    auto it = props->find(name);
    return it == props->end() ? nullptr : &*it;
  };
  const std::vector<std::string> rb = required(*b);
  for (const std::string& name : required(*a)) {
    if (std::find(rb.begin(), rb.end(), name) == rb.end()) continue;
    const Json* pa = property(*a, name);
    const Json* pb = property(*b, name);
    if (pa != nullptr && pb != nullptr && Disjoint(*pa, *pb, depth + 1)) return true;
  }
  return false;
}

absl::Status SchemaConverter::CheckOneOf(const Json& branches, const std::string& path,
                                         int depth) const {
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = i + 1; j < branches.size(); ++j) {
      if (Disjoint(branches[i], branches[j], depth)) continue;
      return Error(path, absl::StrCat(
                             "'oneOf' branches ", i, " and ", j,
                             " may both match one value, which the engine cannot exclude; "
                             "use 'anyOf', or make the branches disjoint (different types, "
                             "different const/enum values, or a required property with "
                             "different const values)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ExprId> SchemaConverter::ExtraKey(const Json& props) {
  // A trie over the declared names (as code points); a key may end anywhere
  // except on a declared name. Keys are written without escapes, so a name
  // with a character that would need one can never be spelled: skip it.
  struct Node {
    bool name = false;
    std::vector<std::pair<uint32_t, int>> children;  // (code point, node)
  };
  std::vector<Node> trie(1);
  for (const auto& [name, unused] : props.items()) {
    std::vector<uint32_t> cps;
    bool plain = true;
    for (size_t pos = 0; pos < name.size();) {
      const int32_t cp = DecodeUtf8(name, &pos);
      if (cp < 0x20 || cp == '"' || cp == '\\') {
        plain = false;
        break;
      }
      cps.push_back(static_cast<uint32_t>(cp));
    }
    if (!plain) continue;
    int at = 0;
    for (uint32_t cp : cps) {
      int next = -1;
      for (const auto& [c, child] : trie[at].children) {
        if (c == cp) next = child;
      }
      if (next < 0) {
        next = static_cast<int>(trie.size());
        trie[at].children.emplace_back(cp, next);
        trie.emplace_back();
      }
      at = next;
    }
    trie[at].name = true;
  }
  ASSIGN_OR_RETURN(ExprId quote, g_.AddString("\""));
  // free = plain* '"': the key has left the trie, it can no longer be a name.
  const RuleId free_rule = g_.NewRule("extra_key_free");
  {
    ASSIGN_OR_RETURN(ExprId plain, AddCodepointRanges(g_, JsonRules::PlainStringChars()));
    ASSIGN_OR_RETURN(ExprId plain_star, g_.AddRepeat(plain, 0, kUnbounded));
    ASSIGN_OR_RETURN(ExprId body, g_.AddSeq({plain_star, quote}));
    g_.DefineRule(free_rule, body);
  }
  // One rule per trie node, defined children first (reverse creation order).
  std::vector<RuleId> rules(trie.size());
  for (size_t i = 0; i < trie.size(); ++i) rules[i] = g_.NewRule("extra_key");
  for (size_t i = trie.size(); i-- > 0;) {
    const Node& node = trie[i];
    std::vector<ExprId> alts;
    if (!node.name) alts.push_back(quote);
    std::vector<CodepointRange> taken;
    for (const auto& [cp, child] : node.children) {
      std::string bytes;
      AppendUtf8(cp, &bytes);
      ASSIGN_OR_RETURN(ExprId step, g_.AddString(bytes));
      ASSIGN_OR_RETURN(ExprId rest, g_.AddRuleRef(rules[child]));
      ASSIGN_OR_RETURN(ExprId seq, g_.AddSeq({step, rest}));
      alts.push_back(seq);
      taken.emplace_back(cp, cp);
    }
    // Any other plain character leaves the trie.
    std::vector<CodepointRange> others = JsonRules::PlainStringChars();
    if (!taken.empty()) {
      std::vector<CodepointRange> allowed = ComplementRanges(NormalizeRanges(taken));
      std::vector<CodepointRange> both;
      for (const CodepointRange& p : others) {
        for (const CodepointRange& q : allowed) {
          const uint32_t lo = std::max(p.first, q.first), hi = std::min(p.second, q.second);
          if (lo <= hi) both.emplace_back(lo, hi);
        }
      }
      others = std::move(both);
    }
    if (!others.empty()) {
      ASSIGN_OR_RETURN(ExprId other, AddCodepointRanges(g_, others));
      ASSIGN_OR_RETURN(ExprId rest, g_.AddRuleRef(free_rule));
      ASSIGN_OR_RETURN(ExprId seq, g_.AddSeq({other, rest}));
      alts.push_back(seq);
    }
    ASSIGN_OR_RETURN(ExprId body, g_.AddAlt(std::move(alts)));
    g_.DefineRule(rules[i], body);
  }
  ASSIGN_OR_RETURN(ExprId start, g_.AddRuleRef(rules[0]));
  return g_.AddSeq({quote, start});
}

}  // namespace weir::grammar::internal
