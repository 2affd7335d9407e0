#include "rpc/health.h"

#include <grpcpp/security/server_credentials.h>
#include <gtest/gtest.h>

#include <chrono>

#include "baton/v1/stage.grpc.pb.h"

namespace baton {
namespace {

TEST(HealthServiceTest, ServingOnceMarkedThenNotServingWhileDraining) {
  EnableHealthService();
  v1::StageService::Service stage;  // every method UNIMPLEMENTED: a server needs one synchronous service
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&stage);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_TRUE(server && port != 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);

  // A named service is unknown until the server says it carries it.
  EXPECT_EQ(CheckHealth(address, kStageServiceName, absl::Seconds(5)).status().code(), absl::StatusCode::kNotFound);
  MarkServing(*server, {kStageServiceName});
  for (const char* service : {"", kStageServiceName}) {
    auto state = CheckHealth(address, service, absl::Seconds(5));
    ASSERT_TRUE(state.ok()) << service << ": " << state.status();
    EXPECT_EQ(*state, HealthState::kServing) << service;
  }
  MarkNotServing(*server);
  for (const char* service : {"", kStageServiceName}) {
    auto state = CheckHealth(address, service, absl::Seconds(5));
    ASSERT_TRUE(state.ok()) << service << ": " << state.status();
    EXPECT_EQ(*state, HealthState::kNotServing) << service;
    EXPECT_STREQ(HealthStateName(*state), "NOT_SERVING");
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  auto gone = CheckHealth(address, "", absl::Seconds(2));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable) << gone.status();
  EXPECT_NE(gone.status().message().find(address), absl::string_view::npos) << gone.status();
}

}  // namespace
}  // namespace baton
