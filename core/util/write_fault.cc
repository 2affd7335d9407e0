#include "core/util/write_fault.h"

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>

#include <atomic>

namespace baton {
namespace {

ABSL_CONST_INIT absl::Mutex g_fault_mu(absl::kConstInit);
std::atomic<bool> g_set{false};  // read without g_fault_mu: the fast path when no fault is set
WriteFaultFn& Fault() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_fault_mu) {
  static auto* fault = new WriteFaultFn();
  return *fault;
}

}  // namespace

void SetWriteFaultForTesting(WriteFaultFn fault) {
  absl::MutexLock lock(&g_fault_mu);
  g_set = static_cast<bool>(fault);
  Fault() = std::move(fault);
}

absl::Status WriteFault(const std::string& path) {
  if (!g_set.load(std::memory_order_relaxed)) return absl::OkStatus();
  absl::MutexLock lock(&g_fault_mu);
  return Fault() ? Fault()(path) : absl::OkStatus();
}

}  // namespace baton
