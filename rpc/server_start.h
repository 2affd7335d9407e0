// Starting and stopping a Baton gRPC server, the one way every process does it (stage worker, encoder worker, the
// coordinator's job service): the process's server options and credentials, the health service reporting the
// server's services SERVING once it listens, the plaintext warning; on stop, NOT_SERVING before the drain.
#pragma once

#include <absl/status/statusor.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace baton {

struct ServerSetup {
  std::string program;  // names the process in the plaintext warning ("stage_worker")
  std::string listen;   // host:port; port 0 picks a free one
  std::vector<grpc::Service*> services;
  std::vector<std::string> health_names;  // the services' names as the health service reports them (rpc/health.h)
  // Null: the process's peer credentials (ProcessServerCredentials: mutual TLS, or plaintext with --insecure).
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::function<void(grpc::ServerBuilder&)> configure;  // builder settings beyond ApplyServerOptions, if any
};

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  std::string address;  // listen's host with the port actually bound
};

// Unavailable naming `listen` when nothing listens there; the credentials' error when the process has none.
absl::StatusOr<StartedServer> StartServer(const ServerSetup& setup);
// The common case: one service, the process's credentials, no other settings.
absl::StatusOr<StartedServer> StartServer(const std::string& program, const std::string& listen, grpc::Service* service,
                                          const std::string& health_name);

// Reports NOT_SERVING (probes see the drain, not a refused port), runs `draining` if given (work to finish while
// the server still answers), then shuts down, giving calls in flight `grace` before they are cancelled.
void StopServer(grpc::Server& server, const std::function<void()>& draining = {},
                std::chrono::milliseconds grace = std::chrono::seconds(2));

}  // namespace baton
