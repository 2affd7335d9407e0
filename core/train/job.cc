#include "core/train/job.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <type_traits>

#include "core/data/cache.h"
#include "core/quant/weight_quant.h"
#include "core/train/job_reader.h"
#include "core/train/sweep.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

// `key: [512, 1024]` (or one number): resolutions in [16, 8192], each once.
absl::Status ParseResolutionList(Reader& r, YAML::Node map, const std::string& key, std::vector<int64_t>* out) {
  YAML::Node node = map[key];
  if (!node.IsDefined() || node.IsNull()) return absl::OkStatus();
  if (node.IsScalar()) {
    int64_t one = 0;
    RETURN_IF_ERROR(r.Get(map, key, &one));
    *out = {one};
  } else {
    RETURN_IF_ERROR(r.GetList(map, key, 16, "bucket resolutions", out));
  }
  bool ok = !out->empty();
  for (int64_t v : *out) ok = ok && v >= 16 && v <= 8192 && std::count(out->begin(), out->end(), v) == 1;
  return r.Check(ok, map, key, "must be resolutions in [16, 8192] (pixels per side), each once");
}

// `offload: auto` or `offload: {blocks: N}`: block swap on each stage (core/pipeline/partition.h "Block swap"),
// checked against the schedule and recompute parsed before it.
absl::Status ParseOffload(Reader& r, YAML::Node root, JobConfig& job) {
  if (!root["offload"].IsDefined() || root["offload"].IsNull()) return absl::OkStatus();
  YAML::Node n = root["offload"];
  if (n.IsScalar()) {
    std::string word;
    RETURN_IF_ERROR(r.Get(root, "offload", &word));
    RETURN_IF_ERROR(r.Check(word == "auto", root, "offload",
                            "must be auto (the fewest blocks that fit memory_per_stage) or {blocks: N}"));
    job.offload_blocks = JobConfig::kOffloadAuto;
  } else {
    RETURN_IF_ERROR(r.Keys(n, "offload", {"blocks"}));
    RETURN_IF_ERROR(r.Check(n["blocks"].IsDefined(), root, "offload", "needs blocks: N (or offload: auto)"));
    RETURN_IF_ERROR(r.Get(n, "blocks", &job.offload_blocks));
    RETURN_IF_ERROR(r.Check(job.offload_blocks >= 0 && job.offload_blocks <= 1000, n, "blocks",
                            "must be 0..1000 (blocks of each stage whose weights stay in host memory)"));
  }
  if (job.offload_blocks == 0) return absl::OkStatus();
  RETURN_IF_ERROR(r.Check(job.schedule != "interleaved", root, "offload",
                          "needs schedule gpipe or 1f1b (interleaved chunks do not swap blocks)"));
  return r.Check(job.recompute != RecomputePolicy::kNone, root, "offload",
                 "swaps blocks that are recomputed: it needs recompute auto or true, not false");
}

// How the model is spread over the stages: schedule (+ chunks), recompute, wire compression, 8-bit
// weights and per-stage memory budgets. `root` by value: yaml-cpp's const operator[] throws on a missing key.
absl::Status ParsePipelineKeys(Reader& r, YAML::Node root, JobConfig& job) {
  RETURN_IF_ERROR(r.Get(root, "schedule", &job.schedule));
  RETURN_IF_ERROR(r.Check(job.schedule == "gpipe" || job.schedule == "1f1b" || job.schedule == "interleaved", root,
                          "schedule", "must be gpipe, 1f1b or interleaved"));
  // Model chunks per stage (virtual stages) of the interleaved schedule; the other schedules run one.
  if (job.schedule == "interleaved") job.chunks = 2;
  RETURN_IF_ERROR(r.Get(root, "chunks", &job.chunks));
  if (job.schedule == "interleaved") {
    RETURN_IF_ERROR(r.Check(job.chunks >= 2 && job.chunks <= 26, root, "chunks",
                            "must be 2 to 26 with schedule: interleaved (model chunks per stage)"));
  } else {
    RETURN_IF_ERROR(r.Check(job.chunks == 1, root, "chunks", "needs schedule: interleaved (gpipe and 1f1b run 1)"));
  }
  if (root["recompute"].IsDefined() && !root["recompute"].IsNull()) {
    std::string recompute;
    RETURN_IF_ERROR(r.Get(root, "recompute", &recompute));
    auto policy = ParseRecomputePolicy(recompute);
    RETURN_IF_ERROR(r.Check(policy.ok(), root, "recompute", "must be auto, true or false"));
    job.recompute = *policy;
  }
  RETURN_IF_ERROR(ParseOffload(r, root, job));
  RETURN_IF_ERROR(r.Get(root, "wire_dtype", &job.wire_dtype));
  RETURN_IF_ERROR(r.Check(job.wire_dtype == "none" || job.wire_dtype == "bf16" || job.wire_dtype == "fp8", root,
                          "wire_dtype", "must be none, bf16 or fp8"));
  RETURN_IF_ERROR(r.Get(root, "quantize", &job.quantize));
  RETURN_IF_ERROR(r.Check(ParseWeightQuant(job.quantize).ok(), root, "quantize", "must be none, int8 or fp8"));
  if (root["memory_per_stage"].IsSequence()) {
    RETURN_IF_ERROR(r.GetList(root, "memory_per_stage", kMaxJobStages, "one budget per stage", &job.memory_per_stage));
  } else if (root["memory_per_stage"].IsDefined()) {
    std::string one;
    RETURN_IF_ERROR(r.Get(root, "memory_per_stage", &one));
    job.memory_per_stage = {one};
  }
  return absl::OkStatus();
}

