// The seed corpus (tests/fuzz/corpus/<target>/), made by the project's own writers so every seed is a real input:
//   build/bin/baton_fuzz_replay_tests --write_corpus tests/fuzz/corpus
// Seeds are small (the whole corpus stays well under 1 MB) and deterministic (fixed seeds).
#include <ATen/ATen.h>
#include <absl/strings/str_cat.h>

#include "core/lora/adapter_file.h"
#include "core/lora/lora.h"
#include "core/model/flux2_model.h"
#include "core/model/flux2_weights.h"
#include "core/model/stage_io.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/common.h"
#include "core/util/files.h"
#include "stage_worker/stage_runner.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"
#include "wire/envelope.h"

namespace baton::fuzz {
namespace {

void Write(const std::string& dir, const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string folder = JoinPath(dir, target);
  Require(MakeDirs(folder).ok(), "making the corpus folder");
  Require(WriteFileAtomic(JoinPath(folder, name), bytes).ok(), "writing a seed");
}

// Messages of one Push stream, as WriteEnvelope sends them.
struct Recorder {
  std::vector<v1::Envelope> messages;
  bool Write(const v1::Envelope& m) {
    messages.push_back(m);
    return true;
  }
};

std::string Push(const v1::EnvelopeHeader& header, const TensorMap& tensors, size_t chunk_bytes,
                 WireDtype wire = WireDtype::kNone) {
  Recorder recorder;
  Require(WriteEnvelope(&recorder, header, tensors, chunk_bytes, wire).ok(), "recording an envelope");
  std::vector<const google::protobuf::MessageLite*> all;
  for (const auto& m : recorder.messages) all.push_back(&m);
  return JoinDelimited(all);
}

v1::EnvelopeHeader Header(v1::EnvelopeHeader::Kind kind, int mb = 0) {
  v1::EnvelopeHeader h;
  h.set_job_id("job");
  h.set_config_hash("hash");  // StageFuzzConfigure's
  h.set_step(0);
  h.set_micro_batch(mb);
  h.set_kind(kind);
  h.set_sender("coordinator");
  return h;
}

TensorMap MixedTensors() {
  at::manual_seed(1);
  return {{"f32", at::randn({2, 3})},
          {"bf16", at::randn({4}).to(at::kBFloat16)},
          {"f16", at::randn({1, 2}).to(at::kHalf)},
          {"f64", at::scalar_tensor(2.5, at::kDouble)},
          {"i64", at::arange(5, at::kLong)},
          {"i32", at::arange(3, at::kInt)},
          {"u8", at::arange(6, at::kByte).reshape({2, 3})},
          {"bool", at::arange(4) % 2 == 0},
          {"fp8", at::randn({3}).to(at::kFloat8_e4m3fn)},
          {"empty", at::zeros({0, 4})}};
}

void WireSeeds(const std::string& dir) {
  Write(dir, "wire", "mixed_dtypes", Push(Header(v1::EnvelopeHeader::INPUTS), MixedTensors(), 8));
  at::manual_seed(2);
  TensorMap act = {{"img", at::randn({1, 4, 16})}, {"txt", at::randn({1, 3, 16})}};
  Write(dir, "wire", "activation_fp8", Push(Header(v1::EnvelopeHeader::ACTIVATION), act, 64, WireDtype::kFp8));
  Write(dir, "wire", "gradient_bf16", Push(Header(v1::EnvelopeHeader::GRADIENT), act, 4096, WireDtype::kBf16));
  Write(dir, "wire", "header_only", Push(Header(v1::EnvelopeHeader::LORA_WEIGHTS), {}, 16));
}

void SafetensorsSeeds(const std::string& dir) {
  TensorMap mixed = MixedTensors();
  mixed["f8_e5m2"] = at::randn({2}).to(at::kFloat8_e5m2);
  Write(dir, "safetensors", "mixed_dtypes.safetensors", *SerializeSafetensors(mixed, {{"format", "pt"}}));
  Write(dir, "safetensors", "empty.safetensors", *SerializeSafetensors({}, {}));
  at::manual_seed(3);
  Write(dir, "safetensors", "weights.safetensors",
        *SerializeSafetensors({{"transformer_blocks.0.attn.to_q.weight", at::randn({16, 16}).to(at::kBFloat16)},
                               {"x_embedder.weight", at::randn({16, 4})}},
                              {{"format", "pt"}, {"note", "{\"json\": [1, 2]}"}}));
}

void JobSeeds(const std::string& dir) {
  Write(dir, "job", "demo.yaml", *ReadFile(JoinPath(test_util::SourceDir(), "configs/jobs/demo.yaml")));
  Write(dir, "job", "every_key.yaml", R"(name: every-key
model: out/model
model_config: ""
dataset: out/cache
lora: {rank: 4, alpha: 8, targets: "to_q,to_k,to_v", dropout: 0.1}
init_lora: ""
optimizer: {lr: 1e-3, weight_decay: 0.01, betas: [0.9, 0.99], eps: 1e-8, clip: 1.0, warmup_steps: 2}
timesteps: {sampling: logit_normal, logit_mean: 0.5, logit_std: 1.0, mode_scale: 1.29, shift: flux2_empirical, shift_steps: 28}
steps: 10
batch_size: 4
micro_batches: 2
schedule: interleaved
chunks: 2
recompute: auto
wire_dtype: fp8
seed: 7
checkpoint_every: 5
dtype: bf16
quantize: int8
devices: [cpu, cpu]
guidance: 4.0
save_bfl: true
threads: 2
memory_per_stage: [1GB, 2GB]
encode: {images: data/dogs, encoder_worker: "127.0.0.1:5000", resolution: 512, trigger: sks}
)");
  Write(dir, "job", "minimal.yaml", "model: m\ndataset: d\nsteps: 1\n");
}

// DoRA (diffusers naming with lora_magnitude_vector), LoHa and LoKr (LyCORIS naming), as Baton writes them.
void VariantLoraSeeds(const std::string& dir, const std::string& tmp) {
  const Flux2Config config = test_util::TinyFlux2Config();
  const std::string path = JoinPath(tmp, "variant.safetensors");
  for (AdapterType type : {AdapterType::kDora, AdapterType::kLoha, AdapterType::kLokr}) {
    LoraSpec spec{2, 4.0, {"to_q", "attn.to_out"}, 0.0, 3};
    spec.type = type;
    Flux2Stage stage(config, Flux2StageRange::Full(config), at::TensorOptions());
    Require(AttachLora(*stage, spec).ok(), "attaching the adapters");
    at::manual_seed(5);
    TensorMap params;
    for (auto& [name, p] : LoraParameters(*stage)) params[name] = at::randn_like(p);
    const bool lycoris = type != AdapterType::kDora;
    Require((lycoris ? SaveLycoris(path, params, spec, {}) : SaveLoraDiffusers(path, params, spec)).ok(), "saving");
    Write(dir, "lora", absl::StrCat(AdapterTypeName(type), ".safetensors"), *ReadFile(path));
  }
}

void LoraSeeds(const std::string& dir) {
  const Flux2Config config = test_util::TinyFlux2Config();
  const absl::StatusOr<std::vector<std::string>> targets = ResolveLoraTargets("attention");
  Require(targets.ok(), "resolving the attention targets");
  LoraSpec spec{2, 2.0, *targets, 0.0, 3};
  Flux2Stage stage(config, Flux2StageRange::Full(config), at::TensorOptions());
  Require(AttachLora(*stage, spec).ok(), "attaching the LoRA");
  at::manual_seed(4);
  TensorMap params;
  for (auto& [name, p] : LoraParameters(*stage)) params[name] = at::randn_like(p);
  const std::string tmp = test_util::MakeTempDir("fuzz_seeds");
  const std::string path = JoinPath(tmp, "lora.safetensors");
  Require(SaveLoraDiffusers(path, params, spec).ok(), "saving diffusers");
  Write(dir, "lora", "diffusers.safetensors", *ReadFile(path));
  Require(SaveLoraBfl(path, params, spec).ok(), "saving BFL");
  Write(dir, "lora", "bfl.safetensors", *ReadFile(path));
  // PEFT as peft's save_pretrained writes it: no "transformer." prefix, lora_alpha ≠ r, an alpha_pattern.
  TensorMap peft = {
      {"transformer_blocks.0.attn.to_q.lora_A.weight", params["transformer_blocks.0.attn.to_q.lora_A.weight"]},
      {"transformer_blocks.0.attn.to_q.lora_B.weight", params["transformer_blocks.0.attn.to_q.lora_B.weight"]},
      {"single_transformer_blocks.0.attn.to_out.lora_A.weight",
       params["single_transformer_blocks.0.attn.to_out.lora_A.weight"]},
      {"single_transformer_blocks.0.attn.to_out.lora_B.weight",
       params["single_transformer_blocks.0.attn.to_out.lora_B.weight"]}};
  Write(dir, "lora", "peft.safetensors",
        *SerializeSafetensors(
            peft, {{"format", "pt"},
                   {"lora_adapter_metadata", R"({"r": 2, "lora_alpha": 4, "use_rslora": false,)"
                                             R"( "alpha_pattern": {"single_transformer_blocks.0.attn.to_out": 8}})"}}));
  // BFL with an explicit .alpha (ComfyUI files have one).
  TensorMap bfl = {{"diffusion_model.double_blocks.0.img_attn.proj.lora_A.weight", at::randn({2, 16})},
                   {"diffusion_model.double_blocks.0.img_attn.proj.lora_B.weight", at::randn({16, 2})},
                   {"diffusion_model.double_blocks.0.img_attn.proj.alpha", at::scalar_tensor(4.0)}};
  Write(dir, "lora", "bfl_alpha.safetensors", *SerializeSafetensors(bfl, {}));
  VariantLoraSeeds(dir, tmp);
  (void)RemoveAll(tmp);
}

void StageSeeds(const std::string& dir) {
  const Flux2Config config = test_util::TinyFlux2Config();
  StageRunnerOptions options;
  options.model_root = StageFuzzConfigure().model_path();
  StageRunner runner(options);
  absl::StatusOr<v1::ConfigureResponse> configured = runner.Configure(StageFuzzConfigure());
  Require(configured.ok(), "configuring the seed worker");
  TensorMap lora = *runner.CurrentLora("job", "hash");
  for (auto& [name, t] : lora) t = t + 0.01;
  auto ckpt = Flux2Checkpoint::Open(StageFuzzConfigure().model_path());
  Require(ckpt.ok(), "opening the tiny model");
  auto shell = BuildFlux2Shell(**ckpt, at::kFloat, at::kCPU);
  Require(shell.ok(), "building the shell");
  auto in = test_util::MakeTinyInputs(config, 1, 2, 2, 3, 8);
  Flux2Constants k;
  {
    at::NoGradGuard no_grad;
    k = (*shell)(in.timestep, in.guidance, in.img_ids, in.txt_ids, at::kFloat);
  }
  at::manual_seed(6);
  const std::string step =
      Push(Header(v1::EnvelopeHeader::LORA_WEIGHTS), lora, 4096) +
      Push(Header(v1::EnvelopeHeader::ROPE), RopeTensors(k, "key"), 4096) +
      Push(Header(v1::EnvelopeHeader::CONSTANTS), ConstantTensors(k, "key"), 4096) +
      Push(Header(v1::EnvelopeHeader::INPUTS), InputTensors(in.hidden_states, in.encoder_hidden_states), 4096) +
      Push(Header(v1::EnvelopeHeader::TARGET), {{"target", at::randn({1, 4, config.in_channels})}}, 4096);
  Write(dir, "stage", "one_step", step);
}

}  // namespace

void WriteSeedCorpus(const std::string& dir) {
  WireSeeds(dir);
  SafetensorsSeeds(dir);
  JobSeeds(dir);
  LoraSeeds(dir);
  StageSeeds(dir);
}

}  // namespace baton::fuzz
