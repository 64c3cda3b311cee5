#include "base/grpc_util.h"

#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/health.grpc.pb.h"

namespace weir {

void HoldGrpcForProcess() {
  static const bool held = [] {
    grpc_init();
    return true;
  }();
  (void)held;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::StatusOr<StartedServer> StartServer(const ServerOptions& options,
                                          const std::vector<grpc::Service*>& services) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(options.max_receive_bytes);
  builder.SetMaxSendMessageSize(options.max_send_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  // gRPC sets SO_REUSEPORT by default, which lets a second server silently
  // share a busy port; a weir process must own its port or fail.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Long streams (Steps, Generate) must not be killed for idle pings.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (options.configure) options.configure(builder);
  StartedServer started;
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || port == 0) {
    return absl::UnavailableError("cannot listen on " + options.address);
  }
  started.port = port;
  const size_t colon = options.address.rfind(':');
  started.address = options.address.substr(0, colon) + ":" + std::to_string(port);
  return started;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, int max_message_bytes,
                                           ChannelKeepalive keepalive) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  // Reconnect quickly after a peer restarts instead of backing off for minutes.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Keepalive pings on long streams, also when no data flows (a worker that
  // computes a long prefill sends nothing for a while and must not be cut).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(keepalive.time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(keepalive.timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

absl::StatusOr<std::string> CheckHealth(grpc::Channel& channel, const std::string& service,
                                        std::chrono::milliseconds timeout) {
  auto stub = grpc::health::v1::Health::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(timeout));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

}  // namespace weir
