#include "core/util/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace baton {
namespace {

std::string TempDir() {
  std::string templ = "/tmp/baton-files-test-XXXXXX";
  EXPECT_NE(::mkdtemp(templ.data()), nullptr);
  return templ;
}

// A whole tree goes, depth first; a link inside it goes without what it points at; a missing path is fine.
TEST(RemoveAllTest, RemovesATreeButNeverFollowsALink) {
  const std::string root = TempDir(), outside = TempDir();
  ASSERT_TRUE(WriteFileAtomic(JoinPath(outside, "keep.txt"), "keep").ok());
  ASSERT_TRUE(MakeDirs(JoinPath(root, "a/b/c")).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root, "a/b/c/x.bin"), "x").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root, "a/y.bin"), "y").ok());
  ASSERT_EQ(::symlink(outside.c_str(), JoinPath(root, "a/link").c_str()), 0);
  ASSERT_TRUE(RemoveAll(root).ok());
  EXPECT_FALSE(PathExists(root));
  EXPECT_TRUE(PathExists(JoinPath(outside, "keep.txt")));
  EXPECT_TRUE(RemoveAll(root).ok());
  ASSERT_TRUE(RemoveAll(outside).ok());
}

}  // namespace
}  // namespace baton
