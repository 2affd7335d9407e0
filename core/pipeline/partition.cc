#include "core/pipeline/partition.h"

#include <absl/strings/ascii.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/quant/weight_quant.h"
#include "core/util/status.h"

namespace baton {
namespace {

// The bytes a stage's adapters take with what they bring (PartitionOptions::LoraCopies fp32 copies), rounded up.
int64_t LoraBytes(int64_t lora_params, const PartitionOptions& o) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(lora_params) * 4 * o.LoraCopies()));
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kHuge = 1e300;  // an unlimited budget's headroom
constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxTokens = 100'000'000;

// Multiply-add equivalents of one pass of one token stream's operations on a CPU (the dispatch term, header).
constexpr double kCpuStreamPassMacs = 1e8;

double DispatchMacs(PlanDevice device) { return device == PlanDevice::kCpu ? kCpuStreamPassMacs : 0; }

// One micro-batch's training-step cost of blocks [i, j) with the first r recomputed (embedders recomputed with
// them when r > 0; the head only under full recompute, r == j - i: the hybrid keeps its graph), on a device whose
// dispatch term is `dispatch`. A block or the head costs 2 passes (forward + input-gradient backward), the
// embedders 1 (their inputs need no gradient), plus one forward per recomputed piece.
double SegmentCost(const PlanModel& m, double dispatch, int64_t i, int64_t j, int64_t r, bool embedders, bool head) {
  const int64_t n = j - i;
  auto forward = [&](int64_t begin, int64_t end) {
    double streams = 0;
    for (int64_t b = begin; b < end; ++b) streams += m.Streams(b);
    return static_cast<double>(end - begin) * m.block_macs + streams * dispatch;
  };
  double cost = 2 * forward(i, j) + forward(i, i + r);
  if (embedders) cost += m.embed_macs * (r > 0 ? 2 : 1);
  if (head) cost += m.head_macs * (r == n && n > 0 ? 3 : 2);
  return cost;
}

}  // namespace

int64_t LoraInputCopyBytes(const PlanModel& m, const PartitionOptions& o) {
  // An fp32 compute dtype needs no copy: the adapters read the input itself.
  if (o.activation_bytes >= 4) return 0;
  if (o.lora_fp32) return m.block_lora_input * 4;
  return o.lora_dropout ? m.block_lora_input * o.activation_bytes : 0;
}

int64_t AdapterMatrixBytes(const PlanModel& m, const PartitionOptions& o, bool graph) {
  const int64_t bytes = o.lora_fp32 || o.activation_bytes >= 4 ? 4 : o.activation_bytes;
  if (graph) return o.lora_type == AdapterType::kLoha ? 3 * m.block_adapted_elements * bytes : 0;
  return o.lora_type == AdapterType::kDora ? 2 * m.largest_adapted * bytes : 0;
}

int64_t TransientBytes(const PlanModel& m, const PartitionOptions& o) {
  const int64_t adapter = AdapterMatrixBytes(m, o, /*graph=*/false);
  if (o.quantize == WeightQuant::kNone || m.largest_quantized_linear == 0) return adapter;
  const int64_t dequantized = m.largest_quantized_linear * o.bytes_per_param;
  const int64_t tile = o.bytes_per_param < 4 ? std::min(kDequantTileBytes, m.largest_quantized_linear * 4) : 0;
  return dequantized + tile + adapter;
}

namespace {

// Sizes every contiguous segment for one stage count; the DPs below only call Cost/Memory/Budget.
class Sizer {
 public:
  Sizer(const PlanModel& m, const PartitionOptions& o, int stages, std::vector<int64_t> budgets)
      : stages_(stages), budgets_(std::move(budgets)), options_(o), model_(m) {
    const int64_t n = m.num_blocks();
    param_prefix_.assign(n + 1, 0);
    bytes_prefix_.assign(n + 1, 0);
    lora_prefix_.assign(n + 1, 0);
    for (int64_t b = 0; b < n; ++b) {
      param_prefix_[b + 1] = param_prefix_[b] + model_.frozen.block_params[b];
      bytes_prefix_[b + 1] = bytes_prefix_[b] + model_.frozen.block_bytes[b];
      lora_prefix_[b + 1] = lora_prefix_[b] + m.block_lora[b];
    }
    act_unit_ = o.tokens_per_micro_batch * m.hidden_size * o.activation_bytes;
    graph_ = kBlockWorkingFactor * act_unit_ + LoraInputCopyBytes(m, o) + AdapterMatrixBytes(m, o, /*graph=*/true);
    transient_ = TransientBytes(m, o);
    for (int k = 0; k < stages; ++k) {
      overhead_.push_back(o.overhead_bytes >= 0 ? o.overhead_bytes : DeviceProcessBytes(o.StageDevice(k)));
    }
    const int mbs = o.micro_batches > 0 ? o.micro_batches : stages;
    auto schedule = MakeSchedule(o.schedule, stages, mbs);
    in_flight_ = schedule.ok() ? PeakInFlight(*schedule) : std::vector<int>(stages, mbs);
  }

