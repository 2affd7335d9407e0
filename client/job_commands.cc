#include "client/job_commands.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/time/clock.h>
#include <absl/time/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "baton/v1/job_service.grpc.pb.h"
#include "client/client_security.h"
#include "client/watch_view.h"
#include "core/util/files.h"
#include "core/util/limits.h"
#include "core/util/status.h"
#include "ui/job_client.h"

namespace baton {
namespace {

std::string DefaultCoordinator() {
  const char* env = std::getenv("BATON_COORDINATOR");
  return env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
}

FlagSpec CoordinatorFlag() {
  return {"coordinator", "job service address (coordinator --listen); env BATON_COORDINATOR", DefaultCoordinator()};
}

// The job service's client (ui/job_client.h: every call written once, for the browser view too); the channel
// carries this user's token, so the calls pass none.
absl::StatusOr<std::unique_ptr<JobClient>> Connect(const Args& args) {
  ASSIGN_OR_RETURN(auto credentials, ClientCredentials(args));
  const std::string address = args.Get("coordinator");
  return std::make_unique<JobClient>(address, credentials, absl::StrCat("coordinator ", address));
}

// The coordinator's address and how to authenticate to it: every job command's flags.
std::vector<FlagSpec> ServerFlags(std::vector<FlagSpec> specs) {
  specs.push_back(CoordinatorFlag());
  for (FlagSpec& f : SecurityFlags()) specs.push_back(std::move(f));
  return specs;
}

std::string Clock(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMicros(static_cast<int64_t>(unix_seconds * 1e6)),
                          absl::LocalTimeZone());
}

absl::Status Submit(const Args& args) {
  const std::string file = args.Get("JOB.yaml");
  // The service refuses a job file over kMaxJobFileBytes; saying so here names the file instead of gRPC's size error.
  ASSIGN_OR_RETURN(std::string yaml, ReadFileBounded(file, kMaxJobFileBytes));
  v1::SubmitRequest req;
  req.set_job_yaml(yaml);
  req.set_job_file(file);
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) != nullptr) req.set_working_dir(cwd);
  req.set_name(args.Get("name"));
  ASSIGN_OR_RETURN(int64_t steps, args.GetInt("steps"));
  if (steps < 0)
    return absl::InvalidArgumentError(absl::StrCat("--steps ", steps, ": a step count is >= 1 (0: the job's)"));
  req.set_steps(steps);
  ASSIGN_OR_RETURN(auto client, Connect(args));
  ASSIGN_OR_RETURN(const v1::SubmitResponse resp, client->Submit("", req));
  std::printf(
      "job %s (%s) %s; output %s on the coordinator\n", resp.job_id().c_str(), resp.job().name().c_str(),
      resp.queue_position() == 0 ? "starts now" : absl::StrCat("queued at position ", resp.queue_position()).c_str(),
      resp.job().output_dir().c_str());
  for (const v1::JobInfo& member : resp.sweep_members()) {  // a sweep: every member is a job of its own
    std::printf("job %s (%s) %s; output %s on the coordinator\n", member.job_id().c_str(), member.name().c_str(),
                member.queue_position() == 0 ? "starts now"
                                             : absl::StrCat("queued at position ", member.queue_position()).c_str(),
                member.output_dir().c_str());
  }
  return absl::OkStatus();
}

absl::Status ShowStatus(const Args& args) {
  ASSIGN_OR_RETURN(auto client, Connect(args));
  ASSIGN_OR_RETURN(const v1::JobInfo job, client->Status("", args.Get("JOB_ID")));
  std::printf("%s", JobPanel(job).c_str());
  if (job.state() == v1::JOB_STATE_QUEUED) {
    std::printf("queue position: %d%s%s\n", job.queue_position(), job.waiting_for().empty() ? "" : "; waiting for ",
                job.waiting_for().c_str());
  }
  std::printf("submitted %s  started %s  ended %s\noutput: %s\n", Clock(job.submit_time_unix()).c_str(),
              Clock(job.start_time_unix()).c_str(), Clock(job.end_time_unix()).c_str(), job.output_dir().c_str());
  return absl::OkStatus();
}

absl::Status List(const Args& args) {
  ASSIGN_OR_RETURN(auto client, Connect(args));
  ASSIGN_OR_RETURN(const v1::ListResponse resp, client->List(""));
  std::printf("%-6s %-24s %-9s %-13s %-9s %-9s %s\n", "ID", "NAME", "STATE", "STEP", "LOSS", "S/STEP", "ETA/QUEUE");
  for (const v1::JobInfo& j : resp.jobs()) {
    const v1::StepProgress& s = j.last_step();
    std::string when = j.state() == v1::JOB_STATE_QUEUED ? absl::StrCat("#", j.queue_position())
                       : j.state() == v1::JOB_STATE_RUNNING
                           ? (j.has_last_step() ? FormatDuration(s.eta_seconds()) : "-")
                           : Clock(j.end_time_unix());
    std::printf("%-6s %-24s %-9s %-13s %-9s %-9s %s\n", j.job_id().c_str(), j.name().c_str(),
                JobStateName(j.state()).c_str(), absl::StrCat(s.step(), "/", j.total_steps()).c_str(),
                j.has_last_step() ? absl::StrFormat("%.5f", s.loss()).c_str() : "-",
                j.has_last_step() ? absl::StrFormat("%.3f", s.step_seconds()).c_str() : "-", when.c_str());
  }
  return absl::OkStatus();
}

