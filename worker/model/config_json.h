// worker/model/config_json.h
//
// Typed, non-throwing access to one JSON object of config.json, used by
// config.cc. Each key has an inference name and an HF name; lookups try the
// name preferred by the file's layout first, then the other. Errors are
// INVALID_ARGUMENT and name the key as "<prefix><preferred name>".
//
// Thread safety: stateless apart from references; not shared across threads.

#ifndef WEIR_WORKER_MODEL_CONFIG_JSON_H_
#define WEIR_WORKER_MODEL_CONFIG_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace weir::model::internal {

struct Key {
  const char* inference;
  const char* hf;
};

class ConfigObject {
 public:
  // Does not take ownership; `object` must outlive this. `object` may be a
  // non-object JSON value, in which case every key is absent.
  ConfigObject(const nlohmann::json& object, bool hf_layout, std::string prefix)
      : object_(object), hf_(hf_layout), prefix_(std::move(prefix)) {}

  // Returns the value of `key`, or nullptr when absent (JSON null counts as absent).
  const nlohmann::json* Find(Key key) const;
  bool Has(Key key) const { return Find(key) != nullptr; }
  // The name used in error messages: prefix + preferred name.
  std::string Name(Key key) const;

  // Reads an integer. When the key is absent: INVALID_ARGUMENT if `required`,
  // otherwise `*out` keeps its value. Wrong type or outside [lo, hi]: INVALID_ARGUMENT.
  absl::Status Int(Key key, int64_t* out, bool required, int64_t lo = INT64_MIN,
                   int64_t hi = INT64_MAX) const;
  absl::Status Int(Key key, int* out, bool required, int64_t lo = INT32_MIN,
                   int64_t hi = INT32_MAX) const;
  // Reads any JSON number as a double; must be finite.
  absl::Status Float(Key key, double* out, bool required) const;
  absl::Status Bool(Key key, bool* out, bool required) const;
  absl::Status String(Key key, std::string* out, bool required) const;
  // Reads an array of integers, each within [lo, hi].
  absl::Status IntList(Key key, std::vector<int64_t>* out, bool required, int64_t lo,
                       int64_t hi) const;
  absl::Status IntList(Key key, std::vector<int>* out, bool required, int64_t lo,
                       int64_t hi) const;

 private:
  absl::Status Missing(Key key) const;
  absl::Status BadType(Key key, const char* want) const;

  const nlohmann::json& object_;
  bool hf_;
  std::string prefix_;
};

// Converts one JSON number to int64 without throwing. False if `v` is not an
// integer (a float with an integral value counts) or does not fit.
bool JsonToInt64(const nlohmann::json& v, int64_t* out);

}  // namespace weir::model::internal

#endif  // WEIR_WORKER_MODEL_CONFIG_JSON_H_
