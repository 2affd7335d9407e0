// The standard grpc.health.v1 service on a real stage_worker process: Check for the whole server and for
// StageService says SERVING, Watch streams SERVING, an unknown service is NOT_FOUND, `baton health` exits 0
// against it and 1 once the worker is gone (what a Docker healthcheck sees).
#include "rpc/health.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include "coordinator/local_workers.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/util/files.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rpc/grpc_options.h"

namespace baton {
namespace {

TEST(HealthTest, StageWorkerServesTheStandardHealthService) {
  LocalWorkerOptions options;
  options.binary = JoinPath(test_util::BinDir(), "stage_worker");
  auto workers = LocalWorkers::Start(1, options);
  ASSERT_TRUE(workers.ok()) << workers.status();
  const std::string address = (*workers)->addresses()[0];

  auto whole = CheckHealth(address, "", absl::Seconds(5));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, HealthState::kServing);
  auto stage = CheckHealth(address, kStageServiceName, absl::Seconds(5));
  ASSERT_TRUE(stage.ok()) << stage.status();
  EXPECT_EQ(*stage, HealthState::kServing);
  auto unknown = CheckHealth(address, "baton.v1.NoSuchService", absl::Seconds(5));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();

  // Watch: the first message is the current status.
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(5)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(kStageServiceName);
  auto reader = stub->Watch(&context, request);
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  context.TryCancel();

  const std::string baton = JoinPath(test_util::BinDir(), "baton");
  auto ok = test_util::RunCommand(baton + " health " + address + " --service baton.v1.StageService", true);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("SERVING"), std::string::npos) << ok.output;
  auto wrong = test_util::RunCommand(baton + " health " + address + " --service baton.v1.JobService", true);
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;

  ASSERT_TRUE((*workers)->Stop().ok());
  auto gone = test_util::RunCommand(baton + " health " + address + " --timeout-s 2", true);
  EXPECT_EQ(gone.exit_code, 1) << gone.output;
}

}  // namespace
}  // namespace baton
