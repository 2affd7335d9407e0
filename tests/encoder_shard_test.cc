// Several encoder_worker processes on one dataset, run as a user runs them: bad --shard values refused, a shard
// killed with SIGKILL mid-dataset keeps every record it wrote and its rerun encodes only the rest, and the shards
// merged (--merge) are byte for byte the cache one worker writes. The tiny FLUX.2 pipeline; the bundled sample
// pictures, each three times with its own caption, so the killed run still has work left.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/data/cache.h"
#include "core/data/cache_shard.h"
#include "core/encode/flux2_encoder.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/sample_dataset.h"
#include "core/testing/spawn.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// Large enough that one record takes a visible while (the kill lands mid-dataset), small enough for the suite.
constexpr int kResolution = 256;

std::map<std::string, std::string> FolderBytes(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    auto bytes = ReadFile(entry.path().string());
    files[fs::relative(entry.path(), dir).string()] = bytes.ok() ? *bytes : "unreadable";
  }
  return files;
}

// The finished records in a cache folder (a SIGKILL can leave a temporary file, never a torn record).
std::vector<std::string> RecordFiles(const std::string& cache) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(JoinPath(cache, "records"), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors") files.push_back("records/" + name);
  }
  return files;
}

class EncoderShardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(test_util::MakeTempDir("encoder_shard"));
    ASSERT_TRUE(WriteTinyFlux2Pipeline(JoinPath(*root_, "pipeline"), 0).ok());
    const std::string data = JoinPath(*root_, "data");
    auto names = test_util::WriteSampleCopies(data, 3);
    ASSERT_TRUE(names.ok()) << names.status();
    names_ = *names;
    ASSERT_EQ(names_.size(), 24u);
  }
  static void TearDownTestSuite() { delete root_; }

  static std::vector<std::string> Worker(const std::string& cache, const std::string& shard) {
    std::vector<std::string> args = {JoinPath(test_util::BinDir(), "encoder_worker"),
                                     "--dataset",
                                     JoinPath(*root_, "data"),
                                     "--cache",
                                     JoinPath(*root_, cache),
                                     "--model",
                                     JoinPath(*root_, "pipeline"),
                                     "--resolution",
                                     std::to_string(kResolution),
                                     "--max_sequence_length",
                                     "96",
                                     "--threads",
                                     "1"};
    if (!shard.empty()) args.insert(args.end(), {"--shard", shard});
    return args;
  }
  static test_util::CommandResult Run(const std::vector<std::string>& args) {
    std::string command;
    for (const std::string& a : args) absl::StrAppend(&command, command.empty() ? "" : " ", "'", a, "'");
    return test_util::RunCommand(command, /*with_stderr=*/true);
  }
  static int64_t ShareSize(int64_t index, int64_t count) {
    int64_t n = 0;
    for (const std::string& name : names_) n += ShardOfName(name, count) == index ? 1 : 0;
    return n;
  }
  static std::string Dir(const std::string& name) { return JoinPath(*root_, name); }

  static std::string* root_;
  static std::vector<std::string> names_;
};
std::string* EncoderShardTest::root_ = nullptr;
std::vector<std::string> EncoderShardTest::names_;

TEST_F(EncoderShardTest, BadShardValuesAreRefusedWithExitCode2AndAClearMessage) {
  const std::map<std::string, std::string> refused = {
      {"2/2", "encoder_worker: --shard \"2/2\": the share i must be one of 0 .. 1 for N = 2 workers, not 2"},
      {"half", "encoder_worker: --shard \"half\": expected i/N: this worker's share i of N workers"},
      {"0/0", "encoder_worker: --shard \"0/0\": the worker count N must be between 1 and 4096, not 0"}};
  for (const auto& entry : refused) {
    auto result = Run(Worker("refused", entry.first));
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find(entry.second), std::string::npos) << result.output;
  }
  EXPECT_FALSE(PathExists(Dir("refused")));
  std::vector<std::string> listen = {JoinPath(test_util::BinDir(), "encoder_worker"),
                                     "--model",
                                     Dir("pipeline"),
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--insecure",
                                     "--shard",
                                     "0/2"};
  auto served = Run(listen);
  EXPECT_EQ(served.exit_code, 2) << served.output;
  EXPECT_NE(served.output.find("--shard is for batch mode"), std::string::npos) << served.output;
  auto merge = Run({JoinPath(test_util::BinDir(), "encoder_worker"), "--merge", Dir("a") + "," + Dir("b")});
  EXPECT_EQ(merge.exit_code, 2) << merge.output;
  EXPECT_NE(merge.output.find("needs --cache"), std::string::npos) << merge.output;
}

TEST_F(EncoderShardTest, AKilledShardKeepsItsRecordsItsRerunEncodesOnlyTheRestAndTheMergeIsOneWorkersCache) {
  const int64_t share = ShareSize(0, 2);
  ASSERT_GE(share, 6);
  const pid_t pid = test_util::SpawnLogged(Worker("killed0", "0/2"), Dir("killed0.log"));
  ASSERT_GT(pid, 0);
  // Kill it (SIGKILL: no chance to write its index) once it has written two records.
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 6000 && RecordFiles(Dir("killed0")).size() < 2; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!exited) {
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
  }
  auto log = ReadFile(Dir("killed0.log"));
  ASSERT_TRUE(WIFSIGNALED(status)) << "the shard finished before the kill: " << (log.ok() ? *log : "");
  EXPECT_FALSE(PathExists(JoinPath(Dir("killed0"), "index.json")));
  const std::vector<std::string> written = RecordFiles(Dir("killed0"));
  const int64_t kept = static_cast<int64_t>(written.size());
  ASSERT_GE(kept, 2);
  ASSERT_LT(kept, share) << "the kill came too late to leave work";
  for (const std::string& file : written) {  // each whole and valid (atomic writes)
    CacheRecordInfo info;
    EXPECT_TRUE(ReadCacheRecord(Dir("killed0"), file, CacheLayout{128, 96}, &info, nullptr).ok()) << file;
  }

  // The rerun keeps what was written and encodes only the missing records.
  auto rerun = Run(Worker("killed0", "0/2"));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find(absl::StrCat("encoded ", share - kept, ", kept ", kept, " unchanged, 0 failed of ", share,
                                           " samples (shard 0/2)")),
            std::string::npos)
      << rerun.output;
  auto other = Run(Worker("killed1", "1/2"));
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_NE(other.output.find(absl::StrCat("encoded ", 24 - share, ", kept 0 unchanged, 0 failed of ", 24 - share,
                                           " samples (shard 1/2)")),
            std::string::npos)
      << other.output;

  auto merge = Run({JoinPath(test_util::BinDir(), "encoder_worker"), "--merge", Dir("killed0") + "," + Dir("killed1"),
                    "--cache", Dir("merged")});
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  EXPECT_NE(merge.output.find("merged 24 records from 2 shards"), std::string::npos) << merge.output;
  auto whole = Run(Worker("whole", ""));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto expected = FolderBytes(Dir("whole"));
  const auto actual = FolderBytes(Dir("merged"));
  ASSERT_EQ(expected.size(), 26u);  // index.json, empty_prompt.safetensors and 24 records
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& entry : expected) {
    auto it = actual.find(entry.first);
    ASSERT_NE(it, actual.end()) << entry.first;
    EXPECT_TRUE(it->second == entry.second) << entry.first << " differs from the single worker's";
  }
}

}  // namespace
}  // namespace baton
