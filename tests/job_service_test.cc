// The job service end to end, as a user drives it: a real `coordinator --listen` process (which starts two
// local stage workers per job) and the real `baton` client commands, on a tiny model. Checks the queue order,
// that watch streams every step and the end state, that a bad job is refused at submit with file:line, that
// stop checkpoints a running job, that download returns the job's LoRA byte for byte — the same bytes
// `coordinator --job` writes for the same job —, that SIGTERM checkpoints the running job and a restarted
// service still knows it, and that watch, status and download show a job's validation loss and sample images.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>
#include <vector>

#include "baton/v1/job_service.grpc.pb.h"
#include "coordinator/checkpoint.h"
#include "core/data/cache.h"
#include "core/encode/flux2_encoder.h"
#include "core/model/flux2_config.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/spawn.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "rpc/grpc_options.h"
#include "rpc/tls.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::RunCommand;

// `baton certs` output in <dir>/certs (made once), as a user deploys it: the coordinator serves TLS with the
// 127.0.0.1 certificate and checks the token; the `baton` commands find ca.crt and the token through
// BATON_TLS_DIR=<dir>/certs/client.
std::string Certs(const std::string& dir) {
  const std::string certs = JoinPath(dir, "certs");
  if (!PathExists(certs)) {
    auto r = RunCommand(absl::StrCat(BinDir(), "/baton certs --out ", certs, " --hosts 127.0.0.1"), true);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  ::setenv("BATON_TLS_DIR", JoinPath(certs, "client").c_str(), 1);
  return certs;
}

// A `coordinator --listen 127.0.0.1:0 --stages 2` child; its output goes to <dir>/coordinator-<n>.log.
class Service {
 public:
  Service(const std::string& dir, const std::string& root, const std::vector<std::string>& extra_args = {}) {
    static int count = 0;
    const std::string certs = Certs(dir);
    log_ = JoinPath(dir, absl::StrCat("coordinator-", ++count, ".log"));
    std::vector<std::string> args = {JoinPath(BinDir(), "coordinator"),
                                     "--listen=127.0.0.1:0",
                                     "--stages=2",
                                     absl::StrCat("--output=", root),
                                     absl::StrCat("--data_root=", dir),  // the jobs' model and cache live there
                                     "--rpc_timeout_s=60",
                                     absl::StrCat("--stage_worker=", JoinPath(BinDir(), "stage_worker")),
                                     absl::StrCat("--tls_dir=", JoinPath(certs, "127.0.0.1")),
                                     absl::StrCat("--token_file=", JoinPath(certs, "token"))};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = test_util::SpawnLogged(args, log_);
    static const std::regex kListening("LISTENING (\\S+)");
    for (int i = 0; i < 1200 && pid_ > 0 && address_.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, kListening)) address_ = m[1];
    }
    auto client = LoadTlsDir(JoinPath(certs, "client"));
    EXPECT_TRUE(client.ok()) << client.status();
    auto token = ReadTokenFile(JoinPath(certs, "token"));
    EXPECT_TRUE(token.ok()) << token.status();
    stub_ = v1::JobService::NewStub(MakeChannel(address_, ClientChannelCredentials(*client, *token)));
  }
  ~Service() {
    if (pid_ > 0) Terminate();
  }
  // SIGTERM, then its exit code (-1: killed after 60 s, or died by a signal).
  int Terminate() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 600; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    return -1;
  }
  // SIGKILL: the service dies as in a crash, with no chance to checkpoint (its stage workers die with it).
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return ReadFile(log_).value_or(""); }

  v1::JobInfo Status(const std::string& id) {
    grpc::ClientContext ctx;
    v1::StatusRequest req;
    req.set_job_id(id);
    v1::JobInfo info;
    grpc::Status s = stub_->Status(&ctx, req, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }
  // The job's history: every step point (one per step at this size) and the log tail.
  v1::HistoryResponse History(const std::string& id) {
    grpc::ClientContext ctx;
    v1::HistoryRequest req;
    req.set_job_id(id);
    req.set_log_lines(3);
    v1::HistoryResponse history;
    grpc::Status s = stub_->History(&ctx, req, &history);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return history;
  }
  // The status of a raw Download call (what the `baton` client would never send).
  grpc::Status DownloadStatus(const v1::DownloadRequest& req) {
    grpc::ClientContext ctx;
    auto reader = stub_->Download(&ctx, req);
    v1::FileChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }
  // Polls until `done(status)` or 60 s.
  template <typename F>
  v1::JobInfo WaitFor(const std::string& id, F done) {
    v1::JobInfo info;
    for (int i = 0; i < 1200; ++i) {
      info = Status(id);
      if (done(info)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return info;
  }

 private:
  pid_t pid_ = 0;
  std::string log_, address_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

class JobServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("job_service"));
    Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(*dir_, "model"), 1).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(*dir_, "cache"), c.in_channels, c.joint_attention_dim, 8, {{2, 2}, {2, 3}}, 5, 3)
            .ok());
    service_ = new Service(*dir_, JoinPath(*dir_, "jobs"));
    ASSERT_FALSE(service_->address().empty()) << service_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(service_->Terminate(), 0) << service_->log();
    delete service_;
    delete dir_;
  }

  // A job file with absolute paths (so `coordinator --job` from anywhere reads the same job).
  // `extra`: more keys (`dtype: bf16` makes a job that cannot join a fp32 one: another copy of the frozen weights).
  static std::string WriteJob(const std::string& name, int steps, int checkpoint_every = 0,
                              const std::string& extra = "") {
    const std::string path = JoinPath(*dir_, name + ".yaml");
    EXPECT_TRUE(
        WriteFileAtomic(path, absl::StrCat("model: ", JoinPath(*dir_, "model"), "\ndataset: ", JoinPath(*dir_, "cache"),
                                           "\nlora: {rank: 4, targets: all-linear}\n"
                                           "optimizer: {lr: 0.01}\nsteps: ",
                                           steps,
                                           "\nbatch_size: 2\nmicro_batches: 2\nseed: 5\n"
                                           "checkpoint_every: ",
                                           checkpoint_every, "\n", extra))
            .ok());
    return path;
  }

  static test_util::CommandResult Baton(const std::string& args, Service* service = nullptr) {
    return RunCommand(
        absl::StrCat(BinDir(), "/baton ", args, " --coordinator ", (service ? service : service_)->address()),
        /*with_stderr=*/true);
  }

  // `baton submit`; returns the job id it prints ("job 3 (name) ...").
  static std::string Submit(const std::string& job_file, std::string* output = nullptr, Service* service = nullptr) {
    auto r = Baton(absl::StrCat("submit ", job_file), service);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (output != nullptr) *output = r.output;
    std::smatch m;
    static const std::regex kJob("job (\\d+) \\(");  // anywhere: gRPC may log to stderr first
    return std::regex_search(r.output, m, kJob) ? std::string(m[1]) : "";
  }

  static std::string* dir_;
  static Service* service_;
};
std::string* JobServiceTest::dir_ = nullptr;
Service* JobServiceTest::service_ = nullptr;

