// Channel and server settings shared by every Baton gRPC endpoint: explicit message-size limits on both
// ends (tensors travel in ~1 MiB chunks, far below them), keepalive pings so a dead peer is noticed in
// seconds rather than at the TCP timeout, a short reconnect backoff so a restarted worker is picked up
// quickly, and a helper that turns a timeout into the absolute deadline gRPC wants.
#pragma once

#include <absl/time/time.h>
#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

#include <chrono>
#include <memory>
#include <string>

namespace baton {

struct GrpcOptions {
  // Largest message either end sends or accepts. gRPC's default receive limit is 4 MiB; tensor chunks
  // are 1 MiB (wire/wire.h), so 64 MiB leaves room for bigger chunks and large non-tensor replies.
  int max_message_bytes = 64 << 20;
  // Ping an idle connection this often, and drop it when a ping is not answered within the timeout.
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // Cap on the pause between reconnect attempts (gRPC's default is 120 s).
  absl::Duration max_reconnect_backoff = absl::Seconds(5);
};

// Client side: size limits, keepalive (also without active calls, unlimited pings without data) and
// reconnect backoff.
grpc::ChannelArguments MakeChannelArguments(const GrpcOptions& options = {});

// A channel to `address` ("host:port") with MakeChannelArguments(options).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                           const GrpcOptions& options = {});

// Server side: the same size limits and keepalive, and permission for clients to ping at our own rate
// (otherwise the server answers frequent pings with GOAWAY "too_many_pings").
void ApplyServerOptions(grpc::ServerBuilder& builder, const GrpcOptions& options = {});

// First thing in main, before gRPC initializes: a channel whose calls failed fast (its peer was down) makes progress on
// its next connection attempt only when gRPC's backup poller runs, every 5 s by default, since no call waits on it;
// each step of a reconnect (TCP, TLS, HTTP/2) then waited for a tick, and `baton ui` saw a restarted job service 15 s
// after it listened. Sets GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS to kBackupPollMs unless the environment has it.
inline constexpr int kBackupPollMs = 100;
void PrepareGrpcPolling();

// std::chrono::system_clock::now() + timeout, for ClientContext::set_deadline. InfiniteDuration gives
// the far future; a negative timeout gives now (the call fails with DEADLINE_EXCEEDED at once).
std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout);

}  // namespace baton
