// Many tensors across the host-device boundary in a few large copies. A LoRA's adapters and optimizer state are
// ~1000-3000 tensors (FLUX.2-dev, rank 16): copied one by one through pageable memory, each copy synchronizes and a
// read-back of the state takes seconds. Here they are packed into flat buffers of up to `bucket_bytes` (by dtype),
// each crossing in one copy from or into pinned memory, with one wait for the lot.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace baton {

inline constexpr int64_t kBulkCopyBucketBytes = int64_t{64} << 20;

// What DownloadAll does with tensors already on the host: copies (the result never aliases the input, which its
// owner goes on changing) or the tensors themselves where their dtype and layout already fit (a reader done with
// them before they change).
enum class HostTensors { kCopy, kShare };

// Every tensor on the host, contiguous, in `dtype` when given (else its own): CUDA tensors as views into a few pinned
// buffers (packed on the device one bucket at a time, so the packing holds at most a bucket of extra device memory),
// host tensors as `host` says. Complete when it returns.
std::map<std::string, at::Tensor> DownloadAll(const std::map<std::string, at::Tensor>& tensors,
                                              std::optional<at::ScalarType> dtype = std::nullopt,
                                              HostTensors host = HostTensors::kCopy,
                                              int64_t bucket_bytes = kBulkCopyBucketBytes);

// Every tensor onto `device`: to CUDA as views into a few device buffers, each filled by one copy from a pinned
// buffer packed on the host, on the calling thread's current stream (usable there at once, no host wait); to any
// other device a plain copy per tensor. Tensors already on `device` are passed through.
std::map<std::string, at::Tensor> UploadAll(const std::map<std::string, at::Tensor>& tensors, at::Device device,
                                            int64_t bucket_bytes = kBulkCopyBucketBytes);

}  // namespace baton
