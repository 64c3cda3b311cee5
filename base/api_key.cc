#include "base/api_key.h"

namespace weir {

bool ConstantTimeEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

std::string BearerValue(std::string_view key) { return "Bearer " + std::string(key); }

bool BearerMatches(std::string_view authorization, std::string_view key) {
  if (key.empty()) return false;
  return ConstantTimeEquals(authorization, BearerValue(key));
}

}  // namespace weir
