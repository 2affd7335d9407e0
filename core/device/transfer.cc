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
  c10::cuda::CUDAStream side;
};
#else
struct DeviceTransfer::CudaState {};
#endif

DeviceTransfer::DeviceTransfer(at::Device device) : device_(device) {
#ifdef BATON_WITH_CUDA
  if (device_.is_cuda()) {
    c10::cuda::CUDAGuard guard(device_);
    cuda_ = std::make_unique<CudaState>(CudaState{c10::cuda::getStreamFromPool(/*isHighPriority=*/false)});
  }
#endif
}

DeviceTransfer::~DeviceTransfer() = default;

at::Tensor DeviceTransfer::Upload(const at::Tensor& host, std::optional<at::ScalarType> dtype) {
  if (!device_.is_cuda()) return dtype ? host.to(*dtype) : host;
#ifdef BATON_WITH_CUDA
  c10::cuda::CUDAGuard guard(device_);
  c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
  // Allocated while the compute stream is current, so the caching allocator ties the block to it.
  at::Tensor dst = at::empty(host.sizes(), host.options().device(device_));
  const at::Tensor src = host.is_pinned() ? host : host.pin_memory();
  {
    c10::cuda::CUDAStreamGuard on_side(cuda_->side);
    dst.copy_(src, /*non_blocking=*/true);  // the host allocator keeps `src` alive until the copy is done
  }
  at::cuda::CUDAEvent copied;
  copied.record(cuda_->side);
  copied.block(compute);
  return dtype && *dtype != dst.scalar_type() ? dst.to(*dtype) : dst;
#else
  return host.to(device_);  // unreachable: ParseDevice refuses cuda in a build without CUDA
#endif
}

at::Tensor DeviceTransfer::Download(const at::Tensor& tensor) {
  if (!tensor.is_cuda()) return tensor.contiguous();
#ifdef BATON_WITH_CUDA
  c10::cuda::CUDAGuard guard(tensor.device());
  at::cuda::CUDAEvent produced;
  produced.record(c10::cuda::getCurrentCUDAStream(tensor.device().index()));
  produced.block(cuda_->side);  // the side stream copies only once the compute stream has produced it
  at::Tensor dst = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
  {
    c10::cuda::CUDAStreamGuard on_side(cuda_->side);
    dst.copy_(tensor, /*non_blocking=*/true);
    cuda_->side.synchronize();
  }
  return dst;
#else
  return tensor.cpu();
#endif
}

DeviceTransfer::PendingDownload DeviceTransfer::DownloadAsync(const at::Tensor& tensor) {
  if (!tensor.is_cuda()) return {tensor, nullptr};
#ifdef BATON_WITH_CUDA
  c10::cuda::CUDAGuard guard(tensor.device());
  at::cuda::CUDAEvent produced;
  produced.record(c10::cuda::getCurrentCUDAStream(tensor.device().index()));
  produced.block(cuda_->side);
  at::Tensor dst = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
  {
    c10::cuda::CUDAStreamGuard on_side(cuda_->side);
    dst.copy_(tensor, /*non_blocking=*/true);
  }
  // The compute stream may reuse the source's memory only after the side stream's copy.
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), cuda_->side);
  auto copied = std::make_shared<at::cuda::CUDAEvent>();
  copied->record(cuda_->side);
  return {dst, [copied] { copied->synchronize(); }};
#else
  return {tensor.cpu(), nullptr};
#endif
}

}  // namespace baton
