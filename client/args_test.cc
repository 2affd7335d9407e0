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

}  // namespace
}  // namespace baton
