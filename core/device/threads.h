// Compute threads: one number (a job's `threads:`, a binary's --threads) governs every compute thread of a
// process — libtorch's intra-op pool (OpenMP, and the BLAS under it) and its inter-op pool — with no
// environment variable needed.
#pragma once

namespace baton {

// Intra-op (OpenMP/BLAS) and inter-op threads of this process; n < 1 counts as 1. Call early in main, before
// tensor work; later calls change the intra-op number (the inter-op pool is fixed once libtorch has started it).
//
// Why this reaches threads started later (gRPC handlers, std::thread, std::async): libtorch 2.x records the
// number process-wide and applies it lazily in each thread before its first parallel op
// (at::internal::lazy_init_num_threads), whereas OpenMP alone keeps the setting per thread. threads_test.cc
// holds libtorch to that, so a libtorch that changed it would fail the test rather than silently use every
// core (and another reduction order: the pipeline would no longer equal the single-process trainer bit for bit).
void SetComputeThreads(int n);

}  // namespace baton
