// Fuzz target: the tensor wire decoder and envelopes (wire/wire.h, wire/envelope.h). The input is a Push stream:
// length-delimited baton.v1.Envelope messages (fuzz_util.h), read by ReadEnvelope as the stage worker reads
// one. Every envelope it accepts must survive a round trip: re-sent with AppendTensorChunks (exact and fp8
// compressed, when finite) and reassembled, each tensor comes back with its name, dtype and shape (and, exact, its
// bytes).
#include <cstring>

#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"
#include "wire/envelope.h"
#include "wire/wire.h"

namespace baton::fuzz {
namespace {

// Small caps keep the fuzzer's memory flat; the checks are the same at any cap.
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 20;
constexpr uint64_t kMaxTotalBytes = uint64_t{4} << 20;

// A grpc::ServerReader stand-in over the decoded messages. A message that does not parse ends the stream,
// as a broken stream does in gRPC.
class MessageReader {
 public:
  explicit MessageReader(std::vector<std::string> messages) : messages_(std::move(messages)) {}
  bool Read(v1::Envelope* message) {
    if (next_ >= messages_.size()) return false;
    return message->ParseFromString(messages_[next_++]);
  }

 private:
  std::vector<std::string> messages_;
  size_t next_ = 0;
};

void RoundTrip(const std::string& name, const at::Tensor& tensor, WireDtype wire_dtype) {
  TensorAssembler assembler(kMaxTensorBytes);
  std::optional<NamedTensor> back;
  absl::Status sent = AppendTensorChunks(
      name, tensor, /*max_chunk_bytes=*/97,
      [&](v1::TensorChunk&& chunk) {
        absl::StatusOr<std::optional<NamedTensor>> done = assembler.Add(chunk);
        RequireOk(done.status(), "a chunk AppendTensorChunks made is accepted");
        if (done->has_value()) back = std::move(*done);
        return true;
      },
      wire_dtype);
  RequireOk(sent, "an accepted tensor can be sent again");
  Require(assembler.Finish().ok() && back.has_value(), "the resent tensor completes");
  Require(back->name == name, "the name survives");
  Require(back->tensor.scalar_type() == tensor.scalar_type(), "the dtype survives");
  Require(back->tensor.sizes() == tensor.sizes(), "the shape survives");
  if (wire_dtype == WireDtype::kNone) {
    Require(back->tensor.nbytes() == tensor.nbytes(), "the size survives");
    Require(tensor.nbytes() == 0 || std::memcmp(back->tensor.data_ptr(), tensor.data_ptr(), tensor.nbytes()) == 0,
            "the bytes survive");
  }
}

}  // namespace

bool RunWire(const uint8_t* data, size_t size) {
  MessageReader reader(SplitDelimited(data, size));
  EnvelopeLimits limits;
  limits.max_tensor_bytes = kMaxTensorBytes;
  limits.max_total_bytes = kMaxTotalBytes;
  absl::StatusOr<ReceivedEnvelope> envelope = ReadEnvelope(&reader, limits);
  if (!envelope.ok()) {
    // Malformed input is INVALID_ARGUMENT; a tensor header over the envelope's byte budget is RESOURCE_EXHAUSTED
    // (the inbox budget, README), refused before anything is allocated.
    Require(absl::IsInvalidArgument(envelope.status()) || absl::IsResourceExhausted(envelope.status()),
            "ReadEnvelope fails with InvalidArgument or ResourceExhausted");
    return false;
  }
  Require(envelope->bytes <= kMaxTotalBytes, "the byte budget holds");
  for (const auto& [name, tensor] : envelope->tensors) {
    Require(tensor.device().is_cpu() && tensor.is_contiguous(), "a received tensor is CPU and contiguous");
    RoundTrip(name, tensor, WireDtype::kNone);
    // fp8 sends what it cannot scale (inf, NaN, fp64 beyond fp32's range) exactly, so every tensor goes.
    RoundTrip(name, tensor, WireDtype::kFp8);
  }
  return true;
}

}  // namespace baton::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  baton::fuzz::RunWire(data, size);
  return 0;
}
