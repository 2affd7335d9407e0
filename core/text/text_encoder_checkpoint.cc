#include "core/text/text_encoder_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <utility>

#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kIndexFile[] = "model.safetensors.index.json";
// Where transformers puts the decoder, most specific first (see the header).
constexpr const char* kLayoutPrefixes[] = {"model.language_model.", "language_model.model.", "model.", ""};

absl::Status CheckShape(const std::string& key, const std::string& path, const SafetensorsEntry& entry,
                        const std::vector<int64_t>& expected) {
  if (entry.shape == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor '", key, "' in ", path, " has shape ",
                                                 ShapeString(entry.shape), ", expected ", ShapeString(expected),
                                                 " from the config"));
}

absl::Status PreadFully(int fd, void* buf, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": short read at byte ", offset, got < 0 ? absl::StrCat(": ", std::strerror(errno)) : ""));
    }
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

// Random values for a tensor: RMSNorm scales near 1, biases small, matrices with 1/√fan_in scale so
// activations stay O(1) through a deep random stack; embeddings unit normal.
at::Tensor RandomTensor(const std::string& seed_name, const std::vector<int64_t>& shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(MixSeed(seed, HashName(seed_name)));
  at::Tensor t = at::randn(shape, gen, at::kFloat);
  const bool is_bias = seed_name.size() >= 4 && seed_name.compare(seed_name.size() - 4, 4, "bias") == 0;
  if (shape.size() == 1) {
    t = is_bias ? 0.1 * t : 1.0 + 0.1 * t;
  } else if (seed_name != "embed_tokens.weight") {
    t = t / std::sqrt(static_cast<double>(t.numel() / shape[0]));
  }
  return t.to(at::kBFloat16);
}

}  // namespace

std::vector<TextEncoderTensorSpec> TextEncoderLayerSpecs(const TextEncoderConfig& c, int64_t layer) {
  const std::string p = absl::StrCat("layers.", layer, ".");
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), m = c.intermediate_size;
  std::vector<TextEncoderTensorSpec> specs = {
      {p + "input_layernorm.weight", {h}},      {p + "self_attn.q_proj.weight", {q, h}},
      {p + "self_attn.k_proj.weight", {kv, h}}, {p + "self_attn.v_proj.weight", {kv, h}},
      {p + "self_attn.o_proj.weight", {h, q}},
  };
  if (c.attention_bias) {
    specs.push_back({p + "self_attn.q_proj.bias", {q}});
    specs.push_back({p + "self_attn.k_proj.bias", {kv}});
    specs.push_back({p + "self_attn.v_proj.bias", {kv}});
    specs.push_back({p + "self_attn.o_proj.bias", {h}});
  }
  if (c.qk_norm) {
    specs.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    specs.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
  }
  specs.push_back({p + "post_attention_layernorm.weight", {h}});
  specs.push_back({p + "mlp.gate_proj.weight", {m, h}});
  specs.push_back({p + "mlp.up_proj.weight", {m, h}});
  specs.push_back({p + "mlp.down_proj.weight", {h, m}});
  return specs;
}

std::vector<TextEncoderTensorSpec> TextEncoderTensorSpecs(const TextEncoderConfig& c) {
  std::vector<TextEncoderTensorSpec> specs = {{"embed_tokens.weight", {c.vocab_size, c.hidden_size}}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    for (auto& s : TextEncoderLayerSpecs(c, i)) specs.push_back(std::move(s));
  }
  specs.push_back({"norm.weight", {c.hidden_size}});
  return specs;
}

absl::StatusOr<std::unique_ptr<TextEncoderCheckpoint>> TextEncoderCheckpoint::Open(const std::string& dir) {
  return Open(dir, "embed_tokens.weight",
              std::vector<std::string>(std::begin(kLayoutPrefixes), std::end(kLayoutPrefixes)));
}

