// Fuzz target: the safetensors reader (core/tensor/safetensors.h). The input is a whole file. Whatever Open
// accepts must load completely: every key's tensor has its entry's dtype, shape and byte size, loads converted to
// fp32 too, and the file survives a round trip through SerializeSafetensors (same keys, dtypes, shapes, bytes,
// metadata).
#include <cstring>

#include "core/tensor/safetensors.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"

namespace baton::fuzz {
namespace {

struct Loaded {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Every tensor of the file at `path`, checked against its header entry; nullopt when Open rejects the file.
std::optional<Loaded> LoadChecked(const std::string& path, bool convert) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  if (!file.ok()) return std::nullopt;
  Loaded out;
  out.metadata = (*file)->metadata();
  for (const std::string& key : (*file)->Keys()) {
    Require((*file)->Contains(key), "Contains agrees with Keys");
    absl::StatusOr<SafetensorsEntry> entry = (*file)->Entry(key);
    Require(entry.ok(), "every listed key has an entry");
    absl::StatusOr<at::Tensor> tensor = (*file)->Load(key);
    Require(tensor.ok(), "every entry of an opened file loads");
    absl::StatusOr<at::ScalarType> dtype = SafetensorsDtypeToTorch(entry->dtype);
    Require(dtype.ok() && tensor->scalar_type() == *dtype, "the tensor has the entry's dtype");
    Require(tensor->sizes().vec() == entry->shape, "the tensor has the entry's shape");
    Require(static_cast<uint64_t>(tensor->nbytes()) == entry->end - entry->begin, "the tensor has the entry's size");
    if (convert) {
      absl::StatusOr<at::Tensor> f32 = (*file)->Load(key, at::kFloat);
      Require(f32.ok() && f32->scalar_type() == at::kFloat && f32->sizes() == tensor->sizes(), "loads as fp32");
    }
    out.tensors[key] = *tensor;
  }
  Require(!(*file)->Entry("\x01 not a key").ok(), "a missing key is an error");
  return out;
}

}  // namespace

bool RunSafetensors(const uint8_t* data, size_t size) {
  std::optional<Loaded> first = LoadChecked(ScratchFile(data, size), /*convert=*/true);
  if (!first) return false;
  absl::StatusOr<std::string> bytes = SerializeSafetensors(first->tensors, first->metadata);
  Require(bytes.ok(), "what was read can be written");
  std::optional<Loaded> second =
      LoadChecked(ScratchFile(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()), false);
  Require(second.has_value(), "what was written can be read");
  Require(second->metadata == first->metadata, "metadata survives");
  Require(second->tensors.size() == first->tensors.size(), "every tensor survives");
  for (const auto& [key, t] : first->tensors) {
    auto it = second->tensors.find(key);
    Require(it != second->tensors.end(), "every key survives");
    const at::Tensor& u = it->second;
    Require(u.scalar_type() == t.scalar_type() && u.sizes() == t.sizes() && u.nbytes() == t.nbytes(),
            "every tensor keeps its dtype and shape");
    Require(t.nbytes() == 0 || std::memcmp(u.data_ptr(), t.data_ptr(), t.nbytes()) == 0,
            "every tensor survives bitwise");
  }
  return true;
}

}  // namespace baton::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  baton::fuzz::RunSafetensors(data, size);
  return 0;
}
