// WriteTinyWanPipeline and its tokenizer (declared in wan_encoder.h): a tiny but complete diffusers Wan 2.1 T2V
// folder for tests and demos, with every component in its real layout.
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <nlohmann/json.hpp>
#include <set>

#include "core/encode/clip_vision.h"
#include "core/encode/clip_vision_config.h"
#include "core/encode/wan_encoder.h"
#include "core/model/wan_config.h"
#include "core/model/wan_weights.h"
#include "core/text/umt5_checkpoint.h"
#include "core/text/umt5_config.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"
#include "core/vae/wan_vae_config.h"
#include "core/vae/wan_vae_random.h"

namespace baton {
namespace {

// A [piece, score] pair (a braced {string, x} would become a JSON object).
nlohmann::ordered_json Piece(const std::string& piece, double score) {
  return nlohmann::ordered_json::array({piece, score});
}

// Whole words get better (higher) scores than their letters, as a trained sentencepiece model gives frequent words.
constexpr char kTinyWanWords[] =
    "a an the of on in to and with is are at by from moving falling circling rolling flying walking running red "
    "green blue yellow white black orange purple gray circle square triangle ball cat dog car bird tree sky "
    "background left right up down slowly fast small large video scene camera";

}  // namespace

std::string TinyUnigramTokenizerJson() {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::array();
  vocab.push_back(Piece("<pad>", 0.0));
  vocab.push_back(Piece("</s>", 0.0));
  vocab.push_back(Piece("<unk>", 0.0));
  vocab.push_back(Piece("\u2581", -3.0));
  std::set<std::string> seen;
  for (absl::string_view word : absl::StrSplit(kTinyWanWords, ' ', absl::SkipEmpty())) {
    std::string piece = absl::StrCat("\u2581", word);
    if (seen.insert(piece).second) vocab.push_back(Piece(piece, -4.0 - 0.01 * static_cast<double>(seen.size())));
  }
  for (const char* chars : {"abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()"}) {
    for (const char* c = chars; *c; ++c) vocab.push_back(Piece(std::string(1, *c), -9.0));
  }
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  const char* specials[] = {"<pad>", "</s>", "<unk>"};
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  nlohmann::ordered_json metaspace = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  nlohmann::ordered_json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", metaspace},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}}},
      {"decoder", metaspace},
      {"model", {{"type", "Unigram"}, {"unk_id", 2}, {"vocab", vocab}, {"byte_fallback", false}}}};
  return j.dump(1);
}

namespace {

// The transformer of a tiny pipeline: the Wan 2.1 T2V architecture at D = 24, 3 blocks, over the tiny VAE's latents
// (image-to-video kinds: noisy + mask + first-frame latents) and the tiny umT5's width.
WanConfig TinyTransformer(const std::string& variant, const WanVaeConfig& vae, const Umt5Config& text) {
  WanConfig t;
  t.num_attention_heads = 2;
  t.attention_head_dim = 12;
  t.in_channels = variant == "t2v" || variant == "ti2v" ? vae.z_dim : 2 * vae.z_dim + 4;
  t.out_channels = vae.z_dim;
  t.text_dim = text.d_model;
  t.ffn_dim = 32;
  t.num_layers = 3;
  t.rope_max_seq_len = 32;
  if (variant == "i2v-2.1") {  // the CLIP image branch over the tiny image encoder's tokens
    t.image_dim = TinyClipVisionConfig().hidden_size;
    t.added_kv_proj_dim = t.inner_dim();
  }
  return t;
}

absl::Status WriteTinyTokenizer(const std::string& dir) {
  RETURN_IF_ERROR(MakeDirs(JoinPath(dir, "tokenizer")));
  RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "tokenizer/tokenizer.json"), TinyUnigramTokenizerJson()));
  nlohmann::ordered_json tokenizer_config = {
      {"tokenizer_class", "T5Tokenizer"}, {"pad_token", "<pad>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"},
      {"model_max_length", 512},          {"extra_ids", 0}};
  return WriteFileAtomic(JoinPath(dir, "tokenizer/tokenizer_config.json"), tokenizer_config.dump(2));
}

