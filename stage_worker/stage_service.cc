#include "stage_worker/stage_service.h"

#include <absl/strings/str_cat.h>
#include <absl/synchronization/mutex.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/util/clock.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "core/util/stop_signals.h"
#include "rpc/grpc_status.h"
#include "rpc/health.h"
#include "rpc/peer_address.h"
#include "rpc/server_start.h"
#include "wire/envelope.h"
#include "wire/wire.h"

namespace baton {

grpc::Status StageServiceImpl::Configure(grpc::ServerContext*, const v1::ConfigureRequest* req,
                                         v1::ConfigureResponse* resp) {
  const InFlight call(in_flight_);
  auto result = tenants_->Configure(*req);
  if (!result.ok()) {
    LogError("Configure failed: ", result.status().ToString());
    return ToGrpcStatus(result.status());
  }
  *resp = std::move(*result);
  return grpc::Status::OK;
}

grpc::Status StageServiceImpl::Push(grpc::ServerContext*, grpc::ServerReader<v1::Envelope>* reader, v1::PushAck* ack) {
  const InFlight call(in_flight_);
  const auto t0 = std::chrono::steady_clock::now();
  // The header is checked before a byte of tensor data is read, and the envelope may bring at most what the
  // inbox can still hold: a foreign, stale or oversized push costs neither memory nor the running job.
  // The pipeline is known from the header: until then the largest free inbox bounds it (Deliver checks its own).
  EnvelopeLimits limits;
  limits.max_total_bytes = tenants_->max_push_budget_bytes();
  limits.max_tensor_bytes = std::min(limits.max_tensor_bytes, limits.max_total_bytes);
  std::shared_ptr<StageRunner> runner;
  limits.check_header = [this, &runner](const v1::EnvelopeHeader& h) {
    runner = tenants_->For(h.job_id());
    return runner->CheckPushHeader(h);
  };
  // Every pipeline of a worker computes on the same device: any runner says whether to pin.
  auto envelope = ReadEnvelope(reader, limits,
                               tenants_->For("")->wants_pinned_host() ? HostMemory::kPinned : HostMemory::kPageable);
  if (!envelope.ok()) {
    absl::Status refused = envelope.status();
    if (refused.code() == absl::StatusCode::kResourceExhausted) {
      refused = absl::ResourceExhaustedError(absl::StrCat(refused.message(), " (the inbox holds at most --inbox_bytes ",
                                                          tenants_->For("")->inbox_budget_bytes(), "; ",
                                                          limits.max_total_bytes, " were free)"));
    }
    LogWarning("refused a push: ", refused.ToString());
    return ToGrpcStatus(refused);
  }
  runner->metrics()
      .Link(StageInstruments::PeerLabel(envelope->header.sender()))
      .Received(envelope->bytes, SecondsSince(t0));
  ack->set_num_tensors(static_cast<uint32_t>(envelope->tensors.size()));
  ack->set_num_bytes(envelope->bytes);
  return ToGrpcStatus(runner->Deliver(std::move(*envelope)));
}

grpc::Status StageServiceImpl::RunStep(grpc::ServerContext* ctx, const v1::StepPlan* plan,
                                       grpc::ServerWriter<v1::StepReply>* writer) {
  const InFlight call(in_flight_);
  const std::shared_ptr<StageRunner> runner = tenants_->For(plan->job_id());
  v1::StepReply reply;
  absl::Mutex write_mu;  // the heartbeat thread and the gradient sink share the stream
  auto heartbeat = [&](const v1::StageHeartbeat& progress) {
    v1::StepReply beat;
    *beat.mutable_progress() = progress;
    absl::MutexLock lock(&write_mu);
    writer->Write(beat);
  };
  auto sink = [&](const std::string& name, const at::Tensor& grad) {
    absl::MutexLock lock(&write_mu);
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = AppendTensorChunks(name, grad, kMaxChunkBytes, [&](v1::TensorChunk&& chunk) {
      reply.mutable_grad_chunk()->Swap(&chunk);
      return writer->Write(reply);
    });
    runner->metrics().Link("coordinator").Sent(grad.nbytes(), SecondsSince(t0));
    return s;
  };
  auto summary = runner->RunStep(
      *plan, [ctx] { return ctx->IsCancelled(); }, sink, heartbeat);
  if (!summary.ok()) {
    LogError(WorkName(plan->step(), plan->pass()), " failed: ", summary.status().ToString());
    return ToGrpcStatus(summary.status());
  }
  v1::StepReply last;
  *last.mutable_summary() = std::move(*summary);
  if (!writer->Write(last)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "client went away");
  return grpc::Status::OK;
}

grpc::Status StageServiceImpl::GetLora(grpc::ServerContext*, const v1::GetLoraRequest* req,
                                       grpc::ServerWriter<v1::TensorChunk>* writer) {
  const InFlight call(in_flight_);
  const std::shared_ptr<StageRunner> runner = tenants_->For(req->job_id());
  auto lora = runner->CurrentLora(req->job_id(), req->config_hash(), req->with_optimizer_state());
  if (!lora.ok()) return ToGrpcStatus(lora.status());
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  for (const auto& [name, t] : *lora) {
    absl::Status s = AppendTensorChunks(name, t, kMaxChunkBytes, [&](v1::TensorChunk&& c) { return writer->Write(c); });
    if (!s.ok()) return ToGrpcStatus(s);
    bytes += static_cast<uint64_t>(t.nbytes());
  }
  runner->metrics().Link("coordinator").Sent(bytes, SecondsSince(t0));  // the state read back (a checkpoint, ...)
  return grpc::Status::OK;
}

// A gRPC unary call's result into the reply (a template: the request and response types differ per call).
template <typename Response>
grpc::Status Reply(absl::StatusOr<Response> result, Response* resp) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *resp = std::move(*result);
  return grpc::Status::OK;
}

