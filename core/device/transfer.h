// Host ↔ device copies for a pipeline stage's inputs and outputs.
//
// On CUDA, tensors arrive from the wire already in pinned (page-locked) host memory (the wire assembler
// allocates them so when the stage's device is CUDA), and Upload issues the copy on a side stream: the copy of
// the next micro-batch's inputs runs while the compute stream works on the current one. The compute stream
// waits for each copy through an event before it touches the tensor, so ordering stays exact. Download copies
// a result back into pinned host memory on the side stream and waits for it (the wire needs the bytes);
// DownloadAsync starts that copy and returns at once, so a peer sender's thread can wait for the bytes while the
// compute stream goes on with the next micro-batch (a plain .to(kCPU) from the sender's thread would run on the
// default stream, behind whatever the compute thread has queued since).
// On CPU both are plain (no copy unless a dtype change is asked for).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>

namespace baton {

class DeviceTransfer {
 public:
  explicit DeviceTransfer(at::Device device);
  ~DeviceTransfer();
  DeviceTransfer(const DeviceTransfer&) = delete;
  DeviceTransfer& operator=(const DeviceTransfer&) = delete;

  at::Device device() const { return device_; }
  // Whether host buffers for this device should be pinned (true for CUDA).
  bool wants_pinned_host() const { return device_.is_cuda(); }

  // host (CPU) → device, optionally cast to `dtype` on the device. Safe to use on the compute stream at once.
  at::Tensor Upload(const at::Tensor& host, std::optional<at::ScalarType> dtype = std::nullopt);
  // device → host (CPU, contiguous); complete when it returns.
  at::Tensor Download(const at::Tensor& tensor);
  // device → pinned host, started now (after what the compute stream has queued so far); `host` holds the bytes
  // once `wait` (callable from any thread, any number of times) returns. On CPU: the tensor itself, wait empty.
  struct PendingDownload {
    at::Tensor host;
    std::function<void()> wait;
  };
  PendingDownload DownloadAsync(const at::Tensor& tensor);

 private:
  struct CudaState;  // side stream; defined only in CUDA builds
  at::Device device_;
  std::unique_ptr<CudaState> cuda_;
};

}  // namespace baton
