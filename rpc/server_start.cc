#include "rpc/server_start.h"

#include <absl/strings/str_cat.h>

#include <chrono>

#include "rpc/grpc_options.h"
#include "rpc/health.h"
#include "rpc/tls.h"

namespace baton {

absl::StatusOr<StartedServer> StartServer(const ServerSetup& setup) {
  std::shared_ptr<grpc::ServerCredentials> credentials = setup.credentials;
  if (!credentials) {
    auto process = ProcessServerCredentials();
    if (!process.ok()) return process.status();
    credentials = *process;
  }
  EnableHealthService();
  grpc::ServerBuilder builder;
  ApplyServerOptions(builder);
  if (setup.configure) setup.configure(builder);
  int port = 0;
  builder.AddListeningPort(setup.listen, credentials, &port);
  for (grpc::Service* service : setup.services) builder.RegisterService(service);
  StartedServer started;
  started.server = builder.BuildAndStart();
  if (!started.server || port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", setup.listen));
  MarkServing(*started.server, setup.health_names);
  started.address = absl::StrCat(setup.listen.substr(0, setup.listen.rfind(':')), ":", port);
  WarnIfPlaintext(setup.program, started.address, GetProcessSecurity().value_or(ProcessSecurity{}));
  return started;
}

absl::StatusOr<StartedServer> StartServer(const std::string& program, const std::string& listen, grpc::Service* service,
                                          const std::string& health_name) {
  ServerSetup setup;
  setup.program = program;
  setup.listen = listen;
  setup.services = {service};
  setup.health_names = {health_name};
  return StartServer(setup);
}

void StopServer(grpc::Server& server, const std::function<void()>& draining, std::chrono::milliseconds grace) {
  MarkNotServing(server);
  if (draining) draining();
  server.Shutdown(std::chrono::system_clock::now() + grace);
}

}  // namespace baton