grpc::Status StageServiceImpl::JoinGroup(grpc::ServerContext* ctx, const v1::JoinGroupRequest* req,
                                         v1::JoinGroupResponse* resp) {
  const InFlight call(in_flight_);
  return Reply(tenants_->For(req->job_id())->JoinGroup(*req, PeerHost(ctx->peer())), resp);
}

grpc::Status StageServiceImpl::Reduce(grpc::ServerContext*, const v1::ReduceRequest* req, v1::ReduceResponse* resp) {
  const InFlight call(in_flight_);
  return Reply(tenants_->For(req->job_id())->Reduce(*req), resp);
}

grpc::Status StageServiceImpl::Update(grpc::ServerContext*, const v1::UpdateRequest* req, v1::UpdateResponse* resp) {
  const InFlight call(in_flight_);
  return Reply(tenants_->For(req->job_id())->Update(*req), resp);
}

grpc::Status StageServiceImpl::LoadState(grpc::ServerContext*, grpc::ServerReader<v1::Envelope>* reader,
                                         v1::PushAck* ack) {
  const InFlight call(in_flight_);
  // The coordinator's, over mutual TLS: a stage's adapters and AdamW's two moments (FLUX.2-dev's rank-16 stage 1:
  // 0.55 GB), within the default limits.
  EnvelopeLimits limits;
  limits.check_header = [](const v1::EnvelopeHeader& h) {
    return h.kind() == v1::EnvelopeHeader::LORA_STATE
               ? absl::OkStatus()
               : absl::InvalidArgumentError("LoadState takes one LORA_STATE envelope");
  };
  auto envelope = ReadEnvelope(reader, limits, HostMemory::kPageable);
  if (!envelope.ok()) return ToGrpcStatus(envelope.status());
  ack->set_num_tensors(static_cast<uint32_t>(envelope->tensors.size()));
  ack->set_num_bytes(envelope->bytes);
  return ToGrpcStatus(tenants_->For(envelope->header.job_id())->LoadState(*envelope));
}

grpc::Status StageServiceImpl::Shutdown(grpc::ServerContext*, const google::protobuf::Empty*,
                                        google::protobuf::Empty*) {
  const InFlight call(in_flight_);
  if (shutdown_) shutdown_();
  return grpc::Status::OK;
}

grpc::Status StageServiceImpl::Release(grpc::ServerContext*, const v1::ReleaseRequest* req, google::protobuf::Empty*) {
  const InFlight call(in_flight_);
  tenants_->Release(req->job_id(), req->config_hash());
  return grpc::Status::OK;
}

namespace {
constexpr std::chrono::seconds kShutdownGrace{8};  // StopServer's drain, then the runner's teardown
// What a stopping worker gives the calls in its handlers. Nothing of the job's is lost by cutting them (the coordinator
// holds the state). With none in a handler it stops at once: gRPC's shutdown also waits for its clients to close their
// connections, and the coordinator and the neighbour stages close theirs only when they exit, after this worker (that
// waited out the grace on every stop: 0.18 s on average, 44 stops of three integration suites).
constexpr std::chrono::milliseconds kInFlightGrace{250};
}  // namespace

absl::Status RunStageWorker(const std::string& listen, const StageRunnerOptions& options,
                            const std::function<void(const std::string&)>& on_listening) {
  StageRunnerOptions opts = options;
  StageTenants tenants(opts);
  StageServiceImpl service(&tenants);
  // Set before the server starts: a Shutdown call may come as soon as it listens (ThreadSanitizer saw the callback
  // written by this thread while a handler read it).
  std::atomic<bool>& stop = InstallStopSignals(SecondSignal::kStops).stop;
  service.set_shutdown_callback([&stop] { stop = true; });
  ASSIGN_OR_RETURN(StartedServer started, StartServer("stage_worker", listen, &service, kStageServiceName));
  const std::string& address = started.address;
  tenants.set_address(address);  // the runners name themselves with its address in errors
  on_listening(address);
  while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  LogInfo("shutting down");
  // A handler that does not return after its cancellation, or a channel that will not close, must not keep a stopped
  // worker alive (a supervisor would SIGKILL it later anyway): it holds nothing of the job's that the coordinator
  // does not, so after kShutdownGrace it exits regardless, saying so.
  std::thread([] {
    std::this_thread::sleep_for(kShutdownGrace);
    std::fprintf(stderr, "stage_worker: shutdown did not finish within %lld s; exiting now\n",
                 static_cast<long long>(kShutdownGrace.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }).detach();
  StopServer(*started.server, {}, service.calls_in_flight() > 0 ? kInFlightGrace : std::chrono::milliseconds{0});
  return absl::OkStatus();
}

}  // namespace baton
