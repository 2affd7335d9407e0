#include "rpc/peer_address.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(PeerHostTest, TakesTheHostOfIpv4AndIpv6PeersAndNothingElse) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.1:5000"), "10.0.0.1");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5000"), "::1");
  EXPECT_EQ(PeerHost("ipv6:%5B::ffff:10.0.0.2%5D:41234"), "::ffff:10.0.0.2");
  EXPECT_EQ(PeerHost("unix:/tmp/socket"), "");
  EXPECT_EQ(PeerHost("ipv6:nonsense"), "");
}

}  // namespace
}  // namespace baton
