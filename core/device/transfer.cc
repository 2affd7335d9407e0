#include "core/device/transfer.h"

#ifdef BATON_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace baton {

#ifdef BATON_WITH_CUDA
struct DeviceTransfer::CudaState {
  c10::cuda::CUDAStream up;    // host → device
  c10::cuda::CUDAStream down;  // device → host
};
#else
struct DeviceTransfer::CudaState {};
#endif

DeviceTransfer::DeviceTransfer(at::Device device) : device_(device) {
#ifdef BATON_WITH_CUDA
  if (device_.is_cuda()) {
    c10::cuda::CUDAGuard guard(device_);
    cuda_ = std::make_unique<CudaState>(CudaState{c10::cuda::getStreamFromPool(/*isHighPriority=*/false),
                                                  c10::cuda::getStreamFromPool(/*isHighPriority=*/false)});
  }
#endif
}

DeviceTransfer::~DeviceTransfer() = default;

at::Tensor DeviceTransfer::Upload(const at::Tensor& host, std::optional<at::ScalarType> dtype) {
  if (!device_.is_cuda()) {  // CPU: the tensor itself; meta (the placement tests): a plain copy
    const at::Tensor on_device = host.to(device_);
    return dtype ? on_device.to(*dtype) : on_device;
  }
#ifdef BATON_WITH_CUDA
  c10::cuda::CUDAGuard guard(device_);
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
  const at::Tensor src = host.is_pinned() ? host : host.pin_memory();
  at::Tensor dst;
  {
    c10::cuda::CUDAStreamGuard on_up(cuda_->up);
    // Allocated while the upload stream is current: the block comes from that stream's pool, whose blocks are
    // reused only after every stream recorded on them is done. Allocated under the compute stream instead, the
    // copy (on another stream) could overwrite a freed block that a queued compute kernel still reads.
    dst = at::empty(host.sizes(), host.options().device(device_).pinned_memory(false));
    dst.copy_(src, /*non_blocking=*/true);  // the pinned host allocator keeps `src` until the copy is done
  }
  // The compute stream uses `dst` from now on: freeing it must wait for that stream's work, not the upload's.
  c10::cuda::CUDACachingAllocator::recordStream(dst.storage().data_ptr(), compute);
  at::cuda::CUDAEvent copied;
  copied.record(cuda_->up);
  copied.block(compute);  // nothing on the compute stream reads `dst` before the copy lands
  return dtype && *dtype != dst.scalar_type() ? dst.to(*dtype) : dst;
#else
  return host.to(device_);  // unreachable: ParseDevice refuses cuda in a build without CUDA
#endif
}

at::Tensor DeviceTransfer::Download(const at::Tensor& tensor) {
  if (!tensor.is_cuda()) return tensor.contiguous();
  PendingDownload pending = DownloadAsync(tensor);
  pending.wait();
  return pending.host;
}

DeviceTransfer::PendingDownload DeviceTransfer::DownloadAsync(const at::Tensor& tensor) {
  if (!tensor.is_cuda()) return {tensor, nullptr};
#ifdef BATON_WITH_CUDA
  c10::cuda::CUDAGuard guard(tensor.device());
  // The download stream copies only once the current (compute) stream has produced the tensor.
  at::cuda::CUDAEvent produced;
  produced.record(c10::cuda::getCurrentCUDAStream(tensor.device().index()));
  produced.block(cuda_->down);
  at::Tensor dst = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
  {
    c10::cuda::CUDAStreamGuard on_down(cuda_->down);
    dst.copy_(tensor, /*non_blocking=*/true);  // the pinned allocator records the copy: `dst` is not reused early
  }
  // The source's block may go back to the compute stream's pool only after the download stream has read it.
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), cuda_->down);
  auto copied = std::make_shared<at::cuda::CUDAEvent>();
  copied->record(cuda_->down);
  return {dst, [copied] { copied->synchronize(); }};
#else
  return {tensor.cpu(), nullptr};
#endif
}

}  // namespace baton
