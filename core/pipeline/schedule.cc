#include "core/pipeline/schedule.h"

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/util/status.h"

namespace baton {
namespace {

constexpr int64_t kMaxActions = int64_t{1} << 24;
constexpr int kMaxChunks = 26;  // labels name chunks a..z

// Structural checks: sizes, ids in range, each F/B of each chunk exactly once per stage, B after F.
absl::Status CheckStructure(const Schedule& s) {
  if (s.stages < 1 || s.micro_batches < 1 || s.chunks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("schedule needs >= 1 stage, micro-batch and chunk; got stages=",
                                                   s.stages, " micro_batches=", s.micro_batches, " chunks=", s.chunks));
  }
  if (static_cast<int>(s.per_stage.size()) != s.stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule has ", s.per_stage.size(), " action lists but stages=", s.stages));
  }
  const int m = s.micro_batches, v = s.chunks;
  for (int st = 0; st < s.stages; ++st) {
    std::vector<int> f_pos(v * m, -1), b_pos(v * m, -1);  // [chunk * m + micro_batch]
    const auto& list = s.per_stage[st];
    for (int k = 0; k < static_cast<int>(list.size()); ++k) {
      const Action& a = list[k];
      if (a.micro_batch < 0 || a.micro_batch >= m) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", st, " action #", k, " ", ActionLabel(a, v),
                                                       ": micro-batch out of range [0, ", m, ")"));
      }
      if (a.chunk < 0 || a.chunk >= v) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", st, " action #", k, " ", ActionLabel(a, v), ": chunk ",
                                                       a.chunk, " out of range [0, ", v, ")"));
      }
      std::vector<int>& pos = a.type == Action::kForward ? f_pos : b_pos;
      const int id = a.chunk * m + a.micro_batch;
      if (pos[id] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("stage ", st, " runs ", ActionLabel(a, v), " twice (actions #", pos[id], " and #", k, ")"));
      }
      pos[id] = k;
    }
    for (int id = 0; id < v * m; ++id) {
      const Action f{Action::kForward, id % m, id / m}, b{Action::kBackward, id % m, id / m};
      if (f_pos[id] < 0 || b_pos[id] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("stage ", st, " never runs ", ActionLabel(f_pos[id] < 0 ? f : b, v)));
      }
      if (b_pos[id] < f_pos[id]) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", st, " runs ", ActionLabel(b, v), " (action #",
                                                       b_pos[id], ") before ", ActionLabel(f, v), " (action #",
                                                       f_pos[id], ")"));
      }
    }
  }
  return absl::OkStatus();
}

// The action `a` on stage `st` waits for (virtual stage u = chunk*p + st): F on u-1, or B on u+1, or -- for B on
// the last virtual stage -- its own F. Sets *dep and *dep_stage; returns false for F on virtual stage 0 (fed by
// the coordinator).
bool Dependency(const Schedule& s, int st, const Action& a, Action* dep, int* dep_stage) {
  const int p = s.stages, last = s.chunks * p - 1;
  const int u = a.chunk * p + st;
  int du;
  if (a.type == Action::kForward) {
    if (u == 0) return false;
    du = u - 1;
    *dep = {Action::kForward, a.micro_batch, du / p};
  } else if (u == last) {
    du = u;
    *dep = {Action::kForward, a.micro_batch, a.chunk};
  } else {
    du = u + 1;
    *dep = {Action::kBackward, a.micro_batch, du / p};
  }
  *dep_stage = du % p;
  return true;
}