// `validation: {every, samples, timesteps, dataset}`.
absl::Status ParseValidation(Reader& r, YAML::Node root, ValidationConfig& v) {
  if (!root["validation"].IsDefined()) return absl::OkStatus();
  YAML::Node n = root["validation"];
  RETURN_IF_ERROR(r.Keys(n, "validation", {"every", "samples", "timesteps", "dataset"}));
  RETURN_IF_ERROR(r.Get(n, "every", &v.every));
  RETURN_IF_ERROR(r.Check(v.every > 0, n, "every", "must be positive (steps between validations)"));
  RETURN_IF_ERROR(r.Get(n, "dataset", &v.dataset));
  RETURN_IF_ERROR(r.Get(n, "samples", &v.samples));
  RETURN_IF_ERROR(r.Check(v.samples > 0 || (v.samples == 0 && !v.dataset.empty()), n, "samples",
                          "must be positive (held-out records; 0 = all, only with a separate validation dataset)"));
  RETURN_IF_ERROR(r.GetList(n, "timesteps", kMaxValidationTimesteps,
                            "each is a forward pass per held-out record at every validation", &v.timesteps));
  bool in_range = !v.timesteps.empty();
  for (double t : v.timesteps) in_range = in_range && t > 0 && t <= 1;
  return r.Check(in_range, n, "timesteps", "must be a non-empty list of t in (0, 1]");
}

// `encode: {encoder_worker: H:P}` or `encode: {encoder_workers: [H:P, ...]}`, never both; no worker twice.
absl::Status ParseEncoderWorkers(Reader& r, YAML::Node e, EncodeConfig& encode) {
  RETURN_IF_ERROR(r.Check(!(e["encoder_worker"].IsDefined() && e["encoder_workers"].IsDefined()), e, "encoder_workers",
                          "and encoder_worker are exclusive: list every worker in encoder_workers"));
  RETURN_IF_ERROR(r.Get(e, "encoder_worker", &encode.encoder_worker));
  if (!encode.encoder_worker.empty()) encode.encoder_workers = {encode.encoder_worker};
  if (!e["encoder_workers"].IsDefined()) return absl::OkStatus();
  RETURN_IF_ERROR(r.GetList(e, "encoder_workers", kMaxEncoderWorkers, "each encodes a share of the dataset",
                            &encode.encoder_workers));
  const std::set<std::string> distinct(encode.encoder_workers.begin(), encode.encoder_workers.end());
  RETURN_IF_ERROR(r.Check(
      !encode.encoder_workers.empty() && !distinct.count("") && distinct.size() == encode.encoder_workers.size(), e,
      "encoder_workers", "must list distinct host:port addresses, each at most once"));
  encode.encoder_worker = encode.encoder_workers.front();
  return absl::OkStatus();
}

// `samples: {every, prompts, steps, guidance, size, seed, max_sequence_length, frames, negative_prompt, image,
// references}`.
absl::Status ParseSamples(Reader& r, YAML::Node root, SamplesConfig& s) {
  if (!root["samples"].IsDefined()) return absl::OkStatus();
  YAML::Node n = root["samples"];
  RETURN_IF_ERROR(r.Keys(n, "samples",
                         {"every", "prompts", "steps", "guidance", "size", "seed", "max_sequence_length", "frames",
                          "negative_prompt", "image", "references"}));
  RETURN_IF_ERROR(r.Get(n, "every", &s.every));
  RETURN_IF_ERROR(r.Check(s.every > 0, n, "every", "must be positive (steps between sample images)"));
  RETURN_IF_ERROR(r.GetList(n, "prompts", kMaxSamplePrompts, "each renders an image at every rendering", &s.prompts));
  RETURN_IF_ERROR(r.Check(!s.prompts.empty(), n, "prompts", "must list at least one prompt"));
  RETURN_IF_ERROR(r.Get(n, "steps", &s.steps));
  RETURN_IF_ERROR(r.Check(s.steps > 0 && s.steps <= 1000, n, "steps", "must be in [1, 1000] (denoising steps)"));
  RETURN_IF_ERROR(r.Get(n, "guidance", &s.guidance));
  RETURN_IF_ERROR(r.Check(s.guidance >= 0, n, "guidance", "must be ≥ 0"));
  std::vector<int64_t> size = {s.width, s.height};
  RETURN_IF_ERROR(r.GetList(n, "size", 2, "[W, H]", &size));
  RETURN_IF_ERROR(r.Check(size.size() == 2 && size[0] >= 16 && size[1] >= 16 && size[0] % 16 == 0 &&
                              size[1] % 16 == 0 && size[0] <= 8192 && size[1] <= 8192,
                          n, "size", "must be [W, H], multiples of 16 in [16, 8192]"));
  s.width = size[0];
  s.height = size[1];
  RETURN_IF_ERROR(r.Get(n, "seed", &s.seed));
  RETURN_IF_ERROR(r.Get(n, "max_sequence_length", &s.max_sequence_length));
  RETURN_IF_ERROR(
      r.Check(s.max_sequence_length >= 0, n, "max_sequence_length", "must be ≥ 0 (0: the training cache's)"));
  RETURN_IF_ERROR(r.Get(n, "frames", &s.frames));
  RETURN_IF_ERROR(r.Check(s.frames >= 1 && s.frames <= 1021 && (s.frames - 1) % 4 == 0, n, "frames",
                          "must be 4k + 1 in [1, 1021] (video frames; Wan)"));
  RETURN_IF_ERROR(r.Get(n, "negative_prompt", &s.negative_prompt));
  RETURN_IF_ERROR(r.GetList(n, "references", kMaxReferences, "a FLUX.2 reference image file", &s.references));
  RETURN_IF_ERROR(
      r.Check(std::none_of(s.references.begin(), s.references.end(), [](const std::string& f) { return f.empty(); }), n,
              "references", "must name image files"));
  return r.Get(n, "image", &s.image);
}

