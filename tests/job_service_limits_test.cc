// What a submitter can make the job service (a real `coordinator --listen` process) spend, and read: a job file
// over the size limit, one packed with timesteps and one that names paths outside --data_root are each refused at
// submit with a message that names the file (and line, or the path), the service's peak resident memory stays within
// tens of MB of where it was, and the service keeps serving. The issue measured 5.7 GB for a 50 MB timesteps list.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <thread>
#include <vector>

#include "baton/v1/job_service.grpc.pb.h"
#include "core/testing/paths.h"
#include "core/testing/spawn.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/job.h"
#include "core/util/files.h"
#include "rpc/grpc_options.h"

namespace baton {
namespace {

// kB of /proc/<pid>/status's `field`.
int64_t StatusKb(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

std::string Timesteps(size_t n) {
  std::string yaml = "model: m\ndataset: d\nsteps: 4\nvalidation: {every: 1, timesteps: [0.5";
  yaml.reserve(yaml.size() + 4 * n + 4);
  for (size_t i = 1; i < n; ++i) yaml += ",0.5";
  return yaml + "]}\n";
}

class JobServiceLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::MakeTempDir("job_service_limits");
    data_ = JoinPath(dir_, "data");
    ASSERT_TRUE(MakeDirs(data_).ok());
    log_ = JoinPath(dir_, "coordinator.log");
    pid_ = test_util::SpawnLogged(
        {JoinPath(test_util::BinDir(), "coordinator"), "--listen=127.0.0.1:0", "--stages=2", "--insecure",
         absl::StrCat("--output=", JoinPath(dir_, "jobs")), absl::StrCat("--data_root=", data_)},
        log_);
    static const std::regex kListening("LISTENING (\\S+)");
    std::string address;
    for (int i = 0; i < 1200 && address.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::smatch m;
      const std::string text = ReadFile(log_).value_or("");
      if (std::regex_search(text, m, kListening)) address = m[1];
    }
    ASSERT_FALSE(address.empty()) << ReadFile(log_).value_or("");
    GrpcOptions options;
    options.max_message_bytes = 256 << 20;  // a client that sends what it likes
    stub_ = v1::JobService::NewStub(MakeChannel(address, grpc::InsecureChannelCredentials(), options));
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  grpc::Status Submit(const std::string& yaml, const std::string& file) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineAfter(absl::Seconds(60)));
    v1::SubmitRequest req;
    req.set_job_yaml(yaml);
    req.set_job_file(file);
    v1::SubmitResponse resp;
    return stub_->Submit(&ctx, req, &resp);
  }

  std::string dir_, data_, log_;
  pid_t pid_ = 0;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

TEST_F(JobServiceLimitsTest, OversizedJobsAreRefusedAndTheServiceStaysSmall) {
  const int64_t idle_kb = StatusKb(pid_, "VmRSS");
  ASSERT_GT(idle_kb, 0);
  std::ofstream(absl::StrCat("/proc/", pid_, "/clear_refs")) << "5";  // reset the peak to now
  // 1. 100 MB of timesteps (the list was 50 MB): gRPC refuses it (kMaxRequestBytes) and the server's
  //    resource quota keeps it from buffering the whole request first (it did: +387 MB for 400 MB).
  grpc::Status big = Submit(Timesteps(25 << 20), "huge.yaml");
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << big.error_message();
  // 2. 1 MB with 200 k timesteps (the second job): under gRPC's limit, over the job file's.
  std::string many = Timesteps(200000);
  grpc::Status mid = Submit(many, "jobs/many.yaml");
  EXPECT_EQ(mid.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << mid.error_message();
  EXPECT_EQ(mid.error_message(), absl::StrCat("jobs/many.yaml: the job file is ", many.size(),
                                              " bytes; a job file is at most 262144 (256 KiB)"));
  // 3. As many timesteps as fit the size limit: the list's own limit, with file:line.
  grpc::Status packed = Submit(Timesteps(60000), "jobs/packed.yaml");
  EXPECT_EQ(packed.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << packed.error_message();
  EXPECT_EQ(packed.error_message().rfind("jobs/packed.yaml:4: 'timesteps' lists 60000 entries; at most 32", 0), 0u)
      << packed.error_message();
  const double growth_mb = static_cast<double>(StatusKb(pid_, "VmHWM") - idle_kb) / 1024.0;
  std::printf("service: idle %.0f MB resident, peak +%.1f MB over the three submits\n", idle_kb / 1024.0, growth_mb);
  EXPECT_LT(growth_mb, 96) << "the job service's peak resident set grew by " << growth_mb << " MB";
  // 4. The service still serves.
  grpc::ClientContext ctx;
  v1::ListResponse list;
  EXPECT_TRUE(stub_->List(&ctx, v1::ListRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

TEST_F(JobServiceLimitsTest, PathsOutsideTheDataRootAreRefusedByName) {
  for (const char* path : {"/etc/shadow", "/etc/no-such-file"}) {
    grpc::Status s = Submit(absl::StrCat("model: ", path, "\ndataset: ", data_, "\n"), "jobs/probe.yaml");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_EQ(s.error_message(),
              absl::StrCat("jobs/probe.yaml:1: model: ", path, " is outside the job service's --data_root ", data_));
  }
  grpc::Status cache = Submit(absl::StrCat("model: ", data_, "\ndataset: ", dir_, "\n"), "jobs/cache.yaml");
  EXPECT_EQ(cache.error_code(), grpc::StatusCode::PERMISSION_DENIED) << cache.error_message();
  EXPECT_NE(cache.error_message().find("jobs/cache.yaml:2: dataset: " + dir_), std::string::npos)
      << cache.error_message();
}

}  // namespace
}  // namespace baton
