// The browser view's calls to the job service (coordinator --listen), each made with the signed-in user's token
// (`authorization: Bearer`): the view holds no token of its own, so it can do only what its user could with `baton`.
#pragma once

#include <absl/status/statusor.h>
#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "baton/v1/job_service.grpc.pb.h"

namespace baton {

class JobClient {
 public:
  JobClient(std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials);

  const std::string& address() const { return address_; }
  absl::StatusOr<v1::ListResponse> List(const std::string& token) const;
  absl::StatusOr<v1::JobInfo> Status(const std::string& token, const std::string& job_id) const;
  absl::StatusOr<v1::HistoryResponse> History(const std::string& token, const v1::HistoryRequest& req) const;
  absl::StatusOr<v1::SubmitResponse> Submit(const std::string& token, const v1::SubmitRequest& req) const;
  absl::StatusOr<v1::JobInfo> Stop(const std::string& token, const std::string& job_id) const;
  absl::StatusOr<v1::JobInfo> Continue(const std::string& token, const std::string& job_id) const;
  absl::StatusOr<v1::ListCheckpointsResponse> Checkpoints(const std::string& token, const std::string& job_id) const;
  // Streams a file of the job: `on_chunk` for each chunk, in order (false: stop, the call is cancelled).
  absl::Status Download(const std::string& token, const v1::DownloadRequest& req,
                        const std::function<bool(const v1::FileChunk&)>& on_chunk) const;

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace baton
