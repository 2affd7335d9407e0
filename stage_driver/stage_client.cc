#include "stage_driver/stage_client.h"

#include <absl/strings/str_cat.h>

#include <algorithm>

#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"
#include "rpc/health.h"
#include "rpc/tls.h"
#include "stage_driver/pipeline_spec.h"
#include "wire/envelope.h"
#include "wire/wire.h"

namespace baton {
namespace {
// The bytes of an envelope: its header and its tensors' payload (the chunks' framing is a few bytes each).
uint64_t EnvelopeBytes(const v1::EnvelopeHeader& header, const TensorMap& tensors) {
  uint64_t bytes = header.ByteSizeLong();
  for (const auto& [name, t] : tensors) bytes += name.size() + static_cast<uint64_t>(t.nbytes());
  return bytes;
}
// How often WaitReady asks a server that is not serving yet.
constexpr absl::Duration kHealthRetry = absl::Milliseconds(100);
}  // namespace

TrafficBytes& TrafficBytes::operator+=(const LinkTraffic& t) {
  data += t.data.load(std::memory_order_relaxed);
  adapters += t.adapters.load(std::memory_order_relaxed);
  control += t.control.load(std::memory_order_relaxed);
  heartbeats += t.heartbeats.load(std::memory_order_relaxed);
  return *this;
}

TrafficBytes& TrafficBytes::operator+=(const TrafficBytes& t) {
  data += t.data;
  adapters += t.adapters;
  control += t.control;
  heartbeats += t.heartbeats;
  return *this;
}

TrafficBytes TrafficBytes::operator-(const TrafficBytes& earlier) const {
  return {data - earlier.data, adapters - earlier.adapters, control - earlier.control, heartbeats - earlier.heartbeats};
}

StageClient::StageClient(int index, std::string address, absl::Duration rpc_timeout)
    : index_(index), address_(std::move(address)), rpc_timeout_(rpc_timeout) {
  channel_ = MakeChannel(address_, ProcessChannelCredentials());
  stub_ = v1::StageService::NewStub(channel_);
}

std::string StageClient::name() const { return absl::StrCat("stage ", index_, " (", address_, ")"); }

absl::Status StageClient::Named(const absl::Status& s, const std::string& what) const {
  if (up_ != nullptr) up_->Set(s.code() == absl::StatusCode::kUnavailable ? 0 : 1);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(name(), ": ", what, ": ", s.message()));
}

void StageClient::Count(std::atomic<uint64_t> LinkTraffic::*kind, uint64_t bytes) const {
  if (traffic_) ((*traffic_).*kind).fetch_add(bytes, std::memory_order_relaxed);
}

void StageClient::CountControl(const google::protobuf::Message& a, const google::protobuf::Message& b) const {
  Count(&LinkTraffic::control, a.ByteSizeLong() + b.ByteSizeLong());
}

absl::Status StageClient::WaitReady(absl::Duration timeout, const std::function<bool()>& stop) {
  const absl::Time deadline = absl::Now() + timeout;
  bool connected = false;
  while (!connected && absl::Now() < deadline) {  // in slices, so that a stop is seen within 200 ms
    if (stop && stop()) return absl::CancelledError(absl::StrCat(name(), ": stopped while waiting for it"));
    connected = channel_->WaitForConnected(DeadlineAfter(std::min(deadline - absl::Now(), absl::Milliseconds(200))));
  }
  if (!connected) {
    if (up_ != nullptr) up_->Set(0);
    return absl::UnavailableError(absl::StrCat(name(), ": no stage worker answered within ",
                                               absl::FormatDuration(timeout), " (is it running and reachable?)"));
  }
  // Connected to something: make sure it is a stage worker that serves. A server between listening and marking its
  // services (rpc/server_start.cc) answers NOT_FOUND, one starting or stopping NOT_SERVING or UNAVAILABLE: each is
  // asked again until the deadline, NOT_FOUND for a second only (after that it is another kind of server).
  const absl::Time not_found_until = std::min(deadline, absl::Now() + absl::Seconds(1));
  while (true) {
    auto state = CheckHealth(channel_, address_, kStageServiceName, std::max(deadline - absl::Now(), absl::Seconds(1)));
    if (state.ok() && *state == HealthState::kServing) break;
    const absl::StatusCode code = state.ok() ? absl::StatusCode::kOk : state.status().code();
    const bool again = code == absl::StatusCode::kNotFound
                           ? absl::Now() < not_found_until
                           : (code == absl::StatusCode::kOk || code == absl::StatusCode::kUnavailable) &&
                                 absl::Now() + kHealthRetry < deadline;
    if (!again) {
      if (code == absl::StatusCode::kNotFound) {
        return absl::FailedPreconditionError(absl::StrCat(
            name(), ": the server there is not a stage worker (it does not serve ", kStageServiceName, ")"));
      }
      if (!state.ok()) return Named(state.status(), "health check");
      return absl::UnavailableError(absl::StrCat(name(), ": the stage worker is ", HealthStateName(*state)));
    }
    if (stop && stop()) return absl::CancelledError(absl::StrCat(name(), ": stopped while waiting for it"));
    absl::SleepFor(kHealthRetry);
  }
  if (up_ != nullptr) up_->Set(1);
  return absl::OkStatus();
}

