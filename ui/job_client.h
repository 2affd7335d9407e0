// The one client of the job service (coordinator --listen): every call `baton`'s job commands and the browser view
// make, written once. The view passes each signed-in user's token (`authorization: Bearer`; it holds none of its
// own, so it can do only what its user could with `baton`); `baton` passes none (its channel carries its own).
#pragma once

#include <absl/status/statusor.h>
#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "baton/v1/job_service.grpc.pb.h"
#include "core/util/sha256.h"

namespace baton {

// A download's chunks in order, at the offsets they claim, of one size, and the whole matching the SHA-256 the last
// one carries.
class DownloadCheck {
 public:
  absl::Status Add(const v1::FileChunk& chunk);
  // OK once the last chunk's SHA-256 matched.
  absl::Status Done() const;

 private:
  int64_t got_ = 0, total_ = -1;
  Sha256 hash_;
  bool verified_ = false;
};

class JobClient {
 public:
  // `peer`: how errors name the service ("coordinator 10.0.0.1:7070"; default "the job service ADDRESS").
  JobClient(std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials, std::string peer = "");

  const std::string& address() const { return address_; }
  absl::StatusOr<v1::ListResponse> List(const std::string& token) const;
  absl::StatusOr<v1::JobInfo> Status(const std::string& token, const std::string& job_id) const;
  absl::StatusOr<v1::HistoryResponse> History(const std::string& token, const v1::HistoryRequest& req) const;
  absl::StatusOr<v1::SubmitResponse> Submit(const std::string& token, const v1::SubmitRequest& req) const;
  absl::StatusOr<v1::JobInfo> Stop(const std::string& token, const std::string& job_id) const;
  absl::StatusOr<v1::JobInfo> Continue(const std::string& token, const std::string& job_id) const;
  absl::StatusOr<v1::ListCheckpointsResponse> Checkpoints(const std::string& token, const std::string& job_id) const;
  // Streams a file of the job: `on_chunk` for each chunk, in order (false: stop, the call is cancelled). The chunks are
  // checked as `baton download` checks them (DownloadCheck), and the last one is passed on only once the stream ended
  // and the whole file matched its SHA-256: a bad download never reaches its end (DATA_LOSS).
  absl::Status Download(const std::string& token, const v1::DownloadRequest& req,
                        const std::function<bool(const v1::FileChunk&)>& on_chunk) const;
  // Follows a job: `on_event` for each event as it comes (false: stop, the call is cancelled), no deadline (a job runs
  // for hours). OK when the stream ended or was stopped.
  absl::Status Watch(const std::string& token, const v1::WatchRequest& req,
                     const std::function<bool(const v1::WatchEvent&)>& on_event) const;

 private:
  std::string address_;
  std::string peer_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace baton
