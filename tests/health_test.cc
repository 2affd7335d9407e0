// The standard grpc.health.v1 service on a real stage_worker process: Check for the whole server and for
// StageService says SERVING, Watch streams SERVING, an unknown service is NOT_FOUND, `baton health` exits 0
// against it and 1 once the worker is gone (what a Docker healthcheck sees).
#include "rpc/health.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "baton/v1/encoder.grpc.pb.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/util/files.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rpc/grpc_options.h"
#include "rpc/tls.h"
#include "stage_driver/local_tls.h"
#include "stage_driver/local_workers.h"
#include "stage_driver/stage_client.h"

namespace baton {
namespace {

TEST(HealthTest, StageWorkerServesTheStandardHealthService) {
  LocalWorkerOptions options;
  options.binary = JoinPath(test_util::BinDir(), "stage_worker");
  options.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS with the ephemeral CA, as the coordinator does
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
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, ProcessChannelCredentials()));
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
  const std::string tls = " --tls-dir " + EphemeralTlsDir();  // its ca.crt, tls.crt, tls.key
  auto ok = test_util::RunCommand(baton + " health " + address + " --service baton.v1.StageService" + tls, true);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("SERVING"), std::string::npos) << ok.output;
  auto wrong = test_util::RunCommand(baton + " health " + address + " --service baton.v1.JobService" + tls, true);
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;

  ASSERT_TRUE((*workers)->Stop().ok());
  auto gone = test_util::RunCommand(baton + " health " + address + " --timeout-s 2" + tls, true);
  EXPECT_EQ(gone.exit_code, 1) << gone.output;
}

// --workers pointing at a gRPC server that is not a stage worker (an encoder worker's port, say) fails at
// connect time with a message that says so, instead of an UNIMPLEMENTED Configure later.
TEST(HealthTest, CoordinatorRefusesAServerThatIsNotAStageWorker) {
  ASSERT_TRUE(LocalWorkerSecurityArgs().ok());  // the process's identity, as the coordinator's
  EnableHealthService();
  v1::EncoderService::Service encoder;  // every method UNIMPLEMENTED; the health service says what it is
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", PeerServerCredentials(*GetProcessSecurity()), &port);
  builder.RegisterService(&encoder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_TRUE(server && port != 0);
  MarkServing(*server, {kEncoderServiceName});
  StageClient client(1, "127.0.0.1:" + std::to_string(port), absl::Seconds(5));
  absl::Status status = client.WaitReady(absl::Seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("stage 1 (127.0.0.1:"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("not a stage worker"), absl::string_view::npos) << status;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

// A stage worker caught between listening and marking its service (NOT_FOUND), or not serving yet, is asked again:
// the wait ends when it serves, instead of failing the run (a remote worker restarting during a recovery).
TEST(HealthTest, WaitReadyWaitsForAStageWorkerThatIsNotServingYet) {
  ASSERT_TRUE(LocalWorkerSecurityArgs().ok());
  EnableHealthService();
  v1::EncoderService::Service stand_in;  // any service: the health entry is what WaitReady reads
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", PeerServerCredentials(*GetProcessSecurity()), &port);
  builder.RegisterService(&stand_in);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_TRUE(server && port != 0);
  std::thread marks([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    MarkServing(*server, {kStageServiceName});
  });
  StageClient client(1, "127.0.0.1:" + std::to_string(port), absl::Seconds(5));
  absl::Status status = client.WaitReady(absl::Seconds(5));
  marks.join();
  EXPECT_TRUE(status.ok()) << status;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace
}  // namespace baton
