#include "stage_driver/stage_metrics.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/metrics/families.h"
#include "core/metrics/metrics_server.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<std::string> StageMetricsListen(const std::string& driver_listen, int stage) {
  ASSIGN_OR_RETURN(MetricsAddress address, ParseMetricsAddress(driver_listen));
  if (address.port == 0) return absl::StrCat(address.host, ":0");
  const int port = address.port + 1 + stage;
  if (port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics ", driver_listen, ": stage ", stage,
                                                   " would serve its metrics on port ", port, " (past 65535)"));
  }
  return absl::StrCat(address.host, ":", port);
}

absl::Status PublishMetricsTargets(const std::string& output_dir, const std::string& process,
                                   const std::string& address, const std::vector<std::string>& stages, bool print) {
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  groups.push_back({{"targets", {address}}, {"labels", {{"baton_process", process}}}});
  std::vector<std::string> line = {absl::StrCat(process, " ", address)};
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].empty()) continue;
    groups.push_back(
        {{"targets", {stages[i]}}, {"labels", {{"baton_process", "stage_worker"}, {"stage", absl::StrCat(i)}}}});
    line.push_back(absl::StrCat("stage ", i, " ", stages[i]));
  }
  if (print) {
    std::printf("metrics: %s\n", absl::StrJoin(line, ", ").c_str());
    std::fflush(stdout);
  }
  RETURN_IF_ERROR(MakeDirs(output_dir));
  return WriteFileAtomic(JoinPath(output_dir, "prometheus_targets.json"), groups.dump(2) + "\n");
}

prometheus::Gauge* StageUpGauge(const std::string& job_name, int stage, const std::string& address) {
  return &CoordinatorFamilies().stage_up.Add({{"job", job_name}, {"stage", absl::StrCat(stage)}, {"peer", address}});
}

}  // namespace baton