// encode's Wan clip keys: frames, frame_extraction, clips_per_video, slide_stride (the encoder worker's flags).
absl::Status ParseEncodeClips(Reader& r, YAML::Node e, EncodeConfig& encode) {
  RETURN_IF_ERROR(r.GetList(e, "frames", 64, "a frame bucket", &encode.frames));
  bool frames_ok = true;
  for (int64_t f : encode.frames) {
    frames_ok = frames_ok && f >= 1 && f <= 1021 && (f - 1) % 4 == 0 &&
                std::count(encode.frames.begin(), encode.frames.end(), f) == 1;
  }
  RETURN_IF_ERROR(r.Check(frames_ok, e, "frames", "must be frame counts 4k + 1 in [1, 1021], each once"));
  std::sort(encode.frames.begin(), encode.frames.end());
  RETURN_IF_ERROR(r.Get(e, "frame_extraction", &encode.frame_extraction));
  const std::string& mode = encode.frame_extraction;
  RETURN_IF_ERROR(r.Check(mode == "head" || mode == "chunk" || mode == "slide" || mode == "uniform", e,
                          "frame_extraction", "must be head, chunk, slide or uniform (musubi-tuner's modes)"));
  RETURN_IF_ERROR(r.Get(e, "clips_per_video", &encode.clips_per_video));
  RETURN_IF_ERROR(r.Check(encode.clips_per_video >= (mode == "uniform" ? 1 : 0) && encode.clips_per_video <= 10000, e,
                          "clips_per_video",
                          mode == "uniform" ? "must be in [1, 10000] with uniform" : "must be in [0, 10000] (0: all)"));
  RETURN_IF_ERROR(r.Get(e, "slide_stride", &encode.slide_stride));
  return r.Check(encode.slide_stride >= 1 && encode.slide_stride <= 100000, e, "slide_stride",
                 "must be in [1, 100000] (sampled frames between slide clips)");
}

// encode: {images, encoder_worker(s), resolution, trigger, quantize, control, and the Wan clip keys}.
absl::Status ParseEncode(Reader& r, YAML::Node root, JobConfig& job) {
  if (!root["encode"].IsDefined()) return absl::OkStatus();
  YAML::Node e = root["encode"];
  RETURN_IF_ERROR(r.Keys(e, "encode",
                         {"images", "encoder_worker", "encoder_workers", "resolution", "trigger", "quantize", "control",
                          "frames", "frame_extraction", "clips_per_video", "slide_stride"}));
  RETURN_IF_ERROR(ParseEncodeClips(r, e, job.encode));
  RETURN_IF_ERROR(r.Get(e, "images", &job.encode.images));
  RETURN_IF_ERROR(r.Get(e, "control", &job.encode.control));
  RETURN_IF_ERROR(ParseEncoderWorkers(r, e, job.encode));
  RETURN_IF_ERROR(r.Check(!job.encode.images.empty() && !job.encode.encoder_worker.empty(), e, "images",
                          "and encoder_worker (or encoder_workers) are both required in encode"));
  RETURN_IF_ERROR(ParseResolutionList(r, e, "resolution", &job.encode.resolutions));
  if (!job.encode.resolutions.empty()) job.encode.resolution = job.encode.resolutions.front();
  if (job.encode.resolutions.size() < 2) job.encode.resolutions.clear();
  RETURN_IF_ERROR(r.Get(e, "trigger", &job.encode.trigger));
  RETURN_IF_ERROR(r.Get(e, "quantize", &job.encode.quantize));
  RETURN_IF_ERROR(r.Check(job.encode.quantize.empty() || ParseWeightQuant(job.encode.quantize).ok(), e, "quantize",
                          "must be none, int8 or fp8 (the text encoder's Linear weights; encoder_worker --quantize)"));
  return absl::OkStatus();
}

