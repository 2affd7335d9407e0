#include "rpc/grpc_status.h"

#include <absl/strings/cord.h>
#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(GrpcStatusTest, EveryCodeSurvivesTheRoundTrip) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status original(static_cast<absl::StatusCode>(code), code == 0 ? "" : "stage 1: boom");
    const grpc::Status wire = ToGrpcStatus(original);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(wire), original) << code;
  }
}

TEST(GrpcStatusTest, NoLibtorchBacktraceLeavesTheProcess) {
  const absl::Status s = absl::InvalidArgumentError(
      "Push: tensor 'img': boom\nException raised from empty_cpu at aten/src/ATen/Empty.cpp:12 (most recent call "
      "first):\nframe #0: c10::Error::Error()");
  const grpc::Status wire = ToGrpcStatus(s);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(wire.error_message(), "Push: tensor 'img': boom");
}

TEST(GrpcStatusTest, KeepsMessageAndDetails) {
  absl::Status s = absl::InvalidArgumentError("tensor 'img': bad shape");
  s.SetPayload("type.googleapis.com/grpc.error_details", absl::Cord("\x08\x03"));
  const grpc::Status wire = ToGrpcStatus(s);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(wire.error_message(), "tensor 'img': bad shape");
  EXPECT_EQ(wire.error_details(), "\x08\x03");
  EXPECT_EQ(FromGrpcStatus(wire), s);
}

TEST(GrpcStatusTest, UnknownCodesBecomeUnknown) {
  const grpc::Status wire = ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(99), "odd"));
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(77), "odd")).code(), absl::StatusCode::kUnknown);
}

TEST(GrpcStatusTest, ContextPrefixesErrorsOnly) {
  const absl::Status s =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"), "stage 2 (h:7001) Push");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "stage 2 (h:7001) Push: connection refused");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "stage 2").ok());
}

}  // namespace
}  // namespace baton
