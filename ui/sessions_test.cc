#include "ui/sessions.h"

#include <gtest/gtest.h>

#include <set>

namespace baton {
namespace {

TEST(SessionStoreTest, AnIdFindsItsTokenUntilRemovedOrExpired) {
  SessionStore store(absl::Seconds(2));
  const std::string id = store.Create("secret");
  EXPECT_EQ(id.size(), 64u);
  auto s = store.Find(id);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->token, "secret");
  EXPECT_EQ(s->csrf.size(), 32u);
  EXPECT_FALSE(store.Find("").has_value());
  EXPECT_FALSE(store.Find(id + "0").has_value());
  store.Remove(id);
  EXPECT_FALSE(store.Find(id).has_value());
  const std::string idle = store.Create("t");
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_TRUE(store.Find(idle, /*touch=*/false).has_value());  // looked at, not used
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_FALSE(store.Find(idle).has_value());
}

TEST(RandomHexTest, NeverTheSameTwice) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(RandomHex(16));
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace baton