bool Ended(const v1::JobInfo& j) { return j.state() >= v1::JOB_STATE_FINISHED; }

// A job that cannot share the running one's stage workers (another precision: other frozen weights) waits for it.
TEST_F(JobServiceTest, SecondJobWaitsForTheFirstAndWatchStreamsEveryStep) {
  std::string out_a, out_b;
  // The first job runs long enough that the second is still queued when its status is read on a loaded machine.
  const std::string a = Submit(WriteJob("first", 16), &out_a);
  const std::string b = Submit(WriteJob("second", 3, 0, "dtype: bf16\n"), &out_b);
  ASSERT_FALSE(a.empty() || b.empty()) << out_a << out_b;
  EXPECT_NE(out_b.find("queued at position 1"), std::string::npos) << out_b;
  v1::JobInfo queued = service_->Status(b);
  EXPECT_EQ(queued.state(), v1::JOB_STATE_QUEUED) << service_->Status(a).error() << service_->log();
  EXPECT_EQ(queued.queue_position(), 1);
  EXPECT_EQ(queued.waiting_for(), absl::StrCat("job ", a, " (another model, precision or cut on the stage workers)"));

  auto watch = Baton(absl::StrCat("watch ", b));  // stdout is a pipe: plain lines
  EXPECT_EQ(watch.exit_code, 0) << watch.output;
  for (int step = 1; step <= 3; ++step) {
    EXPECT_NE(watch.output.find(absl::StrCat("job ", b, " step ", step, "/3 loss ")), std::string::npos)
        << "step " << step << " missing from:\n"
        << watch.output;
  }
  const size_t last_step = watch.output.find(absl::StrCat("job ", b, " step 3/3 "));
  const size_t checkpoint = watch.output.find(absl::StrCat("job ", b, " checkpoint step 3\n"));
  const size_t finished = watch.output.find(absl::StrCat("job ", b, " finished: step 3/3"));
  EXPECT_NE(finished, std::string::npos) << watch.output;
  EXPECT_TRUE(last_step < checkpoint && checkpoint < finished) << "events out of order:\n" << watch.output;

  v1::JobInfo ja = service_->Status(a), jb = service_->Status(b);
  EXPECT_EQ(ja.state(), v1::JOB_STATE_FINISHED) << ja.error();
  EXPECT_EQ(jb.state(), v1::JOB_STATE_FINISHED) << jb.error();
  // Nothing running or queued: a watch without an id follows the newest job (it had NOT_FOUND).
  auto newest = Baton("watch --plain");
  EXPECT_EQ(newest.exit_code, 0) << newest.output;
  EXPECT_NE(newest.output.find(absl::StrCat("job ", b, " finished")), std::string::npos) << newest.output;
  EXPECT_GE(jb.start_time_unix(), ja.end_time_unix()) << "the second job started before the first ended";
  ASSERT_EQ(jb.stage_totals_size(), 2);
  EXPECT_GT(jb.stage_totals(0).busy_seconds(), 0);
  EXPECT_GT(jb.stage_totals(1).busy_seconds(), 0);

  auto list = Baton("list");
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_LT(list.output.find(absl::StrCat("\n", b, " ")), list.output.find(absl::StrCat("\n", a, " ")))
      << "finished jobs are listed newest first:\n"
      << list.output;
}