// Discrete-event simulation. Assumes CheckStructure passed. Fills per_stage timings and makespan; returns
// FAILED_PRECONDITION naming every blocked stage if the lists cannot all run to completion.
// fc/bc: [stage][chunk] time of one F/B of that chunk.
absl::Status Simulate(const Schedule& s, const std::vector<std::vector<double>>& fc,
                      const std::vector<std::vector<double>>& bc, double comm, Timeline* out) {
  const int p = s.stages, m = s.micro_batches, v = s.chunks;
  constexpr double kNotDone = -1;
  // [stage][chunk * m + micro_batch]
  std::vector<std::vector<double>> f_end(p, std::vector<double>(v * m, kNotDone));
  std::vector<std::vector<double>> b_end(p, std::vector<double>(v * m, kNotDone));
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  out->per_stage.assign(p, {});
  for (int st = 0; st < p; ++st) out->per_stage[st].reserve(s.per_stage[st].size());

  // Returns the time the dependency is satisfied at stage `st`, or kNotDone.
  auto ready_time = [&](int st, const Action& a) -> double {
    Action dep;
    int dep_stage;
    if (!Dependency(s, st, a, &dep, &dep_stage)) return 0;
    const double end = (dep.type == Action::kForward ? f_end : b_end)[dep_stage][dep.chunk * m + dep.micro_batch];
    if (end < 0) return kNotDone;
    return dep_stage == st ? end : end + comm;
  };

  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int st = 0; st < p; ++st) {
      while (next[st] < s.per_stage[st].size()) {
        const Action& a = s.per_stage[st][next[st]];
        const double ready = ready_time(st, a);
        if (ready < 0) break;
        const double start = std::max(free_at[st], ready);
        const double end = start + (a.type == Action::kForward ? fc : bc)[st][a.chunk];
        (a.type == Action::kForward ? f_end : b_end)[st][a.chunk * m + a.micro_batch] = end;
        free_at[st] = end;
        out->per_stage[st].push_back({a, start, end});
        ++next[st];
        progressed = true;
      }
    }
  }

  std::vector<std::string> blocked;
  for (int st = 0; st < p; ++st) {
    if (next[st] == s.per_stage[st].size()) continue;
    const Action& a = s.per_stage[st][next[st]];
    Action dep;
    int dep_stage = 0;
    Dependency(s, st, a, &dep, &dep_stage);  // true: an F on virtual stage 0 never blocks
    blocked.push_back(absl::StrCat("stage ", st, " waits at ", ActionLabel(a, v), " for ", ActionLabel(dep, v),
                                   " on stage ", dep_stage));
  }
  if (!blocked.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ScheduleKindName(s.kind), " schedule deadlocks: ", absl::StrJoin(blocked, "; ")));
  }
  out->makespan = *std::max_element(free_at.begin(), free_at.end());
  return absl::OkStatus();
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward (backward) chunk-action of a
// stage runs micro-batch (k / (p*v))*p + k % p on chunk (k % (p*v)) / p (backward: v-1 minus that).
std::vector<Action> InterleavedList(int p, int m, int v, int st) {
  const int total = v * m;
  const int warmup = std::min((p - st - 1) * 2 + (v - 1) * p, total);
  auto at = [&](Action::Type type, int k) {
    const int chunk = (k % (p * v)) / p;
    return Action{type, (k / (p * v)) * p + k % p, type == Action::kForward ? chunk : v - 1 - chunk};
  };
  std::vector<Action> list;
  list.reserve(2 * total);
  for (int k = 0; k < warmup; ++k) list.push_back(at(Action::kForward, k));
  for (int k = 0; k < total - warmup; ++k) {
    list.push_back(at(Action::kForward, warmup + k));
    list.push_back(at(Action::kBackward, k));
  }
  for (int k = total - warmup; k < total; ++k) list.push_back(at(Action::kBackward, k));
  return list;
}

int Digits(int v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

bool AllEqual(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [&](double x) { return x == v[0]; });
}

}  // namespace

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "gpipe") return ScheduleKind::kGPipe;
  if (lower == "1f1b") return ScheduleKind::k1F1B;
  if (lower == "interleaved") return ScheduleKind::kInterleaved1F1B;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pipeline schedule '", name, "'; expected 'gpipe', '1f1b' or 'interleaved'"));
}

const char* ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved";
  }
  return "unknown";
}

std::string ActionLabel(const Action& action, int chunks) {
  std::string label = absl::StrCat(action.type == Action::kForward ? "F" : "B", action.micro_batch);
  if (chunks > 1) {
    label += action.chunk >= 0 && action.chunk < kMaxChunks ? std::string(1, static_cast<char>('a' + action.chunk))
                                                            : absl::StrCat(".", action.chunk);
  }
  return label;
}

absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int stages, int micro_batches) {
  return MakeSchedule(kind, stages, micro_batches, 1);
}

absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int stages, int micro_batches, int chunks) {
  if (stages < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a schedule needs >= 1 stage and >= 1 micro-batch; got stages=", stages, " micro_batches=", micro_batches));
  }
  if (kind == ScheduleKind::kInterleaved1F1B) {
    if (chunks < 2 || chunks > kMaxChunks) {
      return absl::InvalidArgumentError(absl::StrCat("the interleaved schedule needs 2 to ", kMaxChunks,
                                                     " chunks (model chunks per stage); got chunks=", chunks));
    }
    if (micro_batches % stages != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the interleaved schedule needs micro-batches to be a multiple of stages (as Megatron-LM); got ",
                       micro_batches, " micro-batches for ", stages, " stages"));
    }
  } else if (chunks != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the ", ScheduleKindName(kind),
                                                   " schedule runs 1 chunk per stage; got chunks=", chunks,
                                                   " (more than one needs the interleaved schedule)"));
  }
  if (int64_t{2} * stages * micro_batches * chunks > kMaxActions) {
    return absl::InvalidArgumentError(absl::StrCat("schedule of ", stages, " stages x ", micro_batches,
                                                   " micro-batches x ", chunks, " chunks is too large (limit ",
                                                   kMaxActions, " actions)"));
  }
  Schedule s{kind, stages, micro_batches, std::vector<std::vector<Action>>(stages), chunks};
  const int m = micro_batches;
  for (int st = 0; st < stages; ++st) {
    auto& list = s.per_stage[st];
    if (kind == ScheduleKind::kInterleaved1F1B) {
      list = InterleavedList(stages, m, chunks, st);
      continue;
    }
    list.reserve(2 * m);
    if (kind == ScheduleKind::kGPipe) {
      for (int i = 0; i < m; ++i) list.push_back({Action::kForward, i});
      for (int i = 0; i < m; ++i) list.push_back({Action::kBackward, i});
      continue;
    }
    const int warmup = std::min(stages - st - 1, m);
    const int steady = m - warmup;
    for (int i = 0; i < warmup; ++i) list.push_back({Action::kForward, i});
    for (int i = 0; i < steady; ++i) {
      list.push_back({Action::kForward, warmup + i});
      list.push_back({Action::kBackward, i});
    }
    for (int i = steady; i < m; ++i) list.push_back({Action::kBackward, i});
  }
  return s;
}

absl::Status ValidateSchedule(const Schedule& schedule) {
  RETURN_IF_ERROR(CheckStructure(schedule));
  Timeline scratch;
  const int p = schedule.stages, v = schedule.chunks;
  return Simulate(schedule, std::vector<std::vector<double>>(p, std::vector<double>(v, 1.0)),
                  std::vector<std::vector<double>>(p, std::vector<double>(v, 2.0)), 0.0, &scratch);
}

std::vector<int> PeakInFlight(const Schedule& schedule) {
  std::vector<int> peak(schedule.per_stage.size(), 0);
  for (size_t st = 0; st < schedule.per_stage.size(); ++st) {
    int live = 0;
    for (const Action& a : schedule.per_stage[st]) {
      live += a.type == Action::kForward ? 1 : -1;
      peak[st] = std::max(peak[st], live);
    }
  }
  return peak;
}

double TheoreticalBubble(int stages, int micro_batches, int chunks) {
  return static_cast<double>(stages - 1) / (static_cast<double>(chunks) * micro_batches + stages - 1);
}

absl::StatusOr<Timeline> SimulateSchedule(const Schedule& schedule, double forward_cost, double backward_cost,
                                          double comm_cost) {
  const size_t p = schedule.stages > 0 ? schedule.stages : 0;
  return SimulateScheduleWithCosts(schedule, std::vector<double>(p, forward_cost),
                                   std::vector<double>(p, backward_cost), comm_cost);
}

absl::StatusOr<Timeline> SimulateScheduleWithCosts(const Schedule& schedule, const std::vector<double>& forward_cost,
                                                   const std::vector<double>& backward_cost, double comm_cost) {
  RETURN_IF_ERROR(CheckStructure(schedule));
  const int p = schedule.stages, v = schedule.chunks;
  if (static_cast<int>(forward_cost.size()) != p || static_cast<int>(backward_cost.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("need one forward and one backward cost per stage (", p, "); got ",
                                                   forward_cost.size(), " and ", backward_cost.size()));
  }
  std::vector<std::vector<double>> fc(p), bc(p);
  for (int st = 0; st < p; ++st) {
    fc[st].assign(v, forward_cost[st] / v);
    bc[st].assign(v, backward_cost[st] / v);
  }
  return SimulateScheduleWithChunkCosts(schedule, fc, bc, comm_cost);
}

