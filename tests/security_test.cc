// Nothing unauthenticated gets in (issue 10, item 6). A real 2-stage training job runs over mutual TLS (the
// embedded default: an ephemeral CA) while strangers call every control RPC of its workers: a plaintext client,
// a client with a certificate from another CA, a TLS client with no certificate. Each is refused at the
// handshake (UNAVAILABLE), and the job's LoRA is bitwise the LoRA of the same job run without the attacks. The
// job service refuses calls without the bearer token or with a wrong one (UNAUTHENTICATED). --insecure works
// and warns; --workers, --listen and a bare stage_worker refuse to start without --tls_dir or --insecure; the
// files `baton certs` writes make a working mTLS server and client.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include "baton/v1/job_service.grpc.pb.h"
#include "baton/v1/stage.grpc.pb.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/spawn.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "job_service/job_service.h"
#include "rpc/certs.h"
#include "rpc/grpc_options.h"
#include "rpc/tls.h"
#include "stage_driver/local_tls.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::RunCommand;

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("security"));
    Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(*dir_, "model"), 1).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(*dir_, "cache"), c.in_channels, c.joint_attention_dim, 8, {{2, 2}}, 5, 3).ok());
    std::ofstream(JoinPath(*dir_, "job.yaml")) << JobYaml(1);
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string JobYaml(int steps) {
    return absl::StrCat("model: ", JoinPath(*dir_, "model"), "\ndataset: ", JoinPath(*dir_, "cache"),
                        "\nlora: {rank: 4, targets: all-linear}\noptimizer: {lr: 0.01}\nsteps: ", steps,
                        "\nbatch_size: 2\nmicro_batches: 2\nschedule: 1f1b\nseed: 5\n");
  }

  static CoordinatorOptions Options(const std::string& out) {
    return test_util::LocalStagesOptions(2, JoinPath(*dir_, out));
  }

  static std::map<std::string, at::Tensor> Lora(const std::string& out) {
    return test_util::LoadRunLora(JoinPath(*dir_, out));
  }

  static std::string* dir_;
};
std::string* SecurityTest::dir_ = nullptr;

// Calls Shutdown, GetLora, Configure (a bogus model path) and Push (a foreign job id) on `address` with
// `credentials`; returns each call's status code.
std::vector<grpc::StatusCode> AttackStage(const std::string& address,
                                          const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  auto stub = v1::StageService::NewStub(MakeChannel(address, credentials));
  std::vector<grpc::StatusCode> codes;
  auto deadline = [] { return DeadlineAfter(absl::Seconds(5)); };
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    google::protobuf::Empty in, out;
    codes.push_back(stub->Shutdown(&ctx, in, &out).error_code());
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    auto reader = stub->GetLora(&ctx, v1::GetLoraRequest());
    v1::TensorChunk chunk;
    while (reader->Read(&chunk)) {
    }
    codes.push_back(reader->Finish().error_code());
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::ConfigureRequest req;
    req.set_job_id("intruder");
    req.set_model_path("/dev/zero");
    v1::ConfigureResponse resp;
    codes.push_back(stub->Configure(&ctx, req, &resp).error_code());
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::PushAck ack;
    auto writer = stub->Push(&ctx, &ack);
    v1::Envelope envelope;
    envelope.mutable_header()->set_job_id("intruder");
    envelope.mutable_header()->set_step(1);
    writer->Write(envelope);
    writer->WritesDone();
    codes.push_back(writer->Finish().error_code());
  }
  return codes;
}

std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(const std::string& ca, const PemPair* identity) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca;
  if (identity != nullptr) {
    options.pem_cert_chain = identity->cert;
    options.pem_private_key = identity->key;
  }
  return grpc::SslCredentials(options);
}

