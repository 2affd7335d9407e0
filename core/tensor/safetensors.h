// safetensors reader and writer. Design goals: the file is memory-mapped and only the tensors asked for are
// touched (a pipeline stage reads just its block range of a 64 GB checkpoint); every header is validated before
// any byte is trusted; writes are atomic so a crash never leaves a torn file.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace baton {

// Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, N bytes of
// JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the raw little-endian tensor bytes.
struct SafetensorsEntry {
  std::string dtype;  // safetensors code: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

// A read-only, memory-mapped safetensors file. Thread-safe after Open (all methods are const).
class SafetensorsFile {
 public:
  // Maps the file and validates the header: size bounds (header ≤ 100 MB, fits in file), JSON syntax,
  // known dtypes, offsets in range and consistent with dtype×shape, no overlaps. Errors name the path.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  std::vector<std::string> Keys() const;  // sorted
  bool Contains(const std::string& key) const { return entries_.count(key) > 0; }
  // NotFound naming the key and the file when absent.
  absl::StatusOr<SafetensorsEntry> Entry(const std::string& key) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copies one tensor out of the mapping into an owned CPU tensor, converting to `dtype` when given
  // (at::ScalarType::Undefined keeps the stored dtype). Only this tensor's pages are read, and they are
  // released from this process once copied: the process holds the weights once (the copy), not twice.
  absl::StatusOr<at::Tensor> Load(const std::string& key, at::ScalarType dtype = at::ScalarType::Undefined) const;
  // The tensor in place, over the mapping (no copy, no page faults on a fresh buffer): READ-ONLY memory (a write
  // faults). The tensor keeps `file` mapped; when it is freed its pages leave this process's resident set.
  static absl::StatusOr<at::Tensor> View(const std::shared_ptr<const SafetensorsFile>& file, const std::string& key);

 private:
  SafetensorsFile() = default;
  static void StartReadahead(const uint8_t* src, uint64_t nbytes);
  static void ReleaseMappedPages(const uint8_t* src, uint64_t nbytes);
  std::string path_;
  int fd_ = -1;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section inside the mapping
  uint64_t data_size_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A file's layout before it is written: the 8-byte length and JSON header, then each tensor's bytes in `data`'s order
// (CPU, contiguous: a CPU tensor that already is, shares its storage), for writers that write them without
// gathering the file in memory first.
struct SafetensorsLayout {
  std::string head;
  std::vector<at::Tensor> data;
  uint64_t data_bytes = 0;
};
absl::StatusOr<SafetensorsLayout> LayOutSafetensors(const std::map<std::string, at::Tensor>& tensors,
                                                    const std::map<std::string, std::string>& metadata = {});

// Serializes tensors (any device; copied to CPU, made contiguous) with optional string metadata.
absl::StatusOr<std::string> SerializeSafetensors(const std::map<std::string, at::Tensor>& tensors,
                                                 const std::map<std::string, std::string>& metadata = {});

// Writes atomically (temporary file, fsync, rename, fsync of the directory).
absl::Status WriteSafetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes `tensors` in Hugging Face's layout: one "<stem>.safetensors" when max_shard_bytes ≤ 0, else shards
// "<stem>-00001-of-0000N.safetensors" of at most max_shard_bytes each (a larger tensor gets a shard of its
// own), filled in the given order, plus "<stem>.safetensors.index.json" with the weight_map.
absl::Status WriteShardedSafetensors(const std::string& dir, const std::string& stem,
                                     const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                     const std::map<std::string, std::string>& metadata, int64_t max_shard_bytes);

// The reading side of that layout. ReadSafetensorsIndex parses "<stem>.safetensors.index.json" into
// tensor name -> shard path (joined to the index's folder; a shard name that would leave the folder is an
// error). SafetensorsShardPaths lists the distinct files of a folder: the index's shards (sorted) when
// there is an index, else the single "<stem>.safetensors"; NotFound names both when neither exists.
absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsIndex(const std::string& dir,
                                                                        const std::string& stem);
absl::StatusOr<std::vector<std::string>> SafetensorsShardPaths(const std::string& dir, const std::string& stem);

// Convenience: loads every tensor (tests, small files).
absl::StatusOr<std::map<std::string, at::Tensor>> LoadAllSafetensors(const std::string& path);

// dtype mapping. Supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 (float8_e4m3fn) F8_E5M2.
absl::StatusOr<at::ScalarType> SafetensorsDtypeToTorch(const std::string& code);
absl::StatusOr<std::string> TorchDtypeToSafetensors(at::ScalarType dtype);

}  // namespace baton
