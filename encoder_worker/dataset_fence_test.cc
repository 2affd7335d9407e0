#include "encoder_worker/dataset_fence.h"

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/util/files.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

class DatasetFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (std::filesystem::temp_directory_path() /
             absl::StrCat("baton_fence_test_", ::getpid(), "_",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    ASSERT_TRUE(RemoveAll(root_).ok());
    ASSERT_TRUE(MakeDirs(root_).ok());
    root_ = *RealPath(root_);  // messages name resolved folders
    data_ = JoinPath(root_, "data");
    outside_ = JoinPath(root_, "outside");
    ASSERT_TRUE(MakeDirs(data_).ok());
    ASSERT_TRUE(MakeDirs(outside_).ok());
  }
  void TearDown() override { ASSERT_TRUE(RemoveAll(root_).ok()); }
  void Link(const std::string& target, const std::string& link) {
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0) << link;
  }

  std::string root_, data_, outside_;
};

// A caption is never held whole when it is over the limit: its size refuses it before a byte is read, and a file
// whose size stat does not tell (/proc) is cut off one byte past the limit.
TEST_F(DatasetFenceTest, ReadsAtMostTheLimitAndOnlyRegularFiles) {
  const std::string file = JoinPath(data_, "a.txt");
  ASSERT_TRUE(WriteFileAtomic(file, std::string(100, 'x')).ok());
  auto fence = DatasetFence::Make(data_);
  ASSERT_TRUE(fence.ok()) << fence.status();
  auto whole = fence->Read(file, 100, "caption");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, std::string(100, 'x'));
  auto over = fence->Read(file, 99, "caption");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(), file + ": caption is 100 bytes, over the limit of 99 bytes");

  // A FIFO (no writer: a plain open would wait for one) and a folder are not files.
  const std::string fifo = JoinPath(data_, "fifo.txt");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(fence->Read(fifo).status().message(), fifo + " is not a regular file");
  EXPECT_EQ(fence->Read(data_).status().message(), data_ + " is not a regular file");

  const std::string proc = JoinPath(data_, "status.txt");
  Link("/proc/self/status", proc);  // st_size 0, over 100 bytes of text
  auto opened = DatasetFence::Make(data_, {"/proc"});
  ASSERT_TRUE(opened.ok()) << opened.status();
  auto cut = opened->Read(proc, 100, "caption");
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cut.status().message(), proc + ": caption is more than 100 bytes, over the limit of 100 bytes");
}

// Where a path resolves decides, links followed on every part of it; the operator's folders count as inside; a
// dangling link is named with its target.
TEST_F(DatasetFenceTest, JudgesWhereAPathResolves) {
  ASSERT_TRUE(WriteFileAtomic(JoinPath(outside_, "secret"), "s").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "mine"), "m").ok());
  Link(JoinPath(outside_, "secret"), JoinPath(data_, "out"));
  Link("mine", JoinPath(data_, "in"));
  Link("gone", JoinPath(data_, "dangling"));
  Link(outside_, JoinPath(data_, "dir"));
  auto fence = DatasetFence::Make(data_);
  ASSERT_TRUE(fence.ok()) << fence.status();
  EXPECT_TRUE(fence->Check(JoinPath(data_, "mine")).ok());
  EXPECT_TRUE(fence->Check(JoinPath(data_, "in")).ok());
  auto read = fence->Read(JoinPath(data_, "in"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "m");
  for (const char* name : {"out", "dir/secret"}) {
    const std::string path = JoinPath(data_, name);
    absl::Status s = fence->Check(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_THAT(
        std::string(s.message()),
        HasSubstr(path + " resolves to " + JoinPath(outside_, "secret") + ", outside the dataset folder " + data_ +
                  ": links out of the dataset are not followed (an operator may allow a folder with "
                  "encoder_worker --follow_links_into=" +
                  outside_ + ")"));
    EXPECT_EQ(fence->Read(path).status().code(), absl::StatusCode::kPermissionDenied);
  }
  absl::Status dangling = fence->Check(JoinPath(data_, "dangling"));
  EXPECT_EQ(dangling.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dangling.message(), JoinPath(data_, "dangling") + " is a dangling link (to gone)");
  EXPECT_EQ(fence->Read(JoinPath(data_, "dangling")).status(), dangling);
  EXPECT_EQ(fence->Check(JoinPath(data_, "absent")).code(), absl::StatusCode::kNotFound);

  auto opened = DatasetFence::Make(data_, {outside_});
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE(opened->Check(JoinPath(data_, "out")).ok());
  EXPECT_TRUE(opened->Check(JoinPath(data_, "dir/secret")).ok());
  auto everywhere = DatasetFence::Make(data_, {"/"});
  ASSERT_TRUE(everywhere.ok()) << everywhere.status();
  EXPECT_TRUE(everywhere->Check(JoinPath(data_, "out")).ok());
  EXPECT_EQ(DatasetFence::Make(data_, {JoinPath(root_, "nowhere")}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace baton
