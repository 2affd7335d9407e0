#include "core/pipeline/chunks.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <tuple>

#include "core/pipeline/schedule.h"
#include "core/pipeline/stage_memory.h"
#include "core/util/status.h"

namespace baton {
namespace {

// C(n, k), saturating just above `cap`.
int64_t Choose(int64_t n, int64_t k, int64_t cap) {
  if (k < 0 || k > n) return 0;
  k = std::min(k, n - k);
  double r = 1;
  for (int64_t i = 1; i <= k; ++i) {
    r = r * static_cast<double>(n - k + i) / static_cast<double>(i);
    if (r > static_cast<double>(cap)) return cap + 1;
  }
  return static_cast<int64_t>(r + 0.5);
}

using Bounds = std::vector<int64_t>;  // [k + 1]: chunk u is blocks [bounds[u], bounds[u+1])

// (busiest worker, most expensive chunk, sum of squared chunk costs): smaller is better.
std::tuple<double, double, double> Score(const PlanModel& c, const PartitionOptions& o, int p, const Bounds& b) {
  const int k = static_cast<int>(b.size()) - 1;
  std::vector<double> worker(p, 0);
  double max_chunk = 0, squares = 0;
  for (int u = 0; u < k; ++u) {
    const double cost = StageComputeCost(c, o, b[u], b[u + 1], u == 0, u == k - 1);
    worker[u % p] += cost;
    max_chunk = std::max(max_chunk, cost);
    squares += cost * cost;
  }
  return {*std::max_element(worker.begin(), worker.end()), max_chunk, squares};
}

// Every split of n blocks into k non-empty contiguous chunks; the best by Score.
Bounds BestSplit(const PlanModel& c, const PartitionOptions& o, int p, int k) {
  const int64_t n = c.num_blocks();
  Bounds cur(k + 1, 0), best;
  cur[k] = n;
  std::tuple<double, double, double> best_score{std::numeric_limits<double>::infinity(), 0, 0};
  std::function<void(int)> place = [&](int u) {  // choose bounds[u] for u in [1, k)
    if (u == k) {
      auto score = Score(c, o, p, cur);
      if (score < best_score) best_score = score, best = cur;
      return;
    }
    for (int64_t b = cur[u - 1] + 1; b <= n - (k - u); ++b) {
      cur[u] = b;
      place(u + 1);
    }
  };
  place(1);
  return best;
}

// Bytes of activations a worker keeps: `in_flight` chunk-activations of its largest chunk (see the header).
int64_t ActivationBytes(const PlanModel& c, const PartitionOptions& o, int in_flight, int64_t max_blocks) {
  const int64_t unit = o.tokens_per_micro_batch * c.hidden_size * o.activation_bytes;
  const int64_t graph = kBlockWorkingFactor * unit + LoraInputCopyBytes(c, o) +
                        AdapterMatrixBytes(c, o, true);  // one block's graph (partition.h)
  if (o.recompute == RecomputePolicy::kNone) return in_flight * max_blocks * graph;
  return in_flight * max_blocks * unit + graph;
}

// Fills the per-worker cost, memory, budget and the verdict.
absl::Status SizeWorkers(const PlanModel& c, const PartitionOptions& o, ChunkPlan& plan) {
  const int p = plan.workers, v = plan.chunks;
  const int m = o.micro_batches > 0 ? o.micro_batches : p;
  // The schedule needs m % p == 0 (the coordinator checks); size for the nearest such m meanwhile.
  auto schedule = MakeSchedule(ScheduleKind::kInterleaved1F1B, p, std::max(p, m - m % p), v);
  if (!schedule.ok()) return schedule.status();
  const std::vector<int> in_flight = PeakInFlight(*schedule);
  std::vector<std::string> over;
  for (int w = 0; w < p; ++w) {
    int64_t frozen_bytes = 0, lora = 0, max_blocks = 0;
    double cost = 0;
    for (int u : WorkerVirtualStages(p, v, w)) {
      const StageSpec& s = plan.virtual_stages[u];
      cost += s.cost;
      frozen_bytes += s.param_bytes;
      lora += s.lora_params;
      max_blocks = std::max(max_blocks, s.block_end - s.block_begin);
    }
    const int64_t overhead = o.overhead_bytes >= 0 ? o.overhead_bytes : DeviceProcessBytes(o.StageDevice(w));
    const int64_t bytes =
        frozen_bytes + lora * 4 * 2 + ActivationBytes(c, o, in_flight[w], max_blocks) + TransientBytes(c, o) + overhead;
    const size_t nb = o.memory_budget_bytes.size();
    const int64_t budget = nb == 0 ? 0 : o.memory_budget_bytes[nb == 1 ? 0 : w];
    plan.worker_cost.push_back(cost);
    plan.worker_memory_bytes.push_back(bytes);
    plan.worker_budget_bytes.push_back(budget);
    if (budget > 0 && bytes > budget) {
      over.push_back(
          absl::StrCat("worker ", w, " needs ~", FormatByteSize(bytes), " of its ", FormatByteSize(budget), " budget"));
    }
  }
  plan.fits = over.empty();
  if (!plan.fits) {
    plan.message = absl::StrCat(absl::StrJoin(over, "; "), " (interleaved, ", v,
                                " chunks per worker; more workers or recompute would lower it)");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int> WorkerVirtualStages(int workers, int chunks, int worker) {
  std::vector<int> out;
  for (int c = 0; c < chunks; ++c) out.push_back(c * workers + worker);
  return out;
}

absl::StatusOr<ChunkPlan> PartitionFlux2Chunks(const Flux2Config& config, const PartitionOptions& options, int chunks) {
  return PartitionChunks(Flux2PlanSource(config), options, chunks);
}

absl::StatusOr<ChunkPlan> PartitionChunks(const PlanSource& source, const PartitionOptions& options, int chunks) {
  const int p = options.stages;
  if (chunks < 2) return absl::InvalidArgumentError(absl::StrCat("interleaving needs >= 2 chunks; got ", chunks));
  if (p < 1) return absl::InvalidArgumentError(absl::StrCat("stages must be >= 1; got ", p));
  ASSIGN_OR_RETURN(PlanModel model, source(options));
  const int k = p * chunks;
  const int64_t n = model.num_blocks();
  if (k > n) {
    return absl::InvalidArgumentError(absl::StrCat(p, " stages x ", chunks, " chunks = ", k,
                                                   " virtual stages, but the model has only ", n, " blocks"));
  }
  const size_t nb = options.memory_budget_bytes.size();
  if (nb > 1 && static_cast<int>(nb) != p) {
    return absl::InvalidArgumentError(absl::StrCat("memory_per_stage lists ", nb, " budgets for ", p, " stages"));
  }
  // The chunks as Partition balances them among themselves: the fallback, and the per-chunk sizes.
  PartitionOptions per_chunk = options;
  per_chunk.stages = k;
  per_chunk.memory_budget_bytes.clear();
  per_chunk.schedule = ScheduleKind::k1F1B;
  per_chunk.devices.clear();  // per worker, not per chunk; SizeWorkers applies them
  ASSIGN_OR_RETURN(Plan balanced, Partition(source, per_chunk));
  ChunkPlan plan;
  plan.workers = p;
  plan.chunks = chunks;
  plan.model = std::make_shared<const PlanModel>(model);
  Bounds bounds;
  plan.exhaustive = Choose(n - 1, k - 1, kMaxChunkSplits) <= kMaxChunkSplits;
  if (plan.exhaustive) {
    bounds = BestSplit(model, options, p, k);
  } else {
    for (const StageSpec& s : balanced.stages) bounds.push_back(s.block_begin);
    bounds.push_back(n);
  }
  const FrozenSizes& sizes = model.frozen;
  for (int u = 0; u < k; ++u) {
    StageSpec s;
    s.index = u;
    s.block_begin = bounds[u];
    s.block_end = bounds[u + 1];
    s.has_embedders = u == 0;
    s.has_head = u == k - 1;
    s.cost = StageComputeCost(model, options, s.block_begin, s.block_end, s.has_embedders, s.has_head);
    s.params = (s.has_embedders ? sizes.embed_params : 0) + (s.has_head ? sizes.head_params : 0);
    s.param_bytes = (s.has_embedders ? sizes.embed_bytes : 0) + (s.has_head ? sizes.head_bytes : 0);
    for (int64_t b = s.block_begin; b < s.block_end; ++b) {
      s.params += sizes.block_params[b];
      s.param_bytes += sizes.block_bytes[b];  // 8-bit block linears under quantize
      s.lora_params += model.block_lora[b];
    }
    plan.virtual_stages.push_back(s);
  }
  RETURN_IF_ERROR(SizeWorkers(model, options, plan));
  return plan;
}

std::string RenderChunkPlan(const Flux2Config& config, const ChunkPlan& plan) { return RenderChunkPlan(plan); }

std::string RenderChunkPlan(const ChunkPlan& plan) {
  double total = 0;
  for (double c : plan.worker_cost) total += c;
  std::string out =
      absl::StrFormat("interleaved plan: %d stages x %d chunks (virtual stages), split %s\n", plan.workers, plan.chunks,
                      plan.exhaustive ? "searched exhaustively" : "balanced per chunk");
  for (int w = 0; w < plan.workers; ++w) {
    std::vector<std::string> parts;
    for (int u : WorkerVirtualStages(plan.workers, plan.chunks, w)) {
      const StageSpec& s = plan.virtual_stages[u];
      parts.push_back(absl::StrCat(s.has_embedders ? "embedders + " : "",
                                   plan.model->describe(s.block_begin, s.block_end), s.has_head ? " + head" : ""));
    }
    const int64_t budget = plan.worker_budget_bytes[w];
    absl::StrAppendFormat(&out, "stage %d: %s | ~%s of %s | compute %.1f%%\n", w, absl::StrJoin(parts, " | "),
                          FormatByteSize(plan.worker_memory_bytes[w]),
                          budget > 0 ? FormatByteSize(budget) : std::string("unlimited"),
                          total > 0 ? 100.0 * plan.worker_cost[w] / total : 0.0);
  }
  if (!plan.fits) absl::StrAppend(&out, "does not fit: ", plan.message, "\n");
  return out;
}

}  // namespace baton
