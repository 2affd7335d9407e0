// The job keys lora.type and lora.factor: the four types, each refusal naming file:line and why (a key that does not
// apply to the type says which).
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <string>

#include "core/train/job.h"

namespace baton {
namespace {

absl::StatusOr<JobConfig> ParseLoraTypeJob(const std::string& lora) {
  return ParseJobYaml(absl::StrCat("model: m\ndataset: d\nsteps: 4\n", lora), "jobs/variant.yaml");
}

void ExpectLoraTypeRefused(const std::string& lora, const std::string& where, const std::string& what) {
  auto job = ParseLoraTypeJob(lora);
  ASSERT_FALSE(job.ok()) << "accepted: " << lora;
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message().rfind(where, 0), 0u) << job.status();
  EXPECT_NE(job.status().message().find(what), std::string::npos) << job.status();
}

TEST(JobLoraTypeTest, TakesEachTypeAndLokrsFactor) {
  auto plain = ParseLoraTypeJob("");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->lora.type, AdapterType::kLora);
  for (const char* type : {"dora", "loha", "lokr"}) {
    auto job = ParseLoraTypeJob(absl::StrCat("lora: {type: ", type, ", rank: 8}\n"));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_STREQ(AdapterTypeName(job->lora.type), type);
    EXPECT_NE(JobHash(*job), JobHash(*plain)) << type << ": a checkpoint of another type must not resume";
  }
  auto lokr = ParseLoraTypeJob("lora: {type: lokr, rank: 8, factor: 16}\n");
  ASSERT_TRUE(lokr.ok()) << lokr.status();
  EXPECT_EQ(lokr->lora.lokr_factor, 16);
  auto dora = ParseLoraTypeJob("lora: {type: dora, rank: 8, dropout: 0.1, plus_ratio: 16}\n");
  ASSERT_TRUE(dora.ok()) << dora.status();
  for (const char* type :
       {"dora", "loha", "lokr"}) {  // each has an original naming (a LoKr across fused Linears: at plan)
    auto job = ParseLoraTypeJob(absl::StrCat("lora: {type: ", type, "}\nsave_bfl: true\n"));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(job->save_bfl);
  }
}

TEST(JobLoraTypeTest, RefusesWhatDoesNotApplyNamingFileAndLine) {
  ExpectLoraTypeRefused("lora: {type: locon}\n", "jobs/variant.yaml:4", "want lora, dora, loha or lokr");
  ExpectLoraTypeRefused("lora: {type: loha, factor: 4}\n", "jobs/variant.yaml:4", "applies to type: lokr only");
  ExpectLoraTypeRefused("lora: {type: lokr, factor: 0}\n", "jobs/variant.yaml:4", "positive divisor");
  ExpectLoraTypeRefused("lora: {type: loha, dropout: 0.1}\n", "jobs/variant.yaml:4", "does not apply to type: loha");
  ExpectLoraTypeRefused("lora: {type: lokr, plus_ratio: 16}\n", "jobs/variant.yaml:4", "does not apply to type: lokr");
}

}  // namespace
}  // namespace baton
