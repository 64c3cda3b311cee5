// coordinator/parse_error_interceptor.h
//
// A gRPC server interceptor that turns a request gRPC could not parse into
// INVALID_ARGUMENT. gRPC answers such a call INTERNAL (synchronous handlers)
// or UNIMPLEMENTED (callback handlers, as the public API's) with an empty
// message;
// the usual cause is a proto3 string field (GenerateRequest.text, a chat
// message, a stop string, ...) holding invalid UTF-8, which protobuf refuses
// to parse. The interceptor names the field when protobuf reported it
// (reason INVALID_UTF8, a BadRequest on the field) and otherwise says the
// message is malformed (reason MALFORMED_REQUEST); the details follow
// api_error.h.
//
// How the field is known: protobuf logs "String field '<message>.<field>'
// contains invalid UTF-8 data when parsing" on the thread that parses, and
// the interceptor runs right after on that thread; InstallUtf8ErrorCapture
// chains a protobuf log handler that remembers that line per thread (and
// still prints every log line as before).
//
// Thread safety: the factory is thread-safe; one interceptor per call.

#ifndef WEIR_COORDINATOR_PARSE_ERROR_INTERCEPTOR_H_
#define WEIR_COORDINATOR_PARSE_ERROR_INTERCEPTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/support/server_interceptor.h"

namespace weir::coordinator {

// Returns the factory for ServerBuilder::experimental().SetInterceptorCreators;
// put it first so later interceptors (metrics) see the corrected status.
// Installs the UTF-8 error capture on first use.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeParseErrorInterceptorFactory();

// Chains the protobuf log handler that remembers, per thread, the field of
// the last "invalid UTF-8" parse error. Idempotent.
void InstallUtf8ErrorCapture();

// Returns and clears the field ("weir.v1.GenerateRequest.text") of the last
// invalid-UTF-8 parse error logged on this thread; empty if none.
std::string TakeUtf8ErrorField();

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_PARSE_ERROR_INTERCEPTOR_H_