  int stages() const { return stages_; }
  int64_t blocks() const { return static_cast<int64_t>(param_prefix_.size()) - 1; }
  int64_t Budget(int k) const { return budgets_.empty() ? kUnlimited : budgets_[k]; }
  int InFlight(int k) const { return in_flight_[k]; }
  int64_t Overhead(int k) const { return overhead_[k]; }
  int64_t Transient() const { return transient_; }
  double Cost(int k, int64_t i, int64_t j) const {
    return SegmentCost(model_, DispatchMacs(options_.StageDevice(k)), i, j, Recompute(k, i, j), k == 0,
                       k == stages_ - 1);
  }
  int64_t Params(int k, int64_t i, int64_t j) const {
    return param_prefix_[j] - param_prefix_[i] + (k == 0 ? model_.frozen.embed_params : 0) +
           (k == stages_ - 1 ? model_.frozen.head_params : 0);
  }
  int64_t Weights(int k, int64_t i, int64_t j) const {
    return bytes_prefix_[j] - bytes_prefix_[i] + (k == 0 ? model_.frozen.embed_bytes : 0) +
           (k == stages_ - 1 ? model_.frozen.head_bytes : 0);
  }
  int64_t Lora(int64_t i, int64_t j) const { return lora_prefix_[j] - lora_prefix_[i]; }
  // The frozen bytes of the first s blocks of a segment starting at block i (in host memory when swapped), and
  // what they take on the device when swapped: min(s, 2) buffers of the largest.
  int64_t SwappedBytes(int64_t i, int64_t s) const { return bytes_prefix_[i + s] - bytes_prefix_[i]; }
  int64_t SwapBufferBytes(int64_t i, int64_t s) const {
    int64_t largest = 0;
    for (int64_t b = i; b < i + s; ++b) largest = std::max(largest, model_.frozen.block_bytes[b]);
    return std::min<int64_t>(s, 2) * largest;
  }
  // The `act` term for a stage of n blocks, the first r recomputed (header).
  int64_t Activation(int k, int64_t n, int64_t r) const {
    return in_flight_[k] * ActivationPerMicroBatch(n, r) + (r > 0 ? graph_ : 0);
  }
  int64_t ActivationPerMicroBatch(int64_t n, int64_t r) const { return r * act_unit_ + (n - r) * graph_; }
  // Everything but the activations, with the first s blocks swapped.
  int64_t Fixed(int k, int64_t i, int64_t j, int64_t s) const {
    return Weights(k, i, j) - SwappedBytes(i, s) + SwapBufferBytes(i, s) + LoraBytes(Lora(i, j), options_) +
           overhead_[k] + transient_;
  }
  // How many leading blocks of the segment are swapped: the option (at most its blocks), or under auto the fewest
  // that fit (memory never grows with s: a binary search).
  int64_t Offload(int k, int64_t i, int64_t j) const {
    const int64_t n = j - i;
    if (options_.offload_blocks != PartitionOptions::kOffloadAuto) return std::min(options_.offload_blocks, n);
    if (Budget(k) == kUnlimited || MemoryWith(k, i, j, 0) <= Budget(k)) return 0;
    // A stage that swaps at all swaps enough to keep kOffloadHeadroomBytes (at most a tenth of its budget) free:
    // another block costs only copies that overlap the compute, a plan to the last byte an out-of-memory error.
    const int64_t target = Budget(k) - std::min(kOffloadHeadroomBytes, Budget(k) / 10);
    int64_t lo = 1, hi = n;  // the answer is in [lo, hi]; n when nothing fits
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (MemoryWith(k, i, j, mid) <= target) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }
  // How many leading blocks of the segment are recomputed with s swapped: the policy, or under auto the fewest that
  // fit; never fewer than s.
  int64_t RecomputeWith(int k, int64_t i, int64_t j, int64_t s) const {
    const int64_t n = j - i;
    if (options_.recompute == RecomputePolicy::kNone) return 0;
    if (options_.recompute == RecomputePolicy::kAll) return n;
    if (Budget(k) == kUnlimited) return s;
    const int64_t room = Budget(k) - Fixed(k, i, j, s);
    if (Activation(k, n, s) <= room) return s;
    // Activation(k, n, r) for r >= 1 falls by in_flight x (graph - A) per recomputed block.
    const int64_t start = Activation(k, n, 1), step = in_flight_[k] * (graph_ - act_unit_);
    if (start <= room || step <= 0) return std::max<int64_t>(s, std::min<int64_t>(1, n));
    const int64_t r = 1 + (start - room + step - 1) / step;
    return std::max(s, std::min(r, n));
  }
  int64_t Recompute(int k, int64_t i, int64_t j) const { return RecomputeWith(k, i, j, Offload(k, i, j)); }
  int64_t MemoryWith(int k, int64_t i, int64_t j, int64_t s) const {
    return Fixed(k, i, j, s) + Activation(k, j - i, RecomputeWith(k, i, j, s));
  }
  int64_t Memory(int k, int64_t i, int64_t j) const { return MemoryWith(k, i, j, Offload(k, i, j)); }
  // Memory beyond the budget (negative = headroom); very negative for unlimited stages.
  double Overrun(int k, int64_t i, int64_t j) const {
    return Budget(k) == kUnlimited ? -kHuge : static_cast<double>(Memory(k, i, j) - Budget(k));
  }