// lora: {type, factor}: the adapter type and LoKr's factor; keys that do not apply to the type are errors.
absl::Status ParseLoraType(Reader& r, YAML::Node l, JobConfig& job) {
  std::string type = "lora";
  RETURN_IF_ERROR(r.Get(l, "type", &type));
  auto parsed = ParseAdapterType(type);
  RETURN_IF_ERROR(r.Check(parsed.ok(), l, "type", absl::StrCat("is '", type, "' (want lora, dora, loha or lokr)")));
  job.lora.type = *parsed;
  const bool lokr = job.lora.type == AdapterType::kLokr, factors = lokr || job.lora.type == AdapterType::kLoha;
  RETURN_IF_ERROR(r.Check(lokr || !l["factor"].IsDefined(), l, "factor",
                          absl::StrCat("applies to type: lokr only (this LoRA is ", type, ")")));
  RETURN_IF_ERROR(r.Get(l, "factor", &job.lora.lokr_factor));
  RETURN_IF_ERROR(r.Check(job.lora.lokr_factor == -1 || job.lora.lokr_factor > 0, l, "factor",
                          "must be -1 (factors near the square root) or a positive divisor of every adapted layer"));
  RETURN_IF_ERROR(r.Check(!factors || !l["dropout"].IsDefined(), l, "dropout",
                          absl::StrCat("does not apply to type: ", type, " (peft's ", type, " has no input dropout)")));
  return r.Check(!factors || !l["plus_ratio"].IsDefined(), l, "plus_ratio",
                 absl::StrCat("does not apply to type: ", type, " (LoRA+ scales the up projections of lora and dora; ",
                              type, " has none)"));
}

// lora: {type, factor, rank, alpha, targets, dropout, plus_ratio} (alpha defaults to the rank, with or without the
// section).
absl::Status ParseLora(Reader& r, YAML::Node root, JobConfig& job) {
  job.lora.alpha = static_cast<double>(job.lora.rank);
  if (!root["lora"].IsDefined()) return absl::OkStatus();
  YAML::Node l = root["lora"];
  RETURN_IF_ERROR(r.Keys(l, "lora", {"type", "factor", "rank", "alpha", "targets", "dropout", "plus_ratio"}));
  RETURN_IF_ERROR(ParseLoraType(r, l, job));
  RETURN_IF_ERROR(r.Get(l, "rank", &job.lora.rank));
  RETURN_IF_ERROR(r.Check(job.lora.rank > 0, l, "rank", "must be positive"));
  job.lora.alpha = static_cast<double>(job.lora.rank);
  job.lora_alpha_set = l["alpha"].IsDefined() && !l["alpha"].IsNull();
  RETURN_IF_ERROR(r.Get(l, "alpha", &job.lora.alpha));
  RETURN_IF_ERROR(r.Check(job.lora.alpha > 0, l, "alpha", "must be positive"));
  if (l["targets"].IsSequence()) {
    std::vector<std::string> list;
    RETURN_IF_ERROR(r.GetList(l, "targets", kMaxJobStages, "target names", &list));
    job.lora_targets = absl::StrJoin(list, ",");
  } else {
    RETURN_IF_ERROR(r.Get(l, "targets", &job.lora_targets));
  }
  RETURN_IF_ERROR(r.Get(l, "dropout", &job.lora.dropout));
  RETURN_IF_ERROR(r.Check(job.lora.dropout >= 0 && job.lora.dropout < 1, l, "dropout", "must be in [0, 1)"));
  RETURN_IF_ERROR(r.Get(l, "plus_ratio", &job.optimizer.plus_ratio));  // LoRA+: the optimizer steps by it
  return r.Check(job.optimizer.plus_ratio >= 1 && job.optimizer.plus_ratio <= 1000, l, "plus_ratio",
                 "must be in [1, 1000] (LoRA+: the up projections' rate over the rest's; 16 is the paper's)");
}

// loss: {weighting}.
absl::Status ParseLoss(Reader& r, YAML::Node root, JobConfig& job) {
  if (!root["loss"].IsDefined()) return absl::OkStatus();
  YAML::Node l = root["loss"];
  RETURN_IF_ERROR(r.Keys(l, "loss", {"weighting"}));
  RETURN_IF_ERROR(r.Get(l, "weighting", &job.loss_weighting));
  const std::string& w = job.loss_weighting;
  return r.Check(w == "none" || w == "sigma_sqrt" || w == "cosmap", l, "weighting",
                 "must be none, sigma_sqrt or cosmap (diffusers' compute_loss_weighting_for_sd3)");
}