absl::Status Watch(const Args& args) {
  v1::WatchRequest req;
  req.set_job_id(args.Get("JOB_ID"));
  const bool tty = ::isatty(STDOUT_FILENO) && !args.GetBool("plain");
  ASSIGN_OR_RETURN(auto client, Connect(args));
  if (args.Has("from-step")) {
    ASSIGN_OR_RETURN(int64_t from_step, args.GetInt("from-step"));
    req.set_from_step(from_step);
  } else if (tty) {  // the panel shows the latest step: no need to redraw the whole history first
    absl::StatusOr<v1::JobInfo> now = client->Status("", req.job_id());
    if (now.ok()) req.set_from_step(std::max<int64_t>(0, now->last_step().step() - 1));
  }
  v1::JobInfo last;
  bool ended = false;  // the final event came
  int drawn_lines = 0;
  RETURN_IF_ERROR(client->Watch("", req, [&](const v1::WatchEvent& event) {
    last = event.job();
    if (tty) {
      std::string panel = JobPanel(last);
      std::printf("%s%s", drawn_lines > 0 ? absl::StrCat("\033[", drawn_lines, "A\033[J").c_str() : "", panel.c_str());
      drawn_lines = static_cast<int>(std::count(panel.begin(), panel.end(), '\n'));
    } else if (event.has_step()) {
      std::printf("%s\n", PlainStepLine(last, event.step()).c_str());
    } else if (event.checkpoint_step() > 0) {
      std::printf("job %s checkpoint step %lld\n", last.job_id().c_str(),
                  static_cast<long long>(event.checkpoint_step()));
    } else if (event.has_validation()) {
      std::printf("job %s %s\n", last.job_id().c_str(), ValidationLine(event.validation()).c_str());
    } else if (event.has_samples()) {
      std::printf("job %s %s\n", last.job_id().c_str(), SamplesLine(event.samples()).c_str());
    } else if (event.has_outage()) {
      std::printf("job %s %s\n", last.job_id().c_str(), OutageLine(event.outage()).c_str());
    } else {
      std::printf("%s\n", JobSummaryLine(last).c_str());
    }
    std::fflush(stdout);
    ended = event.final();
    return !ended;
  }));
  if (!ended) return absl::UnavailableError("the watch ended before the job did");
  if (tty) std::printf("%s\n", JobSummaryLine(last).c_str());
  if (last.state() == v1::JOB_STATE_FAILED) {
    return absl::AbortedError(absl::StrCat("job ", last.job_id(), " failed: ", last.error()));
  }
  if (last.resumes_on_restart()) {  // not the job's end: `watch && download` must not take a mid-run LoRA
    return absl::UnavailableError(absl::StrCat("job ", last.job_id(),
                                               " was stopped by the job service's shutdown; the service resumes it "
                                               "when it starts again (watch it then)"));
  }
  return absl::OkStatus();
}

absl::Status Stop(const Args& args) {
  ASSIGN_OR_RETURN(auto client, Connect(args));
  ASSIGN_OR_RETURN(const v1::JobInfo job, client->Stop("", args.Get("JOB_ID")));
  if (job.state() == v1::JOB_STATE_STOPPED) {
    std::printf("job %s removed from the queue\n", job.job_id().c_str());
  } else {
    std::printf("job %s stops after its current step, with a checkpoint (baton watch %s)\n", job.job_id().c_str(),
                job.job_id().c_str());
  }
  return absl::OkStatus();
}

absl::Status Continue(const Args& args) {
  ASSIGN_OR_RETURN(auto client, Connect(args));
  ASSIGN_OR_RETURN(const v1::JobInfo job, client->Continue("", args.Get("JOB_ID")));
  std::printf("job %s queued at position %d: it continues from its newest checkpoint (step %lld) (baton watch %s)\n",
              job.job_id().c_str(), job.queue_position(), static_cast<long long>(job.last_checkpoint_step()),
              job.job_id().c_str());
  return absl::OkStatus();
}

absl::Status Checkpoints(const Args& args) {
  const std::string job_id = args.Get("JOB_ID");
  ASSIGN_OR_RETURN(auto client, Connect(args));
  ASSIGN_OR_RETURN(const v1::ListCheckpointsResponse resp, client->Checkpoints("", job_id));
  if (resp.checkpoints().empty()) std::printf("job %s has no checkpoints yet\n", job_id.c_str());
  for (const v1::CheckpointInfo& c : resp.checkpoints()) {
    std::printf("step %-8lld %s  lora %.2f MB  total %.2f MB  %s\n", static_cast<long long>(c.step()),
                Clock(c.time_unix()).c_str(), static_cast<double>(c.lora_bytes()) / 1e6,
                static_cast<double>(c.total_bytes()) / 1e6, c.path().c_str());
  }
  return absl::OkStatus();
}