 private:
  int stages_;
  std::vector<int64_t> budgets_;  // empty or [stages]
  PartitionOptions options_;
  const PlanModel& model_;  // outlives the sizer (Partition's)
  std::vector<int64_t> param_prefix_, bytes_prefix_, lora_prefix_;
  int64_t act_unit_ = 0;  // A: one block boundary's activation
  int64_t graph_ = 0;     // one block's graph: kBlockWorkingFactor x A + the adapters' fp32 input copies
  int64_t transient_ = 0;
  std::vector<int64_t> overhead_;  // [stages]
  std::vector<int> in_flight_;
};

using SegmentFn = std::function<double(int k, int64_t i, int64_t j)>;
using AllowFn = std::function<bool(int k, int64_t i, int64_t j)>;

// min over contiguous splits (>= 1 block per stage) of max_k metric(stage k); kInf if nothing is allowed.
double MinMax(const Sizer& z, const SegmentFn& metric, const AllowFn& allowed) {
  const int p = z.stages();
  const int64_t n = z.blocks();
  // best[j]: over the first k stages covering blocks [0, j).
  std::vector<double> best(n + 1, kInf), next(n + 1, kInf);
  best[0] = -kInf;
  for (int k = 0; k < p; ++k) {
    std::fill(next.begin(), next.end(), kInf);
    const int64_t j_hi = n - (p - 1 - k);
    for (int64_t j = k + 1; j <= j_hi; ++j) {
      if (k == p - 1 && j != n) continue;
      for (int64_t i = k; i < j; ++i) {
        if (best[i] == kInf || !allowed(k, i, j)) continue;
        next[j] = std::min(next[j], std::max(best[i], metric(k, i, j)));
      }
    }
    best.swap(next);
  }
  return best[n];
}

// Among allowed splits, the one with the smallest sum of squared stage costs (earliest boundary on ties).
// Returns the p+1 boundaries, or empty if none is allowed.
std::vector<int64_t> MostBalanced(const Sizer& z, const AllowFn& allowed) {
  const int p = z.stages();
  const int64_t n = z.blocks();
  const double kNone = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(p + 1, std::vector<double>(n + 1, kNone));
  std::vector<std::vector<int64_t>> from(p + 1, std::vector<int64_t>(n + 1, -1));
  best[0][0] = 0;
  for (int k = 0; k < p; ++k) {
    for (int64_t j = k + 1; j <= n - (p - 1 - k); ++j) {
      if (k == p - 1 && j != n) continue;
      for (int64_t i = k; i < j; ++i) {
        if (best[k][i] == kNone || !allowed(k, i, j)) continue;
        const double c = z.Cost(k, i, j);
        const double v = best[k][i] + c * c;
        if (v < best[k + 1][j]) {
          best[k + 1][j] = v;
          from[k + 1][j] = i;
        }
      }
    }
  }
  if (best[p][n] == kNone) return {};
  std::vector<int64_t> bounds(p + 1);
  bounds[p] = n;
  for (int k = p; k > 0; --k) bounds[k - 1] = from[k][bounds[k]];
  return bounds;
}

bool FitsBudgets(const Sizer& z) {
  return MinMax(
             z, [&](int k, int64_t i, int64_t j) { return z.Overrun(k, i, j); },
             [](int, int64_t, int64_t) { return true; }) <= 0;
}

std::string FormatCount(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2f B", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.1f M", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1f k", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

// Explains a plan that does not fit: which stages are over, and what would fit instead.
std::string ExplainMiss(const PlanSource& source, const PlanModel& model, const PartitionOptions& o, const Sizer& z,
                        const std::vector<StageSpec>& stages, const std::vector<int64_t>& budgets) {
  // Name the worst few stages (by overrun), in stage order; a 56-stage list helps nobody.
  constexpr size_t kNamed = 3;
  std::vector<const StageSpec*> over;
  for (const StageSpec& s : stages) {
    if (s.budget_bytes > 0 && s.est_memory_bytes > s.budget_bytes) over.push_back(&s);
  }
  std::vector<const StageSpec*> named = over;
  if (named.size() > kNamed) {
    std::stable_sort(named.begin(), named.end(), [](const StageSpec* a, const StageSpec* b) {
      return a->est_memory_bytes - a->budget_bytes > b->est_memory_bytes - b->budget_bytes;
    });
    named.resize(kNamed);
    std::sort(named.begin(), named.end(), [](const StageSpec* a, const StageSpec* b) { return a->index < b->index; });
  }
  std::vector<std::string> parts;
  for (const StageSpec* s : named) {
    parts.push_back(absl::StrCat("stage ", s->index, " (", model.describe(s->block_begin, s->block_end), ") needs ~",
                                 FormatByteSize(s->est_memory_bytes), " but its budget is ",
                                 FormatByteSize(s->budget_bytes), ": over by ",
                                 FormatByteSize(s->est_memory_bytes - s->budget_bytes)));
  }
  std::string msg = absl::StrCat("does not fit: ", absl::StrJoin(parts, "; "));
  if (over.size() > named.size()) {
    absl::StrAppend(&msg, "; ", over.size() - named.size(), " more stages are over budget");
  }
  const int p = z.stages();

  // Smallest uniform budget that works for this many stages.
  const double need = MinMax(
      z, [&](int k, int64_t i, int64_t j) { return static_cast<double>(z.Memory(k, i, j)); },
      [](int, int64_t, int64_t) { return true; });
  absl::StrAppend(&msg, ". With ", p, " stages every worker needs >= ", FormatByteSize(static_cast<int64_t>(need)));

  // With one budget for all workers: how many stages of that size would do.
  const bool uniform = std::all_of(budgets.begin(), budgets.end(), [&](int64_t b) { return b == budgets[0]; });
  if (uniform) {
    const int64_t b = budgets[0];
    int fit_stages = 0;
    for (int q = p + 1; q <= z.blocks() && fit_stages == 0; ++q) {
      if (FitsBudgets(Sizer(model, o, q, std::vector<int64_t>(q, b)))) fit_stages = q;
    }
    if (fit_stages > 0) {
      absl::StrAppend(&msg, "; it needs >= ", fit_stages, " stages of ", FormatByteSize(b));
    } else {
      absl::StrAppend(&msg, "; no number of stages of ", FormatByteSize(b), " fits (one block per stage is too big)");
    }
  }
  if (o.quantize == WeightQuant::kNone && o.bytes_per_param > 1) {
    PartitionOptions int8 = o;
    int8.quantize = WeightQuant::kInt8;
    auto int8_model = source(int8);
    if (int8_model.ok() && FitsBudgets(Sizer(*int8_model, int8, p, budgets))) {
      absl::StrAppend(&msg, "; with 8-bit frozen weights (quantize: int8 or fp8) ", p, " stages would fit");
    }
  }
  if (o.offload_blocks == 0 && o.recompute != RecomputePolicy::kNone) {
    PartitionOptions swap = o;
    swap.offload_blocks = PartitionOptions::kOffloadAuto;
    if (FitsBudgets(Sizer(model, swap, p, budgets))) {
      absl::StrAppend(&msg, "; with offload: auto (block swap from host memory) ", p, " stages would fit");
    }
  }
  if (o.recompute == RecomputePolicy::kNone) {
    PartitionOptions rc = o;
    rc.recompute = RecomputePolicy::kAuto;
    if (FitsBudgets(Sizer(model, rc, p, budgets))) {
      absl::StrAppend(&msg, "; with recompute: auto ", p, " stages would fit");
    }
  }
  return msg;
}

}  // namespace

int64_t DoubleBlockLoraParams(const Flux2Config& c, int64_t rank, bool all_linear, AdapterType type,
                              int64_t lokr_factor) {
  const int64_t d = c.inner_dim(), m = c.mlp_hidden_dim();
  auto n = [&](int64_t in, int64_t out) { return AdapterParameterCount(type, in, out, rank, lokr_factor); };
  if (!all_linear) return 4 * n(d, d);  // image stream to_q, to_k, to_v, to_out.0
  // Both streams' q, k, v, out; both SwiGLU feed-forwards (linear_in D->2M, linear_out M->D).
  return 8 * n(d, d) + 2 * (n(d, 2 * m) + n(m, d));
}

int64_t SingleBlockLoraParams(const Flux2Config& c, int64_t rank, bool all_linear, AdapterType type,
                              int64_t lokr_factor) {
  const int64_t d = c.inner_dim(), m = c.mlp_hidden_dim();
  // to_qkv_mlp_proj D -> 3D+2M and to_out (D+M) -> D are the only linears; both sets target them.
  return AdapterParameterCount(type, d, 3 * d + 2 * m, rank, lokr_factor) +
         AdapterParameterCount(type, d + m, d, rank, lokr_factor);
}

double StageComputeCost(const Flux2Config& c, const PartitionOptions& o, int64_t block_begin, int64_t block_end,
                        bool embedders, bool head, int64_t recompute_blocks) {
  auto model = Flux2PlanSource(c)(o);
  return model.ok() ? StageComputeCost(*model, o, block_begin, block_end, embedders, head, recompute_blocks) : 0;
}

double StageComputeCost(const PlanModel& m, const PartitionOptions& o, int64_t block_begin, int64_t block_end,
                        bool embedders, bool head, int64_t recompute_blocks) {
  const int64_t n = block_end - block_begin;
  const double dispatch = DispatchMacs(o.device);
  if (recompute_blocks < 0) {
    if (o.recompute != RecomputePolicy::kAll)
      return SegmentCost(m, dispatch, block_begin, block_end, 0, embedders, head);
    // Everything recomputed, the embedders and the head too, even on a stage of no blocks.
    return SegmentCost(m, dispatch, block_begin, block_end, n, false, false) + (embedders ? 2 * m.embed_macs : 0) +
           (head ? 3 * m.head_macs : 0);
  }
  return SegmentCost(m, dispatch, block_begin, block_end, std::min(recompute_blocks, n), embedders, head);
}

absl::StatusOr<Plan> PartitionFlux2(const Flux2Config& config, const PartitionOptions& o) {
  return Partition(Flux2PlanSource(config), o);
}

namespace {

// The options' own errors, before any sizing (`n`: the model's blocks).
absl::Status CheckPartitionOptions(const PartitionOptions& o, int64_t n) {
  const int p = o.stages;
  if (p < 1) return absl::InvalidArgumentError(absl::StrCat("stages must be >= 1; got ", p));
  if (p > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", n, " blocks into ", p, " stages: every stage needs at least one block"));
  }
  const size_t nb = o.memory_budget_bytes.size();
  if (nb != 0 && nb != 1 && nb != static_cast<size_t>(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory budgets: give none, one for all stages, or one per stage (", p, "); got ", nb));
  }
  for (size_t k = 0; k < nb; ++k) {
    if (o.memory_budget_bytes[k] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory budget #", k, " must be > 0 bytes; got ", o.memory_budget_bytes[k]));
    }
  }
  if (o.bytes_per_param < 1 || o.bytes_per_param > 4) {
    return absl::InvalidArgumentError(absl::StrCat("bytes_per_param must be 1..4; got ", o.bytes_per_param));
  }
  if (o.activation_bytes < 1 || o.activation_bytes > 4) {
    return absl::InvalidArgumentError(absl::StrCat("activation_bytes must be 1..4; got ", o.activation_bytes));
  }
  if (o.lora_rank < 0 || o.lora_rank > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("lora_rank must be 0..65536; got ", o.lora_rank));
  }
  if (o.tokens_per_micro_batch < 0 || o.tokens_per_micro_batch > kMaxTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens_per_micro_batch must be 0..", kMaxTokens, "; got ", o.tokens_per_micro_batch));
  }
  if (o.text_tokens_per_micro_batch < 0 || o.text_tokens_per_micro_batch > o.tokens_per_micro_batch) {
    return absl::InvalidArgumentError(absl::StrCat("text_tokens_per_micro_batch must be 0..tokens_per_micro_batch (",
                                                   o.tokens_per_micro_batch, "); got ", o.text_tokens_per_micro_batch));
  }
  if (o.reference_tokens_per_micro_batch < 0 ||
      o.reference_tokens_per_micro_batch > o.tokens_per_micro_batch - o.text_tokens_per_micro_batch) {
    return absl::InvalidArgumentError(absl::StrCat("reference_tokens_per_micro_batch must be 0..the image tokens (",
                                                   o.tokens_per_micro_batch - o.text_tokens_per_micro_batch, "); got ",
                                                   o.reference_tokens_per_micro_batch));
  }
  if (o.micro_batches < 0 || o.micro_batches > 65536 || o.overhead_bytes < -1) {
    return absl::InvalidArgumentError(absl::StrCat("micro_batches must be 0..65536 and overhead_bytes >= -1; got ",
                                                   o.micro_batches, " and ", o.overhead_bytes));
  }
  if (o.offload_blocks < PartitionOptions::kOffloadAuto) {
    return absl::InvalidArgumentError(absl::StrCat("offload blocks must be >= 0 (or auto); got ", o.offload_blocks));
  }
  if (o.offload_blocks != 0 && o.recompute == RecomputePolicy::kNone) {
    return absl::InvalidArgumentError(
        "offload swaps blocks that are recomputed (their weights leave after each use): it needs recompute: true or "
        "auto, not false");
  }
  if (!o.devices.empty() && o.devices.size() != static_cast<size_t>(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices: give none or one per stage (", p, "); got ", o.devices.size()));
  }
  return absl::OkStatus();
}

// Stage k holding blocks [i, j), sized by `z`.
StageSpec SizedStage(const Sizer& z, const PartitionOptions& o, const std::vector<int64_t>& budgets, int k, int64_t i,
                     int64_t j) {
  StageSpec s;
  s.index = k;
  s.block_begin = i;
  s.block_end = j;
  s.has_embedders = k == 0;
  s.has_head = k == o.stages - 1;
  s.cost = z.Cost(k, i, j);
  s.params = z.Params(k, i, j);
  s.param_bytes = z.Weights(k, i, j);  // less the swapped blocks, plus their buffers (below)
  s.lora_params = z.Lora(i, j);
  s.lora_bytes = LoraBytes(s.lora_params, o);
  s.in_flight = z.InFlight(k);
  s.offload_blocks = z.Offload(k, i, j);
  s.host_bytes = z.SwappedBytes(i, s.offload_blocks);
  s.param_bytes += z.SwapBufferBytes(i, s.offload_blocks) - s.host_bytes;
  s.recompute_blocks = z.Recompute(k, i, j);
  s.activation_bytes = z.Activation(k, j - i, s.recompute_blocks);
  s.activation_bytes_per_mb_no_recompute = z.ActivationPerMicroBatch(j - i, 0);
  s.activation_bytes_per_mb_recompute = z.ActivationPerMicroBatch(j - i, j - i);
  s.overhead_bytes = z.Overhead(k);
  s.transient_bytes = z.Transient();
  s.device = o.StageDevice(k);
  s.est_memory_bytes = z.Memory(k, i, j);
  s.budget_bytes = budgets.empty() ? 0 : budgets[k];
  return s;
}

// The plan's line when it fits: its tightest stage against its budget and its slowest stage's share.
std::string FitsMessage(const Plan& plan) {
  const auto tight =
      std::max_element(plan.stages.begin(), plan.stages.end(),
                       [](const StageSpec& a, const StageSpec& b) { return a.est_memory_bytes < b.est_memory_bytes; });
  return absl::StrCat("fits: largest stage estimate ~", FormatByteSize(tight->est_memory_bytes), " (stage ",
                      tight->index, ")",
                      tight->budget_bytes > 0 ? absl::StrCat(" of ", FormatByteSize(tight->budget_bytes)) : "",
                      "; slowest stage carries ", absl::StrFormat("%.1f%%", 100.0 * plan.max_cost / plan.total_cost),
                      " of the compute");
}

}  // namespace

absl::StatusOr<Plan> Partition(const PlanSource& source, const PartitionOptions& o) {
  ASSIGN_OR_RETURN(PlanModel model, source(o));
  RETURN_IF_ERROR(CheckPartitionOptions(o, model.num_blocks()));
  const int p = o.stages;
  const size_t nb = o.memory_budget_bytes.size();
  std::vector<int64_t> budgets;
  if (nb > 0) budgets = nb == 1 ? std::vector<int64_t>(p, o.memory_budget_bytes[0]) : o.memory_budget_bytes;

  const Sizer z(model, o, p, budgets);
  auto fits = [&](int k, int64_t i, int64_t j) { return z.Memory(k, i, j) <= z.Budget(k); };
  auto cost = [&](int k, int64_t i, int64_t j) { return z.Cost(k, i, j); };

  Plan plan;
  plan.options = o;
  plan.model = std::make_shared<const PlanModel>(model);
  std::vector<int64_t> bounds;
  const double bottleneck = MinMax(z, cost, fits);
  if (bottleneck != kInf) {
    plan.fits = true;
    bounds =
        MostBalanced(z, [&](int k, int64_t i, int64_t j) { return z.Cost(k, i, j) <= bottleneck && fits(k, i, j); });
  } else {
    const SegmentFn over = [&](int k, int64_t i, int64_t j) { return z.Overrun(k, i, j); };
    const double worst = MinMax(z, over, [](int, int64_t, int64_t) { return true; });
    bounds = MostBalanced(z, [&](int k, int64_t i, int64_t j) { return z.Overrun(k, i, j) <= worst; });
  }
  if (bounds.size() != static_cast<size_t>(p) + 1) {
    return absl::InternalError("partitioner found no split (a bug: every split is allowed when none fits)");
  }

  for (int k = 0; k < p; ++k) {
    plan.stages.push_back(SizedStage(z, o, budgets, k, bounds[k], bounds[k + 1]));
    plan.max_cost = std::max(plan.max_cost, plan.stages.back().cost);
    plan.total_cost += plan.stages.back().cost;
  }
  plan.message = plan.fits ? FitsMessage(plan) : ExplainMiss(source, model, o, z, plan.stages, budgets);
  return plan;
}

namespace {

// "device cuda" when every stage is planned for one device, else "devices cpu,cuda".
std::string DescribeDevices(const Plan& plan) {
  std::vector<std::string> names;
  bool same = true;
  for (const StageSpec& s : plan.stages) {
    names.push_back(PlanDeviceName(s.device));
    same = same && s.device == plan.stages.front().device;
  }
  if (names.empty()) return absl::StrCat("device ", PlanDeviceName(plan.options.device));
  return same ? absl::StrCat("device ", names.front()) : absl::StrCat("devices ", absl::StrJoin(names, ","));
}

// "-", or "first 12/28, 14.2 GB host": the swapped blocks and their weights in host memory.
std::string DescribeOffload(const StageSpec& s) {
  if (s.offload_blocks == 0) return "-";
  return absl::StrCat("first ", s.offload_blocks, "/", s.block_end - s.block_begin, ", ", FormatByteSize(s.host_bytes),
                      " host");
}

std::string DescribeRecompute(const StageSpec& s) {
  const int64_t n = s.block_end - s.block_begin;
  if (s.recompute_blocks == 0) return "none";
  if (s.recompute_blocks >= n) return absl::StrCat("all ", n);
  return absl::StrCat("first ", s.recompute_blocks, "/", n);
}

}  // namespace

std::string RenderPlan(const Flux2Config& config, const Plan& plan) { return RenderPlan(plan); }

std::string RenderPlan(const Plan& plan) {
  const PartitionOptions& o = plan.options;
  const PlanModel& model = *plan.model;
  std::string out = absl::StrFormat(
      "%s plan: %s on %d stage%s; %s schedule; frozen weights %d B/param%s; "
      "%s rank %d (%s); %d tokens/micro-batch (%d text%s)%s\n",
      model.name, model.summary, plan.stages.size(), plan.stages.size() == 1 ? "" : "s", ScheduleKindName(o.schedule),
      o.bytes_per_param,
      o.quantize == WeightQuant::kNone ? ""
                                       : absl::StrCat(", block linears ", WeightQuantName(o.quantize), " (1 B/param)"),
      AdapterDisplayName(o.lora_type), o.lora_rank, o.all_linear ? "all linears" : "default targets",
      o.tokens_per_micro_batch, o.text_tokens_per_micro_batch,
      o.reference_tokens_per_micro_batch > 0
          ? absl::StrCat(", ", o.reference_tokens_per_micro_batch, " of reference images")
          : "",
      absl::StrCat("; recompute ", RecomputePolicyName(o.recompute),
                   o.offload_blocks == 0                                ? ""
                   : o.offload_blocks == PartitionOptions::kOffloadAuto ? "; offload auto"
                                                                        : absl::StrCat("; offload ", o.offload_blocks),
                   "; ", DescribeDevices(plan)));
  std::vector<std::string> blocks;
  size_t wb = std::string("blocks").size();
  for (const StageSpec& s : plan.stages) {
    std::string b = model.describe(s.block_begin, s.block_end);
    if (s.has_embedders) b = "embedders, " + b;
    if (s.has_head) b += ", head";
    wb = std::max(wb, b.size());
    blocks.push_back(std::move(b));
  }
  absl::StrAppendFormat(&out, "%5s  %-*s  %13s  %11s  %11s  %10s  %10s  %9s  %10s  %19s  %15s  %10s  %10s  %10s  %s\n",
                        "stage", wb, "blocks", "frozen params", "LoRA params", "memory est.", "budget", "compute",
                        "weights", "LoRA+grad*", "act/mb rc|no-rc", "activations", "transient", "overhead", "recompute",
                        "offload");
  for (size_t k = 0; k < plan.stages.size(); ++k) {
    const StageSpec& s = plan.stages[k];
    const bool over = s.budget_bytes > 0 && s.est_memory_bytes > s.budget_bytes;
    absl::StrAppendFormat(
        &out, "%5d  %-*s  %13s  %11s  %11s  %10s  %9.1f%%  %9s  %10s  %19s  %15s  %10s  %10s  %10s  %s%s\n", s.index,
        wb, blocks[k], FormatCount(static_cast<double>(s.params)), FormatCount(static_cast<double>(s.lora_params)),
        FormatByteSize(s.est_memory_bytes), s.budget_bytes > 0 ? FormatByteSize(s.budget_bytes) : "-",
        plan.total_cost > 0 ? 100.0 * s.cost / plan.total_cost : 0.0, FormatByteSize(s.param_bytes),
        FormatByteSize(s.lora_bytes),
        absl::StrCat(FormatByteSize(s.activation_bytes_per_mb_recompute), " | ",
                     FormatByteSize(s.activation_bytes_per_mb_no_recompute)),
        absl::StrCat(FormatByteSize(s.activation_bytes), " (", s.in_flight, " mb)"), FormatByteSize(s.transient_bytes),
        absl::StrCat(FormatByteSize(s.overhead_bytes), " ", PlanDeviceName(s.device)), DescribeRecompute(s),
        DescribeOffload(s), over ? "  OVER" : "");
  }
  absl::StrAppend(&out, plan.message, "\n");
  absl::StrAppend(
      &out,
      "(compute = share of a micro-batch's multiply-adds, double and single blocks alike per token, plus on cpu "
      "stages a fixed cost per pass of each token stream (a double block runs two); memory is an "
      "estimate: weights (block linears 8-bit when quantized) + LoRA + activations",
      o.lora_fp32 && o.activation_bytes < 4 ? " (a block's graph includes the fp32 copies of the adapters' inputs: "
                                              "lora_dtype fp32 under a narrower compute dtype)"
                                            : "",
      " + transient (one 8-bit weight dequantized for its matmul) + the stage device's fixed per-process overhead "
      "(cpu: measured; cuda: estimated, not measured)",
      ".\n * LoRA+grad: fp32 LoRA weights and their gradients on the stage; ",
      o.local_optimizer ? absl::StrCat("with the stage-local optimizer (replica_exchange: allreduce) also the "
                                       "optimizer's state and the step's held and reduced gradient sums (",
                                       o.LoraCopies(), " copies in all)")
                        : "the optimizer state (AdamW moments) lives on the coordinator",
      ". weights: on the device (swapped blocks: their two copy buffers; offload: the swapped blocks' weights in host "
      "memory, copied in for each use). act/mb: activations one in-flight micro-batch keeps with every block "
      "recomputed | "
      "with none; activations: the stage's total for the recompute shown, at its peak in-flight micro-batches (mb))\n");
  return out;
}

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view t = absl::StripAsciiWhitespace(text);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size '", text, "': ", why, " (examples: 24GB, 24GiB, 512MB, 1.5TB, 4096)"));
  };
  size_t pos = 0;
  while (pos < t.size() && absl::ascii_isdigit(t[pos])) ++pos;
  const size_t int_end = pos;
  size_t frac_end = pos;
  if (pos < t.size() && t[pos] == '.') {
    frac_end = ++pos;
    while (frac_end < t.size() && absl::ascii_isdigit(t[frac_end])) ++frac_end;
    if (frac_end == pos) return bad("expected digits after '.'");
  }
  if (int_end == 0) return bad("expected a number");
  const absl::string_view number = t.substr(0, frac_end);
  const bool fractional = frac_end != int_end;
  std::string unit = absl::AsciiStrToLower(absl::StripLeadingAsciiWhitespace(t.substr(frac_end)));

