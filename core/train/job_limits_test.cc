// A job file cannot make its parser exhaust the process (core/train/job.h limits): an oversized file is refused
// before any YAML is built, each list within the limit its meaning sets, every error with file:line, and the peak
// resident memory of parsing what a hostile submitter sends stays within a few MB.
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/testing/tiny_flux2.h"
#include "core/train/job.h"
#include "core/util/files.h"

namespace baton {
namespace {

constexpr char kBase[] = "model: m\ndataset: d\nsteps: 4\n";

std::string List(size_t n, const std::string& item) {
  return absl::StrCat("[", absl::StrJoin(std::vector<std::string>(n, item), ", "), "]");
}

// Parses and expects a refusal whose message starts with `where` and holds `what`.
void ExpectRefused(const std::string& yaml, const std::string& where, const std::string& what) {
  auto job = ParseJobYaml(yaml, "jobs/big.yaml");
  ASSERT_FALSE(job.ok()) << "accepted: " << yaml.substr(0, 200);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message().rfind(where, 0), 0u) << job.status();
  EXPECT_NE(job.status().message().find(what), std::string::npos) << job.status();
}

// kB of /proc/self/status's `field` (VmHWM: peak resident; VmRSS: resident now).
int64_t StatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// Peak resident growth (MB) while `f` runs: the kernel's high-water mark is reset first (clear_refs 5).
template <typename F>
double PeakGrowthMb(F&& f) {
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = StatusKb("VmRSS");
  f();
  return static_cast<double>(StatusKb("VmHWM") - before) / 1024.0;
}

TEST(JobLimitsTest, OversizedFileIsRefusedBeforeParsing) {
  std::string yaml = absl::StrCat(kBase, "validation: {every: 1, timesteps: [");
  while (yaml.size() <= kMaxJobFileBytes) yaml += "0.5, ";
  yaml += "0.5]}\n";
  ExpectRefused(yaml, "jobs/big.yaml: the job file is ", absl::StrCat("a job file is at most ", kMaxJobFileBytes));
  // From disk as well: LoadJob reads no byte of a file over the limit.
  const std::string path = JoinPath(test_util::MakeTempDir("job_limits"), "big.yaml");
  ASSERT_TRUE(WriteFileAtomic(path, yaml).ok());
  auto loaded = LoadJob(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(absl::StrCat(path, " is ", yaml.size(), " bytes")), std::string::npos)
      << loaded.status();
}

TEST(JobLimitsTest, ListsOverTheLimitOfTheirMeaningGiveFileAndLine) {
  ExpectRefused(absl::StrCat(kBase, "validation:\n  every: 1\n  timesteps: ", List(33, "0.5"), "\n"),
                "jobs/big.yaml:6: ", "'timesteps' lists 33 entries; at most 32");
  ExpectRefused(absl::StrCat(kBase, "samples: {every: 1, prompts: ", List(65, "a dog"), "}\n"),
                "jobs/big.yaml:4: ", "'prompts' lists 65 entries; at most 64");
  ExpectRefused(absl::StrCat(kBase, "samples: {every: 1, prompts: [x], size: [512, 512, 512]}\n"),
                "jobs/big.yaml:4: ", "'size' lists 3 entries; at most 2");
  ExpectRefused(absl::StrCat(kBase, "devices: ", List(65, "cpu"), "\n"),
                "jobs/big.yaml:4: ", "'devices' lists 65 entries; at most 64");
  ExpectRefused(absl::StrCat(kBase, "memory_per_stage: ", List(65, "1GB"), "\n"),
                "jobs/big.yaml:4: ", "'memory_per_stage' lists 65 entries");
  ExpectRefused(absl::StrCat(kBase, "lora: {targets: ", List(65, "to_q"), "}\n"),
                "jobs/big.yaml:4: ", "'targets' lists 65 entries");
  ExpectRefused(absl::StrCat(kBase, "optimizer: {betas: [0.9, 0.99, 0.999]}\n"),
                "jobs/big.yaml:4: ", "'betas' lists 3 entries; at most 2");
  ExpectRefused(absl::StrCat(kBase, "samples: {every: 1, prompts: [", std::string(kMaxJobStringBytes + 1, 'a'), "]}\n"),
                "jobs/big.yaml:4: ", "'prompts' is 4097 bytes long; a value is at most 4096");
  ExpectRefused(absl::StrCat("model: ", std::string(5000, 'm'), "\ndataset: d\n"),
                "jobs/big.yaml:1: ", "'model' is 5000 bytes long");
  ExpectRefused("model: m\ndataset: d\nsteps: 1000001\n", "jobs/big.yaml:3: ", "'steps' must be in [1, 1000000]");
  ExpectRefused("model: m\ndataset: d\nbatch_size: 5000\n", "jobs/big.yaml:3: ", "'batch_size' must be in [1, 4096]");
  ExpectRefused("model: m\ndataset: d\nthreads: 100000\n", "jobs/big.yaml:3: ", "'threads' must be in [1, 1024]");
}

TEST(JobLimitsTest, ListsAtTheLimitAreAccepted) {
  auto job = ParseJobYaml(absl::StrCat(kBase, "validation: {every: 1, timesteps: ", List(32, "0.5"),
                                       "}\nsamples: {every: 1, prompts: ", List(64, "a dog"),
                                       "}\ndevices: ", List(64, "cpu"), "\n"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->validation.timesteps.size(), 32u);
  EXPECT_EQ(job->samples.prompts.size(), 64u);
  EXPECT_EQ(job->devices.size(), 64u);
}

// The jobs, scaled to run in a second on the old parser too: a 4 MB timesteps list (the 50 MB one took
// 26 s and 5.7 GB), the same under an unknown key, and a job under the size limit packed with 40 k timesteps.
TEST(JobLimitsTest, HostileJobsCostLittleMemory) {
  std::string big = absl::StrCat(kBase, "validation: {every: 1, timesteps: [");
  while (big.size() < (4u << 20)) big += "0.5, ";
  big += "0.5]}\n";
  std::string unknown = big;
  unknown.replace(unknown.find("validation"), 10, "validatoin");
  std::string packed = absl::StrCat(kBase, "validation: {every: 1, timesteps: [");
  while (packed.size() < kMaxJobFileBytes - 16) packed += "0.5,";
  packed += "0.5]}\n";
  for (const std::string* yaml : {&big, &unknown, &packed}) {
    absl::Status status;
    const double mb = PeakGrowthMb([&] { status = ParseJobYaml(*yaml, "jobs/big.yaml").status(); });
    EXPECT_FALSE(status.ok()) << yaml->size() << " bytes accepted";
    EXPECT_LT(mb, 64) << "parsing " << yaml->size() << " bytes raised the peak resident set by " << mb << " MB";
    std::printf("%zu bytes: refused, peak resident +%.1f MB: %s\n", yaml->size(), mb,
                std::string(status.message().substr(0, 100)).c_str());
  }
}

}  // namespace
}  // namespace baton
