#include "core/data/cache.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/data/crc32c.h"
#include "core/data/empty_prompt.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/seed.h"
#include "core/util/sha256.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kFormat[] = "baton-cache-v1";

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// A synthetic video: the concept's pattern [h·w, C] drifting over `frames` latent frames -> [C, frames, h, w].
at::Tensor VideoFromPattern(const at::Tensor& pattern, int64_t frames, int64_t h, int64_t w, at::Generator& gen) {
  at::Tensor image = pattern.t().reshape({pattern.size(1), h, w});
  std::vector<at::Tensor> steps;
  for (int64_t f = 0; f < frames; ++f) steps.push_back(at::roll(image, {f}, {2}));
  return at::stack(steps, 1) + 0.05 * at::randn({pattern.size(1), frames, h, w}, gen);
}

}  // namespace

std::string CacheRecordFile(const std::string& id) {
  constexpr size_t kMaxName = 255 - 16;  // room for the atomic write's ".tmp.<pid>"
  const std::string suffix = ".safetensors";
  if (id.size() + suffix.size() <= kMaxName) return absl::StrCat("records/", id, suffix);
  const std::string tag = absl::StrCat("~", Sha256Hex(id).substr(0, 16));
  size_t keep = kMaxName - suffix.size() - tag.size();
  while (keep > 0 && (static_cast<unsigned char>(id[keep]) & 0xC0) == 0x80) --keep;  // not inside a UTF-8 character
  return absl::StrCat("records/", id.substr(0, keep), tag, suffix);
}

std::string CacheRecordInfo::Group() const {
  const std::string suffix = absl::StrCat("#", window);
  if (window >= 0 && absl::EndsWith(id, suffix)) return id.substr(0, id.size() - suffix.size());
  return id;
}

std::string CacheRecordInfo::BucketKey() const {
  // Image keys stay as they were ("HxW/L"); video keys add the latent frames ("FxHxW/L").
  const std::string refs = references > 0 ? absl::StrCat("+", references, "ref") : "";
  if (frames > 0) return absl::StrCat(frames, "x", grid_h, "x", grid_w, "/", text_len, refs);
  return absl::StrCat(grid_h, "x", grid_w, "/", text_len, refs);
}

namespace {

// The latents' shape for the record's layout: [grid_h·grid_w, C] (image) or [C, frames, grid_h, grid_w] (video).
absl::Status CheckLatentShape(const at::Tensor& latents, const CacheRecordInfo& r, int64_t latent_channels) {
  if (r.frames > 0) {
    if (latents.dim() == 4 && latents.size(0) == latent_channels && latents.size(1) == r.frames &&
        latents.size(2) == r.grid_h && latents.size(3) == r.grid_w) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("latents shape ", ShapeString(latents.sizes()), " is not [",
                                                   latent_channels, ", ", r.frames, ", ", r.grid_h, ", ", r.grid_w,
                                                   "] (video: channels, frames, latent grid)"));
  }
  if (latents.dim() == 2 && latents.size(0) == r.grid_h * r.grid_w && latents.size(1) == latent_channels) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("latents shape ", ShapeString(latents.sizes()),
                                                 " does not match grid ", r.grid_h, "x", r.grid_w, " with ",
                                                 latent_channels, " channels"));
}

}  // namespace

// One pass (aminmax) on the good path; NaN fails both comparisons.
absl::Status CheckCacheValues(const at::Tensor& t, const char* name, double bound) {
  if (t.numel() == 0) return absl::OkStatus();
  auto [lo, hi] = at::aminmax(t);
  if (lo.item<double>() >= -bound && hi.item<double>() <= bound) return absl::OkStatus();
  at::Tensor flat = t.flatten();
  const int64_t first = at::logical_not(at::abs(flat) <= bound).to(at::kByte).argmax().item<int64_t>();
  const double value = flat[first].item<double>();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s %s holds %s at element %d: %s (finite values within ±%g expected; a corrupt file, or an encoder bug)", name,
      ShapeString(t.sizes()), std::isfinite(value) ? "an absurd value" : "a non-finite value", first,
      absl::StrFormat("%g", value), bound));
}