absl::StatusOr<v1::ConfigureResponse> StageClient::Configure(const v1::ConfigureRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(rpc_timeout_));
  v1::ConfigureResponse response;
  absl::Status s = FromGrpcStatus(stub_->Configure(&ctx, request, &response));
  CountControl(request, response);
  if (!s.ok()) return Named(s, "Configure");
  return response;
}

bool StageClient::Begin(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  active_[ctx] = Clock::now();
  return true;
}

void StageClient::End(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  active_.erase(ctx);
}

absl::Status StageClient::Push(const v1::EnvelopeHeader& header, const TensorMap& tensors) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(rpc_timeout_));
  const std::string what = absl::StrCat("Push ", v1::EnvelopeHeader::Kind_Name(header.kind()), " step ", header.step(),
                                        " micro-batch ", header.micro_batch());
  if (!Begin(&ctx)) return absl::CancelledError(absl::StrCat(name(), ": ", what, ": cancelled"));
  v1::PushAck ack;
  auto writer = stub_->Push(&ctx, &ack);
  v1::EnvelopeHeader stamped = header;
  stamped.set_sender(sender_);
  absl::Status s = WriteEnvelope(writer.get(), stamped, tensors);
  writer->WritesDone();
  absl::Status finished = FromGrpcStatus(writer->Finish());
  End(&ctx);
  const bool adapters = header.kind() == v1::EnvelopeHeader::LORA_WEIGHTS;
  Count(adapters ? &LinkTraffic::adapters : &LinkTraffic::data, EnvelopeBytes(header, tensors));
  if (s.ok() || !finished.ok()) s = finished;
  return Named(s, what);
}

absl::StatusOr<v1::StepSummary> StageClient::RunStep(const v1::StepPlan& plan, TensorMap* grads) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(rpc_timeout_));
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError(absl::StrCat(name(), ": step ", plan.step(), " cancelled"));
    run_ = &ctx;
    stepping_ = true;
    heard_ = Clock::now();
    beat_.Clear();
  }
  auto reader = stub_->RunStep(&ctx, plan);
  Count(&LinkTraffic::control, plan.ByteSizeLong());
  TensorAssembler assembler(uint64_t{16} << 30);
  v1::StepReply reply;
  v1::StepSummary summary;
  bool have_summary = false;
  absl::Status status;
  while (reader->Read(&reply)) {
    {
      absl::MutexLock lock(&mu_);
      heard_ = Clock::now();
      if (reply.has_progress()) beat_ = reply.progress();
    }
    Count(reply.has_grad_chunk() ? &LinkTraffic::adapters
          : reply.has_progress() ? &LinkTraffic::heartbeats
                                 : &LinkTraffic::control,
          reply.ByteSizeLong());
    if (reply.has_progress()) continue;
    if (reply.has_summary()) {
      summary = reply.summary();
      have_summary = true;
    } else if (reply.has_grad_chunk()) {
      auto done = assembler.Add(reply.grad_chunk());
      if (!done.ok()) {
        status = done.status();
        ctx.TryCancel();
        break;
      }
      if (done->has_value()) (*grads)[(*done)->name] = std::move((*done)->tensor);
    }
  }
  absl::Status finished = FromGrpcStatus(reader->Finish());
  {
    absl::MutexLock lock(&mu_);
    run_ = nullptr;
    stepping_ = false;
  }
  if (status.ok()) status = finished;
  if (status.ok() && !have_summary) status = absl::DataLossError("the reply stream ended without a summary");
  if (!status.ok()) return Named(status, absl::StrCat("step ", plan.step()));
  return summary;
}

