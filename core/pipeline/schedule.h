// Pipeline schedules: a pure function of (stages p, micro-batches m, chunks v, kind) that gives each stage its
// ordered list of forward F(i) / backward B(i) actions, plus a discrete-event simulator that times a schedule
// under the pipeline's data dependencies and an ASCII renderer (what `baton schedule` prints). No libtorch: the
// coordinator drives stages from these lists and the client prints them.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <string>
#include <vector>

namespace baton {

enum class ScheduleKind {
  // Fill-drain: F0..F(m-1), then B0..B(m-1). Backward runs in micro-batch order 0..m-1, as
  // torch.distributed.pipelining's ScheduleGPipe does (torchgpipe's autograd-driven backward runs in
  // reverse); the bubble is the same either way, and ascending order makes gradient accumulation order
  // match 1F1B's, which matters for bit-reproducibility across schedules.
  kGPipe,
  // PipeDream-Flush / Megatron forward_backward_pipelining_without_interleaving / torch Schedule1F1B:
  // warm-up w = min(p-s-1, m) forwards F0..F(w-1); steady state for i in [0, m-w): F(w+i) then B(i);
  // cool-down B(m-w)..B(m-1). Same bubble as GPipe, but at most min(p-s, m) micro-batches in flight.
  k1F1B,
  // Megatron-LM forward_backward_pipelining_with_interleaving (virtual stages): each stage holds v >= 2 chunks
  // and m % p == 0. Chunk-actions k = 0..v*m-1 go in groups of p*v: micro-batches in blocks of p per chunk,
  // chunks ascending for F and descending for B. Warm-up min((p-s-1)*2 + (v-1)*p, v*m) forwards, then F/B
  // pairs, then the remaining backwards. Bubble (p-1)/(v*m+p-1). Within a chunk, backwards run in micro-batch order
  // (as 1F1B's), so gradient accumulation matches train-local's bit for bit.
  kInterleaved1F1B,
};

// "gpipe" | "1f1b" | "interleaved" (any case)
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);
const char* ScheduleKindName(ScheduleKind kind);

struct Action {
  enum Type { kForward, kBackward } type;
  int micro_batch;
  int chunk = 0;  // model chunk on this stage (virtual stage chunk*p + stage); 0 unless interleaved

  bool operator==(const Action& o) const { return type == o.type && micro_batch == o.micro_batch && chunk == o.chunk; }
};
// "F3", "B0" when chunks == 1; "F3a", "B0b" (chunk as a letter) when chunks > 1.
std::string ActionLabel(const Action& action, int chunks = 1);

struct Schedule {
  ScheduleKind kind;
  int stages;
  int micro_batches;
  std::vector<std::vector<Action>> per_stage;  // [stages][2 * chunks * micro_batches], in execution order
  int chunks = 1;                              // v: model chunks per stage
};

// With v chunks (interleaved), stage s holds chunks c = 0..v-1, the virtual stages c*p + s of a v*p-stage pipeline.
// Dependencies over virtual stages u: F(u,i) needs F(u-1,i) (u = 0: its input from the coordinator); B(u,i)
// needs B(u+1,i) (the last one: its own F(u,i), which produced the loss). v = 1 is the plain pipeline.
// Every stage executes its list strictly in order.

// Errors: stages or micro_batches < 1, or 2 * stages * micro_batches * chunks above 2^24 actions (a typo, not a
// plan); chunks != 1 for gpipe/1f1b; for interleaved, chunks outside [2, 26] or micro_batches % stages != 0.
absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int stages, int micro_batches, int chunks);
// chunks = 1: gpipe and 1f1b; interleaved fails (it needs chunks >= 2).
absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int stages, int micro_batches);

// Checks that every stage runs each F(i) and B(i) of each chunk exactly once with B(i) after F(i), and that executing
// the lists under the dependencies above cannot deadlock. The error names the stage and action at fault.
absl::Status ValidateSchedule(const Schedule& schedule);

// Per stage, the most chunk-activations held between the start of their F and the end of their B (each one
// keeps its saved chunk input alive; one is 1/v of a stage's activations): GPipe = m, 1F1B = min(p - s, m),
// interleaved = min((p-s-1)*2 + (v-1)*p + 1, v*m).
std::vector<int> PeakInFlight(const Schedule& schedule);

// Theory for equal stage costs and free communication: (p-1)/(v*m+p-1), the idle share of p·makespan
// (v = 1: GPipe and 1F1B; v chunks: interleaved).
double TheoreticalBubble(int stages, int micro_batches, int chunks = 1);

struct TimedAction {
  Action action;
  double start;
  double end;
};

struct Timeline {
  ScheduleKind kind;
  int stages;
  int micro_batches;
  int chunks = 1;
  std::vector<double> forward_cost;                 // [stages] time units per F on that stage (each chunk: 1/v)
  std::vector<double> backward_cost;                // [stages] time units per B on that stage
  double comm_cost;                                 // added to every cross-stage dependency (one hop)
  std::vector<std::vector<TimedAction>> per_stage;  // same order as Schedule::per_stage
  double makespan;
  std::vector<double> busy;         // [stages] sum of action durations
  double bubble_fraction;           // 1 - sum(busy) / (stages * makespan)
  std::vector<int> peak_in_flight;  // [stages], see PeakInFlight
};

// Times the schedule: each action starts when its stage has finished the previous action and its
// dependency has finished (plus comm_cost if that dependency ran on another stage). A chunk's F or B takes 1/v
// of its stage's cost. Costs must be finite
// and >= 0 (comm) / > 0 (F, B). Fails like ValidateSchedule on a malformed or deadlocking schedule.
absl::StatusOr<Timeline> SimulateSchedule(const Schedule& schedule, double forward_cost, double backward_cost,
                                          double comm_cost = 0);
// Same with per-stage costs (e.g. a partition plan's stage costs); both vectors have one entry per stage.
absl::StatusOr<Timeline> SimulateScheduleWithCosts(const Schedule& schedule, const std::vector<double>& forward_cost,
                                                   const std::vector<double>& backward_cost, double comm_cost);

// Same with a cost per chunk: [stage][chunk] time of one F (B) of that chunk on that stage (interleaved chunks
// of unequal size); the timeline's per-stage costs are the sums over the chunks.
absl::StatusOr<Timeline> SimulateScheduleWithChunkCosts(const Schedule& schedule,
                                                        const std::vector<std::vector<double>>& forward_cost,
                                                        const std::vector<std::vector<double>>& backward_cost,
                                                        double comm_cost);

// ASCII timeline, one row per stage, `width_chars` columns for the time axis (<= 0: pick a width at which
// the shortest action shows its full label, capped at 240). Forward spans read "F3", backward "B3--",
// idle '.'; each row ends with the stage's busy share and peak in-flight count, and a summary gives the
// makespan and the measured bubble next to the theory (p-1)/(v*m+p-1).
std::string RenderTimeline(const Timeline& timeline, int width_chars = 0);

}  // namespace baton
