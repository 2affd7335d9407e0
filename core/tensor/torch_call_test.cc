// TorchCall: out of memory is RESOURCE_EXHAUSTED with one short line; no libtorch backtrace in any message.
#include "core/tensor/torch_call.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <new>

#include "core/util/status.h"

namespace baton {
namespace {

TEST(TorchCallTest, OutOfMemoryIsResourceExhaustedAndShort) {
  absl::Status s = TorchCall("allocating", [] { (void)at::empty({int64_t{1} << 52}, at::kByte); });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find("Exception raised from"), absl::string_view::npos) << s;
  s = TorchCall("uploading", [] { TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried 2 GiB"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "uploading: out of memory: CUDA out of memory. Tried 2 GiB");
  s = TorchCall("growing", [] { throw std::bad_alloc(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "growing: out of memory (host allocation failed)");
}

TEST(TorchCallTest, OtherErrorsAreInternalWithoutBacktrace) {
  absl::Status s = TorchCall("forward", [] { TORCH_CHECK(false, "shapes differ"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message().find("Exception raised from"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("forward: shapes differ"), absl::string_view::npos) << s;
  EXPECT_EQ(StripTorchBacktrace("bad\nException raised from f at x.cpp:1 (most recent call first):\nframe #0: g"),
            "bad");
  EXPECT_EQ(StripTorchBacktrace("bad\nframe #0: g\nframe #1: h"), "bad");
  EXPECT_EQ(StripTorchBacktrace("plain message"), "plain message");
}

}  // namespace
}  // namespace baton
