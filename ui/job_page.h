// A job's page: its state and actions, the training loss (raw, smoothed, with the validation mean) with the learning
// rate and gradient norm on one step axis (the panel), the sample gallery, then the validation loss per timestep,
// stage activity and the tail of its train log (the details), and its checkpoints. The panel, the gallery and the
// details are also served alone, for the page to refresh when the job moves.
#pragma once

#include <string>

#include "baton/v1/job_service.pb.h"

namespace baton {

inline constexpr int kChartPoints = 900;  // History's max_points: one per chart pixel
inline constexpr int kLogLines = 30;

// `smoothing` in [0, 1): the loss curve's EMA weight.
std::string JobPage(const v1::HistoryResponse& history, const v1::ListCheckpointsResponse& checkpoints,
                    const std::string& csrf, double smoothing);
std::string JobPanel(const v1::HistoryResponse& history, const std::string& csrf, double smoothing);
std::string JobDetails(const v1::HistoryResponse& history);

}  // namespace baton