std::string CacheLayout::ToString() const {
  std::string out = absl::StrCat(latent_channels, " channels, text ", text_dim);
  if (!conditioning.empty()) {
    absl::StrAppend(&out, ", conditioning ", conditioning, " (", condition_channels, " channels, image_dim ", image_dim,
                    ")");
  }
  return out;
}

std::string CacheSampleChecksum(const at::Tensor& latents, const at::Tensor& prompt_embeds) {
  return CacheSampleChecksum(CacheSample{latents, prompt_embeds});
}

std::string CacheSampleChecksum(const CacheSample& sample) {
  uint32_t crc = 0;
  for (const at::Tensor& t : {sample.latents, sample.prompt_embeds, sample.condition, sample.image_embeds,
                              sample.loss_mask, sample.references}) {
    if (!t.defined()) continue;
    at::Tensor c = t.to(at::kFloat).contiguous();
    crc = Crc32c(crc, c.data_ptr(), static_cast<size_t>(c.numel()) * sizeof(float));
  }
  return absl::StrFormat("crc32c:%08x", crc);
}

absl::StatusOr<CacheIndex> ReadCacheIndex(const std::string& dir) {
  std::string path = JoinPath(dir, "index.json");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  if (j.value("format", "") != kFormat) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": format is not ", kFormat));
  }
  CacheIndex index;
  try {
    index.encoder = j.value("encoder", "");
    index.latent_channels = j.at("latent_channels").get<int64_t>();
    index.text_dim = j.at("text_dim").get<int64_t>();
    index.conditioning = j.value("conditioning", "");
    index.condition_channels = j.value("condition_channels", int64_t{0});
    index.image_dim = j.value("image_dim", int64_t{0});
    if (index.condition_channels < 0 || index.image_dim < 0 ||
        index.conditioning.empty() != (index.condition_channels == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": conditioning '", index.conditioning, "' with ",
                                                     index.condition_channels, " condition channels and image_dim ",
                                                     index.image_dim, " (a kind needs channels, and back)"));
    }
    for (const auto& r : j.at("records")) {
      CacheRecordInfo info;
      info.id = r.at("id").get<std::string>();
      info.file = r.at("file").get<std::string>();
      info.grid_h = r.at("grid_h").get<int64_t>();
      info.grid_w = r.at("grid_w").get<int64_t>();
      info.text_len = r.at("text_len").get<int64_t>();
      info.hash = r.value("hash", "");
      info.bytes = r.value("bytes", int64_t{-1});
      info.bucket = r.value("bucket", "");
      info.frames = r.value("frames", int64_t{0});
      info.checksum = r.value("checksum", "");
      info.resolution = r.value("resolution", int64_t{0});
      info.sample = r.value("sample", "");
      info.window = r.value("window", int64_t{-1});
      info.references = r.value("references", int64_t{0});
      if (info.references < 0 || info.references > kMaxReferences) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": record ", info.id, " references ", info.references, " is not 0..", kMaxReferences));
      }
      if (info.frames < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": record ", info.id, " frames < 0"));
      index.records.push_back(info);
    }
    if (j.contains("empty_prompt")) {
      const auto& e = j.at("empty_prompt");
      index.empty_prompt.text_len = e.at("text_len").get<int64_t>();
      index.empty_prompt.checksum = e.value("checksum", "");
      if (index.empty_prompt.text_len <= 0 || e.value("file", "") != kEmptyPromptFile) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": empty_prompt must name ", kEmptyPromptFile, " with a positive text_len"));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return index;
}

