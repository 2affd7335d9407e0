#include "coordinator/encoder_client.h"

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "baton/v1/encoder.grpc.pb.h"
#include "core/tensor/shape.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"
#include "rpc/tls.h"
#include "wire/wire.h"

namespace baton {

namespace {

absl::StatusOr<std::unique_ptr<v1::EncoderService::Stub>> ConnectEncoderWorker(const std::string& address) {
  if (!GetProcessSecurity()) {  // an encoder worker is never started by us: its operator chose its security
    return absl::FailedPreconditionError(absl::StrCat(
        "encode: encoder_worker: ", address,
        ": pass the coordinator --tls_dir DIR (the CA that signed the encoder worker's certificate) or --insecure"));
  }
  auto channel = MakeChannel(address, ProcessChannelCredentials());
  if (!channel->WaitForConnected(DeadlineAfter(absl::Seconds(20)))) {
    return absl::UnavailableError(absl::StrCat("encoder worker ", address, " did not answer"));
  }
  return v1::EncoderService::NewStub(channel);
}

}  // namespace

absl::StatusOr<v1::EncodeProgress> CallEncodeDataset(
    const std::string& address, const v1::EncodeDatasetRequest& req, absl::Duration timeout,
    const std::function<void(const v1::EncodeProgress&)>& on_progress) {
  ASSIGN_OR_RETURN(auto stub, ConnectEncoderWorker(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(timeout));
  auto reader = stub->EncodeDataset(&ctx, req);
  v1::EncodeProgress msg, last;
  while (reader->Read(&msg)) {
    if (!msg.finished()) on_progress(msg);
    last = msg;
  }
  RETURN_IF_ERROR(FromGrpcStatus(reader->Finish(), absl::StrCat("encoder worker ", address)));
  if (!last.finished()) {
    return absl::UnavailableError(absl::StrCat("encoder worker ", address, " ended EncodeDataset without a result"));
  }
  return last;
}

absl::StatusOr<std::vector<at::Tensor>> EncodePromptsOnWorker(const std::string& address,
                                                              const std::vector<std::string>& prompts,
                                                              int64_t max_sequence_length, absl::Duration timeout) {
  ASSIGN_OR_RETURN(auto stub, ConnectEncoderWorker(address));
  v1::EncodePromptsRequest req;
  for (const std::string& p : prompts) req.add_prompts(p);
  req.set_max_sequence_length(max_sequence_length);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(timeout));
  auto reader = stub->EncodePrompts(&ctx, req);
  TensorAssembler assembler(uint64_t{4} << 30);
  std::vector<at::Tensor> out;
  absl::Status bad;
  v1::EncodePromptsReply reply;
  while (bad.ok() && reader->Read(&reply)) {
    auto done = assembler.Add(reply.chunk());
    if (!done.ok()) {
      bad = done.status();
    } else if (done->has_value()) {
      const NamedTensor& t = **done;
      if (t.name != absl::StrCat(out.size()) || t.tensor.dim() != 2 || t.tensor.size(0) != max_sequence_length ||
          t.tensor.scalar_type() != at::kFloat) {
        bad = absl::InvalidArgumentError(absl::StrCat("unexpected tensor ", t.name, " ", ShapeString(t.tensor.sizes()),
                                                      " (", c10::toString(t.tensor.scalar_type()), ") for prompt ",
                                                      out.size()));
      } else {
        out.push_back(t.tensor);
      }
    }
  }
  if (!bad.ok()) ctx.TryCancel();
  absl::Status finished = FromGrpcStatus(reader->Finish(), absl::StrCat("encoder worker ", address));
  if (!bad.ok()) return Annotate(bad, absl::StrCat("encoder worker ", address, " EncodePrompts"));
  RETURN_IF_ERROR(finished);
  RETURN_IF_ERROR(assembler.Finish());
  if (out.size() != prompts.size()) {
    return absl::DataLossError(absl::StrCat("encoder worker ", address, " returned ", out.size(), " embeddings for ",
                                            prompts.size(), " prompts"));
  }
  return out;
}

PromptEncoder WorkerPromptEncoder(const std::string& address, absl::Duration timeout) {
  return [address, timeout](const std::vector<std::string>& prompts, int64_t max_sequence_length) {
    return EncodePromptsOnWorker(address, prompts, max_sequence_length, timeout);
  };
}

}  // namespace baton
