// The StageService gRPC front end: translates RPCs to the calls of the StageRunner each names (by its job id:
// StageTenants) and statuses to grpc::Status.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "baton/v1/stage.grpc.pb.h"
#include "stage_worker/stage_tenants.h"

namespace baton {

class StageServiceImpl final : public v1::StageService::Service {
 public:
  explicit StageServiceImpl(StageTenants* tenants) : tenants_(tenants) {}

  grpc::Status Configure(grpc::ServerContext* ctx, const v1::ConfigureRequest* req,
                         v1::ConfigureResponse* resp) override;
  grpc::Status Push(grpc::ServerContext* ctx, grpc::ServerReader<v1::Envelope>* reader, v1::PushAck* ack) override;
  grpc::Status RunStep(grpc::ServerContext* ctx, const v1::StepPlan* plan,
                       grpc::ServerWriter<v1::StepReply>* writer) override;
  grpc::Status GetLora(grpc::ServerContext* ctx, const v1::GetLoraRequest* req,
                       grpc::ServerWriter<v1::TensorChunk>* writer) override;
  grpc::Status Shutdown(grpc::ServerContext* ctx, const google::protobuf::Empty* req,
                        google::protobuf::Empty* resp) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req, google::protobuf::Empty* resp) override;
  grpc::Status JoinGroup(grpc::ServerContext* ctx, const v1::JoinGroupRequest* req,
                         v1::JoinGroupResponse* resp) override;
  grpc::Status Reduce(grpc::ServerContext* ctx, const v1::ReduceRequest* req, v1::ReduceResponse* resp) override;
  grpc::Status Update(grpc::ServerContext* ctx, const v1::UpdateRequest* req, v1::UpdateResponse* resp) override;
  grpc::Status LoadState(grpc::ServerContext* ctx, grpc::ServerReader<v1::Envelope>* reader, v1::PushAck* ack) override;

  // Set once the server exists; Shutdown() uses it.
  // Before the server starts: the handlers read it unlocked.
  void set_shutdown_callback(std::function<void()> cb) { shutdown_ = std::move(cb); }
  // Calls inside a handler now (a stopping worker with none has nothing to wait for).
  int calls_in_flight() const { return in_flight_.load(); }

 private:
  // Counts one call for the life of its handler.
  class InFlight {
   public:
    explicit InFlight(std::atomic<int>& count) : count_(count) { ++count_; }
    ~InFlight() { --count_; }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    std::atomic<int>& count_;
  };

  StageTenants* tenants_;
  std::function<void()> shutdown_;
  std::atomic<int> in_flight_{0};
};

// Runs a stage worker server on `listen` ("host:port", port 0 = any free port) until Shutdown or
// SIGTERM/SIGINT. Calls `on_listening(address)` with the bound address once serving.
absl::Status RunStageWorker(const std::string& listen, const StageRunnerOptions& options,
                            const std::function<void(const std::string&)>& on_listening);

}  // namespace baton
