#include "core/util/threads.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <mutex>

namespace baton {
namespace {

std::atomic<int> g_threads{0};

}  // namespace

void SetComputeThreads(int n) {
  if (n < 1) n = 1;
  g_threads.store(n);
  at::set_num_threads(n);  // records n for at::init_num_threads; sets OpenMP (this thread) and MKL
  static std::once_flag interop_once;
  std::call_once(interop_once, [n] {
    try {
      at::set_num_interop_threads(n);
    } catch (const c10::Error&) {
      // The inter-op pool already started (some tensor work ran first): it keeps its size.
    }
  });
}

void EnterComputeThread() {
  if (g_threads.load() > 0) at::init_num_threads();
}

int ComputeThreads() { return g_threads.load(); }

}  // namespace baton
