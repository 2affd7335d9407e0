#include "core/train/job_fingerprint.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>

#include "core/util/files.h"
#include "core/util/sha256.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr int kSampleBlocks = 16;
constexpr uint64_t kSampleBytes = 4096;
constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // safetensors' own limit

// Shortest text that reads back as the same double: 1e-4 and 1.0000001e-4 differ, 0.0001 prints as such.
std::string Num(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : absl::StrCat(v);
}

const char* FingerprintBool(bool b) { return b ? "true" : "false"; }

// A non-default optimizer type with the settings of its own.
std::string TypeSettings(const OptimizerConfig& o) {
  if (o.type == "prodigy") {
    const ProdigyConfig& p = o.prodigy;
    return absl::StrCat("prodigy (beta3 ", p.beta3 < 0 ? "sqrt(beta2)" : Num(p.beta3), "; d0 ", Num(p.d0), "; d_coef ",
                        Num(p.d_coef), "; growth_rate ", Num(p.growth_rate), "; use_bias_correction ",
                        FingerprintBool(p.use_bias_correction), "; safeguard_warmup ",
                        FingerprintBool(p.safeguard_warmup), "; decouple ", FingerprintBool(p.decouple), ")");
  }
  if (o.type == "adamw8bit") return absl::StrCat("adamw8bit (min_8bit_size ", o.min_8bit_size, ")");
  const AdafactorConfig& a = o.adafactor;
  return absl::StrCat(o.type, " (eps ", Num(a.eps1), ", ", Num(a.eps2), "; clip_threshold ", Num(a.clip_threshold),
                      "; decay_rate ", Num(a.decay_rate), "; beta1 ", a.beta1 < 0 ? "none" : Num(a.beta1),
                      "; relative_step ", FingerprintBool(a.relative_step), "; scale_parameter ",
                      FingerprintBool(a.scale_parameter), "; warmup_init ", FingerprintBool(a.warmup_init), ")");
}

std::string ShortHex(const Sha256::Digest& d) { return absl::StrCat("sha256:", DigestToHex(d).substr(0, 32)); }

absl::Status ReadAt(int fd, uint64_t offset, uint64_t n, std::string* out, const std::string& path) {
  out->resize(n);
  uint64_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd, out->data() + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    if (got == 0) return absl::DataLossError(absl::StrCat(path, ": ends early at byte ", offset + done));
    done += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

// Header, size and sampled data blocks of one safetensors file into `h`; returns the file's size.
absl::StatusOr<uint64_t> HashWeightsFile(const std::string& path, Sha256& h) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string buf;
  RETURN_IF_ERROR(ReadAt(fd, 0, 8, &buf, path));
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<uint8_t>(buf[i]);
  if (header > kMaxHeaderBytes || 8 + header > size) {
    return absl::DataLossError(absl::StrCat(path, ": not a safetensors file (header of ", header, " bytes)"));
  }
  RETURN_IF_ERROR(ReadAt(fd, 8, header, &buf, path));
  h.UpdateFramed(buf);
  h.UpdateFramed(absl::StrCat(size));
  const uint64_t data_begin = 8 + header, data_bytes = size - data_begin;
  for (int b = 0; b < kSampleBlocks && data_bytes > 0; ++b) {
    const uint64_t n = std::min(kSampleBytes, data_bytes);
    const uint64_t offset = data_begin + (data_bytes - n) * static_cast<uint64_t>(b) / (kSampleBlocks - 1);
    RETURN_IF_ERROR(ReadAt(fd, offset, n, &buf, path));
    h.UpdateFramed(buf);
  }
  return size;
}

absl::StatusOr<std::string> FileIdentity(const std::string& path, absl::string_view what) {
  auto data = ReadFile(path);
  if (!data.ok()) return Annotate(data.status(), what);
  return ShortHex(Sha256Digest(*data));
}

}  // namespace

absl::StatusOr<std::string> WeightsIdentity(const std::vector<std::string>& files) {
  Sha256 h;
  uint64_t total = 0;
  for (const std::string& path : files) {
    ASSIGN_OR_RETURN(uint64_t size, HashWeightsFile(path, h));
    total += size;
  }
  return absl::StrCat(ShortHex(h.Finish()), " (", files.size(), files.size() == 1 ? " file, " : " files, ", total,
                      " bytes)");
}

std::string CacheIdentity(const CacheIndex& cache) {
  Sha256 h;
  h.UpdateFramed(absl::StrCat(cache.encoder, "|", cache.latent_channels, "|", cache.text_dim));
  for (const CacheRecordInfo& r : cache.records) {
    h.UpdateFramed(absl::StrCat(r.hash, "|", r.bytes, "|", r.grid_h, "x", r.grid_w, "|", r.text_len, "|", r.bucket));
  }
  return absl::StrCat(ShortHex(h.Finish()), " (", cache.records.size(), " records)");
}

