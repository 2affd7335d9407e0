// The coordinator's encode step with several encoder workers (`encode: {encoder_workers: [...]}`), against real
// `encoder_worker --listen` processes over mutual TLS: two workers give the cache one worker gives, byte for byte, and
// reruns encode only what changed; a worker killed (SIGKILL) mid-dataset fails the step naming it, and the rerun with
// the worker back encodes only its missing records. The tiny FLUX.2 pipeline; the bundled sample pictures, each three
// times with its own caption, so the killed worker still has work left.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/encode_step.h"
#include "core/data/cache.h"
#include "core/data/cache_shard.h"
#include "core/encode/flux2_encoder.h"
#include "core/testing/paths.h"
#include "core/testing/sample_dataset.h"
#include "core/testing/spawn.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/job.h"
#include "core/util/files.h"
#include "stage_driver/local_tls.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> WorkersFolderBytes(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    files[fs::relative(entry.path(), dir).string()] = ReadFile(entry.path().string()).value_or("unreadable");
  }
  return files;
}

size_t RecordCount(const std::string& cache) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(JoinPath(cache, "records"), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    n += it->path().extension() == ".safetensors" ? 1 : 0;
  }
  return n;
}

// One `encoder_worker --listen` process; SIGTERM on destruction unless killed.
struct WorkerProcess {
  pid_t pid = 0;
  std::string address;
  WorkerProcess() = default;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  ~WorkerProcess() { Stop(SIGTERM); }
  void Stop(int signal) {
    if (pid <= 0) return;
    ::kill(pid, signal);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = 0;
  }
};

class EncoderWorkersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(test_util::MakeTempDir("encoder_workers"));
    ASSERT_TRUE(WriteTinyFlux2Pipeline(Dir("pipeline"), 0).ok());
    auto names = test_util::WriteSampleCopies(Dir("data"), 3);
    ASSERT_TRUE(names.ok()) << names.status();
    names_ = *names;
    ASSERT_EQ(names_.size(), 24u);
  }
  static void TearDownTestSuite() { delete root_; }
  static std::string Dir(const std::string& name) { return JoinPath(*root_, name); }

  static void Start(const std::string& name, WorkerProcess& worker) {
    auto security = LocalWorkerSecurityArgs();  // mutual TLS with the ephemeral CA, the test process's identity too
    ASSERT_TRUE(security.ok()) << security.status();
    std::vector<std::string> args = {JoinPath(test_util::BinDir(), "encoder_worker"),
                                     "--model",
                                     Dir("pipeline"),
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--cache_root",
                                     *root_,
                                     "--max_sequence_length",
                                     "96",
                                     "--threads",
                                     "1"};
    args.insert(args.end(), security->begin(), security->end());
    const std::string log = Dir(name + ".log");
    worker.pid = test_util::SpawnLogged(args, log);
    ASSERT_GT(worker.pid, 0);
    static const std::regex kListening("LISTENING (\\S+)");
    for (int i = 0; i < 1200 && worker.address.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      std::smatch m;
      const std::string text = ReadFile(log).value_or("");
      if (std::regex_search(text, m, kListening)) worker.address = m[1];
    }
    ASSERT_FALSE(worker.address.empty()) << ReadFile(log).value_or("");
  }

  // A job whose encode step sends `images` to `workers` (one: the `encoder_worker:` key) into `cache`.
  static JobConfig Job(const std::vector<std::string>& workers, const std::string& cache, int64_t resolution) {
    std::string list;
    for (const std::string& w : workers) absl::StrAppend(&list, list.empty() ? "" : ", ", "'", w, "'");
    const std::string key =
        workers.size() == 1 ? absl::StrCat("encoder_worker: ", list) : absl::StrCat("encoder_workers: [", list, "]");
    auto job = ParseJobYaml(absl::StrCat("model: ", Dir("pipeline"), "\ndataset: ", Dir(cache),
                                         "\nencode: {images: ", Dir("data"), ", ", key, ", resolution: ", resolution,
                                         "}\nsteps: 1\nbatch_size: 1\nmicro_batches: 1\n"));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobConfig{};
  }

  static int64_t ShareSize(int64_t index, int64_t count) {
    int64_t n = 0;
    for (const std::string& name : names_) n += ShardOfName(name, count) == index ? 1 : 0;
    return n;
  }

  static std::string* root_;
  static std::vector<std::string> names_;
};
std::string* EncoderWorkersTest::root_ = nullptr;
std::vector<std::string> EncoderWorkersTest::names_;

TEST_F(EncoderWorkersTest, TheEncoderWorkersKeyIsCheckedStrictly) {
  const std::string head = "model: m\ndataset: d\nsteps: 1\nbatch_size: 1\nmicro_batches: 1\nencode: {images: i, ";
  auto two = ParseJobYaml(head + "encoder_workers: ['a:1', 'b:2']}\n");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->encode.encoder_workers, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(two->encode.encoder_worker, "a:1");  // sample prompts go to the first
  auto one = ParseJobYaml(head + "encoder_worker: 'a:1'}\n");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->encode.encoder_workers, (std::vector<std::string>{"a:1"}));
  const std::map<std::string, std::string> refused = {
      {"encoder_worker: 'a:1', encoder_workers: ['b:2']}", "exclusive"},
      {"encoder_workers: ['a:1', 'a:1']}", "distinct"},
      {"encoder_workers: []}", "distinct"},
      {"encoder_workers: ['a:1', '']}", "distinct"},
      {absl::StrCat("encoder_workers: [", std::string(kMaxEncoderWorkers * 2, ',') + "'x']}"), "at most"}};
  for (const auto& entry : refused) {
    auto job = ParseJobYaml(head + entry.first + "\n");
    ASSERT_FALSE(job.ok()) << entry.first;
    EXPECT_NE(job.status().message().find(entry.second), std::string::npos) << job.status();
  }
}

