#include "wire/wire.h"

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Names come from the network: quote them escaped and bounded so an error message stays one sane line.
std::string Quote(const std::string& name) {
  constexpr size_t kShown = 96;
  if (name.size() <= kShown) return absl::StrCat("'", absl::CHexEscape(name), "'");
  return absl::StrCat("'", absl::CHexEscape(name.substr(0, kShown)), "...' (", name.size(), " bytes)");
}

std::string ShapeString(const v1::TensorHeader& header) {
  return absl::StrCat("[", absl::StrJoin(header.shape(), ", "), "]");
}

}  // namespace

absl::StatusOr<at::ScalarType> WireDTypeToTorch(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_F32:
      return at::kFloat;
    case v1::DTYPE_BF16:
      return at::kBFloat16;
    case v1::DTYPE_F16:
      return at::kHalf;
    case v1::DTYPE_F64:
      return at::kDouble;
    case v1::DTYPE_I64:
      return at::kLong;
    case v1::DTYPE_I32:
      return at::kInt;
    case v1::DTYPE_I16:
      return at::kShort;
    case v1::DTYPE_I8:
      return at::kChar;
    case v1::DTYPE_U8:
      return at::kByte;
    case v1::DTYPE_BOOL:
      return at::kBool;
    case v1::DTYPE_F8_E4M3:
      return at::kFloat8_e4m3fn;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported wire dtype ", static_cast<int>(dtype)));
}

absl::StatusOr<v1::DType> TorchToWireDType(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return v1::DTYPE_F32;
    case at::kBFloat16:
      return v1::DTYPE_BF16;
    case at::kHalf:
      return v1::DTYPE_F16;
    case at::kDouble:
      return v1::DTYPE_F64;
    case at::kLong:
      return v1::DTYPE_I64;
    case at::kInt:
      return v1::DTYPE_I32;
    case at::kShort:
      return v1::DTYPE_I16;
    case at::kChar:
      return v1::DTYPE_I8;
    case at::kByte:
      return v1::DTYPE_U8;
    case at::kBool:
      return v1::DTYPE_BOOL;
    case at::kFloat8_e4m3fn:
      return v1::DTYPE_F8_E4M3;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("dtype ", c10::toString(dtype), " cannot be sent on the wire"));
}

absl::Status AppendTensorChunks(const std::string& name, const at::Tensor& tensor, size_t max_chunk_bytes,
                                const std::function<bool(v1::TensorChunk&&)>& emit, WireDtype wire_dtype) {
  if (name.empty() || name.size() > kMaxWireNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor name must be 1..", kMaxWireNameBytes, " bytes, got ", name.size()));
  }
  if (!tensor.defined()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(name), " is undefined"));
  }
  if (tensor.layout() != at::kStrided) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(name), " is not dense (strided)"));
  }
  if (max_chunk_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(name), ": max_chunk_bytes must be > 0"));
  }
  if (tensor.dim() > kMaxWireDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", Quote(name), " has ", tensor.dim(), " dims; the wire allows ", kMaxWireDims));
  }
  absl::StatusOr<v1::DType> dtype = TorchToWireDType(tensor.scalar_type());
  if (!dtype.ok()) return Annotate(dtype.status(), absl::StrCat("tensor ", Quote(name)));

  WirePayload wire;
  RETURN_IF_ERROR(TorchCall(absl::StrCat("moving tensor ", Quote(name), " to CPU").c_str(),
                            [&] { wire = CompressForWire(tensor.detach().to(at::kCPU).contiguous(), wire_dtype); }));
  const at::Tensor& cpu = wire.payload;
  if (wire.decode_dtype != v1::DTYPE_UNSPECIFIED) dtype = *TorchToWireDType(cpu.scalar_type());
  const uint64_t total = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
  const char* bytes = static_cast<const char*>(cpu.data_ptr());

  uint64_t offset = 0;
  // One chunk object for the whole tensor: with an `emit` that swaps it into its outgoing message, the
  // data buffer is allocated once instead of once per chunk (fresh large buffers cost page faults).
  v1::TensorChunk chunk;
  do {
    const uint64_t n = std::min<uint64_t>(max_chunk_bytes, total - offset);
    chunk.Clear();  // keeps the data string's capacity
    if (offset == 0) {
      v1::TensorHeader* header = chunk.mutable_header();
      header->set_name(name);
      header->set_dtype(*dtype);
      for (int64_t d : cpu.sizes()) header->add_shape(d);
      header->set_total_bytes(total);
      if (wire.decode_dtype != v1::DTYPE_UNSPECIFIED) {
        header->set_decode_dtype(wire.decode_dtype);
        if (wire.row_scales.defined()) {
          const float* s = wire.row_scales.data_ptr<float>();
          header->mutable_row_scales()->Assign(s, s + wire.row_scales.numel());
        }
      }
    }
    chunk.set_offset(offset);
    chunk.mutable_data()->assign(bytes + offset, n);
    offset += n;
    chunk.set_last(offset == total);
    if (!emit(std::move(chunk))) {
      return absl::UnavailableError(
          absl::StrCat("stream broke while sending tensor ", Quote(name), " at byte ", offset - n, " of ", total));
    }
  } while (offset < total);
  return absl::OkStatus();
}

TensorAssembler::TensorAssembler(uint64_t max_tensor_bytes, bool pin_memory)
    : max_tensor_bytes_(max_tensor_bytes), pin_memory_(pin_memory) {}