// Issue 38: a job of the model a running job trains joins it on the same stage workers instead of queueing -- no
// model load, its first step within seconds -- and ends on its own while the first goes on; a submitted sweep becomes
// one job per member, all running at once.
TEST_F(JobServiceTest, AJobOfTheSameModelJoinsTheRunningOneAndASweepRunsItsMembersAtOnce) {
  const std::string a = Submit(WriteJob("long", 100000));
  ASSERT_FALSE(a.empty());
  ASSERT_GE(service_->WaitFor(a, [](const v1::JobInfo& j) { return j.last_step().step() >= 1; }).last_step().step(), 1)
      << service_->log();
  std::string out;
  const std::string b = Submit(WriteJob("joiner", 3), &out);
  ASSERT_FALSE(b.empty()) << out;
  EXPECT_NE(out.find("starts now"), std::string::npos) << out;
  // It starts beside the first (not after it) and, the model already loaded, runs its three steps within seconds.
  const v1::JobInfo joined = service_->WaitFor(b, Ended);
  EXPECT_EQ(joined.state(), v1::JOB_STATE_FINISHED) << joined.error() << service_->log();
  EXPECT_EQ(joined.last_step().step(), 3);
  const double seconds = joined.end_time_unix() - joined.start_time_unix();
  std::printf("the joining job ran from its start to its 3rd step in %.2f s\n", seconds);
  EXPECT_LT(seconds, 20) << "a joining job loads no model";
  EXPECT_EQ(service_->Status(a).state(), v1::JOB_STATE_RUNNING) << "the first job ended with the joiner";

  // A sweep of two learning rates beside the long job: two more jobs, named by their values, running together.
  const std::string sweep = WriteJob("sweep", 3, 0, "sweep: {optimizer.lr: [0.01, 0.02]}\n");
  const std::string m1 = Submit(sweep, &out);
  ASSERT_FALSE(m1.empty()) << out;
  const std::string m2 = absl::StrCat(std::stoll(m1) + 1);
  EXPECT_NE(out.find(absl::StrCat("job ", m2, " (sweep.lr_0.02)")), std::string::npos) << "every member said: " << out;
  const v1::JobInfo first_member = service_->WaitFor(m1, Ended), second_member = service_->WaitFor(m2, Ended);
  EXPECT_EQ(first_member.name(), "sweep.lr_0.01");
  EXPECT_EQ(second_member.name(), "sweep.lr_0.02");
  EXPECT_EQ(first_member.state(), v1::JOB_STATE_FINISHED) << first_member.error() << service_->log();
  EXPECT_EQ(second_member.state(), v1::JOB_STATE_FINISHED) << second_member.error();
  EXPECT_LT(second_member.start_time_unix(), first_member.end_time_unix()) << "the members ran one after another";
  const auto a_lora = test_util::LoadRunLora(first_member.output_dir()),
             b_lora = test_util::LoadRunLora(second_member.output_dir());
  ASSERT_FALSE(a_lora.empty());
  ASSERT_EQ(a_lora.size(), b_lora.size());
  bool differ = false;
  for (const auto& [name, t] : a_lora)
    differ |= name.find("lora_B") != std::string::npos && !at::equal(t, b_lora.at(name));
  EXPECT_TRUE(differ) << "two learning rates trained the same LoRA";
  EXPECT_EQ(Baton(absl::StrCat("stop ", a)).exit_code, 0);
  EXPECT_EQ(service_->WaitFor(a, Ended).state(), v1::JOB_STATE_STOPPED) << service_->log();
}