// timesteps: {sampling, logit_mean, logit_std, mode_scale, shift, shift_steps, min, max}.
absl::Status ParseTimesteps(Reader& r, YAML::Node root, JobConfig& job) {
  if (!root["timesteps"].IsDefined()) return absl::OkStatus();
  YAML::Node t = root["timesteps"];
  TimestepConfig& ts = job.timesteps;
  RETURN_IF_ERROR(r.Keys(t, "timesteps",
                         {"sampling", "logit_mean", "logit_std", "mode_scale", "shift", "shift_steps", "min", "max"}));
  RETURN_IF_ERROR(r.Get(t, "sampling", &ts.sampling));
  if (ts.sampling == "uniform") ts.sampling = "none";
  RETURN_IF_ERROR(r.Check(ts.sampling == "none" || ts.sampling == "logit_normal" || ts.sampling == "mode", t,
                          "sampling", "must be none (uniform), logit_normal or mode"));
  RETURN_IF_ERROR(r.Get(t, "logit_mean", &ts.logit_mean));
  RETURN_IF_ERROR(r.Get(t, "logit_std", &ts.logit_std));
  RETURN_IF_ERROR(r.Check(ts.logit_std > 0, t, "logit_std", "must be positive"));
  RETURN_IF_ERROR(r.Get(t, "mode_scale", &ts.mode_scale));
  RETURN_IF_ERROR(r.Check(ts.mode_scale >= -1 && ts.mode_scale <= 1 / (M_PI / 2 - 1), t, "mode_scale",
                          "must be in [-1, 1/(pi/2 - 1) = 1.7519] (outside it u leaves [0, 1])"));
  RETURN_IF_ERROR(r.Get(t, "shift", &ts.shift));
  bool shift_ok = ts.shift == "none" || ts.shift == "flux2_empirical" || ts.shift == "flux1_linear";
  if (!shift_ok) {
    char* end = nullptr;
    double v = std::strtod(ts.shift.c_str(), &end);
    shift_ok = !ts.shift.empty() && end && *end == '\0' && v > 0;
  }
  RETURN_IF_ERROR(r.Check(shift_ok, t, "shift",
                          ts.shift == "auto" ? "auto was FLUX.1's linear mu (now flux1_linear); FLUX.2's inference "
                                               "shift is flux2_empirical, and diffusers' FLUX.2 trainer uses none"
                                             : "must be none, flux2_empirical, flux1_linear or a positive number"));
  RETURN_IF_ERROR(r.Get(t, "shift_steps", &ts.shift_steps));
  RETURN_IF_ERROR(r.Check(ts.shift_steps > 0, t, "shift_steps", "must be positive"));
  RETURN_IF_ERROR(r.Get(t, "min", &ts.min));
  RETURN_IF_ERROR(r.Get(t, "max", &ts.max));
  RETURN_IF_ERROR(r.Check(ts.min >= 0 && ts.min < ts.max && ts.max <= 1, t, "max", "needs 0 <= min < max <= 1"));
  return absl::OkStatus();
}

// One `datasets:` entry: a cache folder, or {path, repeats | weight, caption_dropout, resolutions}.
absl::Status ParseDatasetSource(Reader& r, YAML::Node n, DatasetSource& d) {
  if (n.IsScalar()) {
    d.path = n.as<std::string>();
    return r.CheckStringSize(n, "datasets");
  }
  RETURN_IF_ERROR(r.Keys(n, "a datasets entry", {"path", "repeats", "weight", "caption_dropout", "resolutions"}));
  RETURN_IF_ERROR(ParseResolutionList(r, n, "resolutions", &d.resolutions));
  RETURN_IF_ERROR(r.Get(n, "path", &d.path));
  RETURN_IF_ERROR(r.Check(!d.path.empty(), n, "path", "is required in a datasets entry (an encoded cache folder)"));
  RETURN_IF_ERROR(r.Check(!(n["repeats"].IsDefined() && n["weight"].IsDefined()), n, "weight",
                          "and repeats are exclusive: repeats counts each record per epoch, weight is a share of the "
                          "micro-batches"));
  RETURN_IF_ERROR(r.Get(n, "repeats", &d.repeats));
  RETURN_IF_ERROR(r.Check(d.repeats >= 1 && d.repeats <= kMaxDatasetRepeats, n, "repeats",
                          absl::StrCat("must be in [1, ", kMaxDatasetRepeats,
                                       "] (times each record is seen per epoch; leave the entry out for none)")));
  RETURN_IF_ERROR(r.Get(n, "weight", &d.weight));
  RETURN_IF_ERROR(r.Check(!n["weight"].IsDefined() || (d.weight > 0 && d.weight <= 1), n, "weight",
                          "must be in (0, 1] (the share of micro-batches drawn from this dataset)"));
  RETURN_IF_ERROR(r.Get(n, "caption_dropout", &d.caption_dropout));
  return r.Check(!n["caption_dropout"].IsDefined() || (d.caption_dropout >= 0 && d.caption_dropout <= 1), n,
                 "caption_dropout", "must be in [0, 1] (the probability of training on the empty caption)");
}