absl::StatusOr<std::unique_ptr<TextEncoderCheckpoint>> TextEncoderCheckpoint::Open(
    const std::string& dir, const std::string& anchor, const std::vector<std::string>& prefixes) {
  std::unique_ptr<TextEncoderCheckpoint> ckpt(new TextEncoderCheckpoint());
  ckpt->dir_ = dir;
  if (PathExists(JoinPath(dir, kIndexFile))) {
    ASSIGN_OR_RETURN(ckpt->file_of_, ReadSafetensorsIndex(dir, "model"));
  } else {
    ASSIGN_OR_RETURN(std::vector<std::string> single, SafetensorsShardPaths(dir, "model"));
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single.front()));
    for (const auto& key : file->Keys()) ckpt->file_of_[key] = single.front();
  }
  std::vector<std::string> tried;
  for (const std::string& prefix : prefixes) {
    tried.push_back(absl::StrCat("'", prefix, anchor, "'"));
    if (ckpt->file_of_.count(prefix + anchor) > 0) {
      ckpt->prefix_ = prefix;
      return ckpt;
    }
  }
  return absl::NotFoundError(
      absl::StrCat(dir, ": no text-encoder embedding found (tried ", absl::StrJoin(tried, ", "), ")"));
}

absl::StatusOr<std::string> TextEncoderCheckpoint::FileOf(const std::string& key) const {
  auto it = file_of_.find(key);
  if (it == file_of_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", key, "' is not in the checkpoint at ", dir_));
  }
  return it->second;
}

absl::Status TextEncoderCheckpoint::VisitByFile(
    const std::vector<TextEncoderTensorSpec>& specs,
    const std::function<absl::Status(const std::shared_ptr<const SafetensorsFile>&, const std::string&, size_t)>& fn)
    const {
  std::map<std::string, std::vector<size_t>> by_file;
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSIGN_OR_RETURN(std::string path, FileOf(Key(specs[i].name)));
    by_file[path].push_back(i);
  }
  for (const auto& [path, indices] : by_file) {
    ASSIGN_OR_RETURN(std::shared_ptr<const SafetensorsFile> file,
                     SafetensorsFile::Open(path));  // unmapped at the end of this block unless a view holds it
    for (size_t i : indices) {
      const std::string key = Key(specs[i].name);
      ASSIGN_OR_RETURN(SafetensorsEntry entry, file->Entry(key));
      RETURN_IF_ERROR(CheckShape(key, path, entry, specs[i].shape));
      RETURN_IF_ERROR(fn(file, key, i));
    }
  }
  return absl::OkStatus();
}

