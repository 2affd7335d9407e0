// The Baton half of bench/bench_encoder.py: the encoder worker's per-sample work, timed in-process (no RPC) on
// a FLUX.2 pipeline folder, so that transformers + diffusers on the same torch can be timed on the same
// weights, captions and image. Run that script, not this binary (it starts and drives this one).
//
//   bench_encoder --write DIR --config tiny|scaled|real [--seed 0] [--text_layers 4]
//       writes the pipeline folder the bench times: `tiny` is WriteTinyFlux2Pipeline (what
//       `baton init-weights --pipeline tiny` writes); `scaled` is the same layout with a bigger Mistral-3 text
//       encoder and VAE (ScaledTextConfig / ScaledVaeConfig below); `real` has `--text_layers` layers of
//       Mistral-Small-3.1-24B's real shapes (RealTextConfig) and the tiny VAE. Then exits.
//   bench_encoder --model DIR --image FILE --width W --height H --captions FILE --ids FILE [--threads 1]
//                 [--max-sequence-length 512] [--dtype fp32|bf16] [--hidden_layers 10,20,30]
//       opens Flux2SampleEncoder on DIR, prints {"ready": ...}, then reads commands on stdin, one per line:
//         caption N  N captions (cycling through FILE's lines): BuildFlux2PromptIds + EncodeFlux2Prompt, i.e.
//                    Flux2SampleEncoder::EncodeText, at --max-sequence-length (with --hidden_layers: the
//                    padded prompt ids through TextEncoder::Encode for those layers);
//         image N    N times: read FILE, DecodeImage, resize to cover W x H + center crop (the encoder
//                    worker's ResizeToBucket), EncodeImage (VAE posterior mean, patchify, BatchNorm, pack);
//         tokens N   N times: the text encoder alone on --ids's `input_ids` [1, T] (no padding), layers
//                    10/20/30 (or --hidden_layers) — the tokens/s figure;
//         dump PATH  writes caption 0's input_ids and embeddings, the image's cropped pixels and packed
//                    latents and the tokens output to PATH (safetensors), for the script's agreement check.
//       Each timing command prints one JSON line {"seconds": [...], "peak_rss": bytes so far}; the binary exits at
//       end of input.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <absl/flags/flag.h>
#include <absl/status/statusor.h>
#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "core/device/threads.h"
#include "core/encode/flux2_encoder.h"
#include "core/image/image.h"
#include "core/tensor/safetensors.h"
#include "core/text/prompt.h"
#include "core/text/text_encoder_checkpoint.h"
#include "core/text/text_encoder_config.h"
#include "core/text/tiny_tokenizer.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"
#include "core/vae/flux2_vae.h"
#include "core/vae/flux2_vae_config.h"

ABSL_FLAG(std::string, write, "", "write a FLUX.2 pipeline folder with random weights here, then exit");
ABSL_FLAG(std::string, config, "tiny", "with --write: tiny | scaled | real (Mistral-3 24B layer shapes)");
ABSL_FLAG(int, text_layers, 4, "with --write --config real: the text encoder's layers");
ABSL_FLAG(uint64_t, seed, 0, "with --write: the weights' seed");
ABSL_FLAG(std::string, model, "", "a FLUX.2 pipeline folder to time");
ABSL_FLAG(std::string, image, "", "the image the vae commands encode");
ABSL_FLAG(int, width, 0, "the width the image is resized to");
ABSL_FLAG(int, height, 0, "the height the image is resized to");
ABSL_FLAG(std::string, captions, "", "a text file of captions, one a line");
ABSL_FLAG(std::string, ids, "", "a safetensors file with input_ids [1, T] for the tokens command");
ABSL_FLAG(int, threads, 1, "compute threads");
ABSL_FLAG(int64_t, max_sequence_length, baton::kFlux2MaxSequenceLength, "tokens each prompt is padded to");
ABSL_FLAG(std::string, dtype, "fp32", "the encoders' compute dtype: fp32 | bf16");
ABSL_FLAG(std::string, hidden_layers, "", "the text encoder's hidden-state layers (default: the family's 10,20,30)");

