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

// Structural checks: sizes, ids in range, each F/B exactly once per stage, B(i) after F(i).
absl::Status CheckStructure(const Schedule& s) {
  if (s.stages < 1 || s.micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule needs >= 1 stage and >= 1 micro-batch; got stages=", s.stages, " micro_batches=", s.micro_batches));
  }
  if (static_cast<int>(s.per_stage.size()) != s.stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule has ", s.per_stage.size(), " action lists but stages=", s.stages));
  }
  for (int st = 0; st < s.stages; ++st) {
    std::vector<int> f_pos(s.micro_batches, -1), b_pos(s.micro_batches, -1);
    const auto& list = s.per_stage[st];
    for (int k = 0; k < static_cast<int>(list.size()); ++k) {
      const Action& a = list[k];
      if (a.micro_batch < 0 || a.micro_batch >= s.micro_batches) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", st, " action #", k, " ", ActionLabel(a),
                                                       ": micro-batch out of range [0, ", s.micro_batches, ")"));
      }
      std::vector<int>& pos = a.type == Action::kForward ? f_pos : b_pos;
      if (pos[a.micro_batch] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", st, " runs ", ActionLabel(a), " twice (actions #",
                                                       pos[a.micro_batch], " and #", k, ")"));
      }
      pos[a.micro_batch] = k;
    }
    for (int i = 0; i < s.micro_batches; ++i) {
      if (f_pos[i] < 0 || b_pos[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", st, " never runs ", f_pos[i] < 0 ? "F" : "B", i));
      }
      if (b_pos[i] < f_pos[i]) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", st, " runs B", i, " (action #", b_pos[i], ") before F",
                                                       i, " (action #", f_pos[i], ")"));
      }
    }
  }
  return absl::OkStatus();
}

// Discrete-event simulation. Assumes CheckStructure passed. Fills per_stage timings and makespan; returns
// FAILED_PRECONDITION naming every blocked stage if the lists cannot all run to completion.
absl::Status Simulate(const Schedule& s, const std::vector<double>& fc, const std::vector<double>& bc, double comm,
                      Timeline* out) {
  const int p = s.stages, m = s.micro_batches;
  constexpr double kNotDone = -1;
  std::vector<std::vector<double>> f_end(p, std::vector<double>(m, kNotDone));
  std::vector<std::vector<double>> b_end(p, std::vector<double>(m, kNotDone));
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  out->per_stage.assign(p, {});
  for (int st = 0; st < p; ++st) out->per_stage[st].reserve(s.per_stage[st].size());

  // Returns the time the dependency is satisfied at stage `st`, or kNotDone.
  auto ready_time = [&](int st, const Action& a) -> double {
    const int i = a.micro_batch;
    if (a.type == Action::kForward) {
      if (st == 0) return 0;
      return f_end[st - 1][i] < 0 ? kNotDone : f_end[st - 1][i] + comm;
    }
    if (st == p - 1) return f_end[st][i];  // loss computed locally, no hop
    return b_end[st + 1][i] < 0 ? kNotDone : b_end[st + 1][i] + comm;
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
        const double end = start + (a.type == Action::kForward ? fc[st] : bc[st]);
        (a.type == Action::kForward ? f_end : b_end)[st][a.micro_batch] = end;
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
    std::string needs;
    if (a.type == Action::kForward) {
      needs = absl::StrCat("F", a.micro_batch, " on stage ", st - 1);
    } else if (st == p - 1) {
      needs = absl::StrCat("F", a.micro_batch, " on stage ", st);
    } else {
      needs = absl::StrCat("B", a.micro_batch, " on stage ", st + 1);
    }
    blocked.push_back(absl::StrCat("stage ", st, " waits at ", ActionLabel(a), " for ", needs));
  }
  if (!blocked.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ScheduleKindName(s.kind), " schedule deadlocks: ", absl::StrJoin(blocked, "; ")));
  }
  out->makespan = *std::max_element(free_at.begin(), free_at.end());
  return absl::OkStatus();
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
  return absl::InvalidArgumentError(absl::StrCat("unknown pipeline schedule '", name, "'; expected 'gpipe' or '1f1b'"));
}

