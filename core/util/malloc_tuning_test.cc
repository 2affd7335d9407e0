#include "core/util/malloc_tuning.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>

namespace baton {
namespace {

long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// One "step": 24 blocks of 1 MiB allocated the way libtorch's CPU allocator does (64-byte aligned), every page
// written, then all freed. Returns the minor page faults it took.
long Step() {
  constexpr int kBlocks = 24;
  constexpr size_t kBytes = 1 << 20;
  const long before = MinorFaults();
  void* blocks[kBlocks];
  for (void*& p : blocks) {
    if (posix_memalign(&p, 64, kBytes) != 0) return -1;
    volatile char* c = static_cast<volatile char*>(p);
    for (size_t i = 0; i < kBytes; i += 4096) c[i] = 1;
  }
  for (int i = kBlocks - 1; i >= 0; --i) std::free(blocks[i]);
  return MinorFaults() - before;
}

// With glibc's defaults every such step faults its 24 MiB in again (6,144 pages: the freed top of the heap
// exceeds the dynamic trim threshold and goes back to the OS). Tuned, the memory stays and later steps reuse it.
TEST(MallocTuningTest, RepeatedStepsReuseTheirMemory) {
  TuneMallocForTensors();
  for (int i = 0; i < 4; ++i) ASSERT_GE(Step(), 0);  // the heap settles
  long faults = 0;
  for (int i = 0; i < 4; ++i) faults += Step();
  EXPECT_LT(faults, 6144 / 2) << "minor faults over 4 steps of 24 MiB each";
}

}  // namespace
}  // namespace baton
