#include "coordinator/run_report.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <cstdio>

#include "core/train_local/local_trainer.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

std::string ProgressBar(int64_t done, int64_t total, int width) {
  int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]");
}

}  // namespace

absl::Status TrimTrainLog(const std::string& path, int64_t last_step) {
  if (!PathExists(path)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::string kept;
  size_t start = 0;
  for (int line_number = 1; start < text.size(); ++line_number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a torn last line is dropped
    std::string line = text.substr(start, end - start);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      return absl::DataLossError(absl::StrCat(path, ":", line_number,
                                              ": not a step record with an integer \"step\" (a train_log.jsonl line "
                                              "is one JSON object per step); fix or remove the line to resume"));
    }
    if (j["step"].get<int64_t>() <= last_step) kept += line + "\n";
    start = end + 1;
  }
  return WriteFileAtomic(path, kept);
}

nlohmann::ordered_json StepLine(const PipelineStepRecord& rec) {
  nlohmann::ordered_json line = StepRecordJson(rec);
  nlohmann::ordered_json busy = nlohmann::ordered_json::array(), idle = nlohmann::ordered_json::array();
  nlohmann::ordered_json memory = nlohmann::ordered_json::array();
  nlohmann::ordered_json device = nlohmann::ordered_json::array(), reserved = nlohmann::ordered_json::array();
  bool on_device = false;
  for (const StageStepStats& st : rec.stages) {
    busy.push_back(st.forward_seconds + st.backward_seconds);
    idle.push_back(st.idle_seconds);
    memory.push_back(st.memory_bytes);
    device.push_back(st.device_seconds);
    reserved.push_back(st.memory_reserved_bytes);
    on_device = on_device || st.device_seconds > 0 || st.memory_reserved_bytes > 0;
  }
  line["stage_busy_seconds"] = busy;
  line["stage_idle_seconds"] = idle;
  line["stage_memory_bytes"] = memory;
  if (on_device) {  // CUDA stages: the device's own busy time (events) and reserved peak
    line["stage_device_busy_seconds"] = device;
    line["stage_memory_reserved_bytes"] = reserved;
  }
  line["coordinator_seconds"] = {{"prepare", rec.prepare_seconds}, {"optimizer", rec.optimizer_seconds}};
  line["coordinator_link_bytes"] = {{"data", rec.link_data_bytes},
                                    {"adapters", rec.link_adapter_bytes},
                                    {"control", rec.link_control_bytes},
                                    {"heartbeats", rec.link_heartbeat_bytes}};
  if (rec.exchange_seconds > 0) {
    line["replica_allreduce_seconds"] = rec.exchange_seconds;
    line["replica_allreduce_early"] = rec.exchange_early;
  }
  if (rec.replica_micro_batches.size() > 1) {
    line["replica_micro_batches"] = rec.replica_micro_batches;
    line["replica_samples_per_second"] = rec.replica_samples_per_second;
  }
  return line;
}

void PrintProgress(const PipelineStepRecord& rec, int64_t start_step, int64_t total_steps, double elapsed, bool tty) {
  const int64_t done = rec.step - start_step, left = total_steps - rec.step;
  double eta = elapsed / static_cast<double>(done) * static_cast<double>(left);
  std::string busy_text;
  for (size_t i = 0; i < rec.stages.size(); ++i) {
    absl::StrAppend(&busy_text, i ? " " : "", absl::StrFormat("%.2f", BusySeconds(rec.stages[i])));
  }
  // absl::StrCat, not " " + std::string: GCC 12 -O3 reports a false -Wrestrict on the latter.
  if (rec.replica_micro_batches.size() > 1) {
    absl::StrAppend(&busy_text, "  split ", absl::StrJoin(rec.replica_micro_batches, "+"));
  }
  const std::string tail = tty ? absl::StrCat(" ", ProgressBar(rec.step, total_steps, 20)) : "\n";
  std::printf("%sstep %4lld/%lld  loss %.5f  lr %.2e  %.3f s/step  %.1f samples/s  busy[s] %s  ETA %.0fs%s",
              tty ? "\r\033[K" : "", static_cast<long long>(rec.step), static_cast<long long>(total_steps), rec.loss,
              rec.lr, rec.step_seconds, rec.samples_per_second, busy_text.c_str(), eta, tail.c_str());
  std::fflush(stdout);
}

}  // namespace baton
