// grammar/schema_checker.cc

#include "grammar/schema_checker.h"

#include <regex>

namespace weir::grammar::testing {
namespace {

using Json = nlohmann::ordered_json;

size_t CodepointCount(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool HasType(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "array") return v.is_array();
  if (type == "object") return v.is_object();
  return false;
}

}  // namespace

std::string CheckSchema(const Json& v, const Json& s, const Json& root, bool strict) {
  if (s.is_boolean()) return s.get<bool>() ? "" : "false schema";
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    const Json& target = ref == "#" ? root : root.at(Json::json_pointer(ref.substr(1)));
    return CheckSchema(v, target, root, strict);
  }
  if (s.contains("const") && v != s["const"]) return "const mismatch";
  if (s.contains("enum")) {
    bool found = false;
    for (const Json& e : s["enum"]) found |= (e == v);
    if (!found) return "not in enum";
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& sub : s["anyOf"]) any |= CheckSchema(v, sub, root, strict).empty();
    if (!any) return "no anyOf branch matches";
  }
  if (s.contains("oneOf")) {
    int count = 0;
    for (const Json& sub : s["oneOf"]) count += CheckSchema(v, sub, root, strict).empty();
    if (count != 1) return "oneOf matched " + std::to_string(count) + " branches";
  }
  if (s.contains("allOf")) {
    for (const Json& sub : s["allOf"]) {
      if (std::string why = CheckSchema(v, sub, root, strict); !why.empty()) return why;
    }
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string()) {
      ok = HasType(v, s["type"].get<std::string>());
    } else {
      for (const Json& t : s["type"]) ok |= HasType(v, t.get<std::string>());
    }
    if (!ok) return "wrong type for " + v.dump();
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    if (s.contains("minLength") && CodepointCount(str) < s["minLength"].get<size_t>()) {
      return "string too short";
    }
    if (s.contains("maxLength") && CodepointCount(str) > s["maxLength"].get<size_t>()) {
      return "string too long";
    }
    if (s.contains("pattern") &&
        !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) {
      return "pattern mismatch: " + str;
    }
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return "below minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return "above maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) {
      return "not above exclusiveMinimum";
    }
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) {
      return "not below exclusiveMaximum";
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return "too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return "too many items";
    if (s.contains("items")) {
      for (const Json& item : v) {
        if (std::string why = CheckSchema(item, s["items"], root, strict); !why.empty()) {
          return "item: " + why;
        }
      }
    }
  }
  if (v.is_object()) {
    const Json props = s.value("properties", Json::object());
    // Strictness applies to schemas that describe objects, not to combinators.
    bool object_schema = s.contains("properties") || s.contains("required");
    if (s.contains("type"))
      object_schema |= s["type"].dump().find("\"object\"") != std::string::npos;
    for (const Json& name : s.value("required", Json::array())) {
      if (!v.contains(name.get<std::string>())) return "missing " + name.get<std::string>();
    }
    for (const auto& [key, value] : v.items()) {
      if (props.contains(key)) {
        if (std::string why = CheckSchema(value, props[key], root, strict); !why.empty()) {
          return key + ": " + why;
        }
        continue;
      }
      const Json extra = s.contains("additionalProperties") ? s["additionalProperties"]
                                                            : Json(!(strict && object_schema));
      if (std::string why = CheckSchema(value, extra, root, strict); !why.empty()) {
        return "additional property " + key + ": " + why;
      }
    }
  }
  return "";
}

}  // namespace weir::grammar::testing
