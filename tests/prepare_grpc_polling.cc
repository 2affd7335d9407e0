// The integration tests hold gRPC channels to services they restart (a job service after SIGTERM, stage workers
// after kill -9), as the binaries do: they prepare gRPC's polling as each binary's main does (rpc/grpc_options.h),
// before any test creates a channel, so a reconnect is not timed by gRPC's 5 s backup poller.
#include "rpc/grpc_options.h"

namespace baton {
namespace {

const bool kGrpcPollingPrepared = (PrepareGrpcPolling(), true);

}  // namespace
}  // namespace baton
