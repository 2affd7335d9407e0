#include "ui/job_client.h"

#include <absl/strings/str_cat.h>
#include <absl/time/time.h>

#include <optional>

#include "core/util/status.h"
#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"

namespace baton {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(60);      // Submit validates (and plans) the job meanwhile
constexpr absl::Duration kDownloadTimeout = absl::Minutes(30);  // a LoRA of hundreds of MB on a slow link

// `timeout` zero: none.
void Prepare(grpc::ClientContext* ctx, const std::string& token, absl::Duration timeout) {
  if (timeout > absl::ZeroDuration()) ctx->set_deadline(DeadlineAfter(timeout));
  if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

}  // namespace

JobClient::JobClient(std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials, std::string peer)
    : address_(std::move(address)),
      peer_(peer.empty() ? "the job service " + address_ : std::move(peer)),
      channel_(MakeChannel(address_, std::move(credentials))),
      stub_(v1::JobService::NewStub(channel_)) {}

namespace {

// One unary call with the user's token and the call deadline.
template <typename Request, typename Response>
absl::StatusOr<Response> Unary(v1::JobService::Stub& stub, const std::string& peer, const std::string& token,
                               grpc::Status (v1::JobService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                                            Response*),
                               const Request& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, token, kCallTimeout);
  Response resp;
  absl::Status s = FromGrpcStatus((stub.*method)(&ctx, req, &resp), peer);
  if (!s.ok()) return s;
  return resp;
}

}  // namespace

absl::StatusOr<v1::ListResponse> JobClient::List(const std::string& token) const {
  return Unary(*stub_, peer_, token, &v1::JobService::Stub::List, v1::ListRequest());
}

absl::StatusOr<v1::JobInfo> JobClient::Status(const std::string& token, const std::string& job_id) const {
  v1::StatusRequest req;
  req.set_job_id(job_id);
  return Unary(*stub_, peer_, token, &v1::JobService::Stub::Status, req);
}

absl::StatusOr<v1::HistoryResponse> JobClient::History(const std::string& token, const v1::HistoryRequest& req) const {
  return Unary(*stub_, peer_, token, &v1::JobService::Stub::History, req);
}

absl::StatusOr<v1::SubmitResponse> JobClient::Submit(const std::string& token, const v1::SubmitRequest& req) const {
  return Unary(*stub_, peer_, token, &v1::JobService::Stub::Submit, req);
}

absl::StatusOr<v1::JobInfo> JobClient::Stop(const std::string& token, const std::string& job_id) const {
  v1::StopRequest req;
  req.set_job_id(job_id);
  return Unary(*stub_, peer_, token, &v1::JobService::Stub::Stop, req);
}

absl::StatusOr<v1::JobInfo> JobClient::Continue(const std::string& token, const std::string& job_id) const {
  v1::ContinueRequest req;
  req.set_job_id(job_id);
  return Unary(*stub_, peer_, token, &v1::JobService::Stub::Continue, req);
}

absl::StatusOr<v1::ListCheckpointsResponse> JobClient::Checkpoints(const std::string& token,
                                                                   const std::string& job_id) const {
  v1::ListCheckpointsRequest req;
  req.set_job_id(job_id);
  return Unary(*stub_, peer_, token, &v1::JobService::Stub::ListCheckpoints, req);
}

absl::Status JobClient::Download(const std::string& token, const v1::DownloadRequest& req,
                                 const std::function<bool(const v1::FileChunk&)>& on_chunk) const {
  grpc::ClientContext ctx;
  Prepare(&ctx, token, kDownloadTimeout);
  auto reader = stub_->Download(&ctx, req);
  DownloadCheck check;
  absl::Status bad;
  bool stopped = false;
  // Each chunk is passed on once the next one came: the last only after the stream ended and the file checked out.
  std::optional<v1::FileChunk> pending;
  v1::FileChunk chunk;
  while (reader->Read(&chunk)) {
    bad = check.Add(chunk);
    stopped = !bad.ok() || (pending && !on_chunk(*pending));
    if (stopped) {
      ctx.TryCancel();
      break;
    }
    pending = std::move(chunk);
  }
  absl::Status finished = FromGrpcStatus(reader->Finish(), peer_);
  if (!bad.ok()) return bad;
  if (!finished.ok() || stopped) return finished;
  RETURN_IF_ERROR(check.Done());
  if (pending) on_chunk(*pending);
  return absl::OkStatus();
}

absl::Status JobClient::Watch(const std::string& token, const v1::WatchRequest& req,
                              const std::function<bool(const v1::WatchEvent&)>& on_event) const {
  grpc::ClientContext ctx;
  Prepare(&ctx, token, absl::ZeroDuration());
  auto reader = stub_->Watch(&ctx, req);
  v1::WatchEvent event;
  bool stopped = false;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      stopped = true;
      ctx.TryCancel();
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  return stopped ? absl::OkStatus() : FromGrpcStatus(status, peer_);
}

absl::Status DownloadCheck::Add(const v1::FileChunk& chunk) {
  if (chunk.offset() != got_) {
    return absl::DataLossError(absl::StrCat("download: a chunk at byte ", chunk.offset(), " where ", got_,
                                            " was next (out of order or missing)"));
  }
  if (total_ >= 0 && chunk.total_bytes() != total_) {
    return absl::DataLossError(absl::StrCat("download: the file's size changed from ", total_, " to ",
                                            chunk.total_bytes(), " bytes during it"));
  }
  total_ = chunk.total_bytes();
  got_ += static_cast<int64_t>(chunk.data().size());
  hash_.Update(chunk.data());
  if (chunk.sha256().empty()) return absl::OkStatus();
  const std::string sha = DigestToHex(hash_.Finish());
  if (got_ != total_ || sha != chunk.sha256()) {
    return absl::DataLossError(absl::StrCat("download: got ", got_, " of ", total_, " bytes, SHA-256 ", sha,
                                            " where the job service sent ", chunk.sha256()));
  }
  verified_ = true;
  return absl::OkStatus();
}

absl::Status DownloadCheck::Done() const {
  if (verified_) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("download: it ended after ", got_, " of ", total_, " bytes without the file's SHA-256"));
}

}  // namespace baton
