// Chunk planner for the interleaved schedule (Megatron virtual stages): FLUX.2's blocks split into p·v contiguous
// chunks, virtual stage u = c·p + w being chunk c of worker w, so worker w holds the non-contiguous chunks
// w, w+p, ..., w+(v-1)p. Chunk 0 (worker 0) also holds the embedders, chunk p·v-1 (worker p-1) the head.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/flux2_config.h"
#include "core/pipeline/partition.h"

namespace baton {

constexpr int64_t kMaxChunkSplits = 2'000'000;

struct ChunkPlan {
  int workers = 1;                           // p
  int chunks = 1;                            // v, per worker
  std::vector<StageSpec> virtual_stages;     // [p·v] in model order (index u; worker u % p, chunk u / p); memory
                                             // fields unset: memory is per worker, below
  std::vector<double> worker_cost;           // [p] MACs per micro-batch, summed over the worker's chunks
  std::vector<int64_t> worker_memory_bytes;  // [p] estimate
  std::vector<int64_t> worker_budget_bytes;  // [p] 0 = unlimited
  bool exhaustive = false;                   // searched every split (else: PartitionFlux2's balanced chunks)
  bool fits = false;
  std::string message;                     // when !fits: which worker is over by how much
  std::shared_ptr<const PlanModel> model;  // what was planned
};

// Worker w's virtual stages in chunk order: w, w + p, ..., w + (v-1)·p.
std::vector<int> WorkerVirtualStages(int workers, int chunks, int worker);

// Split: a worker's time per micro-batch is the sum of its chunks' costs (partition.h's cost model), so the split
// minimizes the busiest WORKER, then the most expensive chunk (the interleaved bubble assumes equal chunks), then
// the sum of squared chunk costs. Exhaustive over all splits while there are at most kMaxChunkSplits of them; past
// that (e.g. 56 blocks into 8 chunks) the chunks are balanced among themselves by PartitionFlux2, which is within
// one block of balanced workers too.
// Memory (an estimate composed from partition.h's model): per worker, frozen + LoRA of all its chunks, the
// overhead once, and activations of PeakInFlight(interleaved)[w] chunk-activations in flight, each sized as the
// worker's largest chunk (with recompute: its block inputs, plus one block's working set; without: every block's
// graph).
// options.stages is the number of workers p; options.memory_budget_bytes is per worker (empty, one, or p);
// options.micro_batches sizes the in-flight term. Errors: chunks < 2, p·v above the number of blocks, and
// PartitionFlux2's option errors.
absl::StatusOr<ChunkPlan> PartitionChunks(const PlanSource& source, const PartitionOptions& options, int chunks);
absl::StatusOr<ChunkPlan> PartitionFlux2Chunks(const Flux2Config& config, const PartitionOptions& options, int chunks);

// Human table: per worker its chunks ("double 0-1 | single 2-3"), memory estimate vs budget, compute share.
std::string RenderChunkPlan(const ChunkPlan& plan);
std::string RenderChunkPlan(const Flux2Config& config, const ChunkPlan& plan);

}  // namespace baton
