#include "collective/peer_group.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace baton {
namespace {

PeerGroupSpec Spec(int port, const std::string& prefix, int rank, int size) {
  PeerGroupSpec spec;
  spec.store_host = "127.0.0.1";
  spec.store_port = port;
  spec.prefix = prefix;
  spec.rank = rank;
  spec.size = size;
  spec.bind_host = "127.0.0.1";
  spec.join_timeout = spec.timeout = absl::Seconds(20);
  return spec;
}

// Three members sum three tensors; each gets the same bytes, and the sum of small integers is exact.
TEST(PeerGroupTest, ThreeMembersGetTheSameSum) {
  auto store = RendezvousStore::Start();
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<at::Tensor> results(3);
  std::vector<absl::Status> status(3);
  std::vector<std::thread> members;
  for (int rank = 0; rank < 3; ++rank) {
    members.emplace_back([&, rank] {
      auto group = PeerGroup::Join(Spec((*store)->port(), "t/three", rank, 3));
      if (!group.ok()) {
        status[rank] = group.status();
        return;
      }
      at::Tensor t = at::arange(1000, at::kFloat) * static_cast<float>(rank + 1);
      status[rank] = (*group)->AllreduceSum(t);
      results[rank] = t;
    });
  }
  for (auto& m : members) m.join();
  for (int rank = 0; rank < 3; ++rank) ASSERT_TRUE(status[rank].ok()) << status[rank];
  EXPECT_TRUE(at::equal(results[0], at::arange(1000, at::kFloat) * 6.0f));
  EXPECT_TRUE(at::equal(results[1], results[0]));
  EXPECT_TRUE(at::equal(results[2], results[0]));
}

// A second formation under a new prefix works beside the first (a group re-formed after a loss); a group of one
// needs no store.
TEST(PeerGroupTest, GroupsReformUnderANewPrefixAndAGroupOfOneIsItself) {
  auto store = RendezvousStore::Start();
  ASSERT_TRUE(store.ok()) << store.status();
  for (int gen = 0; gen < 2; ++gen) {
    std::vector<at::Tensor> results(2);
    std::thread other([&] {
      auto group = PeerGroup::Join(Spec((*store)->port(), absl::StrCat("t/gen", gen), 1, 2));
      ASSERT_TRUE(group.ok()) << group.status();
      results[1] = at::full({8}, 2.0f);
      ASSERT_TRUE((*group)->AllreduceSum(results[1]).ok());
    });
    auto group = PeerGroup::Join(Spec((*store)->port(), absl::StrCat("t/gen", gen), 0, 2));
    ASSERT_TRUE(group.ok()) << group.status();
    results[0] = at::full({8}, 1.0f);
    ASSERT_TRUE((*group)->AllreduceSum(results[0]).ok());
    other.join();
    EXPECT_TRUE(at::equal(results[0], at::full({8}, 3.0f)));
  }
  PeerGroupSpec alone;
  auto group = PeerGroup::Join(alone);
  ASSERT_TRUE(group.ok()) << group.status();
  at::Tensor t = at::ones({4});
  ASSERT_TRUE((*group)->AllreduceSum(t).ok());
  EXPECT_TRUE(at::equal(t, at::ones({4})));
  at::Tensor wrong = at::ones({4}, at::kDouble);
  EXPECT_EQ((*group)->AllreduceSum(wrong).code(), absl::StatusCode::kInvalidArgument);
}

// A member that never comes: the others' join fails after the timeout, with the group named.
TEST(PeerGroupTest, AMissingMemberFailsTheJoinAfterTheTimeout) {
  auto store = RendezvousStore::Start();
  ASSERT_TRUE(store.ok()) << store.status();
  PeerGroupSpec spec = Spec((*store)->port(), "t/missing", 0, 2);
  spec.join_timeout = absl::Seconds(2);
  auto group = PeerGroup::Join(spec);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(group.status().message().find("t/missing"), std::string::npos) << group.status();
}

}  // namespace
}  // namespace baton
