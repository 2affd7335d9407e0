#include "stage_driver/testing/fake_stage_worker.h"

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "rpc/grpc_status.h"
#include "rpc/health.h"
#include "rpc/server_start.h"
#include "wire/wire.h"

namespace baton {
namespace {

// Until the driver cancels the call (or the server is killed): true when it was cancelled.
bool WaitForCancel(grpc::ServerContext* ctx, const std::function<void(double seconds)>& each_tick) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int tick = 0; !ctx->IsCancelled(); ++tick) {
    if (each_tick && tick % 4 == 0) {
      each_tick(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

bool WriteTensor(grpc::ServerWriter<v1::StepReply>* writer, const std::string& name, const at::Tensor& t) {
  v1::StepReply reply;
  return AppendTensorChunks(name, t, kMaxChunkBytes,
                            [&](v1::TensorChunk&& chunk) {
                              reply.mutable_grad_chunk()->Swap(&chunk);
                              return writer->Write(reply);
                            })
      .ok();
}

}  // namespace

class FakeStageWorker::Service final : public v1::StageService::Service {
 public:
  explicit Service(FakeStageWorker* worker) : w_(worker) {}

  grpc::Status Configure(grpc::ServerContext*, const v1::ConfigureRequest* req, v1::ConfigureResponse* out) override {
    {
      absl::MutexLock lock(&w_->mu_);
      w_->configures_.push_back(*req);
    }
    if (absl::Status fault = w_->TakeFault("Configure"); !fault.ok()) return ToGrpcStatus(fault);
    for (const std::string& name : w_->names_) out->add_lora_param_names(name);
    out->set_num_lora_params(static_cast<int64_t>(w_->names_.size()) * w_->numel_);
    return grpc::Status::OK;
  }

  grpc::Status Push(grpc::ServerContext*, grpc::ServerReader<v1::Envelope>* reader, v1::PushAck*) override {
    absl::StatusOr<ReceivedEnvelope> envelope = ReadEnvelope(reader);
    if (!envelope.ok()) return ToGrpcStatus(envelope.status());
    absl::MutexLock lock(&w_->mu_);
    w_->pushes_.push_back(std::move(*envelope));
    return grpc::Status::OK;
  }

  // Kept with the pushes (kind LORA_STATE), and loaded into its optimizer.
  grpc::Status LoadState(grpc::ServerContext*, grpc::ServerReader<v1::Envelope>* reader, v1::PushAck*) override {
    absl::StatusOr<ReceivedEnvelope> envelope = ReadEnvelope(reader);
    if (!envelope.ok()) return ToGrpcStatus(envelope.status());
    if (absl::Status fault = w_->TakeFault("LoadState"); !fault.ok()) return ToGrpcStatus(fault);
    w_->optimizer_.Load(envelope->tensors);
    absl::MutexLock lock(&w_->mu_);
    w_->pushes_.push_back(std::move(*envelope));
    return grpc::Status::OK;
  }

  grpc::Status JoinGroup(grpc::ServerContext*, const v1::JoinGroupRequest* req, v1::JoinGroupResponse* out) override {
    if (absl::Status fault = w_->TakeFault("JoinGroup"); !fault.ok()) return ToGrpcStatus(fault);
    absl::StatusOr<int64_t> steps = w_->optimizer_.Join(*req);
    if (!steps.ok()) return ToGrpcStatus(steps.status());
    out->set_optimizer_steps(*steps);
    return grpc::Status::OK;
  }

  // A failed Reduce fails its group's sum for the others too, as a collective fails when a peer dies.
  grpc::Status Reduce(grpc::ServerContext*, const v1::ReduceRequest* req, v1::ReduceResponse* out) override {
    if (absl::Status fault = w_->TakeFault("Reduce"); !fault.ok()) {
      w_->optimizer_.Break();
      return ToGrpcStatus(fault);
    }
    absl::StatusOr<v1::ReduceResponse> reduced = w_->optimizer_.Reduce(req->step());
    if (!reduced.ok()) return ToGrpcStatus(reduced.status());
    *out = std::move(*reduced);
    return grpc::Status::OK;
  }

  grpc::Status Update(grpc::ServerContext*, const v1::UpdateRequest* req, v1::UpdateResponse* out) override {
    if (absl::Status fault = w_->TakeFault("Update"); !fault.ok()) return ToGrpcStatus(fault);
    absl::StatusOr<int64_t> steps = w_->optimizer_.Update(*req);
    if (!steps.ok()) return ToGrpcStatus(steps.status());
    out->set_optimizer_steps(*steps);
    return grpc::Status::OK;
  }

  grpc::Status RunStep(grpc::ServerContext* ctx, const v1::StepPlan* plan,
                       grpc::ServerWriter<v1::StepReply>* writer) override {
    {
      absl::MutexLock lock(&w_->mu_);
      w_->plans_.push_back(*plan);
    }
    absl::Status failure;
    const FakeRun what = w_->Next(&failure);
    v1::StepReply beat;
    beat.mutable_progress()->set_activity("computing");
    beat.mutable_progress()->set_waiting_on(-2);
    writer->Write(beat);
    switch (what) {
      case FakeRun::kFail:
        return ToGrpcStatus(failure);
      case FakeRun::kStallSilently:
        return Cancelled(WaitForCancel(ctx, nullptr));
      case FakeRun::kWaitForData:
        return Cancelled(WaitForCancel(ctx, [&](double seconds) {
          v1::StepReply waiting;
          waiting.mutable_progress()->set_activity(
              absl::StrCat("waiting for INPUTS of step ", plan->step(), " micro-batch 0 from the driver"));
          waiting.mutable_progress()->set_activity_seconds(seconds);
          waiting.mutable_progress()->set_waiting_on(-1);
          writer->Write(waiting);
        }));
      case FakeRun::kBadChunk: {
        v1::StepReply bad;
        bad.mutable_grad_chunk()->set_data("not a tensor");
        writer->Write(bad);
        return grpc::Status::OK;
      }
      case FakeRun::kAnswer:
      case FakeRun::kNoSummary:
        break;
    }
    if (plan->gradients() != v1::StepPlan::STREAM) {  // held for its optimizer, not streamed
      w_->optimizer_.Hold(plan->step(), Gradients(*plan), plan->gradients() == v1::StepPlan::HOLD_ADD);
    } else if (!Answer(*plan, writer)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "reply stream broke");
    }
    if (what == FakeRun::kNoSummary) return grpc::Status::OK;
    v1::StepReply last;
    v1::StepSummary* summary = last.mutable_summary();
    summary->set_step(plan->step());
    for (int mb = 0; mb < plan->micro_batches(); ++mb) {
      summary->add_losses(0.5f + static_cast<float>(plan->first_micro_batch() + mb));  // by step-wide micro-batch
    }
    writer->Write(last);
    return grpc::Status::OK;
  }

  grpc::Status GetLora(grpc::ServerContext*, const v1::GetLoraRequest* req,
                       grpc::ServerWriter<v1::TensorChunk>* writer) override {
    if (absl::Status fault = w_->TakeFault("GetLora"); !fault.ok()) return ToGrpcStatus(fault);
    for (const auto& [name, t] : w_->optimizer_.State(req->with_optimizer_state(), w_->numel_)) {
      absl::Status sent =
          AppendTensorChunks(name, t, kMaxChunkBytes, [&](v1::TensorChunk&& chunk) { return writer->Write(chunk); });
      if (!sent.ok()) return ToGrpcStatus(sent);
    }
    return grpc::Status::OK;
  }

  grpc::Status Shutdown(grpc::ServerContext*, const google::protobuf::Empty*, google::protobuf::Empty*) override {
    return grpc::Status::OK;
  }

 private:
  grpc::Status Cancelled(bool) {
    absl::MutexLock lock(&w_->mu_);
    ++w_->cancelled_runs_;
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the driver");
  }

  // A training step's gradients: each LoRA name's summed over the plan's micro-batches, each contributing step + 1 +
  // the name's index to every element.
  TensorMap Gradients(const v1::StepPlan& plan) const {
    TensorMap grads;
    for (size_t i = 0; i < w_->names_.size(); ++i) {
      const float value = static_cast<float>((plan.step() + 1 + static_cast<int64_t>(i)) * plan.micro_batches());
      grads[w_->names_[i]] = at::full({w_->numel_}, value);
    }
    return grads;
  }

  // A training step's gradients, or a forward-only pass's output per micro-batch.
  bool Answer(const v1::StepPlan& plan, grpc::ServerWriter<v1::StepReply>* writer) {
    if (plan.pass() != 0) {
      for (int mb = 0; mb < plan.micro_batches(); ++mb) {
        if (!WriteTensor(writer, absl::StrCat("output/", mb), at::full({2}, static_cast<float>(mb)))) return false;
      }
      return true;
    }
    for (const auto& [name, g] : Gradients(plan)) {
      if (!WriteTensor(writer, name, g)) return false;
    }
    return true;
  }

  FakeStageWorker* w_;
};

absl::StatusOr<std::unique_ptr<FakeStageWorker>> FakeStageWorker::Start(std::vector<std::string> lora_names, int numel,
                                                                        int port) {
  std::unique_ptr<FakeStageWorker> w(new FakeStageWorker(lora_names));
  w->names_ = std::move(lora_names);
  w->numel_ = numel;
  w->service_ = std::make_unique<Service>(w.get());
  absl::Status served = w->Serve(port);
  if (!served.ok()) return served;
  return w;
}

FakeStageWorker::FakeStageWorker(std::vector<std::string> names) : optimizer_(std::move(names)) {}

FakeStageWorker::~FakeStageWorker() { Kill(); }

absl::Status FakeStageWorker::Serve(int port) {
  ServerSetup setup;
  setup.program = "fake_stage_worker";
  setup.listen = absl::StrCat("127.0.0.1:", port);
  setup.services = {service_.get()};
  setup.health_names = {kStageServiceName};
  setup.credentials = grpc::InsecureServerCredentials();
  absl::StatusOr<StartedServer> started = StartServer(setup);
  if (!started.ok()) return started.status();
  server_ = std::move(started->server);
  address_ = started->address;
  return absl::OkStatus();
}

void FakeStageWorker::Kill() {
  optimizer_.Forget();  // a killed worker's state dies with it
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
}

absl::Status FakeStageWorker::Restart() {
  Kill();
  const int port = std::stoi(address_.substr(address_.rfind(':') + 1));
  return Serve(port);
}

void FakeStageWorker::Play(FakeRun what, int times) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < times; ++i) {
    script_.push_back(what);
    failures_.push_back(absl::OkStatus());
  }
}