absl::Status WriteCacheIndex(const std::string& dir, const CacheIndex& index) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["encoder"] = index.encoder;
  j["latent_channels"] = index.latent_channels;
  j["text_dim"] = index.text_dim;
  if (!index.conditioning.empty()) {  // text-to-video and image caches stay byte-for-byte as before
    j["conditioning"] = index.conditioning;
    j["condition_channels"] = index.condition_channels;
    j["image_dim"] = index.image_dim;
  }
  j["records"] = nlohmann::ordered_json::array();
  for (const auto& r : index.records) {
    nlohmann::ordered_json e = {{"id", r.id},         {"file", r.file},         {"grid_h", r.grid_h},
                                {"grid_w", r.grid_w}, {"text_len", r.text_len}, {"hash", r.hash},
                                {"bytes", r.bytes},   {"bucket", r.bucket}};
    if (r.frames > 0) e["frames"] = r.frames;  // image entries stay byte-for-byte as before
    if (!r.checksum.empty()) e["checksum"] = r.checksum;
    if (r.resolution > 0) e["resolution"] = r.resolution;  // caches of one resolution stay byte-for-byte as before
    if (!r.sample.empty()) e["sample"] = r.sample;
    if (r.window >= 0) e["window"] = r.window;
    if (r.references > 0) e["references"] = r.references;
    j["records"].push_back(e);
  }
  if (index.empty_prompt.present()) {  // caches without one stay byte-for-byte as before
    j["empty_prompt"] = {{"file", kEmptyPromptFile},
                         {"text_len", index.empty_prompt.text_len},
                         {"checksum", index.empty_prompt.checksum}};
  }
  return WriteFileAtomic(JoinPath(dir, "index.json"), j.dump(1));
}

absl::StatusOr<std::unique_ptr<CacheReader>> CacheReader::Open(const std::string& dir) {
  auto reader = std::make_unique<CacheReader>();
  reader->dirs_ = {dir};
  ASSIGN_OR_RETURN(reader->index_, ReadCacheIndex(dir));
  reader->empty_prompts_ = {reader->index_.empty_prompt};
  if (reader->index_.records.empty())
    return absl::InvalidArgumentError(absl::StrCat(dir, ": the cache has no records"));
  const auto unchecked = std::count_if(reader->index_.records.begin(), reader->index_.records.end(),
                                       [](const CacheRecordInfo& r) { return r.checksum.empty(); });
  if (unchecked > 0) {
    LogWarning("cache ", dir, ": ", unchecked, " of ", reader->index_.records.size(),
               " records have no checksum in index.json (written before checksums): their bytes cannot be verified; "
               "rerun encoder_worker on the cache to add them");
  }
  return reader;
}

absl::StatusOr<std::unique_ptr<CacheReader>> CacheReader::OpenAll(
    const std::vector<std::string>& dirs, const std::vector<std::vector<int64_t>>& resolutions) {
  if (dirs.empty()) return absl::InvalidArgumentError("no cache folder to read");
  const bool filtered = std::any_of(resolutions.begin(), resolutions.end(), [](const auto& r) { return !r.empty(); });
  if (dirs.size() == 1 && !filtered) return Open(dirs[0]);
  auto all = std::make_unique<CacheReader>();
  for (size_t k = 0; k < dirs.size(); ++k) {
    ASSIGN_OR_RETURN(std::unique_ptr<CacheReader> one, Open(dirs[k]));
    const CacheIndex& index = one->index();
    if (k == 0) {
      all->index_ = CacheIndex::For(index.encoder, index.layout());
    } else if (index.encoder != all->index_.encoder || index.layout() != all->index_.layout()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "caches ", dirs[0], " and ", dirs[k], " were made by different encoders (", all->index_.encoder, ", ",
          all->index_.layout().ToString(), " vs ", index.encoder, ", ", index.layout().ToString(),
          "): one LoRA trains on one text encoder's embeddings and one VAE's latents; encode both with the same one"));
    }
    all->dirs_.push_back(dirs[k]);
    all->empty_prompts_.push_back(index.empty_prompt);
    const std::vector<int64_t> keep = k < resolutions.size() ? resolutions[k] : std::vector<int64_t>{};
    size_t kept = 0;
    for (const CacheRecordInfo& r : index.records) {
      if (!keep.empty() && std::find(keep.begin(), keep.end(), r.resolution) == keep.end()) continue;
      all->index_.records.push_back(r);
      all->source_.push_back(static_cast<int>(k));
      ++kept;
    }
    if (kept == 0) {
      const bool one = std::all_of(index.records.begin(), index.records.end(),
                                   [](const CacheRecordInfo& r) { return r.resolution == 0; });
      return absl::InvalidArgumentError(
          absl::StrCat("cache ", dirs[k],
                       one ? " was encoded at one resolution: `resolutions:` picks among the resolutions of "
                             "a cache made by encoder_worker --resolution A,B,..."
                           : absl::StrCat(" holds no record of resolutions ", absl::StrJoin(keep, ", "))));
    }
  }
  return all;
}

