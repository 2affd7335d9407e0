// The encoded training cache: what the encoder worker writes and every trainer reads. One self-describing
// safetensors file per sample, so a rerun re-encodes only what changed, and an index written last and atomically,
// so a crash leaves at worst records the index does not list. Every record is checked against the index when
// read, so a corrupt record is an error naming the record and its file, never data.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace baton {

// Layout (format "baton-cache-v1"):
//   DIR/index.json                 {"format", "encoder", "latent_channels", "text_dim", "records": [{"id",
//                                    "file", "grid_h", "grid_w", "text_len", "hash", "bytes", "bucket",
//                                    "checksum"}...]}
//   DIR/records/<id>.safetensors   "latents" [grid_h·grid_w, C] fp32 (patchified, BatchNorm-normalised,
//                                  packed tokens, row-major over the grid), "prompt_embeds" [text_len, J];
//                                  metadata: id, hash, encoder, grid_h, grid_w, text_len, bucket.
//   Video records (Wan) add "frames" (latent frames F > 0) to the index entry and the metadata, and their
//   "latents" are [C, F, grid_h, grid_w] fp32 (VAE posterior mean, (z − latents_mean) / latents_std, as
//   WanPipeline expects; grid = latent height/width = pixels / 8). No "frames" (or 0) = the packed image layout
//   above, so every earlier cache reads exactly as before.
//   A record may add "loss_mask" [grid_h, grid_w] fp32 in [0, 1] (masked loss; CacheSample::loss_mask).
//   A FLUX.2 record may add "references" [n, grid_h·grid_w, C] fp32 (reference images, each packed as "latents" and
//   of the record's bucket; CacheSample::references), with "references": n (1..kMaxReferences) in its index entry.
//   Image-to-video caches name their `conditioning` in the index (the model family defines the kinds,
//   core/model/wan_i2v.h) with `condition_channels` and `image_dim`; each record then adds "condition"
//   [condition_channels, frames or 1, grid_h, grid_w] and, when image_dim > 0, "image_embeds" [tokens, image_dim].
// A record is checked against the index (shapes, hash, size, checksum) and for sane values when read.
struct CacheRecordInfo {
  std::string id;
  std::string file;                // relative to the cache directory
  int64_t grid_h = 0, grid_w = 0;  // latent token grid (image pixels / 16)
  int64_t text_len = 0;
  std::string hash;      // content hash of the source sample
  int64_t bytes = 0;     // file size, checked on read
  std::string bucket;    // pixel size the image was resized/cropped to, "WxH" ("" for synthetic data)
  int64_t frames = 0;    // latent frames of a video record ([C, F, H, W] latents); 0 = packed image layout
  std::string checksum;  // "crc32c:<8 hex>" of the tensor bytes; empty: an index written before checksums
  // The bucket resolution of a cache encoded at several (encoder_worker --resolution 512,768,1024: one record per
  // image per resolution, id "<image>@<resolution>"); 0 in a cache of one resolution (ids are the image names).
  int64_t resolution = 0;
  // The dataset file the record was encoded from, when the id is not its name (several resolutions, several clips of
  // one video: "walk.mp4#2@512"); "" otherwise.
  std::string sample;
  std::string SampleName() const { return sample.empty() ? id : sample; }
  // Of a video cut into several clips (encoder_worker --frame_extraction chunk|slide|uniform): which, from 0, its id
  // then ending in "#<window>"; -1 otherwise.
  int64_t window = -1;
  // FLUX.2 reference images the record carries (encoder_worker --control); 0: none.
  int64_t references = 0;
  // What the encoder worker encodes together: the id without "#<window>" (a video's clips are encoded, kept and
  // dropped together).
  std::string Group() const;
  // Micro-batches are formed within one bucket: same grid, frames, text length and number of reference images.
  std::string BucketKey() const;
};

// Bounds past which a cached value is corruption, not data: a record's values are finite, |latents| <=
// kMaxAbsLatent and |prompt_embeds| <= kMaxAbsPromptEmbed. Latents are normalised (≈ N(0, 1) per channel): 1e4 is
// ten thousand standard deviations. Prompt embeddings are text-encoder hidden states, whose "massive activations"
// reach a few thousand in a few channels (Sun et al. 2024: ~2.6e3 in Llama-2-7B); 1e6 leaves a factor of 300 and
// still keeps every square and sum of the loss far from fp32's 3.4e38. A flipped exponent bit gives ~1e38.
inline constexpr double kMaxAbsLatent = 1e4;
inline constexpr double kMaxAbsPromptEmbed = 1e6;
// Every value of `t` finite and within ±bound, else InvalidArgument naming the tensor (`name`), the first bad element
// and its value.
absl::Status CheckCacheValues(const at::Tensor& t, const char* name, double bound);