void FakeStageWorker::Fail(absl::Status status, int times) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < times; ++i) {
    script_.push_back(FakeRun::kFail);
    failures_.push_back(status);
  }
}

void FakeStageWorker::FailCall(const std::string& rpc, absl::Status status) {
  absl::MutexLock lock(&mu_);
  call_faults_[rpc].push_back(std::move(status));
}

absl::Status FakeStageWorker::TakeFault(const std::string& rpc) {
  absl::MutexLock lock(&mu_);
  std::vector<absl::Status>& faults = call_faults_[rpc];
  if (faults.empty()) return absl::OkStatus();
  absl::Status fault = faults.front();
  faults.erase(faults.begin());
  return fault;
}

FakeRun FakeStageWorker::Next(absl::Status* failure) {
  absl::MutexLock lock(&mu_);
  if (script_.empty()) return FakeRun::kAnswer;
  const FakeRun what = script_.front();
  *failure = failures_.front();
  script_.erase(script_.begin());
  failures_.erase(failures_.begin());
  return what;
}

std::vector<v1::ConfigureRequest> FakeStageWorker::configures() const {
  absl::MutexLock lock(&mu_);
  return configures_;
}

std::vector<ReceivedEnvelope> FakeStageWorker::pushes() const {
  absl::MutexLock lock(&mu_);
  return pushes_;
}

std::vector<v1::StepPlan> FakeStageWorker::plans() const {
  absl::MutexLock lock(&mu_);
  return plans_;
}

int FakeStageWorker::cancelled_runs() const {
  absl::MutexLock lock(&mu_);
  return cancelled_runs_;
}

void FakeStageWorker::ClearRecords() {
  absl::MutexLock lock(&mu_);
  configures_.clear();
  pushes_.clear();
  plans_.clear();
  cancelled_runs_ = 0;
}

}  // namespace baton
