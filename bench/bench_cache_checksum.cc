// What verifying a cache record costs on every read (core/data/cache.h): writes one record of a real size,
// then times CacheReader::Load (read, shape/metadata checks, value bounds, checksum) and the CRC32C of its tensor
// bytes alone, hot in the page cache (the disk read is not counted: it only makes the share smaller).
//
//   bench_cache_checksum [--tokens=4096] [--channels=128] [--text_len=512] [--text_dim=15360] [--reps=20]
// Defaults: a FLUX.2-dev record at 1024² (latents [4096, 128], Mistral embeddings [512, 15360]; 33 MB fp32).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <absl/flags/flag.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "core/data/cache.h"
#include "core/data/crc32c.h"
#include "core/util/files.h"

namespace {

using baton::MedianSeconds;

}  // namespace

ABSL_FLAG(int64_t, tokens, 4096, "image tokens of the record's latents [tokens, channels]");
ABSL_FLAG(int64_t, channels, 128, "latent channels");
ABSL_FLAG(int64_t, text_len, 512, "text tokens of the record's prompt embeddings [text_len, text_dim]");
ABSL_FLAG(int64_t, text_dim, 15360, "prompt embedding width");
ABSL_FLAG(int64_t, reps, 20, "timed repetitions (the median is reported)");

int main(int argc, char** argv) {
  if (absl::Status s = baton::ParseBenchFlags(
          argc, argv,
          "bench_cache_checksum [--tokens=4096] [--channels=128] [--text_len=512] [--text_dim=15360] [--reps=20]");
      !s.ok()) {
    std::fprintf(stderr, "bench_cache_checksum: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const int64_t tokens = absl::GetFlag(FLAGS_tokens), channels = absl::GetFlag(FLAGS_channels);
  const int64_t text_len = absl::GetFlag(FLAGS_text_len), text_dim = absl::GetFlag(FLAGS_text_dim);
  const int64_t reps = absl::GetFlag(FLAGS_reps);
  at::set_num_threads(1);
  const std::string dir = absl::StrCat("/tmp/bench_cache_checksum_", ::getpid());
  (void)baton::MakeDirs(dir);
  int64_t side = 1;
  while (side * side < tokens) ++side;
  baton::CacheSample sample{at::randn({side * side, channels}), at::randn({text_len, text_dim}), side, side, 0};
  auto info = baton::WriteCacheRecord(dir, "r", "h", "bench", sample);
  if (!info.ok()) return 1;
  baton::CacheIndex index = baton::CacheIndex::For("bench", {channels, text_dim});
  index.records.push_back(*info);
  if (!baton::WriteCacheIndex(dir, index).ok()) return 1;
  auto reader = baton::CacheReader::Open(dir);
  if (!reader.ok()) return 1;
  const double load = MedianSeconds(static_cast<int>(reps), [&] { (void)(*reader)->Load(0); });
  const double crc = MedianSeconds(static_cast<int>(reps),
                                   [&] { (void)baton::CacheSampleChecksum(sample.latents, sample.prompt_embeds); });
  std::vector<unsigned char> bytes(static_cast<size_t>(sample.latents.numel() + sample.prompt_embeds.numel()) * 4);
  const double portable = MedianSeconds(static_cast<int>(reps), [&] {
    volatile uint32_t c = baton::Crc32cPortable(0, bytes.data(), bytes.size());
    (void)c;
  });
  const double mb = static_cast<double>(bytes.size()) / 1e6;
  std::printf("record: latents [%lld, %lld] + prompt_embeds [%lld, %lld] = %.1f MB fp32, %lld reps, medians\n",
              static_cast<long long>(side * side), static_cast<long long>(channels), static_cast<long long>(text_len),
              static_cast<long long>(text_dim), mb, static_cast<long long>(reps));
  std::printf("CacheReader::Load (page cache hot): %.2f ms\n", load * 1e3);
  std::printf("checksum (crc32c, this CPU's path): %.2f ms = %.1f GB/s = %.0f%% of Load\n", crc * 1e3, mb / crc / 1e3,
              100 * crc / load);
  std::printf("checksum (crc32c, portable table): %.2f ms = %.1f GB/s\n", portable * 1e3, mb / portable / 1e3);
  std::printf("{\"record_mb\": %.2f, \"load_ms\": %.3f, \"checksum_ms\": %.3f, \"portable_checksum_ms\": %.3f}\n", mb,
              load * 1e3, crc * 1e3, portable * 1e3);
  (void)baton::RemoveAll(dir);
  return 0;
}