// The checksum of a sample's tensor bytes as a record stores them: "crc32c:<8 hex>" (core/data/crc32c.h) of
// latents then prompt_embeds (fp32 little-endian, contiguous), written by WriteCacheRecord and verified by every
// CacheReader::Load, every epoch (a 33.6 MB FLUX.2-dev record: 7 ms of an 18 ms hot-cache Load on one AMD EPYC core;
// bench/bench_cache_checksum.cc). An index written before checksums (no "checksum") still opens: its records get every
// other check, the reader warns once, and a rerun of the encoder worker adds them.
struct CacheSample {
  at::Tensor latents;        // [grid_h·grid_w, C] fp32, or [C, frames, grid_h, grid_w] for video
  at::Tensor prompt_embeds;  // [text_len, J] fp32
  int64_t grid_h = 0, grid_w = 0;
  int64_t frames = 0;    // 0: image layout
  at::Tensor condition;  // image-to-video conditioning [condition_channels, frames or 1, grid_h, grid_w]; or undefined
  at::Tensor image_embeds;  // [tokens, image_dim] (CLIP image embeddings); or undefined
  // Masked loss: the record's mask (NAME.mask.png, encoder_worker/dataset.h) averaged over each latent cell,
  // [grid_h, grid_w] fp32 in [0, 1], weighting the loss per token (and, for video, the same on every frame); or
  // undefined: every token counts fully.
  at::Tensor loss_mask;
  // FLUX.2 reference images (editing; encoder_worker --control): [n, grid_h·grid_w, C] fp32, each packed as `latents`
  // are and resized and cropped to the record's bucket as its image was; or undefined.
  at::Tensor references;
};
// The most reference images a record may carry (Flux2Pipeline takes any number; the peers' control folders, up to 4).
inline constexpr int64_t kMaxReferences = 4;
// The same for every tensor a sample holds: latents, prompt_embeds, then condition, image_embeds, loss_mask and
// references when defined (so a record without them keeps the checksum it always had).
std::string CacheSampleChecksum(const at::Tensor& latents, const at::Tensor& prompt_embeds);
std::string CacheSampleChecksum(const CacheSample& sample);

// What every record of a cache holds, by width: the checks a record is read against.
struct CacheLayout {
  int64_t latent_channels = 0;
  int64_t text_dim = 0;
  std::string conditioning;  // "": none; else the family's name for it (core/model/wan_i2v.h)
  int64_t condition_channels = 0;
  int64_t image_dim = 0;  // 0: no image_embeds
  bool operator==(const CacheLayout& o) const {
    return latent_channels == o.latent_channels && text_dim == o.text_dim && conditioning == o.conditioning &&
           condition_channels == o.condition_channels && image_dim == o.image_dim;
  }
  bool operator!=(const CacheLayout& o) const { return !(*this == o); }
  std::string ToString() const;  // "16 channels, text 4096[, conditioning K (C channels, image_dim D)]"
};

// The cache's embedding of the empty caption (caption dropout trains on it, core/train/batches.h): the encoder worker
// encodes "" once per cache folder, as Flux2Pipeline and WanPipeline encode prompt="", into
// DIR/empty_prompt.safetensors
// ("prompt_embeds" [text_len, text_dim] fp32; metadata: encoder). index.json lists it as "empty_prompt": {"file",
// "text_len", "checksum"} only when present, so a cache made before it reads as before (and a job that drops captions
// from it is refused with the fix: rerun encoder_worker, which adds it and keeps every record).
inline constexpr char kEmptyPromptFile[] = "empty_prompt.safetensors";
struct EmptyPromptInfo {
  int64_t text_len = 0;  // 0: the cache has none
  std::string checksum;  // CacheSampleChecksum-style "crc32c:<8 hex>" of the tensor bytes
  bool present() const { return text_len > 0; }
};

