// coordinator/startup.h
//
// The coordinator process's start-up pieces that main.cc wires together and
// that need none of its flags: the model's tokenizer, the address files, the
// HTTP address, the HTTP server's in-process channel, data dependencies from
// the runfiles, and the offline mode's batch run.
//
// Thread safety: free functions; no shared state.

#ifndef WEIR_COORDINATOR_STARTUP_H_
#define WEIR_COORDINATOR_STARTUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "tokenizer/tokenizer.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace weir::coordinator {

// Loads `<model_dir>/tokenizer.json` (+ tokenizer_config.json) if present and
// sets `fingerprint` to its xxh64 ("xxh64:<16 hex digits>"). Returns null
// without error when the model has no tokenizer; the tokenizer's errors
// otherwise.
absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizer(const std::string& model_dir,
                                                                     std::string& fingerprint);

// Writes `address` to `path` through a temporary name, so readers never see
// half of it. Returns false on failure.
bool WriteAddressFile(const std::string& path, const std::string& address);

// The HTTP address: `flag` (--http_listen), or for "auto" the gRPC host on
// port 8000 (port 0 when the gRPC port was asked as 0). Empty for "off".
std::string HttpAddress(const std::string& flag, const std::string& grpc_listen);

// The HTTP server's in-process channel to `server`: with an API key, every
// call carries "authorization: Bearer <key>" (the HTTP server checked its
// callers against that key; its own calls, such as /ready's GetServerState,
// carry it too).
std::shared_ptr<grpc::Channel> InProcessChannel(grpc::Server& server,
                                                const grpc::ChannelArguments& args,
                                                const std::string& api_key);

// A data dependency shipped next to this binary: `flag_value` when set,
// else `runfile` in the runfiles ("" without runfiles).
std::string Locate(const bazel::tools::cpp::runfiles::Runfiles* runfiles,
                   const std::string& flag_value, const std::string& runfile);

// Offline mode: the JSON Lines batch at `input` goes through the public API
// at `address` like any client's; results go to `output` (stdout if empty),
// progress and totals to stderr. Returns the process exit code.
int RunOffline(const std::string& input, const std::string& output, const std::string& address);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_STARTUP_H_
