// The queue's records read back when a service starts: a damaged one is skipped with a warning, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "job_service/job_queue.h"

namespace baton {
namespace {

// A job.json as Persist writes it for a finished job, with `extra` fields (JSON members, comma first) after its info.
std::string Record(const std::string& id, const std::string& dir, const std::string& rest) {
  return "{\"info\": {\"jobId\": \"" + id + "\", \"name\": \"job" + id + "\", \"state\": \"JOB_STATE_FINISHED\", " +
         "\"outputDir\": \"" + dir + "\", \"totalSteps\": \"2\"}" + rest + "}";
}

using test_util::MakeTempDir;

TEST(JobStoreTest, ADamagedRecordIsSkippedAndTheOthersLoad) {
  const std::string root = MakeTempDir("job_store_records");
  auto write = [&](const std::string& id, const std::string& rest) {
    const std::string dir = JoinPath(root, "job-" + id);
    ASSERT_TRUE(MakeDirs(dir).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "job.json"), Record(id, dir, rest)).ok());
  };
  const std::string fields = ", \"working_dir\": \"/tmp\", \"steps\": 2, \"sweep_member\": \"\", \"resume\": false";
  write("1", ", \"yaml\": \"steps: 2\\n\"" + fields);
  write("2", fields);                    // no "yaml" (a record of another version, or cut short)
  write("3", ", \"yaml\": 7" + fields);  // a field of the wrong type
  write("4", ", \"yaml\": \"steps: 2\\n\", \"steps\": \"two\", \"working_dir\": \"/tmp\"");
  ASSERT_TRUE(MakeDirs(JoinPath(root, "job-5")).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root, "job-5/job.json"), "{\"info\": ").ok());  // not JSON

  JobQueue queue(CoordinatorOptions{}, root);
  ASSERT_TRUE(queue.Start().ok());
  auto one = queue.Get("1");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->state(), v1::JOB_STATE_FINISHED);
  EXPECT_EQ(one->name(), "job1");
  for (const char* skipped : {"2", "3", "4", "5"}) EXPECT_FALSE(queue.Get(skipped).ok()) << "job " << skipped;
  queue.Shutdown();
}

}  // namespace
}  // namespace baton