struct CacheIndex {
  std::string encoder;
  int64_t latent_channels = 0;
  int64_t text_dim = 0;
  std::string conditioning;  // CacheLayout's three, written to index.json only when conditioning is set
  int64_t condition_channels = 0;
  int64_t image_dim = 0;
  std::vector<CacheRecordInfo> records;
  EmptyPromptInfo empty_prompt;
  CacheLayout layout() const { return {latent_channels, text_dim, conditioning, condition_channels, image_dim}; }
  // An empty index of `layout`.
  static CacheIndex For(const std::string& encoder, const CacheLayout& layout) {
    return {encoder,
            layout.latent_channels,
            layout.text_dim,
            layout.conditioning,
            layout.condition_channels,
            layout.image_dim,
            {}};
  }
};

class CacheReader {
 public:
  static absl::StatusOr<std::unique_ptr<CacheReader>> Open(const std::string& dir);
  // Several caches read as one (a job's `datasets:`): index() lists every folder's records, folder after folder, and
  // record i is read from its own folder (source(i)). The folders must have one encoder and one layout: embeddings of
  // two text encoders, or latents of two VAEs, do not train one LoRA. One folder reads exactly as Open(dir).
  // `resolutions[k]`, when given and not empty, keeps only folder k's records of those bucket resolutions (a job's
  // `resolutions:`); InvalidArgument when the folder was encoded at one resolution or holds none of them.
  static absl::StatusOr<std::unique_ptr<CacheReader>> OpenAll(
      const std::vector<std::string>& dirs, const std::vector<std::vector<int64_t>>& resolutions = {});
  const CacheIndex& index() const { return index_; }
  size_t size() const { return index_.records.size(); }
  // Reads and validates record i (size, shapes, metadata and checksum against the index; finite, sane values).
  // DataLoss naming the record id and its file.
  absl::StatusOr<CacheSample> Load(size_t i) const;
  // The folders, in the order given, and which of them record i is in.
  const std::vector<std::string>& dirs() const { return dirs_; }
  int source(size_t i) const { return source_.empty() ? 0 : source_.at(i); }
  // Folder `source`'s empty-caption embedding [text_len, text_dim] fp32, checked against its index (shape, checksum,
  // sane values). FailedPrecondition naming the folder when it has none.
  absl::StatusOr<at::Tensor> EmptyPrompt(int source) const;

 private:
  std::vector<std::string> dirs_;
  std::vector<EmptyPromptInfo> empty_prompts_;  // per folder
  std::vector<int> source_;                     // per record; empty: one folder
  CacheIndex index_;
};

// A record's file, relative to the cache: records/<id>.safetensors, or, where that name and its temporary's suffix
// would pass the file system's 255 bytes (a long caption-like file name, ~75 CJK characters), the id cut at a
// character boundary plus "~" and 16 hex of its SHA-256, so every sample gets a file and two long ids never share one.
std::string CacheRecordFile(const std::string& id);
// Writes one record file atomically and returns its index entry.
absl::StatusOr<CacheRecordInfo> WriteCacheRecord(const std::string& dir, const std::string& id, const std::string& hash,
                                                 const std::string& encoder, const CacheSample& sample,
                                                 const std::string& bucket = "", int64_t resolution = 0,
                                                 const std::string& sample_name = "", int64_t window = -1);
// Reads a record file on its own (no index) and checks it fully: metadata, shapes, finite values within the bounds
// above. Used to decide whether a rerun may keep it. `info` receives the entry the index should list, with the
// checksum of the bytes it read (the caller compares it with an index's).
absl::StatusOr<CacheSample> ReadCacheRecord(const std::string& dir, const std::string& file, const CacheLayout& layout,
                                            CacheRecordInfo* info, std::string* encoder);
// Writes the index atomically (last, after the records).
absl::Status WriteCacheIndex(const std::string& dir, const CacheIndex& index);
absl::StatusOr<CacheIndex> ReadCacheIndex(const std::string& dir);

// A deterministic synthetic cache for a model config: `num_samples` records spread over `grids` (token
// grids), text length `text_len`, and an empty-caption embedding unlike any concept's. Samples are drawn around a few
// "concepts" (a latent prototype paired with a text embedding), so a LoRA can learn the text→image relation and the
// loss visibly falls. Used until real images are encoded, and by tests. frames > 0 writes video records: latents [C,
// frames, h, w] (grids are then latent grids).
absl::Status WriteSyntheticCache(const std::string& dir, int64_t latent_channels, int64_t text_dim, int64_t num_samples,
                                 const std::vector<std::pair<int64_t, int64_t>>& grids, int64_t text_len, uint64_t seed,
                                 int64_t num_concepts = 4, int64_t frames = 0);

}  // namespace baton