// `dataset: DIR` or `datasets: [...]` (exactly one), and `caption_dropout`.
absl::Status ParseDatasets(Reader& r, YAML::Node root, JobConfig& job) {
  RETURN_IF_ERROR(r.Get(root, "dataset", &job.dataset));
  RETURN_IF_ERROR(ParseResolutionList(r, root, "resolutions", &job.resolutions));
  RETURN_IF_ERROR(r.Get(root, "caption_dropout", &job.caption_dropout));
  RETURN_IF_ERROR(r.Check(job.caption_dropout >= 0 && job.caption_dropout <= 1, root, "caption_dropout",
                          "must be in [0, 1] (the probability of training on the empty caption)"));
  YAML::Node list = root["datasets"];
  if (!list.IsDefined() || list.IsNull()) {
    return r.Check(!job.dataset.empty(), root, "dataset", "is required (an encoded cache folder; or `datasets:`)");
  }
  RETURN_IF_ERROR(
      r.Check(job.dataset.empty(), root, "datasets", "and dataset are exclusive: list every cache in datasets"));
  RETURN_IF_ERROR(r.Check(list.IsSequence() && list.size() > 0 && list.size() <= kMaxJobDatasets, root, "datasets",
                          absl::StrCat("must list 1 to ", kMaxJobDatasets, " cache folders")));
  std::set<std::string> paths;
  size_t weighted = 0;
  for (const YAML::Node& n : list) {
    DatasetSource d;
    RETURN_IF_ERROR(ParseDatasetSource(r, n, d));
    // Spelled alike: "cache/a", "cache/a/" and "./cache/a" are one folder (a link to it is the user's to see).
    std::string spelled = std::filesystem::path(d.path).lexically_normal().string();
    while (spelled.size() > 1 && spelled.back() == '/') spelled.pop_back();
    if (!paths.insert(spelled).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(job.source, n), ": dataset ", d.path, " is listed twice; give it once (with repeats)"));
    }
    weighted += d.weight > 0 ? 1 : 0;
    job.datasets.push_back(d);
  }
  return r.Check(weighted == 0 || weighted == job.datasets.size(), root, "datasets",
                 "must give every entry a weight, or none (repeats and weights do not mix in one job)");
}

// The run's own keys: steps and batching, the pipeline keys, seed, checkpoints, dtype, devices and threads.
absl::Status ParseRunKeys(Reader& r, YAML::Node root, JobConfig& job) {
  RETURN_IF_ERROR(r.Get(root, "steps", &job.steps));
  RETURN_IF_ERROR(r.Check(job.steps > 0 && job.steps <= kMaxJobSteps, root, "steps",
                          absl::StrCat("must be in [1, ", kMaxJobSteps, "]")));
  RETURN_IF_ERROR(r.Get(root, "batch_size", &job.batch_size));
  RETURN_IF_ERROR(r.Check(job.batch_size > 0 && job.batch_size <= kMaxJobBatchSize, root, "batch_size",
                          absl::StrCat("must be in [1, ", kMaxJobBatchSize, "] (samples per step)")));
  RETURN_IF_ERROR(r.Get(root, "micro_batches", &job.micro_batches));
  RETURN_IF_ERROR(r.Check(job.micro_batches > 0 && job.batch_size % job.micro_batches == 0, root, "micro_batches",
                          "must be positive and divide batch_size"));
  RETURN_IF_ERROR(r.Get(root, "replicas", &job.replicas));
  RETURN_IF_ERROR(r.Check(job.replicas > 0 && job.replicas <= static_cast<int64_t>(kMaxJobStages), root, "replicas",
                          absl::StrCat("must be in [1, ", kMaxJobStages, "]")));
  RETURN_IF_ERROR(r.Check(job.micro_batches >= job.replicas, root, "replicas",
                          "must be at most micro_batches (each replica runs whole micro-batches)"));
  RETURN_IF_ERROR(r.GetList(root, "replica_stages", kMaxJobStages, "one stage count per replica", &job.replica_stages));
  if (!job.replica_stages.empty()) {
    RETURN_IF_ERROR(
        r.Check(!root["replicas"].IsDefined() || job.replicas == static_cast<int64_t>(job.replica_stages.size()), root,
                "replica_stages", "must list one stage count per replica (`replicas:`)"));
    job.replicas = static_cast<int64_t>(job.replica_stages.size());
    for (int64_t stages : job.replica_stages) {
      RETURN_IF_ERROR(r.Check(stages >= 1 && stages <= static_cast<int64_t>(kMaxJobStages), root, "replica_stages",
                              absl::StrCat("each count must be in [1, ", kMaxJobStages, "]")));
    }
    RETURN_IF_ERROR(r.Check(job.micro_batches >= job.replicas, root, "replica_stages",
                            "must list at most micro_batches replicas (each replica runs whole micro-batches)"));
  }
  RETURN_IF_ERROR(r.Get(root, "replica_split", &job.replica_split));
  RETURN_IF_ERROR(r.Check(job.replica_split == "speed" || job.replica_split == "equal", root, "replica_split",
                          "must be speed or equal"));
  RETURN_IF_ERROR(r.Get(root, "replica_exchange", &job.replica_exchange));
  RETURN_IF_ERROR(r.Check(
      job.replica_exchange == "auto" || job.replica_exchange == "coordinator" || job.replica_exchange == "allreduce",
      root, "replica_exchange", "must be auto, allreduce or coordinator"));
  RETURN_IF_ERROR(r.Get(root, "state_every", &job.state_every));
  RETURN_IF_ERROR(r.Check(job.state_every >= 0, root, "state_every",
                          "must be ≥ 0 (0: read the state back only at evaluations and checkpoints)"));
  RETURN_IF_ERROR(ParsePipelineKeys(r, root, job));
  RETURN_IF_ERROR(r.Get(root, "seed", &job.seed));
  RETURN_IF_ERROR(r.Get(root, "checkpoint_every", &job.checkpoint_every));
  RETURN_IF_ERROR(r.Check(job.checkpoint_every >= 0, root, "checkpoint_every", "must be ≥ 0"));
  RETURN_IF_ERROR(r.Get(root, "dtype", &job.dtype));
  RETURN_IF_ERROR(r.Check(job.dtype == "fp32" || job.dtype == "bf16", root, "dtype", "must be fp32 or bf16"));
  job.lora_dtype = job.dtype;
  RETURN_IF_ERROR(r.Get(root, "lora_dtype", &job.lora_dtype));
  RETURN_IF_ERROR(r.Check(job.lora_dtype == "fp32" || job.lora_dtype == job.dtype, root, "lora_dtype",
                          absl::StrCat("must be fp32 or the job's dtype (", job.dtype, ")")));
  job.lora.dtype = job.lora_dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  RETURN_IF_ERROR(r.GetList(root, "devices", kMaxJobStages, "one device per stage", &job.devices));
  RETURN_IF_ERROR(r.Get(root, "guidance", &job.guidance));
  RETURN_IF_ERROR(r.Get(root, "save_bfl", &job.save_bfl));
  RETURN_IF_ERROR(r.Get(root, "threads", &job.threads));
  RETURN_IF_ERROR(r.Check(job.threads > 0 && job.threads <= kMaxJobThreads, root, "threads",
                          absl::StrCat("must be in [1, ", kMaxJobThreads, "]")));
  RETURN_IF_ERROR(r.Get(root, "deterministic", &job.deterministic));
  return absl::OkStatus();
}

