// Envelopes: the bundle of named tensors one StageService.Push stream carries (stage.proto). An envelope
// is one EnvelopeHeader message followed by the TensorChunks of each tensor in turn (wire.h).
// WriteEnvelope is the sender side (coordinator, neighbour stages); ReadEnvelope the receiver side (the
// stage worker's Push handler), which validates the framing, every chunk, name uniqueness and the byte
// budget before anything reaches the inbox. Templates so they work on any gRPC reader/writer of Envelope.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "baton/v1/stage.pb.h"
#include "wire/wire.h"

namespace baton {

struct ReceivedEnvelope {
  v1::EnvelopeHeader header;
  std::map<std::string, at::Tensor> tensors;  // CPU, contiguous
  uint64_t bytes = 0;                         // tensor payload bytes
};

struct EnvelopeLimits {
  uint64_t max_tensor_bytes = uint64_t{4} << 30;  // per tensor
  uint64_t max_total_bytes = uint64_t{16} << 30;  // whole envelope (over it: RESOURCE_EXHAUSTED)
  // Runs on the header before any tensor is read: a push the receiver would refuse costs no memory.
  std::function<absl::Status(const v1::EnvelopeHeader&)> check_header;
};

// Where ReadEnvelope puts the tensors: ordinary or page-locked host memory (a CUDA stage uploads from pinned
// memory asynchronously; see core/device/transfer.h).
// "step 3" for training work, "pass 7 (after step 3)" for a forward-only pass: how logs and errors name work.
inline std::string WorkName(int64_t step, uint64_t pass) {
  return pass != 0 ? absl::StrCat("pass ", pass, " (after step ", step, ")") : absl::StrCat("step ", step);
}

enum class HostMemory { kPageable, kPinned };

// Writes `header`, then each tensor's chunks (map order), to `writer` (grpc::ClientWriter<v1::Envelope>
// or anything with `bool Write(const v1::Envelope&)`). Does not call WritesDone/Finish. Unavailable when
// the stream breaks, InvalidArgument for a tensor that cannot be sent.
template <typename Writer>
absl::Status WriteEnvelope(Writer* writer, const v1::EnvelopeHeader& header,
                           const std::map<std::string, at::Tensor>& tensors, size_t max_chunk_bytes = kMaxChunkBytes,
                           WireDtype wire_dtype = WireDtype::kNone) {
  v1::Envelope first;
  *first.mutable_header() = header;
  if (!writer->Write(first)) return absl::UnavailableError("stream broke while sending the envelope header");
  v1::Envelope message;
  for (const auto& [name, tensor] : tensors) {
    absl::Status sent = AppendTensorChunks(
        name, tensor, max_chunk_bytes,
        [&](v1::TensorChunk&& chunk) {
          message.mutable_chunk()->Swap(&chunk);  // no copy; `chunk` gets the previous buffer back to reuse
          return writer->Write(message);
        },
        wire_dtype);
    if (!sent.ok()) return sent;
  }
  return absl::OkStatus();
}

// Reads one whole envelope from `reader` (grpc::ServerReader<v1::Envelope> or anything with
// `bool Read(v1::Envelope*)`) until the stream ends. InvalidArgument when the first message is not a
// header, the kind is unspecified or unknown, step or micro-batch is negative, a later message is not a chunk, a chunk
// is malformed (see TensorAssembler), a name repeats, or the stream ends inside a tensor; RESOURCE_EXHAUSTED when the
// byte budget is exceeded or memory runs out; whatever `limits.check_header` returns.
// The header's job/step/micro-batch are the caller's to check against its own state.
template <typename Reader>
absl::StatusOr<ReceivedEnvelope> ReadEnvelope(Reader* reader, const EnvelopeLimits& limits = {},
                                              HostMemory memory = HostMemory::kPageable) {
  ReceivedEnvelope envelope;
  v1::Envelope message;
  if (!reader->Read(&message)) return absl::InvalidArgumentError("envelope stream ended before its header");
  if (!message.has_header()) return absl::InvalidArgumentError("the first envelope message must be the header");
  envelope.header = std::move(*message.mutable_header());
  if (envelope.header.kind() == v1::EnvelopeHeader::KIND_UNSPECIFIED ||
      !v1::EnvelopeHeader::Kind_IsValid(envelope.header.kind())) {
    return absl::InvalidArgumentError(absl::StrCat("envelope from '", absl::CHexEscape(envelope.header.sender()),
                                                   "' for step ", envelope.header.step(), " has kind ",
                                                   static_cast<int>(envelope.header.kind())));
  }
  if (envelope.header.step() < 0 || envelope.header.micro_batch() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("envelope from '", absl::CHexEscape(envelope.header.sender()),
                                                   "' has step ", envelope.header.step(), " and micro-batch ",
                                                   envelope.header.micro_batch(), " (must be >= 0)"));
  }
  if (limits.check_header) {
    absl::Status accepted = limits.check_header(envelope.header);
    if (!accepted.ok()) return accepted;
  }
  const std::string what = absl::StrCat(v1::EnvelopeHeader::Kind_Name(envelope.header.kind()), " envelope for step ",
                                        envelope.header.step(), " micro-batch ", envelope.header.micro_batch());
  TensorAssembler assembler(limits.max_tensor_bytes, memory == HostMemory::kPinned);
  while (reader->Read(&message)) {
    if (!message.has_chunk()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": second header after ", assembler.tensors_completed(), " tensors"));
    }
    // A tensor is allocated whole from its header: refuse one the budget cannot hold before it is allocated.
    if (message.chunk().has_header() &&
        message.chunk().header().total_bytes() > limits.max_total_bytes - assembler.bytes_received()) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": tensor of ", message.chunk().header().total_bytes(),
                                                       " bytes would take it over ", limits.max_total_bytes, " bytes"));
    }
    // `message` is reused for every Read so its chunk buffer is allocated once per stream.
    absl::StatusOr<std::optional<NamedTensor>> done = assembler.Add(message.chunk());
    if (!done.ok()) {
      // Out of memory stays RESOURCE_EXHAUSTED (retry later); everything else is the sender's fault.
      const absl::StatusCode code = done.status().code() == absl::StatusCode::kResourceExhausted
                                        ? absl::StatusCode::kResourceExhausted
                                        : absl::StatusCode::kInvalidArgument;
      return absl::Status(code, absl::StrCat(what, ": ", done.status().message()));
    }
    if (assembler.bytes_received() > limits.max_total_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": more than ", limits.max_total_bytes, " bytes"));
    }
    if (!done->has_value()) continue;
    NamedTensor& tensor = **done;
    if (!envelope.tensors.emplace(tensor.name, std::move(tensor.tensor)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": tensor '", absl::CHexEscape(tensor.name), "' sent twice"));
    }
  }
  absl::Status finished = assembler.Finish();
  if (!finished.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", finished.message()));
  envelope.bytes = assembler.bytes_received();
  return envelope;
}

}  // namespace baton