TEST_F(EncoderWorkersTest, TwoWorkersGiveOneWorkersCacheByteForByteAndRerunsEncodeOnlyWhatChanged) {
  WorkerProcess w0, w1;
  ASSERT_NO_FATAL_FAILURE(Start("same0", w0));
  ASSERT_NO_FATAL_FAILURE(Start("same1", w1));
  const absl::Duration timeout = absl::Seconds(300);
  auto both = RunEncodeStep(Job({w0.address, w1.address}, "two", 64), timeout, /*quiet=*/true);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->workers, 2);
  EXPECT_EQ(both->encoded, 24);
  EXPECT_EQ(RecordCount(ShardCacheDir(Dir("two"), 0, 2)), static_cast<size_t>(ShareSize(0, 2)));
  auto one = RunEncodeStep(Job({w1.address}, "one", 64), timeout, /*quiet=*/true);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->encoded, 24);
  EXPECT_FALSE(PathExists(Dir("one.shards")));
  const auto expected = WorkersFolderBytes(Dir("one"));
  ASSERT_EQ(expected.size(), 26u);  // index.json, empty_prompt.safetensors and 24 records
  EXPECT_TRUE(WorkersFolderBytes(Dir("two")) == expected) << "the merged cache differs from one worker's";

  // Rerun: nothing changed, nothing encoded. Then one caption changes: only that sample is encoded again.
  auto again = RunEncodeStep(Job({w0.address, w1.address}, "two", 64), timeout, /*quiet=*/true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->encoded, 0);
  EXPECT_EQ(again->kept, 24);
  const std::string stem = names_[1].substr(0, names_[1].size() - 4);  // "<picture>_<copy>.png"
  ASSERT_TRUE(WriteFileAtomic(JoinPath(Dir("data"), stem + ".txt"), "a changed caption").ok());
  auto changed = RunEncodeStep(Job({w0.address, w1.address}, "two", 64), timeout, /*quiet=*/true);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(changed->encoded, 1);
  EXPECT_EQ(changed->kept, 23);
  auto one_changed = RunEncodeStep(Job({w1.address}, "one", 64), timeout, /*quiet=*/true);
  ASSERT_TRUE(one_changed.ok()) << one_changed.status();
  EXPECT_EQ(one_changed->encoded, 1);
  EXPECT_TRUE(WorkersFolderBytes(Dir("two")) == WorkersFolderBytes(Dir("one"))) << "after the change";
}

TEST_F(EncoderWorkersTest, AWorkerKilledMidDatasetFailsTheStepNamingItAndTheRerunEncodesOnlyItsMissingRecords) {
  constexpr int64_t kResolution = 256;  // one record takes a visible while: the kill lands mid-dataset
  const int64_t share0 = ShareSize(0, 2);
  ASSERT_GE(share0, 6);
  WorkerProcess w0, w1;
  ASSERT_NO_FATAL_FAILURE(Start("kill0", w0));
  ASSERT_NO_FATAL_FAILURE(Start("kill1", w1));
  const std::string killed = w0.address;
  absl::StatusOr<EncodeReport> first = absl::UnknownError("not run");
  std::thread step([&] {
    first = RunEncodeStep(Job({w0.address, w1.address}, "killed", kResolution), absl::Seconds(300), /*quiet=*/true);
  });
  const std::string shard0 = ShardCacheDir(Dir("killed"), 0, 2);
  for (int i = 0; i < 6000 && RecordCount(shard0) < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  w0.Stop(SIGKILL);
  step.join();
  ASSERT_FALSE(first.ok()) << "worker 0 finished before the kill";
  EXPECT_NE(first.status().message().find(absl::StrCat("encoder worker ", killed)), std::string::npos)
      << first.status();
  EXPECT_NE(first.status().message().find("shard 0/2"), std::string::npos) << first.status();
  EXPECT_FALSE(PathExists(JoinPath(Dir("killed"), "index.json"))) << "no merge after a failed shard";
  EXPECT_FALSE(PathExists(JoinPath(shard0, "index.json")));
  const int64_t kept0 = static_cast<int64_t>(RecordCount(shard0));
  ASSERT_GE(kept0, 2);
  ASSERT_LT(kept0, share0) << "the kill came too late to leave work";
  EXPECT_EQ(RecordCount(ShardCacheDir(Dir("killed"), 1, 2)), static_cast<size_t>(24 - share0))
      << "the other worker ran to its end";

  // The worker is back (another port: the job lists it again in its place): only its missing records are encoded.
  WorkerProcess back;
  ASSERT_NO_FATAL_FAILURE(Start("back0", back));
  auto rerun = RunEncodeStep(Job({back.address, w1.address}, "killed", kResolution), absl::Seconds(300), true);
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  EXPECT_EQ(rerun->encoded, share0 - kept0);
  EXPECT_EQ(rerun->kept, kept0 + (24 - share0));
  auto cache = CacheReader::Open(Dir("killed"));
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->size(), 24u);
}

}  // namespace
}  // namespace baton