namespace baton {
namespace {

struct Args {
  std::string write, config = "tiny";
  int text_layers = 4;
  uint64_t seed = 0;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> hidden_layers;  // empty: the family's
  std::string model, image, captions, ids;
  int width = 0, height = 0;
  int threads = 1;
  int64_t max_sequence_length = kFlux2MaxSequenceLength;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  RETURN_IF_ERROR(ParseBenchFlags(
      argc, argv,
      "bench_encoder --write DIR --config tiny|scaled|real [--seed 0] [--text_layers 4]\n"
      "  or: bench_encoder --model DIR --image FILE --width W --height H --captions FILE --ids FILE [--threads 1] "
      "[--max-sequence-length 512] [--dtype fp32|bf16] [--hidden_layers 10,20,30]\n(see the comment atop "
      "bench/bench_encoder.cc)"));
  Args a;
  a.write = absl::GetFlag(FLAGS_write);
  a.config = absl::GetFlag(FLAGS_config);
  a.text_layers = absl::GetFlag(FLAGS_text_layers);
  a.seed = absl::GetFlag(FLAGS_seed);
  a.model = absl::GetFlag(FLAGS_model);
  a.image = absl::GetFlag(FLAGS_image);
  a.captions = absl::GetFlag(FLAGS_captions);
  a.ids = absl::GetFlag(FLAGS_ids);
  a.width = absl::GetFlag(FLAGS_width);
  a.height = absl::GetFlag(FLAGS_height);
  a.threads = absl::GetFlag(FLAGS_threads);
  a.max_sequence_length = absl::GetFlag(FLAGS_max_sequence_length);
  auto bad = [](const std::string& flag, const std::string& value) {
    return absl::InvalidArgumentError(absl::StrCat("bad value '", value, "' for --", flag));
  };
  if (a.config != "tiny" && a.config != "scaled" && a.config != "real") return bad("config", a.config);
  if (a.text_layers < 1) return bad("text_layers", absl::StrCat(a.text_layers));
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "fp32" && dtype != "bf16") return bad("dtype", dtype);
  a.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  for (absl::string_view layer : absl::StrSplit(absl::GetFlag(FLAGS_hidden_layers), ',', absl::SkipEmpty())) {
    int64_t k = 0;
    if (!absl::SimpleAtoi(layer, &k) || k < 0) return bad("hidden_layers", absl::GetFlag(FLAGS_hidden_layers));
    a.hidden_layers.push_back(k);
  }
  if (a.width < 0) return bad("width", absl::StrCat(a.width));
  if (a.height < 0) return bad("height", absl::StrCat(a.height));
  if (a.threads < 1) return bad("threads", absl::StrCat(a.threads));
  if (a.max_sequence_length < 1) return bad("max-sequence-length", absl::StrCat(a.max_sequence_length));
  if (a.write.empty() &&
      (a.model.empty() || a.image.empty() || a.captions.empty() || a.ids.empty() || a.width == 0 || a.height == 0)) {
    return absl::InvalidArgumentError(
        "either --write DIR, or --model, --image, --width, --height, --captions and --ids are required");
  }
  return a;
}

// The scaled text encoder: Mistral-3 layout with the real 40 layers (FLUX.2-dev reads 10/20/30), hidden 256
// (8x the tiny one), GQA 8 query / 2 key-value heads of head_dim 64 (q_dim 512 != hidden, as Mistral-Small-3.1's
// 4096 != 5120), SwiGLU 1024. ~1.1 M parameters per layer, ~34 GFLOP for 512 tokens through layer 30.
TextEncoderConfig ScaledTextConfig() {
  TextEncoderConfig c = TinyMistral3TextConfig();
  c.hidden_size = 256;
  c.intermediate_size = 1024;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  return c;
}

// Mistral-Small-3.1-24B's text model at its real layer shapes (hidden 5120, 32 query heads x 128, 8 KV heads,
// SwiGLU 32768; ~545 M parameters, 1.09 GB of bf16 per layer), `layers` of them; the tiny tokenizer's vocabulary
// (the embedding table is gathered by row, so its size costs no time).
TextEncoderConfig RealTextConfig(int layers) {
  TextEncoderConfig c = TinyMistral3TextConfig();
  c.hidden_size = 5120;
  c.intermediate_size = 32768;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.num_hidden_layers = layers;
  return c;
}

// The scaled VAE: FLUX.2's structure (4 levels, 2 resnets per block, mid-block attention, 32 groups) at half
// its channel widths.
Flux2VaeConfig ScaledVaeConfig() {
  Flux2VaeConfig c;
  c.block_out_channels = {64, 128, 256, 256};
  c.layers_per_block = 2;
  c.norm_num_groups = 32;
  return c;
}

absl::Status WritePipeline(const Args& a) {
  if (a.config == "tiny") return WriteTinyFlux2Pipeline(a.write, a.seed);
  RETURN_IF_ERROR(MakeDirs(a.write));
  const bool real = a.config == "real";
  RETURN_IF_ERROR(WriteRandomFlux2Vae(real ? TinyFlux2VaeConfig() : ScaledVaeConfig(), JoinPath(a.write, "vae"),
                                      MixSeed(a.seed, 2)));
  RETURN_IF_ERROR(WriteRandomTextEncoder(real ? RealTextConfig(a.text_layers) : ScaledTextConfig(),
                                         JoinPath(a.write, "text_encoder"), MixSeed(a.seed, 3)));
  RETURN_IF_ERROR(MakeDirs(JoinPath(a.write, "tokenizer")));
  RETURN_IF_ERROR(WriteTinyBpeTokenizerJson(JoinPath(a.write, "tokenizer/tokenizer.json")));
  return WriteFileAtomic(JoinPath(a.write, "tokenizer/tokenizer_config.json"), TinyTokenizerConfigJson());
}

// The encoder worker's ResizeToBucket (encoder_worker/bucket.cc, not linked into benches): scale so the image
// covers the bucket (one side equal, the other rounded to nearest and at least the bucket's), then crop.
Image ResizeCover(const Image& image, int width, int height) {
  double scale = std::max(static_cast<double>(width) / image.width, static_cast<double>(height) / image.height);
  int w = std::max(width, static_cast<int>(std::lround(image.width * scale)));
  int h = std::max(height, static_cast<int>(std::lround(image.height * scale)));
  return CenterCrop(ResizeImage(image, w, h), width, height);
}

struct Bench {
  Args args;
  std::unique_ptr<Flux2SampleEncoder> encoder;
  std::vector<std::string> captions;
  at::Tensor ids;  // [1, T] for `tokens`
  size_t next_caption = 0;
};

absl::StatusOr<Image> LoadImage(const Bench& b) {
  ASSIGN_OR_RETURN(Image image, ReadImageFile(b.args.image));
  return ResizeCover(image, b.args.width, b.args.height);
}

std::vector<int64_t> HiddenLayers(const Bench& b) {
  return b.args.hidden_layers.empty() ? Flux2HiddenStateLayers(b.encoder->family()) : b.args.hidden_layers;
}

absl::StatusOr<at::Tensor> EncodeTokens(Bench& b) {
  return b.encoder->text_encoder().Encode(b.ids, at::Tensor(), HiddenLayers(b));
}

// A caption's prompt embeddings: the encoder worker's EncodeText, or with --hidden_layers the same padded prompt
// ids through the text encoder for those layers.
absl::StatusOr<at::Tensor> EncodeCaption(Bench& b, const std::string& caption) {
  if (b.args.hidden_layers.empty()) return b.encoder->EncodeText(caption);
  ASSIGN_OR_RETURN(PromptIds ids, b.encoder->PromptIdsFor(caption));
  return b.encoder->text_encoder().Encode(ids.input_ids, ids.attention_mask, HiddenLayers(b));
}

// Runs `one` n times, returning each call's seconds.
absl::StatusOr<std::vector<double>> Time(int64_t n, const std::function<absl::Status()>& one) {
  std::vector<double> seconds;
  for (int64_t i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(one());
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return seconds;
}

absl::StatusOr<std::vector<double>> RunTimed(Bench& b, const std::string& what, int64_t n) {
  if (what == "caption") {
    return Time(n, [&]() -> absl::Status {
      const std::string& caption = b.captions[b.next_caption++ % b.captions.size()];
      return EncodeCaption(b, caption).status();
    });
  }
  if (what == "image") {
    return Time(n, [&]() -> absl::Status {
      ASSIGN_OR_RETURN(Image sized, LoadImage(b));
      return b.encoder->EncodeImage(sized).status();
    });
  }
  if (what == "tokens") return Time(n, [&]() { return EncodeTokens(b).status(); });
  return absl::InvalidArgumentError(absl::StrCat("unknown command '", what, "' (caption|image|tokens|dump)"));
}

absl::Status Dump(Bench& b, const std::string& path) {
  std::map<std::string, at::Tensor> out;
  ASSIGN_OR_RETURN(PromptIds ids, b.encoder->PromptIdsFor(b.captions[0]));
  out["input_ids"] = ids.input_ids;
  ASSIGN_OR_RETURN(out["prompt_embeds"], EncodeCaption(b, b.captions[0]));
  ASSIGN_OR_RETURN(Image sized, LoadImage(b));
  out["pixels"] = ImageToPixels(sized).contiguous();
  ASSIGN_OR_RETURN(out["packed"], b.encoder->EncodeImage(sized));
  ASSIGN_OR_RETURN(out["tokens_out"], EncodeTokens(b));
  for (auto& [name, t] : out) t = t.contiguous();
  return WriteSafetensors(path, out);
}

absl::StatusOr<std::unique_ptr<Bench>> Open(const Args& a) {
  auto b = std::make_unique<Bench>();
  b->args = a;
  Flux2EncoderOptions options;
  options.max_sequence_length = a.max_sequence_length;
  options.dtype = a.dtype;
  ASSIGN_OR_RETURN(b->encoder, Flux2SampleEncoder::Open(a.model, options));
  ASSIGN_OR_RETURN(std::string text, ReadFile(a.captions));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) b->captions.emplace_back(line);
  if (b->captions.empty()) return absl::InvalidArgumentError(absl::StrCat(a.captions, " holds no caption lines"));
  ASSIGN_OR_RETURN(auto ids, LoadAllSafetensors(a.ids));
  auto it = ids.find("input_ids");
  if (it == ids.end()) return absl::InvalidArgumentError(absl::StrCat(a.ids, " lacks tensor 'input_ids'"));
  b->ids = it->second.to(at::kLong);
  return b;
}

// This process's peak resident set (VmHWM). Not getrusage's ru_maxrss: Linux carries that over exec from the
// parent (the bench script, holding transformers' copy of the weights).
int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmHWM:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kib)) {
      return kib * 1024;
    }
  }
  return -1;
}

