// A job's history as a chart and a gallery need it (JobService.History): step records downsampled into runs of
// consecutive steps, the history read back from a train_log.jsonl (a restarted service's reloaded jobs), a sample
// rendering's files and prompts, and the tail of a log. Pure functions of their inputs and the files they name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "baton/v1/job_service.pb.h"

namespace baton {

inline constexpr int kDefaultHistoryPoints = 2000;
inline constexpr int kMaxHistoryPoints = 20000;
inline constexpr int kMaxLogTailLines = 200;

// At most `max_points` points: with more steps than that, runs of ceil(steps / max_points) consecutive steps, each
// their mean loss (min and max beside it), mean gradient norm, step time and link bytes, and the last run's
// learning rate; otherwise one point per step.
std::vector<v1::HistoryPoint> DownsampleSteps(const std::vector<v1::StepProgress>& steps, int max_points);

// What a train_log.jsonl says of a run: its step records and its evaluations (validation and samples events, in
// order): the trained adapters', or their EMA's when the run evaluated only those (ema.evals: ema). Unreadable lines
// are skipped; a missing file is an empty history.
struct LoggedHistory {
  std::vector<v1::StepProgress> steps;
  std::vector<v1::WatchEvent> evals;  // each with its validation or samples set
  double run_seconds = 0;             // the steps' seconds, summed
};
LoggedHistory ReadTrainLogHistory(const std::string& path, int64_t total_steps);

// The sample rendering after samples.step() steps in <output_dir>/samples/step-N/: the files its prompts.txt lists
// (K.png or K.mp4, in prompt order, each with its prompt) that are there.
v1::SampleRendering ListSampleRendering(const std::string& output_dir, const v1::SamplesProgress& samples);

// The last `lines` lines of a text file (at most kMaxLogTailLines, from its last 256 KiB), oldest first.
std::vector<std::string> TailLines(const std::string& path, int lines);

}  // namespace baton