TEST_F(JobServiceTest, BadJobIsRefusedAtSubmitWithFileAndLine) {
  const std::string bad = JoinPath(*dir_, "bad.yaml");
  ASSERT_TRUE(WriteFileAtomic(bad, absl::StrCat("model: ", JoinPath(*dir_, "model"),
                                                "\ndataset: ", JoinPath(*dir_, "cache"), "\nsteps: -2\n"))
                  .ok());
  auto r = Baton(absl::StrCat("submit ", bad));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(absl::StrCat(bad, ":3")), std::string::npos) << r.output;

  const std::string missing = JoinPath(*dir_, "missing.yaml");
  ASSERT_TRUE(WriteFileAtomic(missing, absl::StrCat("steps: 2\nmodel: ", JoinPath(*dir_, "no/such/model"),
                                                    "\ndataset: ", JoinPath(*dir_, "cache"), "\n"))
                  .ok());
  r = Baton(absl::StrCat("submit ", missing));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(absl::StrCat(missing, ":2: model: ")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("INVALID_ARGUMENT"), std::string::npos) << r.output;
}

// Relative paths mean what they mean to `coordinator --job` run where the user typed `baton submit`.
TEST_F(JobServiceTest, RelativePathsResolveAgainstTheSubmittersDirectory) {
  const std::string sub = JoinPath(*dir_, "relative");
  ASSERT_TRUE(MakeDirs(sub).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(sub, "rel.yaml"), "model: ../model\ndataset: ../cache\nsteps: 2\n").ok());
  auto r = RunCommand(absl::StrCat("cd ", sub, " && ", BinDir(), "/baton submit rel.yaml --name rel --coordinator ",
                                   service_->address()),
                      true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("job (\\d+) \\("))) << r.output;
  v1::JobInfo done = service_->WaitFor(m[1], Ended);
  EXPECT_EQ(done.state(), v1::JOB_STATE_FINISHED) << done.error();
  EXPECT_EQ(done.name(), "rel");
  // Submitted from another directory the same file names nothing there: refused at submit, naming the line.
  auto wrong = Baton(absl::StrCat("submit ", JoinPath(sub, "rel.yaml")));
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_NE(wrong.output.find("rel.yaml:1: model: "), std::string::npos) << wrong.output;
}

