#include "core/util/malloc_tuning.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
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
// In a fresh process (a threadsafe death test re-executes this binary), tuned first thing as every compute process is:
// the heap of this one holds whatever the tests before left in it (shuffled, some orders failed here).
TEST(MallocTuningTest, RepeatedStepsReuseTheirMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        TuneMallocForTensors();
        for (int i = 0; i < 4; ++i) {
          if (Step() < 0) std::exit(2);  // the heap settles
        }
        long faults = 0;
        for (int i = 0; i < 4; ++i) faults += Step();
        std::fprintf(stderr, "minor faults over 4 steps of 24 MiB each: %ld\n", faults);
        std::exit(faults < 6144 / 2 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "minor faults");
}

}  // namespace
}  // namespace baton