absl::Status TextEncoderCheckpoint::CheckShapes(const std::vector<TextEncoderTensorSpec>& specs) const {
  return VisitByFile(specs, [](const std::shared_ptr<const SafetensorsFile>&, const std::string&, size_t) {
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<at::Tensor>> TextEncoderCheckpoint::Load(const std::vector<TextEncoderTensorSpec>& specs,
                                                                    at::ScalarType dtype) const {
  std::vector<at::Tensor> out(specs.size());
  RETURN_IF_ERROR(
      VisitByFile(specs, [&](const std::shared_ptr<const SafetensorsFile>& file, const std::string& key, size_t i) {
        ASSIGN_OR_RETURN(out[i], file->Load(key, dtype));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<std::vector<at::Tensor>> TextEncoderCheckpoint::View(const std::vector<TextEncoderTensorSpec>& specs,
                                                                    at::ScalarType dtype) const {
  std::vector<at::Tensor> out(specs.size());
  RETURN_IF_ERROR(
      VisitByFile(specs, [&](const std::shared_ptr<const SafetensorsFile>& file, const std::string& key, size_t i) {
        ASSIGN_OR_RETURN(SafetensorsEntry entry, file->Entry(key));
        ASSIGN_OR_RETURN(at::ScalarType stored, SafetensorsDtypeToTorch(entry.dtype));
        if (stored != dtype) {
          ASSIGN_OR_RETURN(out[i], file->Load(key, dtype));
        } else {
          ASSIGN_OR_RETURN(out[i], SafetensorsFile::View(file, key));
        }
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<at::Tensor> TextEncoderCheckpoint::GatherRows(const TextEncoderTensorSpec& spec,
                                                             const std::vector<int64_t>& rows,
                                                             at::ScalarType dtype) const {
  const std::string key = Key(spec.name);
  ASSIGN_OR_RETURN(std::string path, FileOf(key));
  if (spec.shape.size() != 2) return absl::InvalidArgumentError(absl::StrCat("GatherRows: '", key, "' is not 2-D"));
  SafetensorsEntry entry;
  {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));  // validates the header; mapping dropped below
    ASSIGN_OR_RETURN(entry, file->Entry(key));
  }
  RETURN_IF_ERROR(CheckShape(key, path, entry, spec.shape));
  ASSIGN_OR_RETURN(at::ScalarType stored, SafetensorsDtypeToTorch(entry.dtype));
  const int64_t width = spec.shape[1];
  const uint64_t row_bytes = static_cast<uint64_t>(width) * c10::elementSize(stored);
  at::Tensor out = at::empty({static_cast<int64_t>(rows.size()), width}, at::TensorOptions().dtype(stored));

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  absl::Status status;
  uint8_t len_bytes[8];
  status = PreadFully(fd, len_bytes, sizeof(len_bytes), 0, path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];  // little-endian u64
  const uint64_t data_start = 8 + header_len;
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  for (size_t i = 0; status.ok() && i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= spec.shape[0]) {
      status = absl::InvalidArgumentError(
          absl::StrCat("row ", rows[i], " outside '", key, "' with ", spec.shape[0], " rows"));
      break;
    }
    status = PreadFully(fd, dst + i * row_bytes, row_bytes, data_start + entry.begin + rows[i] * row_bytes, path);
  }
  ::close(fd);
  RETURN_IF_ERROR(status);
  return out.to(dtype);
}

absl::Status WriteRandomTextEncoder(const TextEncoderConfig& config, const std::string& dir, uint64_t seed,
                                    bool legacy_layout, int64_t max_shard_bytes) {
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(MakeDirs(dir));
  const bool mistral3 = config.is_mistral3();
  const bool legacy = mistral3 && legacy_layout;
  const std::string lm_prefix = !mistral3 ? "model." : legacy ? "language_model.model." : "model.language_model.";
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // model order
  for (const auto& spec : TextEncoderTensorSpecs(config)) {
    tensors.emplace_back(lm_prefix + spec.name, RandomTensor(spec.name, spec.shape, seed));
  }
  const std::string head = legacy ? "language_model.lm_head.weight" : "lm_head.weight";
  tensors.emplace_back(head, RandomTensor(head, {config.vocab_size, config.hidden_size}, seed));
  if (mistral3) {
    // A few tensors of the pixtral tower and projector (sizes from TextEncoderConfigToJson's vision_config).
    const std::string vp = legacy ? "" : "model.";
    const int64_t v = 16, h = config.hidden_size;
    const std::vector<std::pair<std::string, std::vector<int64_t>>> vision = {
        {vp + "vision_tower.patch_conv.weight", {v, 3, 4, 4}},
        {vp + "vision_tower.ln_pre.weight", {v}},
        {vp + "vision_tower.transformer.layers.0.attention.q_proj.weight", {v, v}},
        {vp + "vision_tower.transformer.layers.0.feed_forward.gate_proj.weight", {2 * v, v}},
        {vp + "multi_modal_projector.norm.weight", {v}},
        {vp + "multi_modal_projector.patch_merger.merging_layer.weight", {v, 4 * v}},
        {vp + "multi_modal_projector.linear_1.weight", {h, v}},
        {vp + "multi_modal_projector.linear_2.weight", {h, h}},
    };
    for (const auto& [name, shape] : vision) tensors.emplace_back(name, RandomTensor(name, shape, seed));
  }

  RETURN_IF_ERROR(WriteShardedSafetensors(dir, "model", tensors, {{"format", "pt"}}, max_shard_bytes));
  return WriteFileAtomic(JoinPath(dir, "config.json"), TextEncoderConfigToJson(config));
}

}  // namespace baton
