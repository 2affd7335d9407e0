#include "core/device/threads.h"

#include <ATen/Parallel.h>

#include <mutex>

#include "core/util/malloc_tuning.h"

namespace baton {

void SetComputeThreads(int n) {
  if (n < 1) n = 1;
  TuneMallocForTensors();  // every compute process passes here before its first step
  at::set_num_threads(n);  // process-wide; OpenMP and MKL pick it up in every thread (see the header)
  static std::once_flag interop_once;
  std::call_once(interop_once, [n] {
    try {
      at::set_num_interop_threads(n);
    } catch (const c10::Error&) {
      // The inter-op pool already started (some tensor work ran first): it keeps its size.
    }
  });
}

}  // namespace baton
