// base/api_key.h
//
// The API key check shared by the coordinator's HTTP server (the
// "Authorization" header) and its gRPC interceptor (the "authorization"
// metadata): both accept exactly "Bearer <key>", compared in constant time.
//
// Thread safety: pure functions.

#ifndef WEIR_BASE_API_KEY_H_
#define WEIR_BASE_API_KEY_H_

#include <string>
#include <string_view>

namespace weir {

// Compares in time that depends only on `expected`'s length.
bool ConstantTimeEquals(std::string_view given, std::string_view expected);

// "Bearer <key>": the value of an Authorization header / metadata entry.
std::string BearerValue(std::string_view key);

// True when `authorization` is exactly "Bearer <key>" (constant time in the
// key's length). An empty `key` matches nothing: callers decide whether a
// key is configured at all.
bool BearerMatches(std::string_view authorization, std::string_view key);

}  // namespace weir

#endif  // WEIR_BASE_API_KEY_H_
