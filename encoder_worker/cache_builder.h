// Builds the training cache from a dataset folder: scan, assign aspect-ratio buckets, and for each sample
// encode the bucket-sized image (VAE → packed latents) and its caption (text encoder → prompt embeddings)
// into one record. Reruns keep every record whose source hash, bucket and encoder identity are unchanged
// and that reads back whole; a corrupt or partial record is re-encoded, never used. Per-file problems
// are reported and the rest of the dataset still encodes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include "encoder_worker/bucket.h"
#include "encoder_worker/dataset.h"
#include "encoder_worker/image.h"

namespace baton {

// What turns one sample into cache tensors. The real one is Flux2SampleEncoder (VAE + text encoder).
class SampleEncoder {
 public:
  virtual ~SampleEncoder() = default;
  // Names the models and settings; a record made by another identity is re-encoded.
  virtual std::string identity() const = 0;
  virtual int64_t latent_channels() const = 0;
  virtual int64_t text_dim() const = 0;
  // image: already resized/cropped to its bucket → packed latents [grid_h·grid_w, C] fp32.
  virtual absl::StatusOr<at::Tensor> EncodeImage(const Image& image) = 0;
  // caption → prompt embeddings [L, J] fp32.
  virtual absl::StatusOr<at::Tensor> EncodeText(const std::string& caption) = 0;
};

struct CacheBuildOptions {
  std::string dataset_dir;
  std::string cache_dir;
  std::string trigger;
  BucketSpec buckets;
};

struct CacheBuildProgress {
  int64_t done = 0, total = 0;
  int64_t encoded = 0, kept = 0, failed = 0;
  double elapsed_seconds = 0;
  std::string current;  // sample name
};

struct CacheBuildReport {
  int64_t samples = 0;       // images found with captions
  int64_t encoded = 0;       // newly encoded (including re-encoded corrupt ones)
  int64_t kept = 0;          // unchanged records skipped
  int64_t reencoded_corrupt = 0;
  std::vector<FileError> errors;  // scan and encode errors, per file
  double seconds = 0;
  double seconds_per_encoded_sample = 0;
};

// Pixels in [0, 255] RGB8 → [1, 3, H, W] fp32 in [-1, 1] (what the VAE expects).
at::Tensor ImageToPixels(const Image& image);

absl::StatusOr<CacheBuildReport> BuildCache(SampleEncoder& encoder, const CacheBuildOptions& options,
                                            const std::function<void(const CacheBuildProgress&)>& on_progress = {});

}  // namespace baton
