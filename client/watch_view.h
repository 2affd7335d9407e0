// How `baton watch`, `status` and `list` draw a job: a panel with a progress bar and one busy bar per stage
// (block characters, redrawn in place on a terminal), or one plain line per step when stdout is not a terminal
// (logs, pipes). Pure functions of the job service's messages.
#pragma once

#include <string>

#include "baton/v1/job_service.pb.h"
#include "ui/job_words.h"  // JobStateName, FormatDuration: the browser view says them the same way

namespace baton {

// `width` cells of █ with an eighth-block tip (▏▎▍▌▋▊▉) and spaces; fraction clamped to [0, 1].
std::string BlockBar(double fraction, int width);
// One line per step: "job 3 step 12/100 loss 0.12345 lr 1.00e-04 0.840 s/step 4.8 samples/s ETA 1m14s busy 78% 55%".
std::string PlainStepLine(const v1::JobInfo& job, const v1::StepProgress& step);
// The terminal panel (several lines, each ending in '\n'): job, state, progress bar, pace and ETA, a busy bar
// per stage for the last step (busy / step time) with the run's mean, the stages that do not answer and since when,
// the last checkpoint, validation and samples, and the error.
std::string JobPanel(const v1::JobInfo& job, int bar_width = 30);
// "validation after step 30: mean 1.65178 (t=0.1 1.60212, t=0.5 1.66000, ...)".
std::string ValidationLine(const v1::ValidationProgress& v);
// "samples after step 30: 4 images, 0.24 s each: out/demo/samples/step-30/contact_sheet.png".
std::string SamplesLine(const v1::SamplesProgress& s);
// The coordinator's line for a stage that does not answer, or is back: "stage 1 (10.0.0.2:7001) has not answered
// for 30 s (waiting up to 1m0s for it to come back)".
std::string OutageLine(const v1::StageOutage& o);
// One line for a final or state event: "job 3 finished: step 100/100, loss 0.01234, 2m13s".
std::string JobSummaryLine(const v1::JobInfo& job);

}  // namespace baton
