// glibc malloc settings for a process that allocates and frees the same tensor sizes every step. libtorch's
// CPU allocator is plain posix_memalign/free; with glibc's defaults, freed activation buffers at the top of the
// heap are given back to the OS (brk/munmap) and the next step faults them back in page by page: ~8,000 minor
// faults and ~20 ms of a ~0.1 s step in bench_vs_pytorch. Keeping freed memory in the process removes that.
// Cost: the process keeps its peak heap instead of returning it between steps (what a training process
// needs again one step later anyway).
#pragma once

namespace baton {

// Once per process (later calls do nothing): mmap only blocks of >= 32 MiB (glibc's maximum threshold) and
// trim the heap only when more than 1 GiB at its top is free. Called by SetComputeThreads, which every compute
// process calls first.
void TuneMallocForTensors();

}  // namespace baton
