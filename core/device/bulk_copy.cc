#include "core/device/bulk_copy.h"

#include <algorithm>
#include <utility>
#include <vector>

#ifdef BATON_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace baton {
namespace {

// Names grouped into buckets of one dtype and device, at most `bucket_bytes` each (a larger tensor alone); each
// tensor's place in its bucket starts at a multiple of `align_bytes` (device kernels vectorize aligned memory).
struct Bucket {
  at::ScalarType dtype;
  at::Device device;
  std::vector<std::string> names;
  std::vector<int64_t> offsets;  // in elements, one per name
  int64_t numel = 0;             // padding included
};

std::vector<Bucket> Buckets(const std::map<std::string, at::Tensor>& tensors, std::optional<at::ScalarType> dtype,
                            int64_t bucket_bytes, int64_t align_bytes) {
  std::vector<Bucket> buckets;
  std::map<std::pair<at::ScalarType, std::string>, size_t> open;  // (dtype, device) -> its bucket being filled
  for (const auto& [name, t] : tensors) {
    const at::ScalarType type = dtype.value_or(t.scalar_type());
    const int64_t element = static_cast<int64_t>(c10::elementSize(type));
    const int64_t align = std::max<int64_t>(1, align_bytes / element);
    const auto key = std::make_pair(type, t.device().str());
    auto it = open.find(key);
    const auto start = [&](const Bucket& b) { return (b.numel + align - 1) / align * align; };
    if (it == open.end() || (start(buckets[it->second]) + t.numel()) * element > bucket_bytes) {
      buckets.push_back({type, t.device(), {}, {}, 0});
      it = open.insert_or_assign(key, buckets.size() - 1).first;
    }
    Bucket& b = buckets[it->second];
    b.names.push_back(name);
    b.offsets.push_back(start(b));
    b.numel = b.offsets.back() + t.numel();
  }
  return buckets;
}

// `flat`'s pieces as the named tensors' shapes.
void Unpack(const at::Tensor& flat, const Bucket& b, const std::map<std::string, at::Tensor>& like,
            std::map<std::string, at::Tensor>& out) {
  for (size_t i = 0; i < b.names.size(); ++i) {
    const at::Tensor& t = like.at(b.names[i]);
    out[b.names[i]] = flat.narrow(0, b.offsets[i], t.numel()).view(t.sizes());
  }
}

at::Tensor Packed(const Bucket& b, const std::map<std::string, at::Tensor>& tensors) {
  std::vector<at::Tensor> parts;
  parts.reserve(b.names.size());
  for (const std::string& name : b.names) parts.push_back(tensors.at(name).detach().reshape(-1).to(b.dtype));
  return at::cat(parts);
}

}  // namespace

std::map<std::string, at::Tensor> DownloadAll(const std::map<std::string, at::Tensor>& tensors,
                                              std::optional<at::ScalarType> dtype, HostTensors host,
                                              int64_t bucket_bytes) {
  std::map<std::string, at::Tensor> out;
  std::vector<std::pair<at::Tensor, size_t>> pending;  // pinned host buffers being filled, by bucket
  const std::vector<Bucket> buckets = Buckets(tensors, dtype, bucket_bytes, /*align_bytes=*/1);  // packed by cat
#ifdef BATON_WITH_CUDA
  std::vector<at::cuda::CUDAEvent> copied;
#endif
  for (size_t i = 0; i < buckets.size(); ++i) {
    const Bucket& b = buckets[i];
    if (!b.device.is_cuda()) {
      for (const std::string& name : b.names) {
        const at::Tensor& t = tensors.at(name);
        out[name] = t.detach().to(at::kCPU, b.dtype, /*non_blocking=*/false, host == HostTensors::kCopy).contiguous();
      }
      continue;
    }
#ifdef BATON_WITH_CUDA
    c10::cuda::CUDAGuard guard(b.device);
    // Packed on the current stream; the packed buffer goes back to that stream's pool when this iteration ends and
    // is reused only by work queued after the copy, so one bucket of device memory serves them all.
    const at::Tensor flat = Packed(b, tensors);
    at::Tensor pinned = at::empty({b.numel}, at::TensorOptions(b.dtype).pinned_memory(true));
    pinned.copy_(flat, /*non_blocking=*/true);
    copied.emplace_back();
    copied.back().record(c10::cuda::getCurrentCUDAStream(b.device.index()));
    pending.emplace_back(pinned, i);
#endif
  }
#ifdef BATON_WITH_CUDA
  for (auto& event : copied) event.synchronize();
#endif
  for (const auto& [pinned, i] : pending) Unpack(pinned, buckets[i], tensors, out);
  return out;
}

std::map<std::string, at::Tensor> UploadAll(const std::map<std::string, at::Tensor>& tensors, at::Device device,
                                            int64_t bucket_bytes) {
  std::map<std::string, at::Tensor> out, to_move;
  for (const auto& [name, t] : tensors) (t.device() == device ? out[name] : to_move[name]) = t;
  if (!device.is_cuda()) {
    for (const auto& [name, t] : to_move) out[name] = t.to(device);
    return out;
  }
#ifdef BATON_WITH_CUDA
  c10::cuda::CUDAGuard guard(device);
  for (const Bucket& b : Buckets(to_move, std::nullopt, bucket_bytes, /*align_bytes=*/256)) {
    // Packed on the host (a CUDA source is copied to the host first: rare, and correct), then one copy; the pinned
    // allocator keeps `pinned` until the copy has run.
    at::Tensor pinned = at::empty({b.numel}, at::TensorOptions(b.dtype).pinned_memory(true));
    for (size_t i = 0; i < b.names.size(); ++i) {
      const at::Tensor& t = to_move.at(b.names[i]);
      pinned.narrow(0, b.offsets[i], t.numel()).copy_(t.detach().reshape(-1).to(at::kCPU));
    }
    at::Tensor flat = at::empty({b.numel}, at::TensorOptions(b.dtype).device(device));
    flat.copy_(pinned, /*non_blocking=*/true);
    Unpack(flat, b, to_move, out);
  }
#else
  for (const auto& [name, t] : to_move) out[name] = t.to(device);
#endif
  return out;
}

}  // namespace baton
