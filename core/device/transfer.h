// Host ↔ device copies for a pipeline stage's inputs and outputs: on CUDA on side streams, so the next
// micro-batch's inputs travel while the compute stream works; on CPU plain (no copy unless a dtype change is asked
// for).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>

namespace baton {

// On CUDA, tensors arrive from the wire already in pinned host memory (the wire assembler allocates them so when
// the stage computes on CUDA). Upload copies on its own side stream, Download/DownloadAsync on another, so an
// upload never queues behind a download. The orderings each copy relies on are spelled out at each function
// (transfer.cc); in short: an upload's destination comes from the upload stream's pool and is handed to the
// compute stream with recordStream, so the caching allocator never gives it a block that a queued compute kernel
// still reads; the compute stream waits for the copy through an event.
class DeviceTransfer {
 public:
  explicit DeviceTransfer(at::Device device);
  ~DeviceTransfer();
  DeviceTransfer(const DeviceTransfer&) = delete;
  DeviceTransfer& operator=(const DeviceTransfer&) = delete;

  at::Device device() const { return device_; }
  // Whether host buffers for this device should be pinned (true for CUDA).
  bool wants_pinned_host() const { return device_.is_cuda(); }

  // host (CPU) → device, optionally cast to `dtype` on the device. Safe to use on the calling thread's current
  // stream at once. Thread-safe (Push handlers upload RoPE tables while the compute thread uploads inputs).
  at::Tensor Upload(const at::Tensor& host, std::optional<at::ScalarType> dtype = std::nullopt);
  // device → host (CPU, contiguous); complete when it returns.
  at::Tensor Download(const at::Tensor& tensor);
  // device → pinned host, started now (after what the current stream has queued so far); `host` holds the bytes
  // once `wait` (callable from any thread, any number of times) returns. On CPU: the tensor itself, wait empty.
  struct PendingDownload {
    at::Tensor host;
    std::function<void()> wait;
  };
  PendingDownload DownloadAsync(const at::Tensor& tensor);

 private:
  struct CudaState;  // the two side streams; defined only in CUDA builds
  at::Device device_;
  std::unique_ptr<CudaState> cuda_;
};

}  // namespace baton
