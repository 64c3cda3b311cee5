#include "worker/model/config_json.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace weir::model::internal {

bool JsonToInt64(const nlohmann::json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is exactly representable; anything at or past it does not fit.
    if (!std::isfinite(d) || d != std::floor(d) || d >= 9.2233720368547758e18 ||
        d < -9.2233720368547758e18) {
      return false;
    }
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

const nlohmann::json* ConfigObject::Find(Key key) const {
  if (!object_.is_object()) return nullptr;
  const char* names[2] = {hf_ ? key.hf : key.inference, hf_ ? key.inference : key.hf};
  for (const char* name : names) {
    auto it = object_.find(name);
    if (it != object_.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

std::string ConfigObject::Name(Key key) const {
  return absl::StrCat(prefix_, hf_ ? key.hf : key.inference);
}

absl::Status ConfigObject::Missing(Key key) const {
  return absl::InvalidArgumentError(absl::StrCat("config: missing key '", Name(key), "'"));
}

absl::Status ConfigObject::BadType(Key key, const char* want) const {
  return absl::InvalidArgumentError(
      absl::StrCat("config: key '", Name(key), "' must be ", want));
}

absl::Status ConfigObject::Int(Key key, int64_t* out, bool required, int64_t lo,
                               int64_t hi) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  int64_t value = 0;
  if (!JsonToInt64(*v, &value)) return BadType(key, "an integer");
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(absl::StrCat("config: key '", Name(key), "' = ", value,
                                                   " is outside [", lo, ", ", hi, "]"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ConfigObject::Int(Key key, int* out, bool required, int64_t lo, int64_t hi) const {
  int64_t value = *out;
  absl::Status s = Int(key, &value, required, std::max<int64_t>(lo, INT32_MIN),
                       std::min<int64_t>(hi, INT32_MAX));
  if (s.ok()) *out = static_cast<int>(value);
  return s;
}

absl::Status ConfigObject::Float(Key key, double* out, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  if (!v->is_number()) return BadType(key, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return BadType(key, "a finite number");
  *out = d;
  return absl::OkStatus();
}

absl::Status ConfigObject::Bool(Key key, bool* out, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  if (!v->is_boolean()) return BadType(key, "a boolean");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ConfigObject::String(Key key, std::string* out, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  if (!v->is_string()) return BadType(key, "a string");
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status ConfigObject::IntList(Key key, std::vector<int64_t>* out, bool required, int64_t lo,
                                   int64_t hi) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  if (!v->is_array()) return BadType(key, "an array of integers");
  std::vector<int64_t> values;
  values.reserve(v->size());
  for (const nlohmann::json& item : *v) {
    int64_t value = 0;
    if (!JsonToInt64(item, &value)) return BadType(key, "an array of integers");
    if (value < lo || value > hi) {
      return absl::InvalidArgumentError(absl::StrCat("config: key '", Name(key), "' has entry ",
                                                     value, " outside [", lo, ", ", hi, "]"));
    }
    values.push_back(value);
  }
  *out = std::move(values);
  return absl::OkStatus();
}

absl::Status ConfigObject::IntList(Key key, std::vector<int>* out, bool required, int64_t lo,
                                   int64_t hi) const {
  std::vector<int64_t> wide;
  absl::Status s = IntList(key, &wide, required, std::max<int64_t>(lo, INT32_MIN),
                           std::min<int64_t>(hi, INT32_MAX));
  if (!s.ok() || (!required && !Has(key))) return s;
  out->assign(wide.begin(), wide.end());
  return absl::OkStatus();
}

}  // namespace weir::model::internal