TEST_F(SecurityTest, StrangersAreRefusedAndTheJobIsUnharmed) {
  auto job = ParseJobYaml(JobYaml(6));
  ASSERT_TRUE(job.ok()) << job.status();
  auto ref = RunCoordinator(*job, Options("ref"));
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_FALSE(EphemeralTlsDir().empty()) << "the embedded default did not make its ephemeral CA";
  auto our_ca = ReadFile(JoinPath(EphemeralTlsDir(), kTlsCaFile));
  ASSERT_TRUE(our_ca.ok()) << our_ca.status();
  auto other_ca = MakeCertificateAuthority("intruder CA", absl::Hours(1));
  ASSERT_TRUE(other_ca.ok()) << other_ca.status();
  auto other_cert = IssueCertificate(*other_ca, {"127.0.0.1", "localhost"}, absl::Hours(1));
  ASSERT_TRUE(other_cert.ok()) << other_cert.status();
  const std::vector<std::pair<std::string, std::shared_ptr<grpc::ChannelCredentials>>> intruders = {
      {"plaintext", grpc::InsecureChannelCredentials()},
      {"certificate from another CA", TlsCredentials(*our_ca, &*other_cert)},
      {"TLS without a client certificate", TlsCredentials(*our_ca, nullptr)},
  };

  std::atomic<bool> done{false};
  std::atomic<int> rounds{0}, rounds_during_steps{0};
  std::atomic<int64_t> steps_done{0};
  std::vector<std::string> unexpected;  // written by the attacker thread only, read after join
  std::thread attacker;
  CoordinatorOptions options = Options("attacked");
  options.hooks.on_start = [&](const RunStart& start) {
    attacker = std::thread([&, addresses = start.addresses] {
      while (!done) {
        const bool during = steps_done.load() < 6;
        for (const std::string& address : addresses) {
          for (const auto& [who, credentials] : intruders) {
            std::vector<grpc::StatusCode> codes = AttackStage(address, credentials);
            for (size_t i = 0; i < codes.size(); ++i) {
              if (codes[i] != grpc::StatusCode::UNAVAILABLE) {
                unexpected.push_back(absl::StrCat(who, " call ", i, " on ", address, ": code ", codes[i]));
              }
            }
          }
        }
        ++rounds;
        if (during && steps_done.load() < 6) ++rounds_during_steps;
      }
    });
  };
  options.hooks.on_step = [&](const PipelineStepRecord& r) {
    steps_done = r.step;
    // Give the attacker time for a round in every step, so that the attacks overlap the training.
    for (int i = 0; i < 200 && rounds.load() < r.step; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  auto attacked = RunCoordinator(*job, options);
  done = true;
  if (attacker.joinable()) attacker.join();
  ASSERT_TRUE(attacked.ok()) << attacked.status();
  EXPECT_TRUE(unexpected.empty()) << unexpected.front();
  EXPECT_GE(rounds_during_steps.load(), 3) << "the attacks did not overlap the training";
  ASSERT_EQ(attacked->steps.size(), 6u);
  auto a = Lora("ref"), b = Lora("attacked");
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(at::equal(t, b.at(name))) << name << " differs after the attacks";
  }
}

TEST_F(SecurityTest, JobServiceRefusesCallsWithoutTheToken) {
  ASSERT_TRUE(LocalWorkerSecurityArgs().ok());  // the process's identity: the ephemeral CA's 127.0.0.1 certificate
  const ProcessSecurity security = *GetProcessSecurity();
  ASSERT_FALSE(security.insecure);
  JobServiceOptions service;
  service.listen = "127.0.0.1:0";
  service.output_root = JoinPath(*dir_, "jobs");
  service.base = Options("unused");
  service.token = "s3cret-token";
  std::atomic<bool> shutdown{false};
  std::string address;
  std::mutex mu;
  std::condition_variable cv;
  absl::Status served;
  std::thread server([&] {
    served = RunJobService(
        service,
        [&](const std::string& a) {
          std::lock_guard<std::mutex> lock(mu);
          address = a;
          cv.notify_all();
        },
        &shutdown);
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(20), [&] { return !address.empty() || !served.ok(); });
  }
  ASSERT_FALSE(address.empty()) << served;

  auto submit = [&](const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
    auto stub = v1::JobService::NewStub(MakeChannel(address, credentials));
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineAfter(absl::Seconds(10)));
    v1::SubmitRequest req;
    req.set_job_yaml(JobYaml(1));
    v1::SubmitResponse resp;
    grpc::Status s = stub->Submit(&ctx, req, &resp);
    return std::make_pair(s.error_code(), s.error_message());
  };
  auto list = [&](const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineAfter(absl::Seconds(10)));
    v1::ListResponse resp;
    return v1::JobService::NewStub(MakeChannel(address, credentials))
        ->List(&ctx, v1::ListRequest(), &resp)
        .error_code();
  };
  ProcessSecurity client;  // what a user holds: the CA, no certificate
  client.ca_pem = security.ca_pem;
  auto no_token = submit(ClientChannelCredentials(client, ""));
  EXPECT_EQ(no_token.first, grpc::StatusCode::UNAUTHENTICATED) << no_token.second;
  EXPECT_NE(no_token.second.find("token"), std::string::npos) << no_token.second;
  EXPECT_EQ(submit(ClientChannelCredentials(client, "s3cret-tokem")).first, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(submit(ClientChannelCredentials(client, "s3cret-token-and-more")).first, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list(ClientChannelCredentials(client, "")), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(submit(grpc::InsecureChannelCredentials()).first, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(list(ClientChannelCredentials(client, "s3cret-token")), grpc::StatusCode::OK);  // the control
  shutdown = true;
  server.join();
  EXPECT_TRUE(served.ok()) << served;
}

TEST_F(SecurityTest, InsecureWorksAndWarns) {
  const std::string log = JoinPath(*dir_, "insecure-worker.log");
  pid_t pid = test_util::SpawnLogged({JoinPath(BinDir(), "stage_worker"), "--listen=127.0.0.1:0", "--insecure",
                                      "--wait_timeout_s=30", "--model_root=" + *dir_},
                                     log);
  ASSERT_GT(pid, 0);
  std::string address;
  static const std::regex kListening("LISTENING (\\S+)");
  for (int i = 0; i < 400 && address.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::smatch m;
    const std::string text = ReadFile(log).value_or("");
    if (std::regex_search(text, m, kListening)) address = m[1];
  }
  ASSERT_FALSE(address.empty()) << ReadFile(log).value_or("");
  EXPECT_NE(ReadFile(log).value_or("").find("stage_worker: WARNING: --insecure"), std::string::npos);
  auto run = RunCommand(absl::StrCat(BinDir(), "/coordinator --stages 1 --insecure --workers ", address, " --job ",
                                     JoinPath(*dir_, "job.yaml"), " --output ", JoinPath(*dir_, "insecure-run")),
                        true);
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("coordinator: WARNING: --insecure"), std::string::npos) << run.output;
  EXPECT_TRUE(PathExists(JoinPath(JoinPath(*dir_, "insecure-run"), "lora.safetensors")));
}

TEST_F(SecurityTest, RemoteServersNeedSecurityFlags) {
  const std::string job = JoinPath(*dir_, "job.yaml");
  auto workers =
      RunCommand(absl::StrCat(BinDir(), "/coordinator --stages 2 --workers 127.0.0.1:1,127.0.0.1:2 --job ", job), true);
  EXPECT_EQ(workers.exit_code, 2) << workers.output;
  EXPECT_NE(workers.output.find("--tls_dir DIR"), std::string::npos) << workers.output;
  EXPECT_NE(workers.output.find("--insecure"), std::string::npos) << workers.output;
  auto listen = RunCommand(absl::StrCat(BinDir(), "/coordinator --stages 2 --listen 127.0.0.1:0"), true);
  EXPECT_EQ(listen.exit_code, 2) << listen.output;
  EXPECT_NE(listen.output.find("--tls_dir DIR"), std::string::npos) << listen.output;
  auto worker = RunCommand(absl::StrCat(BinDir(), "/stage_worker --listen 127.0.0.1:0"), true);
  EXPECT_EQ(worker.exit_code, 2) << worker.output;
  EXPECT_NE(worker.output.find("stage_worker: no transport security given"), std::string::npos) << worker.output;
  auto encoder = RunCommand(absl::StrCat(BinDir(), "/encoder_worker --model /nonexistent --listen 127.0.0.1:0"), true);
  EXPECT_EQ(encoder.exit_code, 2) << encoder.output;
  EXPECT_NE(encoder.output.find("encoder_worker: no transport security given"), std::string::npos) << encoder.output;
}

mode_t Mode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

TEST_F(SecurityTest, BatonCertsMakesFilesGrpcAccepts) {
  const std::string out = JoinPath(*dir_, "certs");
  auto made =
      RunCommand(absl::StrCat(BinDir(), "/baton certs --out ", out, " --hosts 127.0.0.1,worker-a.example"), true);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_NE(made.output.find("--tls_dir"), std::string::npos) << made.output;
  EXPECT_EQ(Mode(JoinPath(out, "ca.key")), 0600u);
  EXPECT_EQ(Mode(JoinPath(out, "token")), 0600u);
  EXPECT_EQ(Mode(JoinPath(out, "127.0.0.1/tls.key")), 0600u);
  EXPECT_EQ(Mode(JoinPath(out, "client/token")), 0600u);
  for (const char* f : {"worker-a.example/ca.crt", "worker-a.example/tls.crt", "client/tls.crt", "client/ca.crt"}) {
    EXPECT_TRUE(PathExists(JoinPath(out, f))) << f;
  }
  auto again = RunCommand(absl::StrCat(BinDir(), "/baton certs --out ", out, " --hosts 127.0.0.1"), true);
  EXPECT_NE(again.exit_code, 0) << "overwrote an existing CA";

  // A real mTLS server on the files, and real clients.
  const std::string log = JoinPath(*dir_, "certs-worker.log");
  pid_t pid = test_util::SpawnLogged(
      {JoinPath(BinDir(), "stage_worker"), "--listen=127.0.0.1:0", absl::StrCat("--tls_dir=", out, "/127.0.0.1")}, log);
  ASSERT_GT(pid, 0);
  std::string address;
  static const std::regex kListening("LISTENING (\\S+)");
  for (int i = 0; i < 400 && address.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::smatch m;
    const std::string text = ReadFile(log).value_or("");
    if (std::regex_search(text, m, kListening)) address = m[1];
  }
  auto ours = RunCommand(absl::StrCat(BinDir(), "/baton health ", address, " --tls-dir ", out, "/client"), true);
  // (Other CAs' and plaintext clients are refused: StrangersAreRefusedAndTheJobIsUnharmed, rpc/tls_test.cc.)
  // None at all: not even the BATON_TLS_DIR another suite of this process may have set (JobServiceTest's).
  auto none =
      RunCommand(absl::StrCat("env -u BATON_TLS_DIR -u BATON_TOKEN ", BinDir(), "/baton health ", address), true);
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  ASSERT_FALSE(address.empty()) << ReadFile(log).value_or("");
  EXPECT_EQ(ours.exit_code, 0) << ours.output;
  EXPECT_NE(ours.output.find("SERVING"), std::string::npos) << ours.output;
  EXPECT_NE(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("--tls-dir"), std::string::npos) << none.output;
}

}  // namespace
}  // namespace baton
