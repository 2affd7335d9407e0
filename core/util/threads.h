// Compute threads: one number (a job's `threads:`, a binary's --threads) governs every compute thread of a
// process — libtorch's intra-op pool (OpenMP, and the BLAS under it) and its inter-op pool — with no
// environment variable needed.
//
// Why two calls: libtorch's intra-op parallelism is `#pragma omp parallel`, which reads the OpenMP setting of
// the *calling* thread. at::set_num_threads in main() therefore does not reach threads started later (gRPC
// handlers, std::thread, std::async): they would use every core, and a different reduction order (measured:
// LoRAs differing by ~1.5e-6 between the pipeline and the single-process trainer). So SetComputeThreads records
// the number once, and every thread that runs tensor work calls EnterComputeThread() before it does.
#pragma once

namespace baton {

// Intra-op (OpenMP/BLAS) and inter-op threads of this process. n >= 1. Call early in main, before tensor work;
// later calls change the intra-op number (the inter-op pool is fixed once libtorch has started it).
void SetComputeThreads(int n);

// Applies the process's compute-thread number to the calling thread. Cheap; call at the top of every thread
// body or RPC handler that runs tensor work.
void EnterComputeThread();

// The number SetComputeThreads last set (0 before any call).
int ComputeThreads();

}  // namespace baton