absl::StatusOr<Timeline> SimulateScheduleWithChunkCosts(const Schedule& schedule,
                                                        const std::vector<std::vector<double>>& forward_cost,
                                                        const std::vector<std::vector<double>>& backward_cost,
                                                        double comm_cost) {
  RETURN_IF_ERROR(CheckStructure(schedule));
  const int p = schedule.stages, v = schedule.chunks;
  if (static_cast<int>(forward_cost.size()) != p || static_cast<int>(backward_cost.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("need forward and backward costs for each of the ", p,
                                                   " stages; got ", forward_cost.size(), " and ",
                                                   backward_cost.size()));
  }
  Timeline t;
  t.forward_cost.assign(p, 0);
  t.backward_cost.assign(p, 0);
  for (int st = 0; st < p; ++st) {
    if (static_cast<int>(forward_cost[st].size()) != v || static_cast<int>(backward_cost[st].size()) != v) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", st, " needs one forward and one backward cost per chunk (", v, "); got ",
                       forward_cost[st].size(), " and ", backward_cost[st].size()));
    }
    for (int c = 0; c < v; ++c) {
      for (double x : {forward_cost[st][c], backward_cost[st][c]}) {
        if (!std::isfinite(x) || x <= 0) {
          return absl::InvalidArgumentError(absl::StrCat("stage ", st, v > 1 ? absl::StrCat(" chunk ", c) : "",
                                                         " cost must be finite and > 0; got ",
                                                         absl::StrFormat("%g", x)));
        }
      }
      t.forward_cost[st] += forward_cost[st][c];
      t.backward_cost[st] += backward_cost[st][c];
    }
  }
  if (!std::isfinite(comm_cost) || comm_cost < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("communication cost must be finite and >= 0; got ", absl::StrFormat("%g", comm_cost)));
  }
  t.kind = schedule.kind;
  t.stages = p;
  t.micro_batches = schedule.micro_batches;
  t.chunks = v;
  t.comm_cost = comm_cost;
  RETURN_IF_ERROR(Simulate(schedule, forward_cost, backward_cost, comm_cost, &t));
  t.busy.assign(p, 0);
  double total_busy = 0;
  for (int st = 0; st < p; ++st) {
    for (const TimedAction& ta : t.per_stage[st]) t.busy[st] += ta.end - ta.start;
    total_busy += t.busy[st];
  }
  t.bubble_fraction = 1.0 - total_busy / (p * t.makespan);
  t.peak_in_flight = PeakInFlight(schedule);
  return t;
}

std::string RenderTimeline(const Timeline& t, int width_chars) {
  const int p = t.stages;
  if (p < 1 || t.per_stage.size() != static_cast<size_t>(p) || !(t.makespan > 0)) return "(empty timeline)\n";
  const int v = std::max(1, t.chunks);
  const int label_len = 1 + Digits(std::max(0, t.micro_batches - 1)) + (v > 1 ? 1 : 0);
  int width = width_chars;
  if (width <= 0) {
    double shortest = std::numeric_limits<double>::infinity();
    for (int st = 0; st < p; ++st) shortest = std::min({shortest, t.forward_cost[st] / v, t.backward_cost[st] / v});
    const double cols = std::ceil(t.makespan * label_len / shortest - 1e-9);
    width = static_cast<int>(std::min(240.0, std::max(static_cast<double>(label_len), cols)));
  }
  const double dt = t.makespan / width;
  const int stage_digits = Digits(p - 1);

  std::string out;
  std::string costs;
  if (AllEqual(t.forward_cost) && AllEqual(t.backward_cost)) {
    costs = absl::StrFormat("F=%g, B=%g", t.forward_cost[0], t.backward_cost[0]);
  } else {
    costs = "per-stage F/B costs";
  }
  const std::string chunks = v > 1 ? absl::StrFormat(" x %d chunks", v) : "";
  absl::StrAppendFormat(&out, "%s schedule: %d stages x %d micro-batches%s (%s, comm=%g); 1 column = %.3g time units\n",
                        ScheduleKindName(t.kind), p, t.micro_batches, chunks, costs, t.comm_cost, dt);
  for (int st = 0; st < p; ++st) {
    std::string bar(width, '.');
    for (const TimedAction& ta : t.per_stage[st]) {
      int c0 = static_cast<int>(std::lround(ta.start / dt));
      int c1 = static_cast<int>(std::lround(ta.end / dt));
      c0 = std::min(std::max(c0, 0), width - 1);
      c1 = std::min(std::max(c1, c0 + 1), width);
      const std::string label = ActionLabel(ta.action, v);
      for (int c = c0; c < c1; ++c) {
        const size_t k = c - c0;
        bar[c] = k < label.size() ? label[k] : '-';
      }
    }
    absl::StrAppendFormat(&out, "stage %*d |%s|  busy %5.1f%%  peak in-flight %d\n", stage_digits, st, bar,
                          100.0 * t.busy[st] / t.makespan, t.peak_in_flight[st]);
  }
  absl::StrAppendFormat(&out,
                        "makespan %g time units; bubble %.1f%% measured, %.1f%% theory (p-1)/(%sm+p-1) = %d/%d "
                        "(equal stage costs, free communication)\n",
                        t.makespan, 100.0 * t.bubble_fraction, 100.0 * TheoreticalBubble(p, t.micro_batches, v),
                        v > 1 ? "v*" : "", p - 1, v * t.micro_batches + p - 1);
  std::vector<std::string> peaks;
  for (int n : t.peak_in_flight) peaks.push_back(absl::StrCat(n));
  if (v > 1) {
    absl::StrAppend(&out, "peak chunk-activations in flight per stage (each 1/", v,
                    " of a stage's activations): ", absl::StrJoin(peaks, " "), "\n");
  } else {
    absl::StrAppend(&out, "peak micro-batches in flight per stage: ", absl::StrJoin(peaks, " "), "\n");
  }
  return out;
}

}  // namespace baton
