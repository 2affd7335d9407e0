// Pipeline schedules: a pure function of (stages p, micro-batches m, kind) that gives each stage its ordered
// list of forward F(i) / backward B(i) actions, plus a discrete-event simulator that times a schedule under
// the pipeline's data dependencies and an ASCII renderer (what `baton schedule` prints). No libtorch: the
// coordinator drives stages from these lists and the client prints them.
//
// Dependencies: F(s,i) needs F(s-1,i) (stage 0: its input from the coordinator); B(s,i) needs B(s+1,i)
// (last stage: its own F(s,i), which produced the loss). Every stage executes its list strictly in order.
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
};

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);  // "gpipe" | "1f1b" (any case)
const char* ScheduleKindName(ScheduleKind kind);                         // "gpipe" | "1f1b"

struct Action {
  enum Type { kForward, kBackward } type;
  int micro_batch;

  bool operator==(const Action& o) const { return type == o.type && micro_batch == o.micro_batch; }
};
std::string ActionLabel(const Action& action);  // "F3", "B0"

struct Schedule {
  ScheduleKind kind;
  int stages;
  int micro_batches;
  std::vector<std::vector<Action>> per_stage;  // [stages][2 * micro_batches], in execution order
};

// Errors: stages or micro_batches < 1, or stages * micro_batches above 2^24 actions (a typo, not a plan).
absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int stages, int micro_batches);

// Checks that every stage runs each F(i) and B(i) exactly once with B(i) after F(i), and that executing
// the lists under the dependencies above cannot deadlock. The error names the stage and action at fault.
absl::Status ValidateSchedule(const Schedule& schedule);

// Per stage, the most micro-batches held between the start of their F and the end of their B (each one
// keeps its saved stage input alive): GPipe = m, 1F1B = min(p - s, m).
std::vector<int> PeakInFlight(const Schedule& schedule);

// Theory for equal stage costs and free communication: (p-1)/(m+p-1), the idle share of p·makespan.
double TheoreticalBubble(int stages, int micro_batches);

struct TimedAction {
  Action action;
  double start;
  double end;
};

struct Timeline {
  ScheduleKind kind;
  int stages;
  int micro_batches;
  std::vector<double> forward_cost;                 // [stages] time units per F on that stage
  std::vector<double> backward_cost;                // [stages] time units per B on that stage
  double comm_cost;                                 // added to every cross-stage dependency (one hop)
  std::vector<std::vector<TimedAction>> per_stage;  // same order as Schedule::per_stage
  double makespan;
  std::vector<double> busy;         // [stages] sum of action durations
  double bubble_fraction;           // 1 - sum(busy) / (stages * makespan)
  std::vector<int> peak_in_flight;  // [stages], see PeakInFlight
};

// Times the schedule: each action starts when its stage has finished the previous action and its
// dependency has finished (plus comm_cost if that dependency ran on another stage). Costs must be finite
// and >= 0 (comm) / > 0 (F, B). Fails like ValidateSchedule on a malformed or deadlocking schedule.
absl::StatusOr<Timeline> SimulateSchedule(const Schedule& schedule, double forward_cost, double backward_cost,
                                          double comm_cost = 0);
// Same with per-stage costs (e.g. a partition plan's stage costs); both vectors have one entry per stage.
absl::StatusOr<Timeline> SimulateScheduleWithCosts(const Schedule& schedule, const std::vector<double>& forward_cost,
                                                   const std::vector<double>& backward_cost, double comm_cost);

// ASCII timeline, one row per stage, `width_chars` columns for the time axis (<= 0: pick a width at which
// the shortest action shows its full label, capped at 240). Forward spans read "F3", backward "B3--",
// idle '.'; each row ends with the stage's busy share and peak in-flight count, and a summary gives the
// makespan and the measured bubble next to the theory (p-1)/(m+p-1).
std::string RenderTimeline(const Timeline& timeline, int width_chars = 0);

}  // namespace baton