absl::StatusOr<at::Tensor> CacheReader::EmptyPrompt(int source) const {
  const std::string& dir = dirs_.at(static_cast<size_t>(source));
  const EmptyPromptInfo& info = empty_prompts_.at(static_cast<size_t>(source));
  if (!info.present()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cache ", dir,
                     " has no embedding of the empty caption (made before caption dropout): rerun "
                     "encoder_worker on it, which adds one and keeps every record"));
  }
  return ReadEmptyPrompt(dir, index_.layout(), info, index_.encoder);
}

namespace {

// The image-to-video tensors a record of a conditioned cache adds: "condition" [condition_channels, frames or 1,
// grid_h, grid_w] and, with image_dim, "image_embeds" [tokens, image_dim]; both sane. A record of a plain cache that
// carries them is refused too (it was written for another layout).
absl::Status LoadConditioning(const SafetensorsFile& file, const CacheRecordInfo& r, const CacheLayout& layout,
                              CacheSample& s) {
  const bool has_condition = file.Contains("condition"), has_image = file.Contains("image_embeds");
  if (has_condition != (layout.condition_channels > 0) || has_image != (layout.image_dim > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the record ", has_condition ? "has" : "lacks", " 'condition' and ", has_image ? "has" : "lacks",
        " 'image_embeds', the index says conditioning '", layout.conditioning, "' with image_dim ", layout.image_dim));
  }
  if (has_condition) {
    ASSIGN_OR_RETURN(s.condition, file.Load("condition", at::kFloat));
    const at::Tensor& c = s.condition;
    if (c.dim() != 4 || c.size(0) != layout.condition_channels || (c.size(1) != r.frames && c.size(1) != 1) ||
        c.size(2) != r.grid_h || c.size(3) != r.grid_w) {
      return absl::InvalidArgumentError(absl::StrCat("condition shape ", ShapeString(c.sizes()), " is not [",
                                                     layout.condition_channels, ", ", r.frames, " or 1, ", r.grid_h,
                                                     ", ", r.grid_w, "]"));
    }
    RETURN_IF_ERROR(CheckCacheValues(c, "condition", kMaxAbsLatent));
  }
  if (has_image) {
    ASSIGN_OR_RETURN(s.image_embeds, file.Load("image_embeds", at::kFloat));
    if (s.image_embeds.dim() != 2 || s.image_embeds.size(1) != layout.image_dim) {
      return absl::InvalidArgumentError(absl::StrCat("image_embeds shape ", ShapeString(s.image_embeds.sizes()),
                                                     " is not [tokens, ", layout.image_dim, "]"));
    }
    RETURN_IF_ERROR(CheckCacheValues(s.image_embeds, "image_embeds", kMaxAbsPromptEmbed));
  }
  return absl::OkStatus();
}

// The optional loss mask: [grid_h, grid_w], every value in [0, 1].
absl::Status LoadLossMask(const SafetensorsFile& file, const CacheRecordInfo& r, CacheSample& s) {
  if (!file.Contains("loss_mask")) return absl::OkStatus();
  ASSIGN_OR_RETURN(s.loss_mask, file.Load("loss_mask", at::kFloat));
  const at::Tensor& m = s.loss_mask;
  if (m.dim() != 2 || m.size(0) != r.grid_h || m.size(1) != r.grid_w) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_mask shape ", ShapeString(m.sizes()), " is not [", r.grid_h, ", ", r.grid_w, "]"));
  }
  auto [lo, hi] = at::aminmax(m);
  if (!(lo.item<double>() >= 0 && hi.item<double>() <= 1)) {  // NaN fails both
    return absl::InvalidArgumentError(
        absl::StrCat("loss_mask holds values in [", lo.item<double>(), ", ", hi.item<double>(), "], not [0, 1]"));
  }
  if (hi.item<double>() <= 0) return absl::InvalidArgumentError("loss_mask is zero everywhere: nothing would train");
  return absl::OkStatus();
}

