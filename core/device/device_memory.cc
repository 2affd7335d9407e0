#include "core/device/device_memory.h"

#include <absl/base/thread_annotations.h>
#include <absl/strings/str_cat.h>
#include <absl/synchronization/mutex.h>

#include <map>
#include <set>
#include <string>

#include "core/device/peak_periods.h"
#include "core/device/pinned_host.h"
#include "core/metrics/families.h"
#include "core/util/log.h"

#ifdef BATON_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace baton {
namespace {

ABSL_CONST_INIT absl::Mutex g_devices_mu(absl::kConstInit);
std::set<int>& CudaDevices() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_devices_mu) {
  static auto* devices = new std::set<int>();
  return *devices;
}

}  // namespace

void NoteCudaDeviceInUse(int index) {
  absl::MutexLock lock(&g_devices_mu);
  CudaDevices().insert(index);
}

bool CudaAllocatorReady() {
#ifdef BATON_WITH_CUDA
  // The caching allocator sizes its per-device tables when CUDA initializes (lazily, at the first CUDA tensor);
  // asking it for a device's stats before then throws. A quantized stage builds on the CPU for minutes first.
  c10::cuda::CUDACachingAllocator::CUDAAllocator* allocator = c10::cuda::CUDACachingAllocator::get();
  return allocator != nullptr && allocator->initialized();
#else
  return false;
#endif
}

namespace {

struct PeakOwners {
  std::map<int, PeakPeriods> allocated, reserved;  // by device index
};
ABSL_CONST_INIT absl::Mutex g_peaks_mu(absl::kConstInit);
PeakOwners& Peaks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_peaks_mu) {
  static auto* peaks = new PeakOwners();
  return *peaks;
}

}  // namespace

DevicePeakBytes TakeDevicePeakBytes(int index, uint64_t owner) {
#ifdef BATON_WITH_CUDA
  if (!CudaAllocatorReady()) return {};
  const auto device = static_cast<c10::DeviceIndex>(index);
  absl::MutexLock lock(&g_peaks_mu);  // the read and the reset as one, against other owners' takes
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  const auto& allocated = stats.allocated_bytes[aggregate];
  const auto& reserved = stats.reserved_bytes[aggregate];
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
  return {Peaks().allocated[index].Take(owner, allocated.peak, allocated.current),
          Peaks().reserved[index].Take(owner, reserved.peak, reserved.current)};
#else
  (void)index;
  (void)owner;
  return {};
#endif
}

void ForgetDevicePeakOwner(uint64_t owner) {
  absl::MutexLock lock(&g_peaks_mu);
  for (auto* periods : {&Peaks().allocated, &Peaks().reserved}) {
    for (auto& [device, p] : *periods) p.Forget(owner);
  }
}

namespace {

void RefreshCudaGauges(ProcessMetrics& m, const std::set<int>& devices) {
#ifdef BATON_WITH_CUDA
  if (devices.empty() || !CudaAllocatorReady()) return;
  for (int d : devices) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(d));
    const auto& allocated = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    m.device_memory_allocated.Add({{"device", absl::StrCat("cuda:", d)}}).Set(static_cast<double>(allocated.current));
  }
  const PinnedHostBytes pinned = PinnedHostMemory();
  m.pinned_host_memory.Add({{"state", "in_use"}}).Set(static_cast<double>(pinned.in_use));
  m.pinned_host_memory.Add({{"state", "cached"}}).Set(static_cast<double>(pinned.cached));
#else
  (void)m;
  (void)devices;
#endif
}

}  // namespace

void RefreshDeviceMemoryGauges() {
  ProcessMetrics& m = ProcessFamilies();
  std::set<int> devices;
  {
    absl::MutexLock lock(&g_devices_mu);
    devices = CudaDevices();
  }
  // A scrape runs on the HTTP server's thread: nothing may unwind through it, whatever CUDA says.
  try {
    RefreshCudaGauges(m, devices);
  } catch (const std::exception& e) {
    m.refresh_errors.Add({}).Increment();
    LogWarning("metrics: reading CUDA memory statistics failed: ", e.what());
  }
}

}  // namespace baton