TEST_F(JobServiceTest, StopCheckpointsARunningJob) {
  const std::string id = Submit(WriteJob("long", 100000));
  ASSERT_FALSE(id.empty());
  v1::JobInfo running = service_->WaitFor(id, [](const v1::JobInfo& j) { return j.last_step().step() >= 2; });
  ASSERT_GE(running.last_step().step(), 2) << service_->log();
  auto stop = Baton(absl::StrCat("stop ", id));
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  v1::JobInfo stopped = service_->WaitFor(id, Ended);
  EXPECT_EQ(stopped.state(), v1::JOB_STATE_STOPPED) << stopped.error();
  EXPECT_LT(stopped.last_step().step(), 100000);
  EXPECT_EQ(stopped.last_checkpoint_step(), stopped.last_step().step());

  auto list = Baton(absl::StrCat("checkpoints ", id));
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find(absl::StrCat("step ", stopped.last_step().step(), " ")), std::string::npos) << list.output;
  const std::string file = JoinPath(*dir_, "stopped.safetensors");
  auto dl = Baton(absl::StrCat("download ", id, " --checkpoint ", stopped.last_step().step(), " --out ", file));
  EXPECT_EQ(dl.exit_code, 0) << dl.output;
  // A checkpoint's LoRA comes as the job writes its lora.safetensors (diffusers names, alpha/r folded), not as the
  // raw adapters the run resumes from: here the stop's, the same tensors as the lora.safetensors the stop wrote.
  auto got = LoadAllSafetensors(file);
  auto written = LoadAllSafetensors(JoinPath(stopped.output_dir(), "lora.safetensors"));
  ASSERT_TRUE(got.ok() && written.ok()) << got.status() << written.status();
  ASSERT_EQ(got->size(), written->size());
  for (const auto& [name, t] : *written) {
    ASSERT_TRUE(got->count(name)) << name;
    EXPECT_TRUE(at::equal(got->at(name), t)) << name;
  }
  EXPECT_EQ(Baton(absl::StrCat("stop ", id)).exit_code, 1) << "stopping an ended job is an error";

  // Continued, it resumes from the stop's checkpoint; its history holds each step once.
  auto cont = Baton(absl::StrCat("continue ", id));
  EXPECT_EQ(cont.exit_code, 0) << cont.output;
  const int64_t at = stopped.last_step().step();
  v1::JobInfo resumed = service_->WaitFor(id, [&](const v1::JobInfo& j) { return j.last_step().step() >= at + 2; });
  EXPECT_EQ(resumed.state(), v1::JOB_STATE_RUNNING) << resumed.error();
  EXPECT_EQ(resumed.first_step(), at);
  EXPECT_EQ(Baton(absl::StrCat("continue ", id)).exit_code, 1) << "a running job cannot continue";
  v1::HistoryResponse history = service_->History(id);
  ASSERT_GE(history.points_size(), at + 2);
  for (int i = 0; i < history.points_size(); ++i) EXPECT_EQ(history.points(i).step(), i + 1);
  EXPECT_EQ(history.logged_steps(), history.points_size());
  EXPECT_EQ(history.log_tail_size(), 3);
  EXPECT_EQ(Baton(absl::StrCat("stop ", id)).exit_code, 0);
  EXPECT_EQ(service_->WaitFor(id, Ended).state(), v1::JOB_STATE_STOPPED);
}

TEST_F(JobServiceTest, DownloadEqualsTheJobsOutputAndCoordinatorJobBitwise) {
  const std::string job = WriteJob("same", 3, /*checkpoint_every=*/2);
  const std::string id = Submit(job);
  ASSERT_FALSE(id.empty());
  v1::JobInfo done = service_->WaitFor(id, Ended);
  ASSERT_EQ(done.state(), v1::JOB_STATE_FINISHED) << done.error();
  const std::string file = JoinPath(*dir_, "downloaded.safetensors");
  auto dl = Baton(absl::StrCat("download ", id, " --out ", file));
  ASSERT_EQ(dl.exit_code, 0) << dl.output;
  auto downloaded = ReadFile(file);
  ASSERT_TRUE(downloaded.ok());
  EXPECT_EQ(*downloaded, ReadFile(JoinPath(done.output_dir(), "lora.safetensors")).value_or(""));
  // In original naming the service converts it (baton needs no libtorch): the file `baton lora-convert` writes.
  const std::string original = JoinPath(*dir_, "original.safetensors"), converted = JoinPath(*dir_, "conv.safetensors");
  auto dl_original = Baton(absl::StrCat("download ", id, " --naming original --out ", original));
  ASSERT_EQ(dl_original.exit_code, 0) << dl_original.output;
  auto convert = RunCommand(
      absl::StrCat(BinDir(), "/baton lora-convert --in ", file, " --out ", converted, " --to original"), true);
  ASSERT_EQ(convert.exit_code, 0) << convert.output;
  EXPECT_TRUE(ReadFile(original).value_or("a") == ReadFile(converted).value_or("b"));
  EXPECT_NE(Baton(absl::StrCat("download ", id, " --naming kohya --out ", original)).exit_code, 0);

  const std::string direct = JoinPath(*dir_, "direct");
  auto run = RunCommand(absl::StrCat(BinDir(), "/coordinator --stages 2 --job ", job, " --output ", direct,
                                     " --stage_worker ", BinDir(), "/stage_worker"),
                        true);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(*downloaded == ReadFile(JoinPath(direct, "lora.safetensors")).value_or(""))
      << "the service's LoRA differs from coordinator --job's";
}

