#include "rpc/health.h"

#include <absl/strings/str_cat.h>
#include <grpcpp/client_context.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/credentials.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"
#include "rpc/tls.h"

namespace baton {

void EnableHealthService() { grpc::EnableDefaultHealthCheckService(true); }

void MarkServing(grpc::Server& server, const std::vector<std::string>& services) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health == nullptr) return;  // EnableHealthService was not called before BuildAndStart
  health->SetServingStatus(true);
  for (const auto& name : services) health->SetServingStatus(name, true);
}

void MarkNotServing(grpc::Server& server) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health != nullptr) health->Shutdown();
}

const char* HealthStateName(HealthState state) {
  switch (state) {
    case HealthState::kServing:
      return "SERVING";
    case HealthState::kNotServing:
      return "NOT_SERVING";
    case HealthState::kUnknown:
      break;
  }
  return "UNKNOWN";
}

absl::StatusOr<HealthState> CheckHealth(const std::string& address, const std::string& service, absl::Duration timeout,
                                        const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  return CheckHealth(MakeChannel(address, credentials ? credentials : ProcessChannelCredentials()), address, service,
                     timeout);
}

absl::StatusOr<HealthState> CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& address,
                                        const std::string& service, absl::Duration timeout) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return FromGrpcStatus(status, absl::StrCat("health check of ", address, " service '", service, "'"));
  }
  switch (response.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING:
      return HealthState::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING:
      return HealthState::kNotServing;
    default:
      return HealthState::kUnknown;
  }
}

}  // namespace baton
