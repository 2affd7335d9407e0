// NormalizeFlagArgs: hyphenated flag names reach Abseil as the defined underscore names; nothing else changes.
#include "core/util/flags.h"

#include <absl/flags/flag.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

ABSL_FLAG(std::string, flags_test_model_root, "", "a multi-word flag");
ABSL_FLAG(bool, flags_test_dry_run, false, "a multi-word bool");
ABSL_FLAG(std::string, flags_test_resume, "false", "a flag whose value is optional");

namespace baton {
namespace {

std::vector<std::string> Normalize(std::vector<std::string> args,
                                   std::initializer_list<absl::string_view> optional_value = {}) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  NormalizeFlagArgs(static_cast<int>(argv.size()), argv.data(), optional_value);
  return std::vector<std::string>(argv.begin() + 1, argv.end());
}

TEST(NormalizeFlagArgsTest, HyphensInADefinedFlagsNameBecomeUnderscores) {
  EXPECT_EQ(Normalize({"--flags-test-model-root=/a-b/c-d", "--flags-test-model-root", "x-y", "-flags-test-dry-run"}),
            std::vector<std::string>(
                {"--flags_test_model_root=/a-b/c-d", "--flags_test_model_root", "x-y", "--flags_test_dry_run"}));
  EXPECT_EQ(Normalize({"--noflags-test-dry-run"}), std::vector<std::string>({"--noflags_test_dry_run"}));
  // Already canonical, unknown (left for Abseil to reject), positional, and everything after "--": untouched.
  const std::vector<std::string> same = {"--flags_test_model_root=a-b", "--no-such-flag=1", "file-name.yaml", "-", "--",
                                         "--flags-test-model-root=z"};
  EXPECT_EQ(Normalize(same), same);
}

TEST(NormalizeFlagArgsTest, AnOptionalValueFlagGivenBareMeansTrue) {
  const std::initializer_list<absl::string_view> optional = {"flags_test_resume"};
  EXPECT_EQ(Normalize({"--flags-test-resume", "--flags_test_dry_run"}, optional),
            std::vector<std::string>({"--flags_test_resume=true", "--flags_test_dry_run"}));
  EXPECT_EQ(Normalize({"--flags_test_resume"}, optional), std::vector<std::string>({"--flags_test_resume=true"}));
  EXPECT_EQ(Normalize({"--noflags_test_resume"}, optional), std::vector<std::string>({"--flags_test_resume=false"}));
  // With a value (either spelling) it is left to Abseil.
  EXPECT_EQ(Normalize({"--flags_test_resume=if-any"}, optional),
            std::vector<std::string>({"--flags_test_resume=if-any"}));
  EXPECT_EQ(Normalize({"--flags-test-resume", "if-any"}, optional),
            std::vector<std::string>({"--flags_test_resume", "if-any"}));
  // Not optional: a bare non-bool flag stays bare (Abseil then asks for its value).
  EXPECT_EQ(Normalize({"--flags_test_resume"}), std::vector<std::string>({"--flags_test_resume"}));
}

}  // namespace
}  // namespace baton
