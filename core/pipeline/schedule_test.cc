#include "core/pipeline/schedule.h"

#include <absl/strings/str_format.h>
#include <absl/strings/str_split.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace baton {
namespace {

Action F(int i) { return {Action::kForward, i}; }
Action B(int i) { return {Action::kBackward, i}; }

std::string Labels(const std::vector<Action>& list, int chunks = 1) {
  std::string s;
  for (const Action& a : list) s += ActionLabel(a, chunks) + " ";
  return s;
}

TEST(ScheduleTest, ParsesKindNamesInAnyCase) {
  EXPECT_EQ(*ParseScheduleKind("gpipe"), ScheduleKind::kGPipe);
  EXPECT_EQ(*ParseScheduleKind("GPipe"), ScheduleKind::kGPipe);
  EXPECT_EQ(*ParseScheduleKind("1f1b"), ScheduleKind::k1F1B);
  EXPECT_EQ(*ParseScheduleKind("1F1B"), ScheduleKind::k1F1B);
  EXPECT_EQ(*ParseScheduleKind("Interleaved"), ScheduleKind::kInterleaved1F1B);
  auto bad = ParseScheduleKind("zigzag");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'zigzag'"), absl::string_view::npos);
  EXPECT_STREQ(ScheduleKindName(*ParseScheduleKind(ScheduleKindName(ScheduleKind::k1F1B))), "1f1b");
}

TEST(ScheduleTest, RejectsBadSizes) {
  EXPECT_FALSE(MakeSchedule(ScheduleKind::kGPipe, 0, 4).ok());
  EXPECT_FALSE(MakeSchedule(ScheduleKind::k1F1B, 2, 0).ok());
  EXPECT_FALSE(MakeSchedule(ScheduleKind::k1F1B, -1, 4).ok());
  EXPECT_FALSE(MakeSchedule(ScheduleKind::kGPipe, 1 << 12, 1 << 12).ok());
}

TEST(ScheduleTest, GPipeRunsAllForwardsThenBackwardsInAscendingOrder) {
  auto s = MakeSchedule(ScheduleKind::kGPipe, 3, 4);
  ASSERT_TRUE(s.ok()) << s.status();
  for (const auto& list : s->per_stage) {
    EXPECT_EQ(Labels(list), "F0 F1 F2 F3 B0 B1 B2 B3 ");
  }
}

TEST(ScheduleTest, OneFOneBFollowsMegatronWarmupSteadyCooldown) {
  auto s = MakeSchedule(ScheduleKind::k1F1B, 4, 8);
  ASSERT_TRUE(s.ok()) << s.status();
  // Stage 0: 3 warm-up forwards, 5 steady pairs, 3 cool-down backwards.
  EXPECT_EQ(Labels(s->per_stage[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 ");
  EXPECT_EQ(Labels(s->per_stage[2]), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7 ");
  // Last stage: no warm-up, strict alternation.
  EXPECT_EQ(Labels(s->per_stage[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 ");
  // Fewer micro-batches than stages: warm-up is capped at m, so stage 0 is pure fill-drain.
  auto few = MakeSchedule(ScheduleKind::k1F1B, 4, 2);
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(Labels(few->per_stage[0]), "F0 F1 B0 B1 ");
  EXPECT_EQ(Labels(few->per_stage[2]), "F0 F1 B0 B1 ");
  EXPECT_EQ(Labels(few->per_stage[3]), "F0 B0 F1 B1 ");
}

TEST(ScheduleTest, EveryGeneratedScheduleValidates) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int p = 1; p <= 7; ++p) {
      for (int m = 1; m <= 12; ++m) {
        auto s = MakeSchedule(kind, p, m);
        ASSERT_TRUE(s.ok()) << s.status();
        EXPECT_TRUE(ValidateSchedule(*s).ok()) << ScheduleKindName(kind) << " p=" << p << " m=" << m;
      }
    }
  }
}

TEST(ScheduleTest, ValidateNamesStructuralErrors) {
  Schedule s{ScheduleKind::kGPipe, 2, 2, {{F(0), F(1), B(0), B(1)}, {F(0), F(1), B(0), B(1)}}};
  ASSERT_TRUE(ValidateSchedule(s).ok());

  Schedule dup = s;
  dup.per_stage[1] = {F(0), F(0), B(0), B(1)};
  absl::Status st = ValidateSchedule(dup);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("stage 1 runs F0 twice"), absl::string_view::npos) << st;

  Schedule order = s;
  order.per_stage[0] = {F(0), B(1), F(1), B(0)};
  st = ValidateSchedule(order);
  EXPECT_NE(st.message().find("stage 0 runs B1 (action #1) before F1"), absl::string_view::npos) << st;

  Schedule range = s;
  range.per_stage[0][1] = F(5);
  st = ValidateSchedule(range);
  EXPECT_NE(st.message().find("out of range"), absl::string_view::npos) << st;

  Schedule missing = s;
  missing.per_stage.pop_back();
  EXPECT_FALSE(ValidateSchedule(missing).ok());
}

TEST(ScheduleTest, ValidateDetectsDeadlock) {
  // Stage 0 wants B0 before sending F1; stage 1 wants F1 before running B0.
  Schedule s{ScheduleKind::k1F1B, 2, 2, {{F(0), B(0), F(1), B(1)}, {F(0), F(1), B(1), B(0)}}};
  absl::Status st = ValidateSchedule(s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("stage 0 waits at B0 for B0 on stage 1"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("stage 1 waits at F1 for F1 on stage 0"), absl::string_view::npos) << st;
  EXPECT_FALSE(SimulateSchedule(s, 1, 2).ok());
}

TEST(ScheduleTest, GPipeBubbleMatchesTheoryExactly) {
  for (int p : {1, 2, 3, 4, 6}) {
    for (int m : {1, 2, 4, 8, 13}) {
      for (double f : {1.0, 0.5, 3.0}) {
        auto s = MakeSchedule(ScheduleKind::kGPipe, p, m);
        ASSERT_TRUE(s.ok());
        auto t = SimulateSchedule(*s, f, 2 * f);
        ASSERT_TRUE(t.ok()) << t.status();
        EXPECT_NEAR(t->makespan, (m + p - 1) * 3 * f, 1e-9);
        EXPECT_NEAR(t->bubble_fraction, TheoreticalBubble(p, m), 1e-12) << "p=" << p << " m=" << m;
      }
    }
  }
}

TEST(ScheduleTest, OneFOneBHasGPipeBubbleButFewerActivationsInFlight) {
  for (int p : {2, 3, 4, 5}) {
    for (int m : {1, 3, 4, 8, 16}) {
      auto gpipe = MakeSchedule(ScheduleKind::kGPipe, p, m);
      auto ofob = MakeSchedule(ScheduleKind::k1F1B, p, m);
      ASSERT_TRUE(gpipe.ok() && ofob.ok());
      for (double b : {1.0, 2.0}) {
        auto tg = SimulateSchedule(*gpipe, 1.0, b);
        auto t1 = SimulateSchedule(*ofob, 1.0, b);
        ASSERT_TRUE(tg.ok() && t1.ok());
        EXPECT_NEAR(t1->bubble_fraction, TheoreticalBubble(p, m), 1e-12) << "p=" << p << " m=" << m << " b=" << b;
        EXPECT_NEAR(t1->makespan, tg->makespan, 1e-9);
      }
      const std::vector<int> peak_g = PeakInFlight(*gpipe), peak_1 = PeakInFlight(*ofob);
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(peak_g[s], m);
        EXPECT_EQ(peak_1[s], std::min(p - s, m)) << "p=" << p << " m=" << m << " stage " << s;
      }
    }
  }
}

TEST(ScheduleTest, TimelineRespectsDependencies) {
  const double f = 1, b = 2, c = 0.25;
  auto s = MakeSchedule(ScheduleKind::k1F1B, 4, 6);
  ASSERT_TRUE(s.ok());
  auto t = SimulateSchedule(*s, f, b, c);
  ASSERT_TRUE(t.ok());
  const int p = 4, m = 6;
  std::vector<std::vector<TimedAction>> fwd(p, std::vector<TimedAction>(m)), bwd = fwd;
  for (int st = 0; st < p; ++st) {
    double prev_end = 0;
    for (const TimedAction& ta : t->per_stage[st]) {
      EXPECT_GE(ta.start, prev_end);  // one action at a time, in list order
      prev_end = ta.end;
      (ta.action.type == Action::kForward ? fwd : bwd)[st][ta.action.micro_batch] = ta;
    }
  }
  for (int st = 0; st < p; ++st) {
    for (int i = 0; i < m; ++i) {
      if (st > 0) {
        EXPECT_GE(fwd[st][i].start, fwd[st - 1][i].end + c);
      }
      if (st < p - 1) {
        EXPECT_GE(bwd[st][i].start, bwd[st + 1][i].end + c);
      }
      EXPECT_GE(bwd[st][i].start, fwd[st][i].end);
    }
  }
}

TEST(ScheduleTest, CommunicationAddsTwoHopsPerBoundaryToGPipe) {
  // Fill: the last forward reaches the end after p-1 hops; drain: the last backward returns after p-1.
  const int p = 3, m = 5;
  const double f = 1, b = 2, c = 0.5;
  auto s = MakeSchedule(ScheduleKind::kGPipe, p, m);
  ASSERT_TRUE(s.ok());
  auto t = SimulateSchedule(*s, f, b, c);
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(t->makespan, (m + p - 1) * (f + b) + 2 * (p - 1) * c, 1e-9);
  EXPECT_GT(t->bubble_fraction, TheoreticalBubble(p, m));
}

TEST(ScheduleTest, SlowStageSetsThePace) {
  const int p = 3, m = 8;
  auto s = MakeSchedule(ScheduleKind::k1F1B, p, m);
  ASSERT_TRUE(s.ok());
  auto t = SimulateScheduleWithCosts(*s, {1, 2, 1}, {2, 4, 2}, 0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GE(t->makespan, m * (2 + 4));
  EXPECT_NEAR(t->busy[1], m * 6.0, 1e-9);
  EXPECT_NEAR(t->busy[0], m * 3.0, 1e-9);
  EXPECT_GT(t->bubble_fraction, TheoreticalBubble(p, m));
}

TEST(ScheduleTest, SimulateRejectsBadCosts) {
  auto s = MakeSchedule(ScheduleKind::kGPipe, 2, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(SimulateSchedule(*s, 0, 1).ok());
  EXPECT_FALSE(SimulateSchedule(*s, 1, -2).ok());
  EXPECT_FALSE(SimulateSchedule(*s, 1, 2, -0.1).ok());
  EXPECT_FALSE(SimulateScheduleWithCosts(*s, {1}, {2, 2}, 0).ok());
}

TEST(ScheduleTest, RenderShowsOneRowPerStageAndTheBubble) {
  const int p = 4, m = 8;
  auto s = MakeSchedule(ScheduleKind::k1F1B, p, m);
  ASSERT_TRUE(s.ok());
  auto t = SimulateSchedule(*s, 1, 2);
  ASSERT_TRUE(t.ok());
  const std::string text = RenderTimeline(*t);
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  std::vector<std::string> rows;
  for (const std::string& l : lines) {
    if (l.rfind("stage ", 0) == 0) rows.push_back(l);
  }
  ASSERT_EQ(rows.size(), static_cast<size_t>(p)) << text;
  // Auto width gives 2 columns per time unit here (labels are 2 chars, F costs 1).
  const size_t width = static_cast<size_t>(2 * t->makespan);
  for (int st = 0; st < p; ++st) {
    const size_t open = rows[st].find('|'), close = rows[st].find('|', open + 1);
    ASSERT_NE(close, std::string::npos);
    const std::string bar = rows[st].substr(open + 1, close - open - 1);
    EXPECT_EQ(bar.size(), width);
    const auto idle = std::count(bar.begin(), bar.end(), '.');
    EXPECT_EQ(idle, static_cast<long>(2 * (t->makespan - t->busy[st]))) << rows[st];
    EXPECT_NE(rows[st].find(absl::StrFormat("peak in-flight %d", p - st)), std::string::npos) << rows[st];
  }
  EXPECT_EQ(rows[0].substr(0, 17), "stage 0 |F0F1F2F3");
  EXPECT_EQ(rows[3].substr(0, 23), "stage 3 |......F0B0--F1");
  const std::string pct = absl::StrFormat("%.1f%%", 100 * TheoreticalBubble(p, m));
  EXPECT_NE(text.find("bubble " + pct + " measured, " + pct + " theory"), std::string::npos) << text;

  // A fixed narrow width still renders every row at that width.
  const std::string narrow = RenderTimeline(*t, 20);
  for (const std::string& l : std::vector<std::string>(absl::StrSplit(narrow, '\n'))) {
    if (l.rfind("stage ", 0) != 0) continue;
    EXPECT_EQ(l.find('|', l.find('|') + 1) - l.find('|') - 1, 20u) << l;
  }
}

TEST(InterleavedScheduleTest, FollowsMegatronChunkOrder) {
  // p = 2, v = 2: chunk-actions in groups of p*v = 4: (F0a F1a F0b F1b) (F2a F3a F2b F3b); backwards walk the
  // chunks in reverse (B0b B1b B0a B1a) ... Warm-up: stage 0 (2-0-1)*2 + (2-1)*2 = 4, stage 1 0 + 2 = 2.
  auto s = MakeSchedule(ScheduleKind::kInterleaved1F1B, 2, 4, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->chunks, 2);
  EXPECT_EQ(Labels(s->per_stage[0], 2), "F0a F1a F0b F1b F2a B0b F3a B1b F2b B0a F3b B1a B2b B3b B2a B3a ");
  EXPECT_EQ(Labels(s->per_stage[1], 2), "F0a F1a F0b B0b F1b B1b F2a B0a F3a B1a F2b B2b F3b B3b B2a B3a ");
}

TEST(InterleavedScheduleTest, EveryCombinationRunsEachChunkActionOnceAndValidates) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = p; m <= 4 * p; m += p) {
      for (int v = 2; v <= 4; ++v) {
        auto s = MakeSchedule(ScheduleKind::kInterleaved1F1B, p, m, v);
        ASSERT_TRUE(s.ok()) << s.status();
        EXPECT_TRUE(ValidateSchedule(*s).ok()) << "p=" << p << " m=" << m << " v=" << v << ": " << ValidateSchedule(*s);
        for (int st = 0; st < p; ++st) {
          std::vector<int> f_count(v * m, 0), b_count(v * m, 0);
          for (const Action& a : s->per_stage[st]) {
            ASSERT_TRUE(a.chunk >= 0 && a.chunk < v && a.micro_batch >= 0 && a.micro_batch < m);
            (a.type == Action::kForward ? f_count : b_count)[a.chunk * m + a.micro_batch]++;
          }
          EXPECT_EQ(f_count, std::vector<int>(v * m, 1)) << "p=" << p << " m=" << m << " v=" << v << " stage " << st;
          EXPECT_EQ(b_count, std::vector<int>(v * m, 1)) << "p=" << p << " m=" << m << " v=" << v << " stage " << st;
        }
      }
    }
  }
}

TEST(InterleavedScheduleTest, BubbleMatchesTheoryAndBeatsOneFOneB) {
  // Equal stage costs, free communication: the makespan is (m + (p-1)/v)(F+B), so the bubble is exactly
  // (p-1)/(v*m+p-1). Sums of multiples of 1/v (v = 2, 4: exact in binary; v = 3: rounding), hence 1e-9.
  struct Case {
    int p, m, v;
  };
  for (const Case& c : std::vector<Case>{{2, 2, 2},
                                         {2, 4, 2},
                                         {2, 8, 4},
                                         {3, 6, 2},
                                         {3, 9, 3},
                                         {4, 4, 2},
                                         {4, 8, 2},
                                         {4, 8, 4},
                                         {4, 16, 3},
                                         {6, 12, 2}}) {
    auto inter = MakeSchedule(ScheduleKind::kInterleaved1F1B, c.p, c.m, c.v);
    auto ofob = MakeSchedule(ScheduleKind::k1F1B, c.p, c.m);
    ASSERT_TRUE(inter.ok() && ofob.ok()) << inter.status();
    for (double b : {1.0, 2.0}) {
      auto ti = SimulateSchedule(*inter, 1.0, b);
      auto t1 = SimulateSchedule(*ofob, 1.0, b);
      ASSERT_TRUE(ti.ok() && t1.ok()) << ti.status();
      const std::string where = absl::StrFormat("p=%d m=%d v=%d B=%g", c.p, c.m, c.v, b);
      EXPECT_NEAR(ti->bubble_fraction, TheoreticalBubble(c.p, c.m, c.v), 1e-9) << where;
      EXPECT_NEAR(ti->makespan, (c.m + (c.p - 1.0) / c.v) * (1.0 + b), 1e-9) << where;
      EXPECT_LT(ti->bubble_fraction, t1->bubble_fraction) << where;
      EXPECT_NEAR(ti->busy[0], c.m * (1.0 + b), 1e-9) << where;  // v chunks of 1/v each
    }
  }
  EXPECT_DOUBLE_EQ(TheoreticalBubble(4, 8, 2), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(4, 8), 3.0 / 11.0);
}

TEST(InterleavedScheduleTest, PeakInFlightMatchesMegatronWarmup) {
  // Megatron holds every warm-up chunk-activation plus the one the first steady-state F adds before its B
  // frees one: min((p-s-1)*2 + (v-1)*p + 1, v*m) chunk-activations, each 1/v of a stage's.
  auto s48 = MakeSchedule(ScheduleKind::kInterleaved1F1B, 4, 8, 2);
  ASSERT_TRUE(s48.ok());
  EXPECT_EQ(PeakInFlight(*s48), (std::vector<int>{11, 9, 7, 5}));
  // m = p: stages 0 and 1 reach the cap v*m = 8 (all forwards before any backward).
  auto s44 = MakeSchedule(ScheduleKind::kInterleaved1F1B, 4, 4, 2);
  ASSERT_TRUE(s44.ok());
  EXPECT_EQ(PeakInFlight(*s44), (std::vector<int>{8, 8, 7, 5}));
  auto s24 = MakeSchedule(ScheduleKind::kInterleaved1F1B, 2, 4, 3);
  ASSERT_TRUE(s24.ok());
  EXPECT_EQ(PeakInFlight(*s24), (std::vector<int>{7, 5}));
  for (int p : {2, 3, 5}) {
    for (int v : {2, 3}) {
      const int m = 3 * p;
      auto s = MakeSchedule(ScheduleKind::kInterleaved1F1B, p, m, v);
      ASSERT_TRUE(s.ok());
      const std::vector<int> peak = PeakInFlight(*s);
      for (int st = 0; st < p; ++st) {
        EXPECT_EQ(peak[st], std::min((p - st - 1) * 2 + (v - 1) * p + 1, v * m)) << p << " " << v << " " << st;
      }
    }
  }
}

TEST(InterleavedScheduleTest, RejectsBadChunksAndMicroBatchCounts) {
  auto uneven = MakeSchedule(ScheduleKind::kInterleaved1F1B, 4, 6, 2);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("multiple of stages"), absl::string_view::npos) << uneven.status();
  EXPECT_NE(uneven.status().message().find("6 micro-batches for 4 stages"), absl::string_view::npos);
  for (int v : {1, 0, -2, 27}) {
    auto bad = MakeSchedule(ScheduleKind::kInterleaved1F1B, 2, 4, v);
    ASSERT_FALSE(bad.ok()) << v;
    EXPECT_NE(bad.status().message().find(absl::StrFormat("2 to 26 chunks (model chunks per stage); got chunks=%d", v)),
              absl::string_view::npos)
        << bad.status();
  }
  auto old_signature = MakeSchedule(ScheduleKind::kInterleaved1F1B, 2, 4);
  ASSERT_FALSE(old_signature.ok());
  EXPECT_NE(old_signature.status().message().find("got chunks=1"), absl::string_view::npos);
  auto chunked_1f1b = MakeSchedule(ScheduleKind::k1F1B, 2, 4, 2);
  ASSERT_FALSE(chunked_1f1b.ok());
  EXPECT_NE(chunked_1f1b.status().message().find("the 1f1b schedule runs 1 chunk per stage; got chunks=2"),
            absl::string_view::npos)
      << chunked_1f1b.status();
  EXPECT_TRUE(MakeSchedule(ScheduleKind::kGPipe, 2, 3, 1).ok());
}

TEST(InterleavedScheduleTest, ValidateNamesChunkErrorsAndDeadlocks) {
  auto good = MakeSchedule(ScheduleKind::kInterleaved1F1B, 2, 2, 2);
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(ValidateSchedule(*good).ok());

  Schedule dup = *good;
  dup.per_stage[1][1] = dup.per_stage[1][0];  // F0a twice, F1a never
  absl::Status st = ValidateSchedule(dup);
  EXPECT_NE(st.message().find("stage 1 runs F0a twice"), absl::string_view::npos) << st;

  Schedule range = *good;
  range.per_stage[0][0].chunk = 2;
  st = ValidateSchedule(range);
  EXPECT_NE(st.message().find("chunk 2 out of range [0, 2)"), absl::string_view::npos) << st;

  // Stage 0 wants chunk 1's F0 before sending chunk 0's F0 to stage 1, whose output chunk 1 needs.
  Schedule cycle{ScheduleKind::kInterleaved1F1B, 2, 1, {}, 2};
  const Action f0a{Action::kForward, 0, 0}, f0b{Action::kForward, 0, 1};
  const Action b0a{Action::kBackward, 0, 0}, b0b{Action::kBackward, 0, 1};
  cycle.per_stage = {{f0b, f0a, b0b, b0a}, {f0a, f0b, b0b, b0a}};
  st = ValidateSchedule(cycle);
  ASSERT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("stage 0 waits at F0b for F0a on stage 1"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("stage 1 waits at F0a for F0a on stage 0"), absl::string_view::npos) << st;
}

TEST(InterleavedScheduleTest, TimelineRespectsVirtualStageDependencies) {
  const int p = 3, m = 6, v = 2;
  const double f = 1, b = 2, c = 0.25;
  auto s = MakeSchedule(ScheduleKind::kInterleaved1F1B, p, m, v);
  ASSERT_TRUE(s.ok());
  auto t = SimulateSchedule(*s, f, b, c);
  ASSERT_TRUE(t.ok()) << t.status();
  // [virtual stage u = chunk*p + stage][micro-batch]
  std::vector<std::vector<TimedAction>> fwd(v * p, std::vector<TimedAction>(m)), bwd = fwd;
  for (int st = 0; st < p; ++st) {
    double prev_end = 0;
    for (const TimedAction& ta : t->per_stage[st]) {
      EXPECT_GE(ta.start, prev_end);
      EXPECT_NEAR(ta.end - ta.start, (ta.action.type == Action::kForward ? f : b) / v, 1e-12);
      prev_end = ta.end;
      (ta.action.type == Action::kForward ? fwd : bwd)[ta.action.chunk * p + st][ta.action.micro_batch] = ta;
    }
  }
  for (int u = 0; u < v * p; ++u) {
    for (int i = 0; i < m; ++i) {
      if (u > 0) {
        EXPECT_GE(fwd[u][i].start, fwd[u - 1][i].end + c - 1e-12) << "u=" << u << " i=" << i;
      }
      if (u < v * p - 1) {
        EXPECT_GE(bwd[u][i].start, bwd[u + 1][i].end + c - 1e-12) << "u=" << u << " i=" << i;
      }
      EXPECT_GE(bwd[u][i].start, fwd[u][i].end);
    }
  }
  EXPECT_GT(t->bubble_fraction, TheoreticalBubble(p, m, v));
}

TEST(InterleavedScheduleTest, RenderLabelsChunksAndNamesTheTheory) {
  auto s = MakeSchedule(ScheduleKind::kInterleaved1F1B, 4, 8, 2);
  ASSERT_TRUE(s.ok());
  auto t = SimulateSchedule(*s, 1, 2);
  ASSERT_TRUE(t.ok());
  const std::string text = RenderTimeline(*t);
  EXPECT_NE(text.find("interleaved schedule: 4 stages x 8 micro-batches x 2 chunks"), std::string::npos) << text;
  // Auto width: labels are 3 chars and the shortest action (F/2) lasts 0.5, so 6 columns per time unit.
  EXPECT_NE(text.find("stage 0 |F0aF1aF2aF3aF0bF1b"), std::string::npos) << text;
  const std::string pct = absl::StrFormat("%.1f%%", 100 * TheoreticalBubble(4, 8, 2));
  EXPECT_NE(text.find("bubble " + pct + " measured, " + pct + " theory (p-1)/(v*m+p-1) = 3/19"), std::string::npos)
      << text;
  EXPECT_NE(text.find("peak chunk-activations in flight per stage (each 1/2 of a stage's activations): 11 9 7 5"),
            std::string::npos)
      << text;
}

TEST(InterleavedScheduleTest, ChunkCostsShapeTheTimeline) {
  auto s = MakeSchedule(ScheduleKind::kInterleaved1F1B, 2, 8, 2);
  ASSERT_TRUE(s.ok());
  // Equal chunks: the same timeline as per-stage costs split evenly, and the theory's bubble.
  auto even = SimulateScheduleWithChunkCosts(*s, {{0.5, 0.5}, {0.5, 0.5}}, {{1, 1}, {1, 1}}, 0);
  auto per_stage = SimulateScheduleWithCosts(*s, {1, 1}, {2, 2}, 0);
  ASSERT_TRUE(even.ok() && per_stage.ok());
  EXPECT_DOUBLE_EQ(even->makespan, per_stage->makespan);
  EXPECT_NEAR(even->bubble_fraction, TheoreticalBubble(2, 8, 2), 1e-12);
  EXPECT_EQ(even->forward_cost, (std::vector<double>{1, 1}));
  // bench_pipeline's 6 blocks in 4 chunks: 1 + 2 blocks on stage 0, 2 + 1 on stage 1. Same work per stage, but
  // the first and last virtual stages are the short ones, so the pipeline fills and drains faster: less bubble.
  auto uneven = SimulateScheduleWithChunkCosts(*s, {{1.0 / 3, 2.0 / 3}, {2.0 / 3, 1.0 / 3}},
                                               {{2.0 / 3, 4.0 / 3}, {4.0 / 3, 2.0 / 3}}, 0);
  ASSERT_TRUE(uneven.ok());
  for (int st = 0; st < 2; ++st) EXPECT_NEAR(uneven->busy[st], even->busy[st], 1e-9);
  EXPECT_LT(uneven->bubble_fraction, even->bubble_fraction - 0.005);
  auto wrong = SimulateScheduleWithChunkCosts(*s, {{1}, {1}}, {{1, 1}, {1, 1}}, 0);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("stage 0 needs one forward and one backward cost per chunk (2)"),
            std::string::npos)
      << wrong.status();
  EXPECT_FALSE(SimulateScheduleWithChunkCosts(*s, {{1, 0}, {1, 1}}, {{1, 1}, {1, 1}}, 0).ok());
}

}  // namespace
}  // namespace baton
