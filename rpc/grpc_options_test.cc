#include "rpc/grpc_options.h"

#include <grpc/grpc.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace baton {
namespace {

int IntArg(const grpc::ChannelArguments& args, const char* key) {
  grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (std::string(c.args[i].key) == key && c.args[i].type == GRPC_ARG_INTEGER) return c.args[i].value.integer;
  }
  return -1;
}

TEST(GrpcOptionsTest, ChannelArgumentsCarryLimitsAndKeepalive) {
  GrpcOptions options;
  options.max_message_bytes = 32 << 20;
  options.keepalive_time = absl::Seconds(7);
  const grpc::ChannelArguments args = MakeChannelArguments(options);
  EXPECT_EQ(IntArg(args, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH), 32 << 20);
  EXPECT_EQ(IntArg(args, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH), 32 << 20);
  EXPECT_EQ(IntArg(args, GRPC_ARG_KEEPALIVE_TIME_MS), 7000);
  EXPECT_EQ(IntArg(args, GRPC_ARG_KEEPALIVE_TIMEOUT_MS), 5000);
  EXPECT_EQ(IntArg(args, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), 1);
  EXPECT_EQ(IntArg(args, GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA), 0);
}

TEST(GrpcOptionsTest, PrepareGrpcPollingKeepsAUsersSetting) {
  constexpr char kVar[] = "GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS";
  const char* was = std::getenv(kVar);
  const std::string saved = was ? was : "";
  ::unsetenv(kVar);
  PrepareGrpcPolling();
  ASSERT_NE(std::getenv(kVar), nullptr);
  EXPECT_EQ(std::string(std::getenv(kVar)), std::to_string(kBackupPollMs));
  ::setenv(kVar, "2500", 1);
  PrepareGrpcPolling();
  EXPECT_EQ(std::string(std::getenv(kVar)), "2500");
  if (was) {
    ::setenv(kVar, saved.c_str(), 1);
  } else {
    ::unsetenv(kVar);
  }
}

TEST(GrpcOptionsTest, DeadlineAfter) {
  const auto before = std::chrono::system_clock::now();
  const auto deadline = DeadlineAfter(absl::Milliseconds(1500));
  const auto after = std::chrono::system_clock::now();
  EXPECT_GE(deadline, before + std::chrono::milliseconds(1500));
  EXPECT_LE(deadline, after + std::chrono::milliseconds(1500));
  EXPECT_EQ(DeadlineAfter(absl::InfiniteDuration()), std::chrono::system_clock::time_point::max());
  EXPECT_EQ(DeadlineAfter(absl::Hours(24 * 365 * 1000)), std::chrono::system_clock::time_point::max());
  const auto past = DeadlineAfter(absl::Seconds(-3));
  EXPECT_LE(past, std::chrono::system_clock::now());
}

}  // namespace
}  // namespace baton
