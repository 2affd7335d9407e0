#include "core/device/device_spans.h"

#ifdef BATON_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace baton {

#ifdef BATON_WITH_CUDA
struct DeviceSpans::Events {
  at::cuda::CUDAEvent begin{cudaEventDefault};  // the default CUDAEvent keeps no time (cudaEventDisableTiming)
  at::cuda::CUDAEvent end{cudaEventDefault};
};
#else
struct DeviceSpans::Events {};
#endif

DeviceSpans::DeviceSpans(at::Device device) : device_(device) {}
DeviceSpans::~DeviceSpans() = default;

void DeviceSpans::Begin() {
#ifdef BATON_WITH_CUDA
  if (!device_.is_cuda()) return;
  c10::cuda::CUDAGuard guard(device_);
  spans_.push_back(std::make_unique<Events>());
  spans_.back()->begin.record(c10::cuda::getCurrentCUDAStream(device_.index()));
#endif
}

void DeviceSpans::End() {
#ifdef BATON_WITH_CUDA
  if (!device_.is_cuda() || spans_.empty()) return;
  c10::cuda::CUDAGuard guard(device_);
  spans_.back()->end.record(c10::cuda::getCurrentCUDAStream(device_.index()));
#endif
}

double DeviceSpans::TakeSeconds() {
  double seconds = 0;
#ifdef BATON_WITH_CUDA
  if (!spans_.empty()) {
    spans_.back()->end.synchronize();  // one stream: every earlier event is done too
    for (const auto& span : spans_) {
      if (span->end.isCreated()) seconds += span->begin.elapsed_time(span->end) / 1000.0;
    }
  }
#endif
  spans_.clear();
  return seconds;
}

}  // namespace baton
