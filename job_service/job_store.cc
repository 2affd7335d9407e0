// The queue's records on disk: each job's job.json in its output folder, written after every change of state, and
// read back when a service starts (jobs that were running or queued continue).
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <utility>

#include "coordinator/checkpoint.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "job_service/job_admission.h"
#include "job_service/job_history.h"
#include "job_service/job_queue.h"

namespace baton {

void JobQueue::Persist(const Job& job) const {
  std::string info_json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(job.info, &info_json, opts);
  nlohmann::json j = {{"info", nlohmann::json::parse(info_json)},
                      {"yaml", job.submitted.yaml},
                      {"working_dir", job.submitted.working_dir},
                      {"steps", job.submitted.steps},
                      {"sweep_member", job.submitted.sweep_member},
                      {"resume", job.info.state() == v1::JOB_STATE_QUEUED
                                     ? job.resume
                                     : job.interrupted && job.info.state() == v1::JOB_STATE_STOPPED}};
  absl::Status s = MakeDirs(job.info.output_dir());
  if (s.ok()) s = WriteFileAtomic(JoinPath(job.info.output_dir(), "job.json"), j.dump(1));
  if (!s.ok()) LogWarning("job ", job.info.job_id(), ": cannot record its state: ", s.ToString());
}

// A job.json's job with its id, its history and checkpoints from its output folder; nullopt (said) when the record
// cannot be read as one: not JSON, a field missing or of another type (a record cut short, or of another version).
std::optional<std::pair<int64_t, JobQueue::Job>> JobQueue::ParseRecord(const std::string& path,
                                                                       const std::string& text) {
  Job job;
  int64_t id = 0;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!google::protobuf::util::JsonStringToMessage(j.at("info").dump(), &job.info).ok() ||
        !absl::SimpleAtoi(job.info.job_id(), &id)) {
      throw std::invalid_argument("its info is not a job's");
    }
    job.submitted = {j.at("yaml").get<std::string>(),        job.info.job_file(),
                     j.at("working_dir").get<std::string>(), job.info.name(),
                     j.at("steps").get<int64_t>(),           j.value("sweep_member", "")};
    job.resume = j.value("resume", false);
  } catch (const std::exception& e) {  // nlohmann's parse and type errors, and the one above
    LogWarning("skipping unreadable ", path, ": ", e.what());
    return std::nullopt;
  }
  LoggedHistory logged =
      ReadTrainLogHistory(JoinPath(job.info.output_dir(), "train_log.jsonl"), job.info.total_steps());
  job.steps = std::move(logged.steps);
  job.evals = std::move(logged.evals);
  job.run_seconds = logged.run_seconds;
  auto checkpoints = ListCheckpointSteps(job.info.output_dir());
  if (checkpoints.ok()) job.checkpoints = *checkpoints;
  return std::make_pair(id, std::move(job));
}

absl::Status JobQueue::Reload() {
  std::error_code ec;
  std::vector<std::pair<int64_t, Job>> found;
  int64_t highest_folder = 0;  // of every <name>-<id> folder, a damaged record's too: its id is never given again
  for (const auto& entry : std::filesystem::directory_iterator(root_, ec)) {
    const std::string folder = entry.path().filename().string();
    int64_t folder_id = 0;
    if (const size_t dash = folder.rfind('-');
        dash != std::string::npos && absl::SimpleAtoi(folder.substr(dash + 1), &folder_id)) {
      highest_folder = std::max(highest_folder, folder_id);
    }
    const std::string path = JoinPath(entry.path().string(), "job.json");
    if (!PathExists(path)) continue;
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    if (auto record = ParseRecord(path, text)) found.push_back(std::move(*record));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  absl::MutexLock lock(&mu_);
  next_id_ = std::max(next_id_, highest_folder + 1);
  for (auto& [id, job] : found) {
    next_id_ = std::max(next_id_, id + 1);
    // A job the service was running when it died (SIGKILL, a crash, the host) resumes from its newest checkpoint,
    // as one a SIGTERM stopped does; with none yet it starts over (resume_if_any).
    const bool died_running = job.info.state() == v1::JOB_STATE_RUNNING;
    if (died_running) {
      job.resume = true;
      if (job.info.has_last_step()) {
        LogWarning("job ", id, ": the service exited while it ran (at step ", job.info.last_step().step(),
                   ", last checkpoint: step ", job.info.last_checkpoint_step(), "); resuming it");
      } else {  // admitted, but still loading or waiting for its turn on shared workers: nothing ran yet
        LogWarning("job ", id, ": the service exited while the job was starting (no step done yet); starting it again");
      }
    }
    job.info.clear_outages();  // as of the last checkpoint: long over or moot
    if (died_running || job.info.state() == v1::JOB_STATE_QUEUED ||
        (job.resume && job.info.state() == v1::JOB_STATE_STOPPED)) {
      job.info.set_state(v1::JOB_STATE_QUEUED);
      job.info.set_end_time_unix(0);
      auto config = ParseSubmittedJob(job.submitted);
      if (config.ok()) {
        job.config = *config;
        job.frozen_key = PlannedFrozenKey(job.config, base_.stages);
        queue_.push_back(id);
      } else {
        job.info.set_state(v1::JOB_STATE_FAILED);
        job.info.set_error(config.status().ToString());
      }
    }
    Persist(job);
    jobs_[id] = std::move(job);
  }
  return absl::OkStatus();
}

}  // namespace baton
