#include "core/model/quantize_checkpoint.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_split.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/model/flux2_model.h"
#include "core/quant/quantize_tensor.h"
#include "core/quant/stored_quant.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kStem[] = "diffusion_pytorch_model";

// One output tensor, planned before any byte is read.
struct Planned {
  std::string name;    // output key
  std::string source;  // diffusers name in the checkpoint
  std::string dtype;   // safetensors code written
  std::vector<int64_t> shape;
  enum Kind { kAsStored, kQuantData, kQuantScale } kind = kAsStored;
  int64_t itemsize = 0;
  int64_t bytes() const {
    int64_t n = itemsize;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Sort key: non-block tensors first, then double blocks, then single blocks, by index; the block's name.
std::pair<int64_t, std::string> BlockOf(const std::string& name, int64_t num_layers) {
  for (auto [prefix, base] : {std::pair<std::string, int64_t>{"transformer_blocks.", 0},
                              std::pair<std::string, int64_t>{"single_transformer_blocks.", num_layers}}) {
    if (name.rfind(prefix, 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(name.substr(prefix.size()), absl::MaxSplits('.', 1));
    int64_t index = 0;
    if (absl::SimpleAtoi(parts[0], &index)) return {base + index, prefix + parts[0]};
  }
  return {-1, ""};
}

absl::StatusOr<std::vector<Planned>> PlanTensors(const Flux2Checkpoint& ckpt, WeightQuant q) {
  std::vector<Planned> plan;
  for (const auto& [name, shape] : Flux2ParameterShapes(ckpt.config())) {
    ASSIGN_OR_RETURN(std::string stored, ckpt.StoredDtype(name));
    if (IsQuantizedFlux2Param(name, shape)) {
      plan.push_back({name, name, q == WeightQuant::kInt8 ? "I8" : "F8_E4M3", shape, Planned::kQuantData, 1});
      plan.push_back({name + "_scale", name, "F32", {shape[0]}, Planned::kQuantScale, 4});
      continue;
    }
    // A non-block tensor held in 8 bits (community files) is written dequantized, as BF16.
    const std::string dtype = IsEightBitDtype(stored) ? "BF16" : stored;
    ASSIGN_OR_RETURN(at::ScalarType t, SafetensorsDtypeToTorch(dtype));
    plan.push_back({name, name, dtype, shape, Planned::kAsStored, static_cast<int64_t>(c10::elementSize(t))});
  }
  const int64_t layers = ckpt.config().num_layers;
  // Block by block; inside a block 4-byte, then 2-byte, then 1-byte tensors, so every tensor starts aligned
  // to its element size whenever each block's bytes are a multiple of 4 (true of every FLUX.2 config).
  std::stable_sort(plan.begin(), plan.end(), [&](const Planned& a, const Planned& b) {
    const int64_t ba = BlockOf(a.name, layers).first, bb = BlockOf(b.name, layers).first;
    return ba != bb ? ba < bb : a.itemsize > b.itemsize;
  });
  return plan;
}

std::vector<std::vector<Planned>> Shard(const std::vector<Planned>& plan, int64_t max_bytes) {
  std::vector<std::vector<Planned>> shards(1);
  int64_t bytes = 0;
  for (const Planned& p : plan) {
    if (max_bytes > 0 && bytes > 0 && bytes + p.bytes() > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(p);
    bytes += p.bytes();
  }
  return shards;
}

// Produces one planned tensor. A weight is quantized once; its data and scale are kept until both have
// been written (within a block they are apart: scales first for alignment), so at most one block's 8-bit
// weights are held.
class QuantizeSource {
 public:
  QuantizeSource(const Flux2Checkpoint& ckpt, WeightQuant q) : ckpt_(ckpt), q_(q) {}

  absl::StatusOr<at::Tensor> Get(const Planned& p) {
    if (p.kind == Planned::kAsStored) {
      ASSIGN_OR_RETURN(at::ScalarType t, SafetensorsDtypeToTorch(p.dtype));
      return ckpt_.Load(p.source, t);
    }
    auto it = cache_.find(p.source);
    if (it == cache_.end()) {
      Entry e;
      ASSIGN_OR_RETURN(std::optional<QuantizedWeight> stored, ckpt_.LoadQuantized(p.source));
      if (stored && stored->data.scalar_type() == QuantStorageDtype(q_)) {
        e.weight = std::move(*stored);  // already in the requested form: copied as stored
      } else {
        ASSIGN_OR_RETURN(at::Tensor full, ckpt_.Load(p.source, at::kFloat));
        RETURN_IF_ERROR(TorchCall(p.source.c_str(), [&] { e.weight = QuantizeWeight(full, q_); }));
      }
      it = cache_.emplace(p.source, std::move(e)).first;
    }
    Entry& e = it->second;
    at::Tensor out = p.kind == Planned::kQuantData ? e.weight.data : e.weight.scale;
    (p.kind == Planned::kQuantData ? e.data_written : e.scale_written) = true;
    if (e.data_written && e.scale_written) cache_.erase(it);
    return out;
  }

 private:
  struct Entry {
    QuantizedWeight weight;
    bool data_written = false, scale_written = false;
  };
  const Flux2Checkpoint& ckpt_;
  WeightQuant q_;
  std::map<std::string, Entry> cache_;
};

// The safetensors header for `tensors` in this order (same JSON layout as SerializeSafetensors).
std::string ShardHeader(const std::vector<Planned>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) m[k] = v;
  header["__metadata__"] = std::move(m);
  uint64_t offset = 0;
  for (const Planned& p : tensors) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = p.dtype;
    entry["shape"] = p.shape;
    entry["data_offsets"] = {offset, offset + static_cast<uint64_t>(p.bytes())};
    header[p.name] = std::move(entry);
    offset += p.bytes();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + json;
}

class ProgressByBlock {
 public:
  ProgressByBlock(const QuantizeCheckpointOptions& o, int64_t layers, int64_t blocks)
      : options_(o), layers_(layers), blocks_(blocks) {}
  void Wrote(const Planned& p) {
    const auto [index, block] = BlockOf(p.name, layers_);
    if (block != current_) Flush();
    current_ = block;
    bytes_ += p.bytes();
  }
  void Flush() {
    if (current_.empty() || !options_.progress) return;
    options_.progress(absl::StrFormat("quantize: %s done (%d/%d blocks, %.1f MiB written so far)", current_, ++done_,
                                      blocks_, static_cast<double>(bytes_) / (1 << 20)));
    current_.clear();
  }

 private:
  const QuantizeCheckpointOptions& options_;
  int64_t layers_, blocks_, done_ = 0, bytes_ = 0;
  std::string current_;
};

// Writes one shard: header, then each tensor as it is produced; temporary file, fsync, rename.
absl::Status WriteShard(const std::string& path, const std::vector<Planned>& tensors,
                        const std::map<std::string, std::string>& metadata, QuantizeSource& source,
                        ProgressByBlock& progress) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return absl::InternalError(absl::StrCat("cannot open ", tmp, " for writing"));
  auto fail = [&](absl::Status s) {
    std::fclose(f);
    std::remove(tmp.c_str());
    return s;
  };
  const std::string header = ShardHeader(tensors, metadata);
  if (std::fwrite(header.data(), 1, header.size(), f) != header.size()) {
    return fail(absl::InternalError(absl::StrCat("cannot write ", tmp)));
  }
  for (const Planned& p : tensors) {
    auto t = source.Get(p);
    if (!t.ok()) return fail(t.status());
    at::Tensor c = t->contiguous();
    if (c.sizes().vec() != p.shape || static_cast<int64_t>(c.numel() * c.element_size()) != p.bytes()) {
      return fail(absl::InternalError(absl::StrCat("tensor '", p.name, "' came out with another shape or dtype")));
    }
    const size_t n = static_cast<size_t>(p.bytes());
    if (n > 0 && std::fwrite(c.data_ptr(), 1, n, f) != n) {
      return fail(absl::InternalError(absl::StrCat("cannot write ", tmp)));
    }
    progress.Wrote(p);
  }
  if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0)
    return fail(absl::InternalError(absl::StrCat("cannot sync ", tmp)));
  std::fclose(f);
  return RenameDurable(tmp, path);
}

int64_t LargestFileBytes(const Flux2Checkpoint& ckpt) {
  const auto paths = ckpt.FilePaths();
  if (paths.size() <= 1) return 0;  // one input file → one output file
  int64_t largest = 0;
  for (const auto& p : paths) {
    std::error_code ec;
    largest = std::max<int64_t>(largest, static_cast<int64_t>(std::filesystem::file_size(p, ec)));
  }
  return largest;
}

}  // namespace

absl::Status WriteQuantizedFlux2Checkpoint(const Flux2Checkpoint& ckpt, const std::string& out_dir,
                                           const QuantizeCheckpointOptions& options) {
  const WeightQuant q = options.quant;
  if (q == WeightQuant::kNone) return absl::InvalidArgumentError("--quantize must be int8 or fp8");
  if (ckpt.stored_quant() != WeightQuant::kNone && ckpt.stored_quant() != q) {
    return absl::InvalidArgumentError(absl::StrCat(ckpt.path(), " is already quantized as ",
                                                   WeightQuantName(ckpt.stored_quant()),
                                                   "; quantize the full-precision source to get ", WeightQuantName(q)));
  }
  ASSIGN_OR_RETURN(std::vector<Planned> plan, PlanTensors(ckpt, q));
  const int64_t max_shard = options.max_shard_bytes < 0 ? LargestFileBytes(ckpt) : options.max_shard_bytes;
  const auto shards = Shard(plan, max_shard);
  RETURN_IF_ERROR(MakeDirs(out_dir));
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {kBatonQuantizeMetadataKey, WeightQuantName(q)}};
  QuantizeSource source(ckpt, q);
  const Flux2Config& c = ckpt.config();
  ProgressByBlock progress(options, c.num_layers, c.num_blocks());
  if (shards.size() == 1) {
    RETURN_IF_ERROR(
        WriteShard(JoinPath(out_dir, absl::StrCat(kStem, ".safetensors")), shards[0], metadata, source, progress));
  } else {
    nlohmann::ordered_json index;
    int64_t total = 0;
    for (const Planned& p : plan) total += p.bytes();
    index["metadata"]["total_size"] = total;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string file = absl::StrFormat("%s-%05d-of-%05d.safetensors", kStem, i + 1, shards.size());
      RETURN_IF_ERROR(WriteShard(JoinPath(out_dir, file), shards[i], metadata, source, progress));
      for (const Planned& p : shards[i]) index["weight_map"][p.name] = file;
    }
    RETURN_IF_ERROR(WriteFileAtomic(JoinPath(out_dir, absl::StrCat(kStem, ".safetensors.index.json")), index.dump(2)));
  }
  progress.Flush();
  return WriteFileAtomic(JoinPath(out_dir, "config.json"), Flux2ConfigToJson(c));
}

}  // namespace baton
