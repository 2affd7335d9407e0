// Upload ordering on a real GPU (issue 27, defect 1): an upload must never land in memory that a kernel queued on
// the compute stream still reads. The compute stream is held up by a long spin kernel before it reads a buffer;
// the buffer is then freed on the host (the kernel has not run yet) and an upload of other values follows at
// once. Allocated from the compute stream's pool, the upload would get the freed block and its copy (on the side
// stream, not ordered after the compute stream) would overwrite the values before the delayed read: the read
// would see the upload's values. Skips without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#ifdef BATON_WITH_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "core/device/device.h"
#include "core/device/transfer.h"

namespace baton {
namespace {

TEST(CudaTransferOrderTest, AnUploadNeverOverwritesMemoryAQueuedKernelReads) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << BuildAndDeviceSummary();
#ifdef BATON_WITH_CUDA
  const at::Device cuda(at::kCUDA, 0);
  DeviceTransfer transfer(cuda);
  const int64_t n = int64_t{1} << 24;  // 64 MiB of fp32: a block of its own in the caching allocator
  const at::Tensor host_twos = at::full({n}, 2.0f).pin_memory();
  for (int trial = 0; trial < 5; ++trial) {
    at::Tensor ones = at::ones({n}, at::TensorOptions().device(cuda));
    at::cuda::sleep(int64_t{200} * 1000 * 1000);  // ~0.1 s of spinning on the compute stream
    at::Tensor read = ones.clone();               // queued behind the spin: reads `ones` later
    ones.reset();                                 // freed now, from the host's point of view
    at::Tensor uploaded = transfer.Upload(host_twos);
    EXPECT_TRUE(at::equal(read.cpu(), at::ones({n}))) << "trial " << trial << ": the upload overwrote a live read";
    EXPECT_TRUE(at::equal(uploaded.cpu(), at::full({n}, 2.0f))) << "trial " << trial;
  }
#endif
}

TEST(CudaTransferOrderTest, DownloadsStartAfterTheComputeStreamProducedTheTensor) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << BuildAndDeviceSummary();
#ifdef BATON_WITH_CUDA
  const at::Device cuda(at::kCUDA, 0);
  DeviceTransfer transfer(cuda);
  at::Tensor x = at::zeros({int64_t{1} << 22}, at::TensorOptions().device(cuda));
  at::cuda::sleep(int64_t{200} * 1000 * 1000);
  x.add_(3.0f);  // queued behind the spin
  DeviceTransfer::PendingDownload d = transfer.DownloadAsync(x);
  ASSERT_TRUE(d.wait);
  d.wait();
  EXPECT_TRUE(at::equal(d.host, at::full({int64_t{1} << 22}, 3.0f)));
#endif
}

}  // namespace
}  // namespace baton
