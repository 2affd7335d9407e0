// The standard grpc.health.v1.Health service (Check and Watch) on every Baton gRPC server, and a client for
// it (`baton health`, Docker healthchecks, tests). Kubernetes' native gRPC probes and grpc_health_probe speak
// the same protocol. The server side is gRPC's built-in implementation; this file only decides what it says:
//   ""                         the whole server: SERVING once it accepts calls, NOT_SERVING while draining;
//   "baton.v1.StageService"    (and EncoderService, JobService): the same, per service a server carries.
#pragma once

#include <absl/status/statusor.h>
#include <absl/time/time.h>
#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>
#include <vector>

namespace baton {

// Service names as the health service reports them (the proto's full service names).
inline constexpr char kStageServiceName[] = "baton.v1.StageService";
inline constexpr char kEncoderServiceName[] = "baton.v1.EncoderService";
inline constexpr char kJobServiceName[] = "baton.v1.JobService";

// Turns on the health service for every server this process builds from now on. Call before
// ServerBuilder::BuildAndStart (gRPC reads the setting there).
void EnableHealthService();

// After BuildAndStart: "" and each of `services` report SERVING.
void MarkServing(grpc::Server& server, const std::vector<std::string>& services);

// Before Shutdown: everything reports NOT_SERVING from now on (probes see the drain, not a refused port).
void MarkNotServing(grpc::Server& server);

// The answer to one Check call.
enum class HealthState { kServing, kNotServing, kUnknown };
const char* HealthStateName(HealthState state);  // "SERVING" | "NOT_SERVING" | "UNKNOWN"

// Calls Health.Check on `address` for `service` ("" = the whole server). An unreachable server is
// UNAVAILABLE and an unknown service NOT_FOUND, both naming the address; a server without the health
// service is UNIMPLEMENTED. `credentials` null: the process's (rpc/tls.h ProcessChannelCredentials).
absl::StatusOr<HealthState> CheckHealth(const std::string& address, const std::string& service, absl::Duration timeout,
                                        const std::shared_ptr<grpc::ChannelCredentials>& credentials = nullptr);
// Same, over an existing channel (errors name `address`).
absl::StatusOr<HealthState> CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& address,
                                        const std::string& service, absl::Duration timeout);

}  // namespace baton
