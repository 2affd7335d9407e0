// The job commands' transport security (client_security.h): an --insecure on the command line wins over a folder the
// environment gives (BATON_TLS_DIR, exported as deploy/README.md shows); typed together with a folder it is refused,
// naming baton's own flags.
#include "client/client_security.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace baton {
namespace {

TEST(ClientSecurityTest, TypedInsecureWinsOverTheEnvironmentsFolder) {
  ASSERT_EQ(::setenv("BATON_TLS_DIR", "/nonexistent/baton-client", 1), 0);
  auto from_env = Args::Parse({"--insecure"}, SecurityFlags());
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_TRUE(ClientCredentials(*from_env, true).ok());
  auto typed = Args::Parse({"--insecure", "--tls-dir", "/elsewhere"}, SecurityFlags());
  ASSERT_TRUE(typed.ok()) << typed.status();
  const auto both = ClientCredentials(*typed, true);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("--insecure and --tls-dir"), std::string::npos) << both.status();
  ASSERT_EQ(::unsetenv("BATON_TLS_DIR"), 0);
}

}  // namespace
}  // namespace baton
