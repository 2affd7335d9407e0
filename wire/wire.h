// Tensor wire codec: at::Tensor <-> stream of bounded baton.v1.TensorChunk messages (tensor.proto). Used by
// every RPC that moves tensors (Push, RunStep gradients, GetLora).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "baton/v1/tensor.pb.h"
#include "wire/wire_compression.h"

namespace baton {

// Raw tensor bytes go on the wire as the host lays them out; every supported host is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the tensor wire format assumes a little-endian host");

// Default chunk payload. 1 MiB keeps each message far below the 64 MiB message limit (grpc_options.h)
// while keeping per-message overhead negligible (see bench/bench_transfer.cc).
inline constexpr size_t kMaxChunkBytes = size_t{1} << 20;
// Most dimensions a wire tensor may have.
inline constexpr int kMaxWireDims = 16;
// Longest tensor name accepted on the wire.
inline constexpr size_t kMaxWireNameBytes = 1024;

// dtype mapping. Supported: F32 BF16 F16 F64 I64 I32 I16 I8 U8 BOOL F8_E4M3. Errors are InvalidArgument.
absl::StatusOr<at::ScalarType> WireDTypeToTorch(v1::DType dtype);
absl::StatusOr<v1::DType> TorchToWireDType(at::ScalarType dtype);

// A tensor with the name it travelled under.
struct NamedTensor {
  std::string name;
  at::Tensor tensor;  // CPU, contiguous, owns its memory
};

// The sender cuts a tensor's raw little-endian bytes into chunks of at most `max_chunk_bytes`, with the
// header (name, dtype, shape, total_bytes) on the first. The receiver feeds chunks, in order, to a
// TensorAssembler, which validates every field before trusting it, preallocates the tensor from the
// header and copies each chunk straight into place.

// Emits `tensor` (any device; copied to CPU and made contiguous first) as chunks of at most
// `max_chunk_bytes` (> 0) data bytes each, the first carrying the header. A zero-byte tensor is one
// chunk with empty data. `emit` returns false when the stream is broken; that stops emission and
// returns Unavailable naming the tensor. The chunk object is reused between calls: whatever `emit` leaves
// in it (e.g. the previous message, swapped out) keeps its buffer for the next chunk's bytes. InvalidArgument for an
// empty name, undefined tensor or unsupported dtype. `wire_dtype` other than kNone sends a floating tensor
// compressed (wire_compression.h); the assembler restores it.
absl::Status AppendTensorChunks(const std::string& name, const at::Tensor& tensor, size_t max_chunk_bytes,
                                const std::function<bool(v1::TensorChunk&&)>& emit,
                                WireDtype wire_dtype = WireDtype::kNone);

// Reassembles tensors from chunks received in order. One assembler per stream; not thread-safe.
//
//   TensorAssembler assembler(/*max_tensor_bytes=*/1 << 30);
//   while (stream->Read(&chunk)) {
//     ASSIGN_OR_RETURN(std::optional<NamedTensor> done, assembler.Add(chunk));
//     if (done) inbox[done->name] = std::move(done->tensor);
//   }
//   RETURN_IF_ERROR(assembler.Finish());
//
// Every error is InvalidArgument naming the tensor; after an error the assembler stays failed.
class TensorAssembler {
 public:
  // `max_tensor_bytes` caps each tensor's declared total_bytes, checked before any allocation. With
  // `pin_memory` tensors are allocated in page-locked host memory (for asynchronous uploads to a CUDA device).
  explicit TensorAssembler(uint64_t max_tensor_bytes, bool pin_memory = false);

  // Consumes one chunk (its bytes are copied into the tensor, so the caller may reuse the message and
  // its buffer for the next Read). Returns the tensor when this chunk completes it, std::nullopt otherwise.
  // Checks: header present on a tensor's first chunk and only there; name non-empty and bounded; dtype
  // known; at most kMaxWireDims dims, each ≥ 0; numel × itemsize without overflow and equal to
  // total_bytes; total_bytes ≤ the cap; offset equal to the bytes received so far; data within
  // total_bytes; empty data only on a zero-byte tensor; last set exactly on the chunk that completes the
  // tensor; bool bytes 0 or 1; compression fields consistent (wire_compression.h), the decoded size too
  // within the cap. A compressed tensor comes back restored to its original dtype.
  absl::StatusOr<std::optional<NamedTensor>> Add(const v1::TensorChunk& chunk);

  // Call when the stream ends: InvalidArgument if a tensor is still incomplete.
  absl::Status Finish() const;

  // True between a tensor's first and last chunk.
  bool in_progress() const { return in_progress_; }
  // Completed tensors and their payload bytes so far.
  int64_t tensors_completed() const { return tensors_completed_; }
  uint64_t bytes_received() const { return bytes_received_; }

 private:
  absl::Status StartTensor(const v1::TensorHeader& header);
  absl::Status Fail(absl::Status status);

  const uint64_t max_tensor_bytes_;
  const bool pin_memory_;
  bool in_progress_ = false;
  absl::Status error_;        // sticky first error
  std::string name_;          // tensor being assembled
  v1::TensorHeader header_;   // its header (compression fields are applied on completion)
  at::Tensor tensor_;         // preallocated from its header
  uint64_t total_bytes_ = 0;  // its declared size
  uint64_t received_ = 0;     // its bytes so far
  bool is_bool_ = false;
  int64_t tensors_completed_ = 0;
  uint64_t bytes_received_ = 0;  // over all tensors
};

}  // namespace baton