absl::StatusOr<TensorMap> StageClient::GetLora(const std::string& job_id, bool optimizer_state) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(rpc_timeout_));
  v1::GetLoraRequest request;
  AddressTo(request, job_id);
  request.set_with_optimizer_state(optimizer_state);
  auto reader = stub_->GetLora(&ctx, request);
  TensorAssembler assembler(uint64_t{16} << 30);
  TensorMap out;
  v1::TensorChunk chunk;
  absl::Status status;
  while (reader->Read(&chunk)) {
    Count(&LinkTraffic::adapters, chunk.ByteSizeLong());
    auto done = assembler.Add(chunk);
    if (!done.ok()) {
      status = done.status();
      ctx.TryCancel();
      break;
    }
    if (done->has_value()) out[(*done)->name] = std::move((*done)->tensor);
  }
  absl::Status finished = FromGrpcStatus(reader->Finish());
  if (status.ok()) status = finished;
  if (!status.ok()) return Named(status, "GetLora");
  return out;
}

absl::StatusOr<v1::JoinGroupResponse> StageClient::JoinGroup(const std::string& job_id, v1::JoinGroupRequest request,
                                                             absl::Duration wait) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(rpc_timeout_ + wait));
  AddressTo(request, job_id);
  v1::JoinGroupResponse response;
  absl::Status s = FromGrpcStatus(stub_->JoinGroup(&ctx, request, &response));
  CountControl(request, response);
  if (!s.ok()) return Named(s, absl::StrCat("JoinGroup ", request.prefix()));
  return response;
}

absl::StatusOr<v1::ReduceResponse> StageClient::Reduce(const std::string& job_id, int64_t step, absl::Duration wait) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(rpc_timeout_ + wait));
  v1::ReduceRequest request;
  request.set_job_id(job_id);  // per step: no config_hash (the job id names the configuration)
  request.set_step(step);
  v1::ReduceResponse response;
  absl::Status s = FromGrpcStatus(stub_->Reduce(&ctx, request, &response));
  CountControl(request, response);
  if (!s.ok()) return Named(s, absl::StrCat("Reduce step ", step + 1));
  return response;
}

absl::StatusOr<v1::UpdateResponse> StageClient::Update(const std::string& job_id, v1::UpdateRequest request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(rpc_timeout_));
  request.set_job_id(job_id);
  v1::UpdateResponse response;
  absl::Status s = FromGrpcStatus(stub_->Update(&ctx, request, &response));
  CountControl(request, response);
  if (!s.ok())
    return Named(s, absl::StrCat(request.estimate() ? "Update (estimate) step " : "Update step ", request.step() + 1));
  return response;
}

absl::Status StageClient::LoadState(const std::string& job_id, const TensorMap& state) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(rpc_timeout_));
  v1::EnvelopeHeader header;
  AddressTo(header, job_id);
  header.set_kind(v1::EnvelopeHeader::LORA_STATE);
  header.set_sender(sender_);
  v1::PushAck ack;
  auto writer = stub_->LoadState(&ctx, &ack);
  Count(&LinkTraffic::adapters, EnvelopeBytes(header, state));
  absl::Status s = WriteEnvelope(writer.get(), header, state);
  writer->WritesDone();
  absl::Status finished = FromGrpcStatus(writer->Finish());
  if (s.ok() || !finished.ok()) s = finished;
  return Named(s, "LoadState");
}

absl::Status StageClient::Shutdown() {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(absl::Seconds(5)));
  google::protobuf::Empty req, resp;
  return Named(FromGrpcStatus(stub_->Shutdown(&ctx, req, &resp)), "Shutdown");
}

absl::Status StageClient::Release(const std::string& pipeline_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(absl::Seconds(5)));
  v1::ReleaseRequest req;
  AddressTo(req, pipeline_id);
  google::protobuf::Empty resp;
  return Named(FromGrpcStatus(stub_->Release(&ctx, req, &resp)), "Release");
}

void StageClient::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (auto& [ctx, since] : active_) ctx->TryCancel();
  if (run_ != nullptr) run_->TryCancel();
}

void StageClient::Rearm() {
  absl::MutexLock lock(&mu_);
  cancelled_ = false;
}

double StageClient::SilentSeconds() const {
  absl::MutexLock lock(&mu_);
  return stepping_ ? std::chrono::duration<double>(Clock::now() - heard_).count() : 0;
}

double StageClient::SecondsSinceHeard() const {
  absl::MutexLock lock(&mu_);
  return heard_ == Clock::time_point() ? 0 : std::chrono::duration<double>(Clock::now() - heard_).count();
}

v1::StageHeartbeat StageClient::LastHeartbeat() const {
  absl::MutexLock lock(&mu_);
  return beat_;
}

double StageClient::OldestPushSeconds() const {
  absl::MutexLock lock(&mu_);
  double oldest = 0;
  for (const auto& [ctx, since] : active_)
    oldest = std::max(oldest, std::chrono::duration<double>(Clock::now() - since).count());
  return oldest;
}

}  // namespace baton
