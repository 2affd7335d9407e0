#include "job_service/job_service.h"

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "baton/v1/job_service.grpc.pb.h"
#include "coordinator/checkpoint.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/sha256.h"
#include "core/util/status.h"
#include "job_service/download_file.h"
#include "job_service/job_queue.h"
#include "rpc/grpc_status.h"
#include "rpc/health.h"
#include "rpc/server_start.h"
#include "rpc/tls.h"

namespace baton {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

// Sum of the sizes of the files in `dir` (one level: a checkpoint has no subfolders).
int64_t DirBytes(const std::string& dir) {
  std::error_code ec;
  int64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += static_cast<int64_t>(e.file_size(ec));
  }
  return total;
}

double MtimeUnix(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
}

class JobServiceImpl final : public v1::JobService::Service {
 public:
  explicit JobServiceImpl(JobQueue* queue) : queue_(queue) {}

  grpc::Status Submit(grpc::ServerContext*, const v1::SubmitRequest* req, v1::SubmitResponse* resp) override {
    SubmittedJob s{req->job_yaml(), req->job_file().empty() ? "<job>" : req->job_file(), req->working_dir(),
                   req->name(), req->steps()};
    std::vector<v1::JobInfo> others;
    auto info = queue_->Submit(s, &others);
    if (!info.ok()) return ToGrpcStatus(info.status());
    resp->set_job_id(info->job_id());
    resp->set_queue_position(info->queue_position());
    *resp->mutable_job() = *info;
    for (v1::JobInfo& member : others) *resp->add_sweep_members() = std::move(member);
    return grpc::Status::OK;
  }

  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest* req, v1::JobInfo* resp) override {
    auto info = queue_->Get(req->job_id());
    if (!info.ok()) return ToGrpcStatus(info.status());
    *resp = *info;
    return grpc::Status::OK;
  }

  grpc::Status List(grpc::ServerContext*, const v1::ListRequest*, v1::ListResponse* resp) override {
    for (v1::JobInfo& info : queue_->List()) *resp->add_jobs() = std::move(info);
    return grpc::Status::OK;
  }

  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                     grpc::ServerWriter<v1::WatchEvent>* writer) override;

  grpc::Status Stop(grpc::ServerContext*, const v1::StopRequest* req, v1::JobInfo* resp) override {
    auto info = queue_->Stop(req->job_id());
    if (!info.ok()) return ToGrpcStatus(info.status());
    *resp = *info;
    return grpc::Status::OK;
  }

  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest* req,
                               v1::ListCheckpointsResponse* resp) override {
    auto info = queue_->Get(req->job_id());
    if (!info.ok()) return ToGrpcStatus(info.status());
    auto steps = ListCheckpointSteps(info->output_dir());
    if (!steps.ok()) return ToGrpcStatus(steps.status());
    for (int64_t step : *steps) {
      const std::string dir = CheckpointDir(info->output_dir(), step);
      v1::CheckpointInfo* c = resp->add_checkpoints();
      c->set_step(step);
      c->set_time_unix(MtimeUnix(JoinPath(dir, "state.json")));
      std::error_code ec;
      c->set_lora_bytes(static_cast<int64_t>(std::filesystem::file_size(JoinPath(dir, "lora.safetensors"), ec)));
      c->set_total_bytes(DirBytes(dir));
      c->set_path(dir);
    }
    return grpc::Status::OK;
  }

  grpc::Status Download(grpc::ServerContext* ctx, const v1::DownloadRequest* req,
                        grpc::ServerWriter<v1::FileChunk>* writer) override;

  grpc::Status History(grpc::ServerContext*, const v1::HistoryRequest* req, v1::HistoryResponse* resp) override {
    if (req->max_points() < 0 || req->log_lines() < 0) {
      return ToGrpcStatus(absl::InvalidArgumentError("max_points and log_lines must be >= 0"));
    }
    auto history = queue_->History(req->job_id(), req->max_points(), req->log_lines());
    if (!history.ok()) return ToGrpcStatus(history.status());
    *resp = std::move(*history);
    return grpc::Status::OK;
  }

  grpc::Status Continue(grpc::ServerContext*, const v1::ContinueRequest* req, v1::JobInfo* resp) override {
    auto info = queue_->Continue(req->job_id());
    if (!info.ok()) return ToGrpcStatus(info.status());
    *resp = *info;
    return grpc::Status::OK;
  }

 private:
  JobQueue* queue_;
};

