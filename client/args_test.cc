#include "client/args.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(ArgsTest, UnderscoresSpellTheHyphenatedFlag) {
  const std::vector<FlagSpec> specs = {{"input-ids", "ids file"}, {"max-sequence-length", "tokens", "512"}};
  auto args = Args::Parse({"--input_ids", "a_b.safetensors", "--max_sequence_length=64"}, specs);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->Get("input-ids"), "a_b.safetensors");
  EXPECT_EQ(args->Get("max-sequence-length"), "64");
  auto unknown = Args::Parse({"--input_idz", "x"}, specs);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown flag --input_idz"), std::string::npos) << unknown.status();
}

// The flags of a command like `baton download JOB_ID --out FILE [--checkpoint N] [--plain]`.
std::vector<FlagSpec> DownloadLike() {
  return {{"JOB_ID", "job id", "", /*required=*/true, /*boolean=*/false, /*positional=*/true},
          {"out", "file to write", "", /*required=*/true},
          {"checkpoint", "checkpoint step", "0"},
          {"scale", "a number"},
          {"plain", "one line per step", "", false, /*boolean=*/true}};
}

TEST(ArgsTest, PositionalsFlagsDefaultsAndBooleans) {
  auto args = Args::Parse({"7", "--out", "lora.safetensors", "--plain"}, DownloadLike());
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_FALSE(args->help());
  EXPECT_EQ(args->Get("JOB_ID"), "7");
  EXPECT_EQ(args->Get("out"), "lora.safetensors");
  EXPECT_TRUE(args->Has("checkpoint")) << "a default counts as given";
  EXPECT_EQ(*args->GetInt("checkpoint"), 0);
  EXPECT_FALSE(args->Has("scale")) << "no default, not given";
  EXPECT_EQ(args->Get("scale"), "");
  EXPECT_TRUE(args->GetBool("plain"));

  auto explicit_false = Args::Parse({"--plain=false", "--out=x", "3", "--checkpoint=-12"}, DownloadLike());
  ASSERT_TRUE(explicit_false.ok()) << explicit_false.status();
  EXPECT_FALSE(explicit_false->GetBool("plain"));
  EXPECT_EQ(explicit_false->Get("JOB_ID"), "3") << "a positional may follow flags";
  EXPECT_EQ(*explicit_false->GetInt("checkpoint"), -12);
  for (const char* yes : {"true", "1", "yes"}) {
    auto a = Args::Parse({"1", "--out", "x", std::string("--plain=") + yes}, DownloadLike());
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(a->GetBool("plain")) << yes;
  }
  // A value that looks like a flag is still the value of the flag before it.
  auto dashed = Args::Parse({"1", "--out", "--plain"}, DownloadLike());
  ASSERT_TRUE(dashed.ok()) << dashed.status();
  EXPECT_EQ(dashed->Get("out"), "--plain");
  EXPECT_FALSE(dashed->GetBool("plain"));
}

TEST(ArgsTest, EachMistakeIsNamed) {
  struct Case {
    std::vector<std::string> argv;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"--out", "x"}, "JOB_ID is required (job id)"},
      {{"1"}, "--out is required (file to write)"},
      {{"1", "--out"}, "--out needs a value"},
      {{"1", "2", "--out", "x"}, "unexpected argument '2'"},
      {{"1", "--out", "x", "--JOB_ID", "2"}, "unknown flag --JOB_ID"},
      {{"1", "--out", "x", "--bogus"}, "unknown flag --bogus"},
  };
  for (const Case& c : cases) {
    auto args = Args::Parse(c.argv, DownloadLike());
    ASSERT_FALSE(args.ok()) << c.expect;
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument) << c.expect;
    EXPECT_NE(args.status().message().find(c.expect), std::string::npos) << args.status() << " vs " << c.expect;
  }
}

TEST(ArgsTest, NumbersAreCheckedWhenRead) {
  auto args = Args::Parse({"1", "--out", "x", "--checkpoint", "ten", "--scale", "2.5e-1"}, DownloadLike());
  ASSERT_TRUE(args.ok()) << args.status();
  auto step = args->GetInt("checkpoint");
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(step.status().message().find("--checkpoint must be an integer, got 'ten'"), std::string::npos)
      << step.status();
  EXPECT_DOUBLE_EQ(*args->GetDouble("scale"), 0.25);
  auto missing = args->GetDouble("nothing");
  EXPECT_NE(missing.status().message().find("--nothing must be a number, got ''"), std::string::npos)
      << missing.status();
}

TEST(ArgsTest, HelpStopsParsingAndUsageListsEveryFlag) {
  // --help wins even over what would be an error after it.
  for (const char* help : {"--help", "-h"}) {
    auto args = Args::Parse({help, "--bogus"}, DownloadLike());
    ASSERT_TRUE(args.ok()) << args.status();
    EXPECT_TRUE(args->help());
  }
  EXPECT_EQ(Args::Usage("download", "Fetch a LoRA.", DownloadLike()),
            "usage: baton download JOB_ID [flags]\n"
            "  Fetch a LoRA.\n"
            "  JOB_ID  job id\n"
            "  --out VALUE  file to write (required)\n"
            "  --checkpoint VALUE  checkpoint step [default 0]\n"
            "  --scale VALUE  a number\n"
            "  --plain  one line per step\n");
  std::vector<FlagSpec> optional_positional = {{"JOB_ID", "job id", "", false, false, true}};
  EXPECT_EQ(
      Args::Usage("status", "Show a job.", optional_positional).rfind("usage: baton status [JOB_ID] [flags]\n", 0), 0u);
}

}  // namespace
}  // namespace baton