// The optional reference images: [n, grid_h·grid_w, C] with n = the metadata's count (1..kMaxReferences), sane.
absl::Status LoadReferences(const SafetensorsFile& file, const CacheRecordInfo& r, const CacheLayout& layout,
                            CacheSample& s) {
  if (file.Contains("references") != (r.references > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("the record ", r.references > 0 ? "lacks" : "has",
                                                   " 'references', its metadata says ", r.references));
  }
  if (r.references == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(s.references, file.Load("references", at::kFloat));
  const at::Tensor& x = s.references;
  if (x.dim() != 3 || x.size(0) != r.references || x.size(1) != r.grid_h * r.grid_w ||
      x.size(2) != layout.latent_channels) {
    return absl::InvalidArgumentError(absl::StrCat("references shape ", ShapeString(x.sizes()), " is not [",
                                                   r.references, ", ", r.grid_h * r.grid_w, ", ",
                                                   layout.latent_channels, "]"));
  }
  return CheckCacheValues(x, "references", kMaxAbsLatent);
}

// The record's metadata: id, hash, bucket, grid, text length and frames.
absl::StatusOr<CacheRecordInfo> RecordMetadata(const SafetensorsFile& file) {
  const auto& meta = file.metadata();
  auto get = [&](const char* key) {
    auto it = meta.find(key);
    return it == meta.end() ? std::string() : it->second;
  };
  CacheRecordInfo r;
  r.id = get("id");
  r.hash = get("hash");
  r.bucket = get("bucket");
  r.sample = get("sample");
  if (!get("window").empty() && (!absl::SimpleAtoi(get("window"), &r.window) || r.window < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("metadata window '", get("window"), "' is not an index"));
  }
  if (!absl::SimpleAtoi(get("grid_h"), &r.grid_h) || !absl::SimpleAtoi(get("grid_w"), &r.grid_w) ||
      !absl::SimpleAtoi(get("text_len"), &r.text_len)) {
    return absl::InvalidArgumentError("metadata lacks grid_h / grid_w / text_len");
  }
  if (!get("frames").empty() && (!absl::SimpleAtoi(get("frames"), &r.frames) || r.frames < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("metadata frames '", get("frames"), "' is not a count"));
  }
  if (!get("resolution").empty() && (!absl::SimpleAtoi(get("resolution"), &r.resolution) || r.resolution <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("metadata resolution '", get("resolution"), "' is not a size"));
  }
  if (!get("references").empty() &&
      (!absl::SimpleAtoi(get("references"), &r.references) || r.references < 1 || r.references > kMaxReferences)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata references '", get("references"), "' is not 1..", kMaxReferences));
  }
  return r;
}

// Latents and prompt embeddings, shaped as the record and the layout say and sane.
absl::Status LoadMainTensors(const SafetensorsFile& file, const CacheRecordInfo& r, const CacheLayout& layout,
                             CacheSample& s) {
  auto latents = file.Load("latents", at::kFloat);
  auto text = file.Load("prompt_embeds", at::kFloat);
  if (!latents.ok() || !text.ok()) return absl::InvalidArgumentError("missing latents or prompt_embeds");
  s.latents = *latents;
  s.prompt_embeds = *text;
  RETURN_IF_ERROR(CheckLatentShape(s.latents, r, layout.latent_channels));
  if (s.prompt_embeds.dim() != 2 || s.prompt_embeds.size(0) != r.text_len ||
      s.prompt_embeds.size(1) != layout.text_dim) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_embeds shape ", ShapeString(s.prompt_embeds.sizes()),
                                                   " does not match text_len ", r.text_len, " and text_dim ",
                                                   layout.text_dim));
  }
  RETURN_IF_ERROR(CheckCacheValues(s.latents, "latents", kMaxAbsLatent));
  return CheckCacheValues(s.prompt_embeds, "prompt_embeds", kMaxAbsPromptEmbed);
}

}  // namespace