absl::Status WriteTinyScheduler(const std::string& dir) {
  RETURN_IF_ERROR(MakeDirs(JoinPath(dir, "scheduler")));
  nlohmann::ordered_json scheduler = {{"_class_name", "UniPCMultistepScheduler"},
                                      {"num_train_timesteps", 1000},
                                      {"prediction_type", "flow_prediction"},
                                      {"use_flow_sigmas", true},
                                      {"flow_shift", 3.0},
                                      {"solver_order", 2},
                                      {"solver_type", "bh2"},
                                      {"lower_order_final", true}};
  return WriteFileAtomic(JoinPath(dir, "scheduler/scheduler_config.json"), scheduler.dump(2));
}

nlohmann::ordered_json TinyModelIndex(const std::string& variant) {
  const bool i2v = variant == "i2v" || variant == "i2v-a14b" || variant == "i2v-2.1";
  nlohmann::ordered_json index = {{"_class_name", i2v ? "WanImageToVideoPipeline" : "WanPipeline"},
                                  {"_diffusers_version", "0.33.0"},
                                  {"scheduler", {"diffusers", "UniPCMultistepScheduler"}},
                                  {"text_encoder", {"transformers", "UMT5EncoderModel"}},
                                  {"tokenizer", {"transformers", "T5TokenizerFast"}},
                                  {"transformer", {"diffusers", "WanTransformer3DModel"}},
                                  {"vae", {"diffusers", "AutoencoderKLWan"}}};
  if (variant == "i2v-2.1") {  // as Wan2.1-I2V-14B-480P-Diffusers
    index["image_encoder"] = {"transformers", "CLIPVisionModel"};
    index["image_processor"] = {"transformers", "CLIPImageProcessor"};
  } else if (i2v) {  // as Wan2.2-I2V-A14B-Diffusers: no CLIP image branch
    index["image_encoder"] = {nullptr, nullptr};
    index["image_processor"] = {nullptr, nullptr};
  }
  if (variant == "i2v-a14b") {  // the low-noise expert, and I2V-A14B's switch at t = 900
    index["transformer_2"] = {"diffusers", "WanTransformer3DModel"};
    index["boundary_ratio"] = 0.9;
  }
  if (variant == "ti2v") index["expand_timesteps"] = true;
  return index;
}

}  // namespace

absl::Status WriteTinyWanPipeline(const std::string& dir, uint64_t seed, const std::string& variant) {
  if (variant != "t2v" && variant != "i2v" && variant != "i2v-a14b" && variant != "i2v-2.1" && variant != "ti2v") {
    return absl::InvalidArgumentError(
        absl::StrCat("tiny Wan pipeline variant '", variant, "': t2v, i2v, i2v-a14b, i2v-2.1 or ti2v"));
  }
  RETURN_IF_ERROR(MakeDirs(dir));
  const WanVaeConfig vae = TinyWanVaeConfig();
  const Umt5Config text = TinyUmt5Config(256);
  const WanConfig transformer = TinyTransformer(variant, vae, text);
  RETURN_IF_ERROR(WriteRandomWanWeights(transformer, JoinPath(dir, "transformer"), MixSeed(seed, 1)));
  if (variant == "i2v-a14b") {
    RETURN_IF_ERROR(WriteRandomWanWeights(transformer, JoinPath(dir, "transformer_2"), MixSeed(seed, 4)));
  }
  RETURN_IF_ERROR(WriteRandomWanVae(vae, JoinPath(dir, "vae"), MixSeed(seed, 2)));
  if (variant == "i2v-2.1")
    RETURN_IF_ERROR(WriteRandomClipPipelineFolders(TinyClipVisionConfig(), dir, MixSeed(seed, 5)));
  RETURN_IF_ERROR(WriteRandomUmt5Encoder(text, JoinPath(dir, "text_encoder"), MixSeed(seed, 3)));
  RETURN_IF_ERROR(WriteTinyTokenizer(dir));
  RETURN_IF_ERROR(WriteTinyScheduler(dir));
  return WriteFileAtomic(JoinPath(dir, "model_index.json"), TinyModelIndex(variant).dump(2));
}

}  // namespace baton
