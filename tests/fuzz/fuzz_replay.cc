// The fuzz targets in the normal build: every seed (tests/fuzz/corpus/<target>/) must be accepted by its target,
// and every seed and every past finding (tests/fuzz/regressions/<target>/) must run through the target's
// LLVMFuzzerTestOneInput without a crash (a crash fails the test). `--write_corpus DIR` writes the seeds;
// `--run TARGET FILE...` runs files through one target.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/testing/paths.h"
#include "core/util/files.h"
#include "tests/fuzz/fuzz_targets.h"

extern "C" int BatonFuzz_wire(const uint8_t* data, size_t size);
extern "C" int BatonFuzz_safetensors(const uint8_t* data, size_t size);
extern "C" int BatonFuzz_job(const uint8_t* data, size_t size);
extern "C" int BatonFuzz_lora(const uint8_t* data, size_t size);
extern "C" int BatonFuzz_stage(const uint8_t* data, size_t size);

namespace baton::fuzz {
namespace {

struct Target {
  std::string name;
  bool (*run)(const uint8_t*, size_t);
  int (*entry)(const uint8_t*, size_t);
};

const Target kTargets[] = {{"wire", RunWire, BatonFuzz_wire},
                           {"safetensors", RunSafetensors, BatonFuzz_safetensors},
                           {"job", RunJob, BatonFuzz_job},
                           {"lora", RunLora, BatonFuzz_lora},
                           {"stage", RunStage, BatonFuzz_stage}};

std::vector<std::string> Files(const std::string& kind, const std::string& target) {
  std::vector<std::string> out;
  const std::filesystem::path dir = std::filesystem::path(test_util::SourceDir()) / "tests/fuzz" / kind / target;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class FuzzReplay : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplay, EverySeedIsAccepted) {
  const std::vector<std::string> seeds = Files("corpus", GetParam().name);
  ASSERT_FALSE(seeds.empty()) << "no seeds for " << GetParam().name;
  for (const std::string& path : seeds) {
    absl::StatusOr<std::string> bytes = ReadFile(path);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_TRUE(GetParam().run(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size())) << path;
  }
}

TEST_P(FuzzReplay, EverySeedAndFindingRunsCleanly) {
  std::vector<std::string> files = Files("corpus", GetParam().name);
  for (const std::string& path : Files("regressions", GetParam().name)) files.push_back(path);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    absl::StatusOr<std::string> bytes = ReadFile(path);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(GetParam().entry(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& info) { return info.param.name; });

}  // namespace
}  // namespace baton::fuzz

namespace {

// `--run TARGET FILE...`: runs files through one target (reproducing a finding without clang).
int RunFiles(const std::string& target, int count, char** files) {
  for (const auto& t : baton::fuzz::kTargets) {
    if (t.name != target) continue;
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<std::string> bytes = baton::ReadFile(files[i]);
      if (!bytes.ok()) return std::fprintf(stderr, "%s\n", bytes.status().ToString().c_str()), 1;
      const bool accepted = t.run(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
      std::printf("%s: %s\n", files[i], accepted ? "accepted" : "rejected");
    }
    return 0;
  }
  std::fprintf(stderr, "unknown fuzz target %s\n", target.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--write_corpus") == 0) {
    baton::fuzz::WriteSeedCorpus(argv[2]);
    return 0;
  }
  if (argc >= 3 && std::strcmp(argv[1], "--run") == 0) return RunFiles(argv[2], argc - 3, argv + 3);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
