// A full disk at each write a run makes (issue 25, part 3): a checkpoint, the final LoRA, its BFL copy, a sample
// rendering and a train-log line, each refused at its last chance in the run as a full disk refuses it (ENOSPC,
// through core/util/write_fault.h; the train log keeps half a line, as a disk that fills mid-write does). The run
// fails naming the file; `--resume` then leaves the folder complete and right: the LoRA and the BFL copy equal the
// uninterrupted run's bitwise, every sample rendering is there and equal, the train log has each step exactly once.
// Before, a run that died at its final LoRA left the step-2 LoRA beside a complete run, and a resume kept it.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "coordinator/pipeline_trainer.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "core/util/write_fault.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

// The write to refuse: the `occurrence`-th (1-based) write whose path satisfies `matches`.
struct FaultCase {
  std::string name;
  std::function<bool(const std::string& out, const std::string& path)> matches;
  int occurrence;
};

// gtest prints a case by its name (not its bytes) in test lists and failures.
void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.name; }

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class FullDiskTest : public ::testing::TestWithParam<FaultCase> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("full_disk"));
    test_util::WriteTinyPipelineAndSampleCache(*dir_);
    if (HasFatalFailure()) return;
    auto reference = RunCoordinator(Job(), Options("reference"));
    ASSERT_TRUE(reference.ok()) << reference.status();
    const std::vector<nlohmann::json> log = test_util::ReadTrainLog(Out("reference"));
    ASSERT_GE(log.size(), 6u);
    ASSERT_TRUE(!log[5].contains("event") && log[5]["step"] == 4) << "train log order: " << log[5].dump();
  }
  static void TearDownTestSuite() { delete dir_; }

  // 4 steps, checkpoints at 2 and 4, samples after steps 0, 2 and 4, the BFL copy too.
  static JobConfig Job() {
    auto job =
        ParseJobYaml(absl::StrCat("model: ", JoinPath(*dir_, "pipeline"), "\ndataset: ", JoinPath(*dir_, "cache"),
                                  "\nlora: {rank: 4, targets: all-linear}\noptimizer: {lr: 0.01}\nsteps: 4\n"
                                  "batch_size: 4\nmicro_batches: 2\nseed: 3\ncheckpoint_every: 2\n"
                                  "save_bfl: true\nsamples: {every: 2, prompts: [a red circle, a blue square], "
                                  "steps: 2, size: [32, 32], seed: 5}\n"),
                     "full-disk.yaml");
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }
  static CoordinatorOptions Options(const std::string& out) {
    return test_util::LocalStagesOptions(2, JoinPath(*dir_, out));
  }
  static std::string Out(const std::string& name) { return JoinPath(*dir_, name); }

  static void ExpectSameTensors(const std::string& a_path, const std::string& b_path) {
    auto a = LoadAllSafetensors(a_path), b = LoadAllSafetensors(b_path);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    ASSERT_EQ(a->size(), b->size()) << b_path;
    for (const auto& [name, t] : *a) {
      ASSERT_TRUE(b->count(name)) << name;
      EXPECT_TRUE(at::equal(t, b->at(name))) << b_path << ": " << name << " differs from the uninterrupted run";
    }
  }

  // The steps of train_log.jsonl's step records, in order.
  static std::vector<int64_t> LoggedSteps(const std::string& out) {
    std::vector<int64_t> steps;
    for (const auto& j : test_util::ReadTrainLog(out)) {
      if (!j.contains("event")) steps.push_back(j["step"].get<int64_t>());
    }
    return steps;
  }

  static std::string* dir_;
};
std::string* FullDiskTest::dir_ = nullptr;

TEST_P(FullDiskTest, TheRunFailsNamingTheFileAndAResumeLeavesEveryOutputRight) {
  const FaultCase& c = GetParam();
  const std::string out = Out(c.name);
  std::atomic<int> seen{0};
  SetWriteFaultForTesting([&](const std::string& path) -> absl::Status {
    if (!c.matches(out, path) || ++seen != c.occurrence) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat("No space left on device (ENOSPC) writing ", path));
  });
  auto failed = RunCoordinator(Job(), Options(c.name));
  SetWriteFaultForTesting(nullptr);
  ASSERT_EQ(seen.load(), c.occurrence) << "the run never made the write to fail";
  ASSERT_FALSE(failed.ok()) << "a refused write must fail the run";
  EXPECT_NE(failed.status().message().find("No space left on device"), std::string::npos) << failed.status();

  CoordinatorOptions resume = Options(c.name);
  resume.resume = true;
  resume.resume_if_any = true;
  auto resumed = RunCoordinator(Job(), resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  const std::string reference = Out("reference");
  ExpectSameTensors(JoinPath(reference, "lora.safetensors"), JoinPath(out, "lora.safetensors"));
  ExpectSameTensors(JoinPath(reference, "bfl/lora_bfl.safetensors"), JoinPath(out, "bfl/lora_bfl.safetensors"));
  for (int step : {0, 2, 4}) {
    const std::string sheet = absl::StrCat("samples/step-", step, "/contact_sheet.png");
    auto want = ReadFile(JoinPath(reference, sheet));
    auto got = ReadFile(JoinPath(out, sheet));
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << sheet << " is missing after the resume: " << got.status();
    EXPECT_TRUE(*want == *got) << sheet << " differs from the uninterrupted run's";
  }
  EXPECT_EQ(LoggedSteps(out), (std::vector<int64_t>{1, 2, 3, 4})) << "each step once in the train log";
}

INSTANTIATE_TEST_SUITE_P(
    EachWrite, FullDiskTest,
    ::testing::Values(
        // The step-4 checkpoint's manifest (written last): the step-2 checkpoint stays the newest valid one.
        FaultCase{"checkpoint",
                  [](const std::string& out, const std::string& path) {
                    return path.find(JoinPath(out, "checkpoints")) == 0 && EndsWith(path, "state.json");
                  },
                  2},
        // The final LoRA, after the step-4 checkpoint is complete (the case the issue found).
        FaultCase{
            "final_lora",
            [](const std::string& out, const std::string& path) { return path == JoinPath(out, "lora.safetensors"); },
            2},
        FaultCase{"bfl_copy",
                  [](const std::string&, const std::string& path) { return EndsWith(path, "lora_bfl.safetensors"); },
                  2},
        // The rendering after the last step.
        FaultCase{"samples",
                  [](const std::string&, const std::string& path) { return EndsWith(path, "contact_sheet.png"); }, 3},
        // The step-4 line of the train log, its sixth write (after the step-0 samples line, steps 1 and 2, the step-2
        // samples line and step 3; SetUpTestSuite checks the order on the uninterrupted run's log).
        FaultCase{
            "train_log",
            [](const std::string& out, const std::string& path) { return path == JoinPath(out, "train_log.jsonl"); },
            6}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return info.param.name; });

}  // namespace
}  // namespace baton
