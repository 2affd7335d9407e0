// Lossy activation compression for slow links (job key `wire_dtype: none | bf16 | fp8`). Only what flows
// between neighbouring stages is compressed: activations forward and their gradients backward (PeerSender).
// Inputs from the coordinator, targets, LoRA weights and gradients always travel exact.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <string>

#include "baton/v1/tensor.pb.h"

namespace baton {

// bf16 halves an fp32 activation; fp8 (e4m3, max 448) quarters it with one fp32 scale per row —
// per token — so a token with large values does not crush the small ones of its neighbours
// (scale = amax(row) / 448). The receiver converts back to the original dtype as the tensor completes,
// so the stage computing on it never sees the wire format. Deterministic: the same tensor always encodes
// to the same bytes, so N stages still agree with each other run to run (but no longer bitwise with one
// process: the rounding is real and shows in the loss; BENCHMARKS.md has the effect).
enum class WireDtype { kNone, kBf16, kFp8 };

// "none" | "bf16" | "fp8"; anything else is InvalidArgument naming the allowed values.
absl::StatusOr<WireDtype> ParseWireDtype(absl::string_view text);
std::string WireDtypeName(WireDtype d);

// What goes on the wire for `tensor` (contiguous CPU): the payload to send, plus the header fields
// (decode_dtype, row_scales) that let the receiver restore it. A tensor that is not floating, or that is
// already as narrow as the target (bf16 → bf16), or has no elements, is sent unchanged; so is one with a row
// fp8 cannot scale (inf, NaN, or fp64 beyond fp32's range).
struct WirePayload {
  at::Tensor payload;
  v1::DType decode_dtype = v1::DTYPE_UNSPECIFIED;  // unset: sent exactly
  at::Tensor row_scales;                           // fp32 [rows] with fp8, else undefined
};
WirePayload CompressForWire(const at::Tensor& tensor, WireDtype dtype);

// Receiver side: checks the header's compression fields against the assembled payload (decode dtype
// floating, scales only with an fp8 payload and exactly one per row, every scale finite and ≥ 0) and
// returns the restored tensor. A header without decode_dtype returns `payload` itself.
absl::StatusOr<at::Tensor> DecompressFromWire(const v1::TensorHeader& header, at::Tensor payload);

// Bytes the restored tensor will take (for the receiver's size cap before allocating anything).
absl::StatusOr<uint64_t> DecodedBytes(const v1::TensorHeader& header, uint64_t payload_bytes);

}  // namespace baton