absl::Status Serve(Bench& b) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() != 2)
      return absl::InvalidArgumentError(absl::StrCat("expected '<command> <arg>', got '", line, "'"));
    if (words[0] == "dump") {
      RETURN_IF_ERROR(Dump(b, words[1]));
      std::cout << nlohmann::json{{"dumped", words[1]}}.dump() << std::endl;
      continue;
    }
    int64_t n = 0;
    if (!absl::SimpleAtoi(words[1], &n) || n < 0) {
      return absl::InvalidArgumentError(absl::StrCat("expected a count after '", words[0], "', got '", words[1], "'"));
    }
    ASSIGN_OR_RETURN(std::vector<double> seconds, RunTimed(b, words[0], n));
    std::cout << nlohmann::json{{"seconds", seconds}, {"peak_rss", PeakRssBytes()}}.dump() << std::endl;
  }
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv));
  if (!a.write.empty()) return WritePipeline(a);
  SetComputeThreads(a.threads);
  ASSIGN_OR_RETURN(auto bench, Open(a));
  nlohmann::ordered_json ready;
  ready["ready"] = true;
  ready["threads"] = at::get_num_threads();
  ready["identity"] = bench->encoder->identity();
  ready["text_dim"] = bench->encoder->text_dim();
  ready["latent_channels"] = bench->encoder->latent_channels();
  std::cout << ready.dump() << std::endl;
  return Serve(*bench);
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  absl::Status s = baton::Run(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "bench_encoder: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