// Events for what changed since the last round, in the order they happened: one per new step, then that step's
// checkpoint and evaluations (validation, samples), the stages that do not answer (said since the watch began), one
// per state change, and a last one marked final.
grpc::Status JobServiceImpl::Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                                   grpc::ServerWriter<v1::WatchEvent>* writer) {
  std::string id = req->job_id();
  uint64_t version = 0;
  WatchCursor cursor;
  cursor.from_step = req->from_step();
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  while (!ctx->IsCancelled()) {
    auto update = queue_->WaitForUpdate(id, version, cursor, absl::Milliseconds(500));
    if (!update.ok()) return ToGrpcStatus(update.status());
    id = update->job.job_id();  // an empty id follows the job it found first
    version = update->version;
    cursor = update->from;  // taken back to where a resume went back to
    // A checkpoint or an evaluation after step k follows step k's event; the client asked for what came after
    // req->from_step (evaluations at that step included: they ran after it).
    size_t c = 0, e = 0;
    auto send_upto = [&](int64_t step) {
      for (; c < update->checkpoints.size() && update->checkpoints[c] <= step; ++c, ++cursor.checkpoints_seen) {
        if (update->checkpoints[c] <= req->from_step()) continue;
        v1::WatchEvent event;
        *event.mutable_job() = update->job;
        event.set_checkpoint_step(update->checkpoints[c]);
        if (!writer->Write(event)) return false;
      }
      for (; e < update->evals.size() && EvalStep(update->evals[e]) <= step; ++e, ++cursor.evals_seen) {
        if (EvalStep(update->evals[e]) < req->from_step()) continue;
        v1::WatchEvent event = update->evals[e];
        *event.mutable_job() = update->job;
        if (!writer->Write(event)) return false;
      }
      return true;
    };
    for (const v1::StepProgress& step : update->steps) {
      if (!send_upto(step.step() - 1)) return grpc::Status::CANCELLED;
      v1::WatchEvent event;
      *event.mutable_job() = update->job;
      *event.mutable_step() = step;
      if (!writer->Write(event)) return grpc::Status::CANCELLED;
      cursor.from_step = step.step();
    }
    if (!send_upto(INT64_MAX)) return grpc::Status::CANCELLED;
    for (const v1::WatchEvent& said : update->outages) {  // live: none from before the watch began
      v1::WatchEvent event = said;
      *event.mutable_job() = update->job;
      if (!writer->Write(event)) return grpc::Status::CANCELLED;
    }
    cursor.outages_seen = update->outages_seen;
    v1::WatchEvent event;
    *event.mutable_job() = update->job;
    if (update->ended()) {
      event.set_final(true);
      writer->Write(event);
      return grpc::Status::OK;
    }
    if (update->job.state() != state) {
      state = update->job.state();
      if (!writer->Write(event)) return grpc::Status::CANCELLED;
    }
  }
  return grpc::Status::CANCELLED;
}

grpc::Status JobServiceImpl::Download(grpc::ServerContext* ctx, const v1::DownloadRequest* req,
                                      grpc::ServerWriter<v1::FileChunk>* writer) {
  auto info = queue_->Get(req->job_id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  if (req->job_id().empty()) return ToGrpcStatus(absl::InvalidArgumentError("job_id is required"));
  // Only a checkpoint's LoRA is written out with the job's spec (its YAML parsed again): the rest need none.
  absl::StatusOr<LoraSpec> lora = LoraSpec{};
  if (req->checkpoint_step() > 0 && !req->has_samples_step()) lora = queue_->Lora(req->job_id());
  if (!lora.ok()) return ToGrpcStatus(lora.status());
  absl::StatusOr<DownloadFile> file = ReadDownloadFile(*req, info->output_dir(), *lora);
  if (!file.ok()) return ToGrpcStatus(file.status());
  const std::string& data = file->bytes;
  const std::string& file_name = file->name;
  Sha256 hash;
  hash.Update(data);
  const std::string hex = DigestToHex(hash.Finish());
  size_t offset = 0;
  do {
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
    v1::FileChunk chunk;
    const size_t n = std::min(kChunkBytes, data.size() - offset);
    chunk.set_data(data.substr(offset, n));
    chunk.set_offset(static_cast<int64_t>(offset));
    chunk.set_total_bytes(static_cast<int64_t>(data.size()));
    chunk.set_file_name(file_name);
    offset += n;
    if (offset == data.size()) chunk.set_sha256(hex);
    if (!writer->Write(chunk)) return grpc::Status::CANCELLED;
  } while (offset < data.size());
  return grpc::Status::OK;
}

}  // namespace

absl::Status RunJobService(const JobServiceOptions& options,
                           const std::function<void(const std::string&)>& on_listening,
                           const std::atomic<bool>* shutdown) {
  const std::optional<ProcessSecurity> security = GetProcessSecurity();
  if (!security) return absl::FailedPreconditionError("--listen needs --tls_dir (with --token_file) or --insecure");
  if (!security->insecure && options.token.empty()) {
    return absl::FailedPreconditionError(
        "--listen with TLS needs --token_file FILE: the bearer token clients send (baton certs writes DIR/token)");
  }
  if (security->insecure && !options.token.empty()) {
    return absl::FailedPreconditionError(
        "--token_file needs TLS (a token sent in plaintext protects nothing): "
        "drop --insecure and pass --tls_dir");
  }
  if (!options.data_root.empty()) {
    auto root = RealPath(options.data_root);
    if (!root.ok() || !IsDirectory(*root)) {
      return absl::FailedPreconditionError(absl::StrCat("--data_root ", options.data_root, " is not a directory"));
    }
    LogInfo("submitted jobs may read only inside --data_root ", *root);
  }
  JobQueue queue(options.base, options.output_root, options.data_root);
  // The records first, the port next, the jobs last: a port in use is said at once, with no job to stop.
  RETURN_IF_ERROR(queue.Load());
  JobServiceImpl service(&queue);
  ServerSetup setup;
  setup.program = "coordinator";
  setup.listen = options.listen;
  setup.services = {&service};
  setup.health_names = {kJobServiceName};
  setup.credentials = TokenServerCredentials(*security, options.token);
  grpc::ResourceQuota quota("job_service");
  setup.configure = [&quota](grpc::ServerBuilder& builder) {
    builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
    // gRPC checks the size only once it holds the whole message (a 400 MB Submit raised the peak resident set by
    // 387 MB); under a memory quota the transport resets a stream it cannot buffer instead (+65 MB for 100 MB).
    quota.Resize(kTransportMemoryBytes);
    builder.SetResourceQuota(quota);
  };
  ASSIGN_OR_RETURN(StartedServer started, StartServer(setup));
  queue.Run();
  const std::string& address = started.address;
  on_listening(address);
  while (!shutdown->load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  LogInfo("shutting down: stopping the running job with a checkpoint");
  StopServer(*started.server, [&] { queue.Shutdown(); });  // watchers see the job's final event before it goes
  return absl::OkStatus();
}

}  // namespace baton