absl::StatusOr<CacheSample> ReadCacheRecord(const std::string& dir, const std::string& file, const CacheLayout& layout,
                                            CacheRecordInfo* info, std::string* encoder) {
  std::string path = JoinPath(dir, file);
  auto fail = [&](const absl::Status& why) {
    return absl::DataLossError(absl::StrCat("cache record ", path, ": ", why.message()));
  };
  auto opened = SafetensorsFile::Open(path);
  if (!opened.ok()) return fail(opened.status());
  const SafetensorsFile& f = **opened;
  auto r = RecordMetadata(f);
  if (!r.ok()) return fail(r.status());
  r->file = file;
  r->bytes = FileSize(path);
  CacheSample s;
  s.grid_h = r->grid_h;
  s.grid_w = r->grid_w;
  s.frames = r->frames;
  if (absl::Status main = LoadMainTensors(f, *r, layout, s); !main.ok()) return fail(main);
  if (absl::Status cond = LoadConditioning(f, *r, layout, s); !cond.ok()) return fail(cond);
  if (absl::Status mask = LoadLossMask(f, *r, s); !mask.ok()) return fail(mask);
  if (absl::Status refs = LoadReferences(f, *r, layout, s); !refs.ok()) return fail(refs);
  r->checksum = CacheSampleChecksum(s);
  if (info) *info = *r;
  if (encoder) {
    auto it = f.metadata().find("encoder");
    *encoder = it == f.metadata().end() ? std::string() : it->second;
  }
  return s;
}

absl::StatusOr<CacheSample> CacheReader::Load(size_t i) const {
  const CacheRecordInfo& info = index_.records.at(i);
  const std::string& dir = dirs_.at(static_cast<size_t>(source(i)));
  std::string path = JoinPath(dir, info.file);
  auto fail = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("cache record ", info.id, " (", path, "): ", why));
  };
  if (info.bytes >= 0 && FileSize(path) != info.bytes) {
    return fail(absl::StrCat("size ", FileSize(path), " bytes, index says ", info.bytes));
  }
  CacheRecordInfo found;
  auto s = ReadCacheRecord(dir, info.file, index_.layout(), &found, nullptr);
  if (!s.ok()) return fail(std::string(s.status().message()));
  if (!info.checksum.empty() && found.checksum != info.checksum) {
    return fail(absl::StrCat("checksum of the tensor bytes is ", found.checksum, ", the index says ", info.checksum,
                             " (the file changed after it was written; rerun encoder_worker to rebuild it)"));
  }
  if (found.hash != info.hash) return fail("hash in the record differs from the index");
  if (found.grid_h != info.grid_h || found.grid_w != info.grid_w || found.text_len != info.text_len ||
      found.frames != info.frames || found.resolution != info.resolution || found.sample != info.sample ||
      found.window != info.window || found.references != info.references) {
    return fail("grid, frames, resolution, references or text length in the record differs from the index");
  }
  return s;
}

absl::StatusOr<CacheRecordInfo> WriteCacheRecord(const std::string& dir, const std::string& id, const std::string& hash,
                                                 const std::string& encoder, const CacheSample& sample,
                                                 const std::string& bucket, int64_t resolution,
                                                 const std::string& sample_name, int64_t window) {
  RETURN_IF_ERROR(MakeDirs(JoinPath(dir, "records")));
  CacheRecordInfo info;
  info.id = id;
  info.file = CacheRecordFile(id);
  info.grid_h = sample.grid_h;
  info.grid_w = sample.grid_w;
  info.text_len = sample.prompt_embeds.size(0);
  info.hash = hash;
  info.bucket = bucket;
  info.frames = sample.frames;
  info.resolution = resolution;
  info.sample = sample_name;
  info.window = window;
  info.references = sample.references.defined() ? sample.references.size(0) : 0;
  std::map<std::string, std::string> meta = {{"id", id},
                                             {"hash", hash},
                                             {"encoder", encoder},
                                             {"grid_h", std::to_string(info.grid_h)},
                                             {"grid_w", std::to_string(info.grid_w)},
                                             {"text_len", std::to_string(info.text_len)},
                                             {"bucket", bucket}};
  if (sample.frames > 0) meta["frames"] = std::to_string(sample.frames);
  if (resolution > 0) meta["resolution"] = std::to_string(resolution);
  if (!sample_name.empty()) meta["sample"] = sample_name;
  if (window >= 0) meta["window"] = std::to_string(window);
  if (info.references > 0) meta["references"] = std::to_string(info.references);
  std::string path = JoinPath(dir, info.file);
  CacheSample stored = sample;
  std::map<std::string, at::Tensor> tensors;
  for (auto [name, t] : {std::pair<const char*, at::Tensor*>{"latents", &stored.latents},
                         {"prompt_embeds", &stored.prompt_embeds},
                         {"condition", &stored.condition},
                         {"image_embeds", &stored.image_embeds},
                         {"loss_mask", &stored.loss_mask},
                         {"references", &stored.references}}) {
    if (!t->defined()) continue;
    *t = t->to(at::kCPU, at::kFloat).contiguous();
    tensors[name] = *t;
  }
  RETURN_IF_ERROR(WriteSafetensors(path, tensors, meta));
  info.bytes = FileSize(path);
  info.checksum = CacheSampleChecksum(stored);
  return info;
}