absl::StatusOr<JobFingerprint> MakeJobFingerprint(const JobConfig& job, const std::vector<std::string>& weight_files,
                                                  const CacheIndex& cache) {
  JobFingerprint f;
  ASSIGN_OR_RETURN(std::string weights, WeightsIdentity(weight_files));
  f.emplace_back("weights", weights);
  if (!job.model_config.empty()) {
    ASSIGN_OR_RETURN(std::string config, FileIdentity(job.model_config, "model_config"));
    f.emplace_back("model_config", config);
  }
  f.emplace_back("data", CacheIdentity(cache));
  // Only when not the plain one dataset: checkpoints written before `datasets:` existed keep resuming.
  if (!job.datasets.empty()) {
    std::vector<std::string> shares;
    for (const DatasetSource& d : job.datasets) {
      shares.push_back(d.weight > 0 ? absl::StrCat("weight ", Num(d.weight)) : absl::StrCat("repeats ", d.repeats));
    }
    f.emplace_back("datasets", absl::StrJoin(shares, ", "));
  }
  std::vector<std::string> dropout;
  for (const DatasetSource& d : job.Sources()) dropout.push_back(Num(job.CaptionDropout(d)));
  // Only when some caption is dropped (the empty caption's embedding is the encoder's, which "data" names).
  if (absl::StrJoin(dropout, "") != std::string(dropout.size(), '0')) {
    f.emplace_back("caption_dropout", absl::StrJoin(dropout, ", "));
  }
  f.emplace_back("lora.rank", absl::StrCat(job.lora.rank));
  f.emplace_back("lora.alpha", Num(job.lora.alpha));
  f.emplace_back("lora.targets", absl::StrJoin(job.lora.targets, ","));
  f.emplace_back("lora.dropout", Num(job.lora.dropout));
  std::string init = "none";
  if (!job.init_lora.empty()) {
    ASSIGN_OR_RETURN(init, FileIdentity(job.init_lora, "init_lora"));
  }
  f.emplace_back("init_lora", init);
  const OptimizerConfig& o = job.optimizer;
  f.emplace_back("optimizer.lr", Num(o.lr));
  f.emplace_back("optimizer.weight_decay", Num(o.weight_decay));
  f.emplace_back("optimizer.betas", absl::StrCat(Num(o.beta1), ", ", Num(o.beta2)));
  f.emplace_back("optimizer.eps", Num(o.eps));
  f.emplace_back("optimizer.clip", Num(o.clip));
  f.emplace_back("optimizer.warmup_steps", absl::StrCat(o.warmup_steps));
  // Only what the schedule uses: jobs of the constant rate keep the fingerprint they always had.
  if (o.schedule != "constant") f.emplace_back("optimizer.schedule", o.schedule);
  if (absl::StartsWith(o.schedule, "cosine") && o.cycles >= 0) f.emplace_back("optimizer.cycles", Num(o.cycles));
  if (o.schedule == "polynomial") f.emplace_back("optimizer.power", Num(o.power));
  // Absent for AdamW (the default: older checkpoints keep resuming); else the type and its own settings.
  if (o.type != "adamw") f.emplace_back("optimizer.type", TypeSettings(o));
  if (o.plus_ratio != 1.0) f.emplace_back("lora.plus_ratio", Num(o.plus_ratio));
  if (o.ema.enabled()) {
    const EmaConfig& e = o.ema;
    const std::string warmup =
        e.use_ema_warmup ? absl::StrCat(", warm-up: inv_gamma ", Num(e.inv_gamma), ", power ", Num(e.power)) : "";
    f.emplace_back("ema", absl::StrCat("decay ", Num(e.decay), ", min_decay ", Num(e.min_decay), ", update_after_step ",
                                       e.update_after_step, warmup));
  }
  if (job.loss_weighting != "none") f.emplace_back("loss.weighting", job.loss_weighting);
  const TimestepConfig& t = job.timesteps;
  f.emplace_back("timesteps.sampling", t.sampling);
  f.emplace_back("timesteps.logit_mean", Num(t.logit_mean));
  f.emplace_back("timesteps.logit_std", Num(t.logit_std));
  f.emplace_back("timesteps.mode_scale", Num(t.mode_scale));
  f.emplace_back("timesteps.shift", t.shift);
  f.emplace_back("timesteps.shift_steps", absl::StrCat(t.shift_steps));
  // Only when set: checkpoints written before the range existed keep resuming.
  if (t.min != 0.0) f.emplace_back("timesteps.min", Num(t.min));
  if (t.max != 1.0) f.emplace_back("timesteps.max", Num(t.max));
  // Records held out for validation are never trained on: another count is another dataset (absent when none).
  if (job.validation.held_out() > 0) f.emplace_back("validation.held_out", absl::StrCat(job.validation.held_out()));
  f.emplace_back("guidance", Num(job.guidance));
  f.emplace_back("seed", absl::StrCat(job.seed));
  f.emplace_back("batch_size", absl::StrCat(job.batch_size));
  f.emplace_back("micro_batches", absl::StrCat(job.micro_batches));
  f.emplace_back("dtype", job.dtype);
  // Only when the adapter math is not fp32: checkpoints written before the key existed (fp32 math) keep resuming.
  if (job.lora_dtype != "fp32") f.emplace_back("lora_dtype", job.lora_dtype);
  f.emplace_back("quantize", job.quantize);
  f.emplace_back("wire_dtype", job.wire_dtype);
  return f;
}

std::vector<std::string> FingerprintDifferences(const JobFingerprint& was, const JobFingerprint& now) {
  std::map<std::string, std::string> old(was.begin(), was.end());
  std::vector<std::string> diffs;
  for (const auto& [key, value] : now) {
    auto it = old.find(key);
    if (it == old.end()) {
      diffs.push_back(absl::StrCat(key, ": (absent) → ", value));
      continue;
    }
    if (it->second != value) diffs.push_back(absl::StrCat(key, ": ", it->second, " → ", value));
    old.erase(it);
  }
  for (const auto& [key, value] : was) {
    if (old.count(key)) diffs.push_back(absl::StrCat(key, ": ", value, " → (absent)"));
  }
  return diffs;
}

}  // namespace baton
