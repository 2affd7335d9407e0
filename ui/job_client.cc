#include "ui/job_client.h"

#include <absl/strings/str_cat.h>
#include <absl/time/time.h>

#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"

namespace baton {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(30);      // Submit validates the job meanwhile
constexpr absl::Duration kDownloadTimeout = absl::Minutes(30);  // a LoRA of hundreds of MB on a slow link

void Prepare(grpc::ClientContext* ctx, const std::string& token, absl::Duration timeout) {
  ctx->set_deadline(DeadlineAfter(timeout));
  if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

}  // namespace

JobClient::JobClient(std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : address_(std::move(address)),
      channel_(MakeChannel(address_, std::move(credentials))),
      stub_(v1::JobService::NewStub(channel_)) {}

namespace {

// One unary call with the user's token and the call deadline.
template <typename Request, typename Response>
absl::StatusOr<Response> Unary(v1::JobService::Stub& stub, const std::string& address, const std::string& token,
                               grpc::Status (v1::JobService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                                            Response*),
                               const Request& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, token, kCallTimeout);
  Response resp;
  absl::Status s = FromGrpcStatus((stub.*method)(&ctx, req, &resp), "the job service " + address);
  if (!s.ok()) return s;
  return resp;
}

}  // namespace

absl::StatusOr<v1::ListResponse> JobClient::List(const std::string& token) const {
  return Unary(*stub_, address_, token, &v1::JobService::Stub::List, v1::ListRequest());
}

absl::StatusOr<v1::JobInfo> JobClient::Status(const std::string& token, const std::string& job_id) const {
  v1::StatusRequest req;
  req.set_job_id(job_id);
  return Unary(*stub_, address_, token, &v1::JobService::Stub::Status, req);
}

absl::StatusOr<v1::HistoryResponse> JobClient::History(const std::string& token, const v1::HistoryRequest& req) const {
  return Unary(*stub_, address_, token, &v1::JobService::Stub::History, req);
}

absl::StatusOr<v1::SubmitResponse> JobClient::Submit(const std::string& token, const v1::SubmitRequest& req) const {
  return Unary(*stub_, address_, token, &v1::JobService::Stub::Submit, req);
}

absl::StatusOr<v1::JobInfo> JobClient::Stop(const std::string& token, const std::string& job_id) const {
  v1::StopRequest req;
  req.set_job_id(job_id);
  return Unary(*stub_, address_, token, &v1::JobService::Stub::Stop, req);
}

absl::StatusOr<v1::JobInfo> JobClient::Continue(const std::string& token, const std::string& job_id) const {
  v1::ContinueRequest req;
  req.set_job_id(job_id);
  return Unary(*stub_, address_, token, &v1::JobService::Stub::Continue, req);
}

absl::StatusOr<v1::ListCheckpointsResponse> JobClient::Checkpoints(const std::string& token,
                                                                   const std::string& job_id) const {
  v1::ListCheckpointsRequest req;
  req.set_job_id(job_id);
  return Unary(*stub_, address_, token, &v1::JobService::Stub::ListCheckpoints, req);
}

absl::Status JobClient::Download(const std::string& token, const v1::DownloadRequest& req,
                                 const std::function<bool(const v1::FileChunk&)>& on_chunk) const {
  grpc::ClientContext ctx;
  Prepare(&ctx, token, kDownloadTimeout);
  auto reader = stub_->Download(&ctx, req);
  v1::FileChunk chunk;
  while (reader->Read(&chunk)) {
    if (!on_chunk(chunk)) {
      ctx.TryCancel();
      break;
    }
  }
  return FromGrpcStatus(reader->Finish(), "the job service " + address_);
}

}  // namespace baton