absl::Status TensorAssembler::Fail(absl::Status status) {
  error_ = status;
  in_progress_ = false;
  tensor_ = at::Tensor();
  return status;
}

absl::Status TensorAssembler::StartTensor(const v1::TensorHeader& header) {
  const std::string& name = header.name();
  if (name.empty() || name.size() > kMaxWireNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor header after ", tensors_completed_,
                                                   " tensors: name must be 1..", kMaxWireNameBytes, " bytes, got ",
                                                   name.size()));
  }
  const std::string what = absl::StrCat("tensor ", Quote(name));
  absl::StatusOr<at::ScalarType> dtype = WireDTypeToTorch(header.dtype());
  if (!dtype.ok()) return Annotate(dtype.status(), what);
  if (header.shape_size() > kMaxWireDims) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", header.shape_size(), " dims; the wire allows ", kMaxWireDims));
  }
  const uint64_t itemsize = c10::elementSize(*dtype);
  // numel × itemsize must fit in int64 (libtorch sizes) and not overflow on the way.
  uint64_t bytes = itemsize;
  bool overflow = false;
  for (int64_t d : header.shape()) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has a negative dimension in shape ", ShapeString(header)));
    }
    overflow = overflow || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
  }
  if (overflow || bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", ShapeString(header), " overflows the addressable size"));
  }
  if (header.total_bytes() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": total_bytes ", header.total_bytes(),
                                                   " does not match shape ", ShapeString(header), " x ", itemsize,
                                                   " bytes = ", bytes));
  }
  absl::StatusOr<uint64_t> decoded_bytes = DecodedBytes(header, bytes);
  if (!decoded_bytes.ok()) return Annotate(decoded_bytes.status(), what);
  if (std::max(bytes, *decoded_bytes) > max_tensor_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", std::max(bytes, *decoded_bytes), " bytes; the limit is ", max_tensor_bytes_));
  }
  std::vector<int64_t> shape(header.shape().begin(), header.shape().end());
  RETURN_IF_ERROR(TorchCall(absl::StrCat("allocating ", what).c_str(), [&] {
    tensor_ = at::empty(shape, at::TensorOptions().dtype(*dtype).pinned_memory(pin_memory_));
  }));
  name_ = name;
  header_ = header;
  total_bytes_ = bytes;
  received_ = 0;
  is_bool_ = *dtype == at::kBool;
  in_progress_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<NamedTensor>> TensorAssembler::Add(const v1::TensorChunk& chunk) {
  if (!error_.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor stream already failed: ", error_.message()));
  }
  if (!in_progress_) {
    if (!chunk.has_header()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "chunk without a header after ",
          tensors_completed_ == 0 ? "the start of the stream" : absl::StrCat("the last chunk of tensor ", Quote(name_)),
          " (offset ", chunk.offset(), ", ", chunk.data().size(), " bytes)")));
    }
    absl::Status started = StartTensor(chunk.header());
    if (!started.ok()) return Fail(started);
  } else if (chunk.has_header()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(name_), ": new header (for ",
                                                        Quote(chunk.header().name()), ") after ", received_, " of ",
                                                        total_bytes_, " bytes; the previous tensor never ended")));
  }
  const std::string what = absl::StrCat("tensor ", Quote(name_));
  const std::string& data = chunk.data();
  if (chunk.offset() != received_) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(what, ": chunk offset ", chunk.offset(), " but ", received_, " bytes received so far")));
  }
  if (data.size() > total_bytes_ - received_) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(what, ": chunk of ", data.size(), " bytes at offset ",
                                                        received_, " runs past total_bytes ", total_bytes_)));
  }
  if (data.empty() && total_bytes_ != 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(what, ": empty chunk at offset ", received_)));
  }
  const bool completes = received_ + data.size() == total_bytes_;
  if (chunk.last() != completes) {
    return Fail(absl::InvalidArgumentError(
        chunk.last() ? absl::StrCat(what, ": marked last at byte ", received_ + data.size(), " of ", total_bytes_)
                     : absl::StrCat(what, ": all ", total_bytes_, " bytes received but the chunk is not last")));
  }
  if (is_bool_) {
    for (unsigned char c : data) {
      if (c > 1) {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat(what, ": bool byte value ", static_cast<int>(c), " (must be 0 or 1)")));
      }
    }
  }
  if (!data.empty()) {
    std::memcpy(static_cast<char*>(tensor_.data_ptr()) + received_, data.data(), data.size());
  }
  received_ += data.size();
  bytes_received_ += data.size();
  if (!completes) return std::optional<NamedTensor>();

  in_progress_ = false;
  absl::StatusOr<at::Tensor> restored = DecompressFromWire(header_, std::move(tensor_));
  if (!restored.ok()) return Fail(Annotate(restored.status(), what));
  if (pin_memory_ && header_.decode_dtype() != v1::DTYPE_UNSPECIFIED) restored = restored->pin_memory();
  ++tensors_completed_;
  return std::optional<NamedTensor>(NamedTensor{name_, *std::move(restored)});
}

absl::Status TensorAssembler::Finish() const {
  if (!error_.ok()) return error_;
  if (in_progress_) {
    return absl::InvalidArgumentError(absl::StrCat("stream ended inside tensor ", Quote(name_), " after ", received_,
                                                   " of ", total_bytes_, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace baton