const char* ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
  }
  return "unknown";
}

std::string ActionLabel(const Action& action) {
  return absl::StrCat(action.type == Action::kForward ? "F" : "B", action.micro_batch);
}

absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int stages, int micro_batches) {
  if (stages < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a schedule needs >= 1 stage and >= 1 micro-batch; got stages=", stages, " micro_batches=", micro_batches));
  }
  if (int64_t{2} * stages * micro_batches > kMaxActions) {
    return absl::InvalidArgumentError(absl::StrCat("schedule of ", stages, " stages x ", micro_batches,
                                                   " micro-batches is too large (limit ", kMaxActions, " actions)"));
  }
  Schedule s{kind, stages, micro_batches, std::vector<std::vector<Action>>(stages)};
  const int m = micro_batches;
  for (int st = 0; st < stages; ++st) {
    auto& list = s.per_stage[st];
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
  return Simulate(schedule, std::vector<double>(schedule.stages, 1.0), std::vector<double>(schedule.stages, 2.0), 0.0,
                  &scratch);
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

double TheoreticalBubble(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
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
  const int p = schedule.stages;
  if (static_cast<int>(forward_cost.size()) != p || static_cast<int>(backward_cost.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("need one forward and one backward cost per stage (", p, "); got ",
                                                   forward_cost.size(), " and ", backward_cost.size()));
  }
  for (int st = 0; st < p; ++st) {
    for (double c : {forward_cost[st], backward_cost[st]}) {
      if (!std::isfinite(c) || c <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("stage ", st, " cost must be finite and > 0; got ", absl::StrFormat("%g", c)));
      }
    }
  }
  if (!std::isfinite(comm_cost) || comm_cost < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("communication cost must be finite and >= 0; got ", absl::StrFormat("%g", comm_cost)));
  }

  Timeline t;
  t.kind = schedule.kind;
  t.stages = p;
  t.micro_batches = schedule.micro_batches;
  t.forward_cost = forward_cost;
  t.backward_cost = backward_cost;
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
  const int label_len = 1 + Digits(std::max(0, t.micro_batches - 1));
  int width = width_chars;
  if (width <= 0) {
    double shortest = std::numeric_limits<double>::infinity();
    for (int st = 0; st < p; ++st) shortest = std::min({shortest, t.forward_cost[st], t.backward_cost[st]});
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
  absl::StrAppendFormat(&out, "%s schedule: %d stages x %d micro-batches (%s, comm=%g); 1 column = %.3g time units\n",
                        ScheduleKindName(t.kind), p, t.micro_batches, costs, t.comm_cost, dt);
  for (int st = 0; st < p; ++st) {
    std::string bar(width, '.');
    for (const TimedAction& ta : t.per_stage[st]) {
      int c0 = static_cast<int>(std::lround(ta.start / dt));
      int c1 = static_cast<int>(std::lround(ta.end / dt));
      c0 = std::min(std::max(c0, 0), width - 1);
      c1 = std::min(std::max(c1, c0 + 1), width);
      const std::string label = ActionLabel(ta.action);
      for (int c = c0; c < c1; ++c) {
        const size_t k = c - c0;
        bar[c] = k < label.size() ? label[k] : '-';
      }
    }
    absl::StrAppendFormat(&out, "stage %*d |%s|  busy %5.1f%%  peak in-flight %d\n", stage_digits, st, bar,
                          100.0 * t.busy[st] / t.makespan, t.peak_in_flight[st]);
  }
  absl::StrAppendFormat(&out,
                        "makespan %g time units; bubble %.1f%% measured, %.1f%% theory (p-1)/(m+p-1) = %d/%d "
                        "(equal stage costs, free communication)\n",
                        t.makespan, 100.0 * t.bubble_fraction, 100.0 * TheoreticalBubble(p, t.micro_batches), p - 1,
                        t.micro_batches + p - 1);
  std::vector<std::string> peaks;
  for (int v : t.peak_in_flight) peaks.push_back(absl::StrCat(v));
  absl::StrAppend(&out, "peak micro-batches in flight per stage: ", absl::StrJoin(peaks, " "), "\n");
  return out;
}

}  // namespace baton