// Issue 12 through the service: a job with validation: and samples: shows each evaluation in `baton watch` (in
// order, between the steps) and in its status, and `baton download --samples` fetches its pictures.
TEST_F(JobServiceTest, WatchShowsEvaluationsAndDownloadFetchesSampleImages) {
  const std::string pipeline = JoinPath(*dir_, "pipeline");
  ASSERT_TRUE(WriteTinyFlux2Pipeline(pipeline, 2).ok());
  auto config = LoadFlux2Config(JoinPath(pipeline, "transformer/config.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string cache = JoinPath(*dir_, "pipeline_cache");
  ASSERT_TRUE(WriteSyntheticCache(cache, config->in_channels, config->joint_attention_dim, 8, {{2, 2}}, 8, 4).ok());
  const std::string job = JoinPath(*dir_, "evals.yaml");
  ASSERT_TRUE(WriteFileAtomic(job, absl::StrCat("model: ", pipeline, "\ndataset: ", cache,
                                                "\nlora: {rank: 4, targets: all-linear}\noptimizer: {lr: 0.01}\n"
                                                "steps: 2\nbatch_size: 2\nmicro_batches: 2\nseed: 5\n"
                                                "validation: {every: 1, samples: 2, timesteps: [0.25, 0.75]}\n"
                                                "samples: {every: 2, prompts: [a red circle, a blue square], steps: 2, "
                                                "size: [32, 32], seed: 1}\n"))
                  .ok());
  const std::string id = Submit(job);
  ASSERT_FALSE(id.empty());
  auto watch = Baton(absl::StrCat("watch ", id, " --plain"));
  ASSERT_EQ(watch.exit_code, 0) << watch.output;
  size_t at = 0;
  for (const char* line :
       {"validation after step 0: mean", "samples after step 0: 2 images", "step 1/2", "validation after step 1: mean",
        "step 2/2", "validation after step 2: mean", "samples after step 2: 2 images", "finished"}) {
    const size_t found = watch.output.find(absl::StrCat("job ", id, " ", line), at);
    ASSERT_NE(found, std::string::npos) << "'" << line << "' missing or out of order in:\n" << watch.output;
    at = found;
  }

  v1::JobInfo info = service_->Status(id);
  const v1::ValidationProgress& v = info.last_validation();
  EXPECT_EQ(v.step(), 2);
  ASSERT_EQ(v.timesteps_size(), 2);
  ASSERT_EQ(v.losses_size(), 2);
  EXPECT_NEAR(v.mean(), (v.losses(0) + v.losses(1)) / 2, 1e-9 * v.mean());
  EXPECT_EQ(info.last_samples().step(), 2);
  EXPECT_EQ(info.last_samples().images(), 2);

  // The contact sheet, and prompt 1's image, byte for byte.
  const std::string step_dir = JoinPath(info.output_dir(), "samples/step-2");
  const std::string sheet = JoinPath(*dir_, "sheet.png"), image = JoinPath(*dir_, "image1.png");
  auto dl = Baton(absl::StrCat("download ", id, " --samples 2 --out ", sheet));
  ASSERT_EQ(dl.exit_code, 0) << dl.output;
  EXPECT_EQ(ReadFile(sheet).value_or("a"), ReadFile(JoinPath(step_dir, "contact_sheet.png")).value_or("b"));
  dl = Baton(absl::StrCat("download ", id, " --samples 2 --image 1 --out ", image));
  ASSERT_EQ(dl.exit_code, 0) << dl.output;
  EXPECT_EQ(ReadFile(image).value_or("a"), ReadFile(JoinPath(step_dir, "1.png")).value_or("b"));
  // A step without samples, and a file name that would leave the step's folder, are refused.
  dl = Baton(absl::StrCat("download ", id, " --samples 1 --out ", image));
  EXPECT_NE(dl.exit_code, 0);
  EXPECT_NE(dl.output.find("has no"), std::string::npos) << dl.output;
  v1::DownloadRequest escape;
  escape.set_job_id(id);
  escape.set_samples_step(2);
  escape.set_sample_file("../../lora.safetensors");
  EXPECT_EQ(service_->DownloadStatus(escape).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, SigtermCheckpointsTheRunningJobAndARestartedServiceResumesIt) {
  const std::string root = JoinPath(*dir_, "jobs_restart");
  std::string running, queued;
  int64_t checkpointed = 0;
  {
    Service first(*dir_, root);
    ASSERT_FALSE(first.address().empty()) << first.log();
    running = Submit(WriteJob("endless", 100000), nullptr, &first);
    queued = Submit(WriteJob("after", 2, 0, "dtype: bf16\n"), nullptr, &first);  // cannot join it
    ASSERT_FALSE(running.empty() || queued.empty());
    v1::JobInfo r = first.WaitFor(running, [](const v1::JobInfo& j) { return j.last_step().step() >= 2; });
    ASSERT_GE(r.last_step().step(), 2) << first.log();
    // A watch that sees the shutdown's stop does not report the job's end (`watch && download` took a mid-run LoRA).
    test_util::CommandResult watched;
    std::thread watcher([&] { watched = Baton(absl::StrCat("watch ", running, " --plain"), &first); });
    std::this_thread::sleep_for(std::chrono::seconds(1));
    EXPECT_EQ(first.Terminate(), 0) << first.log();
    watcher.join();
    EXPECT_EQ(watched.exit_code, 1) << watched.output;
    EXPECT_NE(watched.output.find("stopped by the job service's shutdown"), std::string::npos) << watched.output;
    auto record = ReadFile(JoinPath(r.output_dir(), "job.json"));
    ASSERT_TRUE(record.ok());
    EXPECT_NE(record->find("JOB_STATE_STOPPED"), std::string::npos) << *record;
    auto steps = ListCheckpointSteps(r.output_dir());
    ASSERT_TRUE(steps.ok() && !steps->empty()) << "SIGTERM left no checkpoint";
    checkpointed = steps->back();
    EXPECT_GE(checkpointed, r.last_step().step());
  }
  // The restarted service resumes the interrupted job from its checkpoint before the queued one.
  Service second(*dir_, root);
  ASSERT_FALSE(second.address().empty()) << second.log();
  v1::JobInfo resumed = second.WaitFor(running, [&](const v1::JobInfo& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.last_step().step() > checkpointed;
  });
  EXPECT_EQ(resumed.first_step(), checkpointed);
  EXPECT_EQ(second.Status(queued).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Baton(absl::StrCat("stop ", running), &second).exit_code, 0);
  v1::JobInfo after = second.WaitFor(queued, Ended);
  EXPECT_EQ(after.state(), v1::JOB_STATE_FINISHED) << after.error() << second.log();
  EXPECT_EQ(after.last_step().step(), 2);
  EXPECT_GE(after.start_time_unix(), second.Status(running).end_time_unix());
  EXPECT_EQ(second.Terminate(), 0) << second.log();
}

// Issue 25, part 4: the service killed with SIGKILL while a job runs. The restarted service resumes that job from its
// newest checkpoint (it used to mark it failed at "step 0/12"), its status shows how far it had got, and the LoRA
// it ends with equals the uninterrupted run's, bitwise.
TEST_F(JobServiceTest, SigkillOfTheServiceResumesTheRunningJobOnRestart) {
  const std::string root = JoinPath(*dir_, "jobs_sigkill");
  const std::string job = WriteJob("killed", 12, /*checkpoint_every=*/2);
  std::string id, out;
  int64_t checkpointed = 0;
  {
    Service first(*dir_, root);
    ASSERT_FALSE(first.address().empty()) << first.log();
    id = Submit(job, nullptr, &first);
    ASSERT_FALSE(id.empty());
    v1::JobInfo r = first.WaitFor(id, [](const v1::JobInfo& j) { return j.last_checkpoint_step() >= 4; });
    ASSERT_GE(r.last_checkpoint_step(), 4) << first.log();
    first.Kill();
    out = r.output_dir();
    auto steps = ListCheckpointSteps(out);
    ASSERT_TRUE(steps.ok() && !steps->empty());
    checkpointed = steps->back();
  }
  Service second(*dir_, root);
  ASSERT_FALSE(second.address().empty()) << second.log();
  const v1::JobInfo restarted = second.Status(id);
  EXPECT_NE(restarted.state(), v1::JOB_STATE_FAILED) << restarted.error();
  EXPECT_GE(restarted.last_checkpoint_step(), 4) << "the status forgot how far the job got";
  v1::JobInfo done = second.WaitFor(id, Ended);
  for (int i = 0; i < 20 && !Ended(done); ++i) done = second.WaitFor(id, Ended);
  ASSERT_EQ(done.state(), v1::JOB_STATE_FINISHED) << done.error() << second.log();
  EXPECT_EQ(done.first_step(), checkpointed);
  EXPECT_EQ(done.last_step().step(), 12);
  const std::string direct = JoinPath(*dir_, "killed_direct");
  auto run = RunCommand(absl::StrCat(BinDir(), "/coordinator --stages 2 --job ", job, " --output ", direct,
                                     " --stage_worker ", BinDir(), "/stage_worker"),
                        true);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto a = LoadAllSafetensors(JoinPath(direct, "lora.safetensors"));
  auto b = LoadAllSafetensors(JoinPath(out, "lora.safetensors"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  ASSERT_EQ(a->size(), b->size());
  for (const auto& [name, t] : *a) EXPECT_TRUE(at::equal(t, b->at(name))) << name;
  EXPECT_EQ(second.Terminate(), 0) << second.log();
}

// Issue 35, item 4: a stage worker that does not answer is said while it does not, in `baton watch` and in the job's
// status, within the stall timeout: here a local worker stopped (SIGSTOP: a hung host), which the service replaces at
// the stall timeout (4 s), after which the stage is back and the job goes on.
TEST_F(JobServiceTest, WatchAndStatusSayWhichStageDoesNotAnswerWhileItDoesNot) {
  Service service(*dir_, JoinPath(*dir_, "jobs_outage"), {"--stall_timeout_s=4"});
  ASSERT_FALSE(service.address().empty()) << service.log();
  const std::string id = Submit(WriteJob("outage", 100000), nullptr, &service);
  ASSERT_FALSE(id.empty());
  v1::JobInfo running = service.WaitFor(id, [](const v1::JobInfo& j) { return j.last_step().step() >= 2; });
  ASSERT_GE(running.last_step().step(), 2) << service.log();
  const std::string watch_log = JoinPath(*dir_, "watch_outage.log");
  const pid_t watch = test_util::SpawnLogged(
      {JoinPath(BinDir(), "baton"), "watch", id, "--plain", "--coordinator", service.address()}, watch_log);
  ASSERT_GT(watch, 0);
  auto watched = [&] { return ReadFile(watch_log).value_or(""); };
  for (int i = 0; i < 600 && watched().find(absl::StrCat("job ", id, " step ")) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the watch is live once it printed a step
  }
  const std::vector<pid_t> workers = test_util::StageWorkersOf(service.pid());
  ASSERT_EQ(workers.size(), 2u);
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(workers[1], SIGSTOP), 0);
  v1::JobInfo out = service.WaitFor(id, [](const v1::JobInfo& j) { return j.outages_size() > 0; });
  const double said = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  ASSERT_EQ(out.outages_size(), 1) << service.log();
  EXPECT_EQ(out.outages(0).stage(), 1);
  EXPECT_NE(out.outages(0).name().find("stage 1 ("), std::string::npos) << out.outages(0).name();
  EXPECT_NE(out.outages(0).message().find("has not answered for"), std::string::npos) << out.outages(0).message();
  EXPECT_LE(said, 4.0 + 1) << "said within the stall timeout";
  // Replaced at the stall timeout: back, and the job goes on.
  const int64_t at = out.last_step().step();
  v1::JobInfo back =
      service.WaitFor(id, [&](const v1::JobInfo& j) { return j.outages_size() == 0 && j.last_step().step() > at + 1; });
  EXPECT_EQ(back.outages_size(), 0);
  EXPECT_GT(back.last_step().step(), at + 1) << service.log();
  EXPECT_EQ(Baton(absl::StrCat("stop ", id), &service).exit_code, 0);
  EXPECT_TRUE(Ended(service.WaitFor(id, Ended)));
  int status = 0;
  ASSERT_EQ(::waitpid(watch, &status, 0), watch);
  const std::string text = watched();
  const size_t first = text.find(absl::StrCat("job ", id, " stage 1 ("));
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_NE(text.find(" has not answered for ", first), std::string::npos) << text;
  // A local worker replaced by a new one at another port: said as such, not as the stopped one back.
  EXPECT_NE(text.find(" was replaced after ", first), std::string::npos) << text;
  EXPECT_EQ(service.Terminate(), 0) << service.log();
}

}  // namespace
}  // namespace baton