  struct Unit {
    const char* name;
    int64_t factor;
  };
  static const Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1000},
      {"kb", 1000},
      {"m", 1000'000},
      {"mb", 1000'000},
      {"g", 1000'000'000},
      {"gb", 1000'000'000},
      {"t", 1000'000'000'000},
      {"tb", 1000'000'000'000},
      {"ki", 1 << 10},
      {"kib", 1 << 10},
      {"mi", 1 << 20},
      {"mib", 1 << 20},
      {"gi", 1 << 30},
      {"gib", 1 << 30},
      {"ti", int64_t{1} << 40},
      {"tib", int64_t{1} << 40},
  };
  int64_t factor = 0;
  for (const Unit& u : kUnits) {
    if (unit == u.name) factor = u.factor;
  }
  if (factor == 0) return bad(absl::StrCat("unknown unit '", unit, "'"));

  if (!fractional) {
    uint64_t value = 0;
    if (!absl::SimpleAtoi(number, &value) ||
        value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / factor)) {
      return bad("too large");
    }
    return static_cast<int64_t>(value) * factor;
  }
  if (factor == 1) return bad("a fraction of a byte needs a larger unit");
  double value = 0;
  if (!absl::SimpleAtod(number, &value)) return bad("expected a number");
  const long double bytes = std::round(static_cast<long double>(value) * factor);
  if (bytes >= static_cast<long double>(std::numeric_limits<int64_t>::max())) return bad("too large");
  return static_cast<int64_t>(bytes);
}

std::string FormatByteSize(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1000) return absl::StrCat(bytes, " B");
  if (b < 1e6) return absl::StrFormat("%.1f kB", b / 1e3);
  if (b < 1e9) return absl::StrFormat("%.1f MB", b / 1e6);
  if (b < 1e12) return absl::StrFormat("%.1f GB", b / 1e9);
  return absl::StrFormat("%.2f TB", b / 1e12);
}

}  // namespace baton
