#include "core/device/transfer.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

// On CPU a DeviceTransfer copies nothing: an upload is the host tensor itself unless a dtype change is asked for,
// a download is the tensor made contiguous.
TEST(DeviceTransferTest, CpuUploadIsTheTensorItselfOrACastCopy) {
  DeviceTransfer transfer(at::kCPU);
  EXPECT_TRUE(transfer.device().is_cpu());
  EXPECT_FALSE(transfer.wants_pinned_host());
  const at::Tensor host = at::arange(12, at::kFloat).reshape({3, 4}) / 7;

  const at::Tensor same = transfer.Upload(host);
  EXPECT_TRUE(same.is_same(host)) << "an upload to the CPU must not copy";
  EXPECT_TRUE(transfer.Upload(host, at::kFloat).is_same(host)) << "the dtype it already has: no copy either";

  const at::Tensor bf16 = transfer.Upload(host, at::kBFloat16);
  EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(bf16.device().is_cpu());
  EXPECT_EQ(bf16.sizes(), host.sizes());
  EXPECT_TRUE(at::equal(bf16, host.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(host, at::arange(12, at::kFloat).reshape({3, 4}) / 7)) << "the source is left as it was";
}

TEST(DeviceTransferTest, CpuDownloadIsContiguousAndEqual) {
  DeviceTransfer transfer(at::kCPU);
  const at::Tensor contiguous = at::arange(6, at::kLong).reshape({2, 3});
  EXPECT_TRUE(transfer.Download(contiguous).is_same(contiguous));

  const at::Tensor transposed = contiguous.t();
  ASSERT_FALSE(transposed.is_contiguous());
  const at::Tensor down = transfer.Download(transposed);
  EXPECT_TRUE(down.is_contiguous());
  EXPECT_EQ(down.scalar_type(), at::kLong);
  EXPECT_TRUE(down.device().is_cpu());
  EXPECT_TRUE(at::equal(down, transposed));
}

TEST(DeviceTransferTest, CpuDownloadAsyncIsDoneAtOnce) {
  DeviceTransfer transfer(at::kCPU);
  const at::Tensor t = at::ones({4}, at::kHalf);
  DeviceTransfer::PendingDownload pending = transfer.DownloadAsync(t);
  EXPECT_TRUE(pending.host.is_same(t));
  EXPECT_FALSE(pending.wait) << "nothing to wait for on the CPU";
}

}  // namespace
}  // namespace baton