// `sweep:`: a mapping of sweepable keys to non-empty lists of values; every member it makes must be a valid job.
absl::Status ParseSweep(Reader& r, YAML::Node root, JobConfig& job) {
  if (!root["sweep"].IsDefined() || root["sweep"].IsNull()) return absl::OkStatus();
  YAML::Node s = root["sweep"];
  const std::vector<std::string> keys = SweepKeys();
  RETURN_IF_ERROR(r.Keys(s, "sweep", std::set<std::string>(keys.begin(), keys.end())));
  for (const auto& kv : s) {
    const std::string key = kv.first.as<std::string>();
    std::vector<std::string> values;
    RETURN_IF_ERROR(r.GetList(s, key, kMaxSweepMembers, "one value per member", &values));
    RETURN_IF_ERROR(r.Check(kv.second.IsSequence() && !values.empty(), s, key, "must list the values to sweep"));
    RETURN_IF_ERROR(r.Check(key != "dataset" || job.datasets.empty(), s, key,
                            "sweeps the one cache of `dataset:`; a job with `datasets:` cannot sweep it"));
    job.sweep.emplace_back(key, std::move(values));
  }
  RETURN_IF_ERROR(r.Check(job.replicas == 1, root, "sweep", "needs one replica (`replicas: 1`): its members share it"));
  RETURN_IF_ERROR(r.Check(job.expert != "both", root, "sweep", "trains one expert (expert: high or low)"));
  RETURN_IF_ERROR(
      r.Check(job.encode.images.empty(), root, "sweep",
              "needs the cache built first (`encoder_worker --dataset IMAGES --cache DIR`, then `dataset: DIR` without "
              "`encode:`)"));
  auto members = ExpandSweep(job);
  if (!members.ok())
    return absl::InvalidArgumentError(absl::StrCat(Where(job.source, s), ": ", members.status().message()));
  return absl::OkStatus();
}

