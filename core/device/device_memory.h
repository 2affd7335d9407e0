// The device's memory as Prometheus sees it: the CUDA caching allocator's allocated bytes on each device the process
// has said it computes on, and the pinned host pool. CUDA is touched only for devices passed to NoteCudaDeviceInUse,
// so a CPU-only process never initializes the CUDA runtime. The binaries that compute pass RefreshDeviceMemoryGauges
// to their metrics server (core/metrics/metrics_server.h), which calls it at each scrape.
#pragma once

#include <cstdint>

namespace baton {

// Adds cuda:`index` to the devices baton_device_memory_allocated_bytes reports. Thread-safe.
void NoteCudaDeviceInUse(int index);

// Sets baton_device_memory_allocated_bytes{device} and baton_pinned_host_memory_bytes{state} to their values now. The
// CUDA figures are read only once CUDA's caching allocator is initialized (CudaAllocatorReady); a failure to read
// them counts baton_metrics_refresh_errors_total and never throws.
void RefreshDeviceMemoryGauges();

// Whether libtorch's CUDA caching allocator has been initialized in this process (false without CUDA).
bool CudaAllocatorReady();

// The peak bytes the caching allocator held allocated and reserved on cuda:`index` since `owner`'s last call (or
// since CUDA started), and starts its next period; other owners' calls do not shorten it (core/device/peak_periods.h).
// -1 before CUDA's allocator is initialized or without CUDA. Thread-safe.
struct DevicePeakBytes {
  int64_t allocated = -1;
  int64_t reserved = -1;
};
DevicePeakBytes TakeDevicePeakBytes(int index, uint64_t owner);
// Ends `owner`'s periods (on every device).
void ForgetDevicePeakOwner(uint64_t owner);

}  // namespace baton
