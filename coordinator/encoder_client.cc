#include "coordinator/encoder_client.h"

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "baton/v1/encoder.grpc.pb.h"
#include "core/util/log.h"
#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"
#include "rpc/tls.h"

namespace baton {

absl::Status EncodeOnWorker(const JobConfig& job, absl::Duration timeout, bool quiet) {
  const std::string& address = job.encode.encoder_worker;
  if (!GetProcessSecurity()) {  // an encoder worker is never started by us: its operator chose its security
    return absl::FailedPreconditionError(absl::StrCat(
        "encode: encoder_worker: ", address,
        ": pass the coordinator --tls_dir DIR (the CA that signed the encoder worker's certificate) or --insecure"));
  }
  auto channel = MakeChannel(address, ProcessChannelCredentials());
  if (!channel->WaitForConnected(DeadlineAfter(absl::Seconds(20)))) {
    return absl::UnavailableError(absl::StrCat("encoder worker ", address, " did not answer"));
  }
  auto stub = v1::EncoderService::NewStub(channel);
  v1::EncodeDatasetRequest req;
  req.set_dataset_dir(job.encode.images);
  req.set_cache_dir(job.dataset);
  req.set_trigger(job.encode.trigger);
  req.set_resolution(job.encode.resolution);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(timeout));
  auto reader = stub->EncodeDataset(&ctx, req);
  v1::EncodeProgress msg, last;
  while (reader->Read(&msg)) {
    last = msg;
    if (!quiet && !msg.finished()) {
      std::printf("encoding %lld/%lld (encoded %lld, kept %lld, failed %lld) %s\n", static_cast<long long>(msg.done()),
                  static_cast<long long>(msg.total()), static_cast<long long>(msg.encoded()),
                  static_cast<long long>(msg.kept()), static_cast<long long>(msg.failed()), msg.current().c_str());
    }
  }
  absl::Status s = FromGrpcStatus(reader->Finish(), absl::StrCat("encoder worker ", address));
  if (!s.ok()) return s;
  for (const auto& e : last.errors()) LogWarning("encoder worker: ", e);
  if (last.encoded() + last.kept() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("encoder worker ", address, " produced no samples from ", job.encode.images));
  }
  if (!quiet) {
    std::printf("cache %s ready: %lld encoded, %lld unchanged, %d failed\n", job.dataset.c_str(),
                static_cast<long long>(last.encoded()), static_cast<long long>(last.kept()), last.errors_size());
  }
  return absl::OkStatus();
}

}  // namespace baton