absl::StatusOr<JobConfig> ParseJobYamlOrThrow(const std::string& text, const std::string& source) {
  if (text.size() > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the job file is ", text.size(),
                                                   " bytes; a job file is at most ", kMaxJobFileBytes, " (256 KiB)"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ": YAML syntax error: ", e.msg));
  }
  Reader r(source);
  JobConfig job;
  job.source = source;
  RETURN_IF_ERROR(r.Keys(root, "the job",
                         {"model",
                          "loss",
                          "model_config",
                          "dataset",
                          "datasets",
                          "caption_dropout",
                          "resolutions",
                          "lora",
                          "init_lora",
                          "optimizer",
                          "ema",
                          "timesteps",
                          "steps",
                          "batch_size",
                          "micro_batches",
                          "schedule",
                          "recompute",
                          "offload",
                          "seed",
                          "checkpoint_every",
                          "dtype",
                          "lora_dtype",
                          "devices",
                          "guidance",
                          "save_bfl",
                          "threads",
                          "memory_per_stage",
                          "encode",
                          "wire_dtype",
                          "quantize",
                          "chunks",
                          "name",
                          "validation",
                          "samples",
                          "deterministic",
                          "expert",
                          "replicas",
                          "replica_split",
                          "replica_stages",
                          "replica_exchange",
                          "state_every",
                          "sweep"}));
  RETURN_IF_ERROR(r.Get(root, "name", &job.name));
  RETURN_IF_ERROR(r.Get(root, "model", &job.model));
  RETURN_IF_ERROR(r.Check(!job.model.empty(), root, "model", "is required (a diffusers folder or BFL file)"));
  RETURN_IF_ERROR(r.Get(root, "model_config", &job.model_config));
  RETURN_IF_ERROR(r.Get(root, "expert", &job.expert));
  RETURN_IF_ERROR(r.Check(job.expert.empty() || job.expert == "high" || job.expert == "low" || job.expert == "both",
                          root, "expert", "must be high, low or both (the experts of a Wan 2.2 A14B folder)"));
  RETURN_IF_ERROR(ParseDatasets(r, root, job));
  RETURN_IF_ERROR(ParseRunKeys(r, root, job));
  RETURN_IF_ERROR(ParseEncode(r, root, job));
  RETURN_IF_ERROR(r.Check(job.datasets.empty() || job.encode.images.empty(), root, "encode",
                          "builds the one cache of `dataset:`; with `datasets:`, encode each folder first "
                          "(encoder_worker --dataset IMAGES --cache DIR)"));
  RETURN_IF_ERROR(ParseValidation(r, root, job.validation));
  RETURN_IF_ERROR(ParseSamples(r, root, job.samples));
  RETURN_IF_ERROR(ParseLora(r, root, job));
  RETURN_IF_ERROR(r.Get(root, "init_lora", &job.init_lora));
  auto targets = ResolveLoraTargets(job.lora_targets);
  if (!targets.ok()) return Annotate(targets.status(), source);
  job.lora.targets = *targets;
  job.lora.seed = job.seed;
  RETURN_IF_ERROR(ParseJobOptimizer(r, root, job));
  RETURN_IF_ERROR(ParseTimesteps(r, root, job));
  RETURN_IF_ERROR(ParseLoss(r, root, job));
  RETURN_IF_ERROR(ParseSweep(r, root, job));
  return job;
}

}  // namespace

absl::StatusOr<JobConfig> ParseJobYaml(const std::string& text, const std::string& source) {
  // yaml-cpp throws on shapes the checks above do not foresee: every one becomes an error with file:line.
  try {
    return ParseJobYamlOrThrow(text, source);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
}

absl::StatusOr<JobConfig> LoadJob(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxJobFileBytes));
  return ParseJobYaml(text, path);
}

std::vector<DatasetSource> JobConfig::Sources() const {
  if (!datasets.empty()) return datasets;
  DatasetSource one;
  one.path = dataset;
  return {one};
}

std::vector<std::vector<int64_t>> JobConfig::SourceResolutions() const {
  std::vector<std::vector<int64_t>> out;
  for (const DatasetSource& d : Sources()) out.push_back(d.resolutions.empty() ? resolutions : d.resolutions);
  return out;
}

std::vector<std::string> JobConfig::SourcePaths() const {
  std::vector<std::string> out;
  for (const DatasetSource& d : Sources()) out.push_back(d.path);
  return out;
}

std::string JobName(const JobConfig& job) {
  if (!job.name.empty()) return job.name;
  std::string stem = std::filesystem::path(job.source).stem().string();
  if (stem.empty() || job.source == "<job>") return "job";
  return stem;
}

std::string JobHash(const JobConfig& j) {
  std::string s = absl::StrCat(j.model, "|", j.model_config, "|", j.lora.rank, "|", j.lora.alpha, "|", j.lora_targets,
                               "|", j.lora.dropout, "|", j.seed, "|", j.dtype, "|", RecomputePolicyName(j.recompute));
  if (!j.init_lora.empty()) absl::StrAppend(&s, "|init_lora=", j.init_lora);
  if (j.wire_dtype != "none") absl::StrAppend(&s, "|wire_dtype=", j.wire_dtype);
  if (j.quantize != "none") absl::StrAppend(&s, "|quantize=", j.quantize);  // absent: older hashes stay valid
  if (!j.expert.empty()) absl::StrAppend(&s, "|expert=", j.expert);
  if (j.lora_dtype != "fp32") absl::StrAppend(&s, "|lora_dtype=", j.lora_dtype);
  if (j.lora.type != AdapterType::kLora) {
    absl::StrAppend(&s, "|lora_type=", AdapterTypeName(j.lora.type), "|factor=", j.lora.lokr_factor);
  }
  if (!j.sweep_member.empty()) absl::StrAppend(&s, "|member=", j.sweep_member);
  return absl::StrFormat("%016x", HashName(s));
}

}  // namespace baton
