// baton: the user's command line, without libtorch. Everything lives in baton_client_lib; this sets gRPC's polling
// (rpc/grpc_options.h) and hands over argv (a model tool goes on in baton-tools: client/commands.h).
#include <string>
#include <vector>

#include "client/commands.h"
#include "rpc/grpc_options.h"

int main(int argc, char** argv) {
  baton::PrepareGrpcPolling();  // before anything initializes gRPC
  return baton::RunClient(std::vector<std::string>(argv + 1, argv + argc));
}
