#include "rpc/grpc_options.h"

#include <grpc/grpc.h>
#include <grpcpp/create_channel.h>

#include <cstdlib>
#include <string>

#include "rpc/rpc_metrics.h"

namespace baton {
namespace {

int Millis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

}  // namespace

grpc::ChannelArguments MakeChannelArguments(const GrpcOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(options.keepalive_timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Default 2: the client would stop pinging an idle connection after two pings and miss a dead peer.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Millis(options.max_reconnect_backoff));
  return args;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                           const GrpcOptions& options) {
  // Every channel counts its failed calls in baton_rpc_errors_total{side="client"}.
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, MakeChannelArguments(options),
                                                                 RpcErrorClientInterceptors());
}

void PrepareGrpcPolling() {
  ::setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", std::to_string(kBackupPollMs).c_str(), /*overwrite=*/0);
}

void ApplyServerOptions(grpc::ServerBuilder& builder, const GrpcOptions& options) {
  builder.experimental().SetInterceptorCreators(RpcErrorServerInterceptors());  // baton_rpc_errors_total
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(options.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Accept client pings as often as half their interval (default minimum is 5 minutes without data).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, Millis(options.keepalive_time / 2));
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  // Beyond ~100 years "now + timeout" would overflow system_clock's nanosecond count; treat as infinite.
  const absl::Duration kFar = absl::Hours(24 * 365 * 100);
  const auto now = std::chrono::system_clock::now();
  if (timeout >= kFar) return std::chrono::system_clock::time_point::max();
  if (timeout <= absl::ZeroDuration()) return now;
  return now + std::chrono::duration_cast<std::chrono::system_clock::duration>(absl::ToChronoNanoseconds(timeout));
}

}  // namespace baton