absl::Status WriteSyntheticCache(const std::string& dir, int64_t latent_channels, int64_t text_dim, int64_t num_samples,
                                 const std::vector<std::pair<int64_t, int64_t>>& grids, int64_t text_len, uint64_t seed,
                                 int64_t num_concepts, int64_t frames) {
  if (grids.empty() || num_samples <= 0 || num_concepts <= 0 || frames < 0) {
    return absl::InvalidArgumentError("synthetic cache needs samples, grids and concepts");
  }
  RETURN_IF_ERROR(MakeDirs(dir));
  CacheIndex index;
  index.encoder = "synthetic";
  index.latent_channels = latent_channels;
  index.text_dim = text_dim;
  for (int64_t i = 0; i < num_samples; ++i) {
    const int64_t concept_id = i % num_concepts;
    const auto [h, w] = grids[static_cast<size_t>(i / num_concepts) % grids.size()];
    auto concept_gen = at::detail::createCPUGenerator(MixSeed(seed, 1000 + concept_id));
    auto sample_gen = at::detail::createCPUGenerator(MixSeed(seed, 2000000 + i));
    // A concept is a smooth pattern: a few channel loadings times low-frequency waves over the grid.
    at::Tensor loadings = at::randn({3, latent_channels}, concept_gen);
    at::Tensor phases = at::rand({3, 2}, concept_gen) * 6.2831853;
    at::Tensor text = at::randn({text_len, text_dim}, concept_gen);
    at::Tensor ys = at::arange(h, at::kFloat).unsqueeze(1).expand({h, w}).reshape({h * w}) / std::max<int64_t>(h, 1);
    at::Tensor xs = at::arange(w, at::kFloat).unsqueeze(0).expand({h, w}).reshape({h * w}) / std::max<int64_t>(w, 1);
    at::Tensor latents = at::zeros({h * w, latent_channels});
    for (int k = 0; k < 3; ++k) {
      at::Tensor wave =
          at::sin(6.2831853 * (k + 1) * ys + phases[k][0]) * at::cos(6.2831853 * (k + 1) * xs + phases[k][1]);
      latents += wave.unsqueeze(1) * loadings[k].unsqueeze(0);
    }
    latents = latents / std::sqrt(1.5) + 0.1 * at::randn({h * w, latent_channels}, sample_gen);
    if (frames > 0) latents = VideoFromPattern(latents, frames, h, w, sample_gen);
    CacheSample s{latents, text + 0.05 * at::randn({text_len, text_dim}, sample_gen), h, w, frames};
    std::string id = absl::StrFormat("%06d", i);
    ASSIGN_OR_RETURN(CacheRecordInfo info,
                     WriteCacheRecord(dir, id, absl::StrFormat("synthetic-%d-%d", seed, i), "synthetic", s));
    index.records.push_back(info);
  }
  // The empty caption: an embedding of its own, near none of the concepts'.
  auto empty_gen = at::detail::createCPUGenerator(MixSeed(seed, 0xe3b7));
  ASSIGN_OR_RETURN(index.empty_prompt, WriteEmptyPrompt(dir, "synthetic", at::randn({text_len, text_dim}, empty_gen)));
  return WriteCacheIndex(dir, index);
}

}  // namespace baton
