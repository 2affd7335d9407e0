#include "core/util/write_fault.h"

#include <atomic>
#include <mutex>

namespace baton {
namespace {

std::mutex g_mu;
std::atomic<bool> g_set{false};
WriteFaultFn& Fault() {  // guarded by g_mu
  static auto* fault = new WriteFaultFn();
  return *fault;
}

}  // namespace

void SetWriteFaultForTesting(WriteFaultFn fault) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_set = static_cast<bool>(fault);
  Fault() = std::move(fault);
}

absl::Status WriteFault(const std::string& path) {
  if (!g_set.load(std::memory_order_relaxed)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(g_mu);
  return Fault() ? Fault()(path) : absl::OkStatus();
}

}  // namespace baton
