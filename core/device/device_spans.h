// The time a device spent on spans of work, from CUDA events on the stream the work was queued on. A host clock
// around a CUDA call measures when the work was queued, not when it ran (the stage's forward_seconds on a GPU are
// launch times); the events measure the device. On the CPU nothing is recorded: the host's clock is the compute's.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace baton {

class DeviceSpans {
 public:
  explicit DeviceSpans(at::Device device);
  ~DeviceSpans();
  DeviceSpans(const DeviceSpans&) = delete;
  DeviceSpans& operator=(const DeviceSpans&) = delete;

  // Marks the start and the end of a span on the calling thread's current stream (spans do not nest).
  void Begin();
  void End();
  // The spans' summed seconds, waiting for the device to reach the last End; forgets them. 0 on the CPU.
  double TakeSeconds();

 private:
  struct Events;  // CUDA events, in CUDA builds
  at::Device device_;
  std::vector<std::unique_ptr<Events>> spans_;
};

}  // namespace baton