// Streams the file into memory, checked as it comes (offsets, size, SHA-256: JobClient::Download), then writes --out
// atomically.
absl::Status Download(const Args& args) {
  v1::DownloadRequest req;
  req.set_job_id(args.Get("JOB_ID"));
  ASSIGN_OR_RETURN(int64_t step, args.GetInt("checkpoint"));
  req.set_checkpoint_step(step);
  if (args.Has("samples")) {
    if (step != 0) return absl::InvalidArgumentError("--samples and --checkpoint name different files: pick one");
    ASSIGN_OR_RETURN(int64_t samples_step, args.GetInt("samples"));
    req.set_samples_step(samples_step);
    std::string file = "contact_sheet.png";
    if (args.Has("image")) {
      ASSIGN_OR_RETURN(int64_t k, args.GetInt("image"));
      file = absl::StrCat(k, ".png");
    }
    req.set_sample_file(file);
  } else if (args.Has("image")) {
    return absl::InvalidArgumentError("--image needs --samples STEP");
  }
  if (args.Get("naming") != "diffusers") {
    if (args.Get("naming") != "original") {
      return absl::InvalidArgumentError(
          absl::StrCat("--naming takes diffusers or original, not '", args.Get("naming"), "'"));
    }
    if (args.Has("samples")) return absl::InvalidArgumentError("--naming applies to LoRA files, not to samples");
    req.set_naming("original");
  }
  const std::string out = args.Get("out");
  if (IsDirectory(out) || out.empty() || out.back() == '/') {  // said before a byte is fetched
    return absl::InvalidArgumentError(absl::StrCat("--out ", out, " is a folder: give the file to write (e.g. ",
                                                   JoinPath(out, "lora.safetensors"), ")"));
  }
  ASSIGN_OR_RETURN(auto client, Connect(args));
  std::string data, sha;
  RETURN_IF_ERROR(client->Download("", req, [&](const v1::FileChunk& chunk) {
    data += chunk.data();
    if (!chunk.sha256().empty()) sha = chunk.sha256();
    return true;
  }));
  RETURN_IF_ERROR(WriteFileAtomic(args.Get("out"), data));
  std::printf("wrote %s (%.2f MB, sha256 %s)\n", args.Get("out").c_str(), static_cast<double>(data.size()) / 1e6,
              sha.c_str());
  return absl::OkStatus();
}

FlagSpec JobIdArg(bool required) {
  return {"JOB_ID", required ? "job id (baton list)" : "job id (default: the running job, else the newest)",
          "",       required,
          false,    true};
}

}  // namespace

std::vector<Command> JobCommands() {
  return {
      {"submit",
       "Queue a job on a coordinator's job service; prints its id and queue position. The job is checked at once "
       "(errors name file:line); relative paths in it resolve against this directory.",
       ServerFlags({{"JOB.yaml", "job YAML file (as coordinator --job takes)", "", true, false, true},
                    {"name", "job name (default: the file's base name); output goes to <root>/<name>-<id>/"},
                    {"steps", "override the job's step count", "0"}}),
       Submit},
      {"status", "Show one job: state, step, loss, pace, ETA, per-stage busy, checkpoint, error.",
       ServerFlags({JobIdArg(false)}), ShowStatus},
      {"list", "List the running job, the queue in order, and finished jobs.", ServerFlags({}), List},
      {"watch",
       "Follow a job live (step, loss, s/step, ETA, per-stage busy bars; one plain line per step when stdout is not "
       "a terminal) until it ends; exits non-zero if it failed.",
       ServerFlags({JobIdArg(false),
                    {"from-step",
                     "replay the steps after this one first (default: all when not a terminal, the latest on one)"},
                    {"plain", "one line per step even on a terminal", "", false, true}}),
       Watch},
      {"stop", "Stop a job: a running one checkpoints after its current step; a queued one leaves the queue.",
       ServerFlags({JobIdArg(true)}), Stop},
      {"continue", "Queue a stopped or failed job again: it continues from its newest checkpoint.",
       ServerFlags({JobIdArg(true)}), Continue},
      {"checkpoints", "List a job's checkpoints: step, time, size, path on the coordinator.",
       ServerFlags({JobIdArg(true)}), Checkpoints},
      {"download",
       "Fetch a job's LoRA (lora.safetensors): the latest, or one checkpoint's; or, with --samples, one of its sample "
       "images; checked and written atomically.",
       ServerFlags({JobIdArg(true),
                    {"checkpoint", "checkpoint step (0: the job's latest lora.safetensors)", "0"},
                    {"samples", "instead: the sample rendering after this many steps (its contact sheet)"},
                    {"image", "with --samples: prompt K's image instead of the contact sheet"},
                    {"naming",
                     "the LoRA's naming: diffusers (as the job wrote it) | original (BFL/ComfyUI for FLUX.2, original "
                     "Wan; rewritten by the service)",
                     "diffusers"},
                    {"out", "file to write", "", true}}),
       Download},
  };
}

}  // namespace baton
