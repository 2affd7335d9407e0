// An EncoderService (encoder_worker/encoder_service.h) served in the test's own process on a free loopback port, and
// a stub to it: the service-mode tests call it as the coordinator does, over gRPC.
#pragma once

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>

#include "baton/v1/encoder.grpc.pb.h"
#include "rpc/grpc_options.h"

namespace baton::test_util {

struct LocalEncoderServer {
  std::unique_ptr<grpc::Server> server;  // null when it could not start (the test has failed)
  std::unique_ptr<v1::EncoderService::Stub> stub;
  ~LocalEncoderServer() {
    if (server) server->Shutdown();
  }
};

// Serves `service` (which must outlive the server) until the returned object goes.
inline std::unique_ptr<LocalEncoderServer> ServeEncoder(grpc::Service* service) {
  auto local = std::make_unique<LocalEncoderServer>();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service);
  local->server = builder.BuildAndStart();
  EXPECT_TRUE(local->server && port > 0) << "the encoder service did not start";
  local->stub =
      v1::EncoderService::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  return local;
}

}  // namespace baton::test_util
