#include "tools/tool_commands.h"

#include <ATen/Parallel.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_split.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <numeric>
#include <optional>
#include <tuple>

#include "core/data/cache.h"
#include "core/device/threads.h"
#include "core/encode/flux2_encoder.h"
#include "core/encode/wan_encoder.h"
#include "core/keys/flux2_keys.h"
#include "core/lora/lora.h"
#include "core/model/flux2_model.h"
#include "core/model/flux2_weights.h"
#include "core/model/model_family.h"
#include "core/model/wan_family.h"
#include "core/pipeline/partition.h"
#include "core/pipeline/replica_split.h"
#include "core/pipeline/schedule.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/train/common.h"
#include "core/train_local/local_trainer.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "tools/clip_command.h"
#include "tools/command_server.h"
#include "tools/debug_commands.h"
#include "tools/input_checks.h"
#include "tools/lora_convert_command.h"
#include "tools/quantize_command.h"
#include "tools/sample_command.h"
#include "tools/scheduler_command.h"
#include "tools/stage_forward.h"
#include "tools/step_grads_command.h"
#include "tools/tokenize_command.h"
#include "tools/wan_forward.h"
#include "tools/wan_text_encode.h"
#include "tools/wan_vae_command.h"
#include "tools/wan_vae_decode_command.h"

namespace baton {
namespace {

// `init-weights --pipeline` names of the tiny Wan pipelines: (name, WriteTinyWanPipeline variant, description).
std::vector<std::tuple<std::string, std::string, const char*>> TinyWanPipelines() {
  return {{"wan-tiny", "t2v", "Wan 2.1 T2V"},
          {"wan-i2v-tiny", "i2v", "Wan 2.2 I2V-A14B kind (36-channel)"},
          {"wan-i2v-a14b-tiny", "i2v-a14b", "Wan 2.2 I2V-A14B kind with both experts"},
          {"wan-i2v-2.1-tiny", "i2v-2.1", "Wan 2.1 I2V kind (CLIP image branch, image_encoder/)"},
          {"wan-ti2v-tiny", "ti2v", "Wan 2.2 TI2V-5B kind (expand_timesteps)"}};
}

// Replaces OUT's random transformer/ and vae/ weights by TRAINED's (data/demo_pipeline: the demo's tiny pipeline after
// training, scripts/make_demo_pipeline.py), which must hold the same tensors: names, shapes and dtypes.
absl::Status CopyTrainedParts(const std::string& trained, const std::string& out) {
  for (const char* part : {"transformer", "vae"}) {
    const std::string from = JoinPath(JoinPath(trained, part), "diffusion_pytorch_model.safetensors");
    const std::string to = JoinPath(JoinPath(out, part), "diffusion_pytorch_model.safetensors");
    ASSIGN_OR_RETURN(auto learned, LoadAllSafetensors(from));
    ASSIGN_OR_RETURN(auto random, LoadAllSafetensors(to));
    for (const auto& [name, tensor] : random) {
      auto it = learned.find(name);
      if (it == learned.end() || it->second.sizes() != tensor.sizes() || it->second.dtype() != tensor.dtype()) {
        return absl::FailedPreconditionError(
            absl::StrCat(from, " is not the tiny pipeline's ", part, ": tensor ", name,
                         it == learned.end() ? " is missing" : " differs in shape or dtype"));
      }
    }
    if (learned.size() != random.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat(from, " holds ", learned.size(), " tensors, the tiny pipeline's ", part, " ", random.size()));
    }
    ASSIGN_OR_RETURN(std::string bytes, ReadFile(from));
    RETURN_IF_ERROR(WriteFileAtomic(to, bytes));
  }
  return absl::OkStatus();
}

absl::Status InitWeights(const Args& args) {
  if (args.Has("pipeline")) {
    ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed"));
    for (const auto& [name, variant, what] : TinyWanPipelines()) {
      if (args.Get("pipeline") != name) continue;
      RETURN_IF_ERROR(WriteTinyWanPipeline(args.Get("out"), static_cast<uint64_t>(seed), variant));
      std::printf("wrote tiny %s pipeline %s (transformer/, vae/, text_encoder/, tokenizer/, scheduler/)\n", what,
                  args.Get("out").c_str());
      return absl::OkStatus();
    }
    if (args.Get("pipeline") != "tiny") {
      return absl::InvalidArgumentError(
          "--pipeline takes 'tiny' (FLUX.2), 'wan-tiny' (Wan 2.1 T2V), 'wan-i2v-tiny' "
          "(Wan 2.2 I2V-A14B kind), 'wan-i2v-a14b-tiny' (both experts), 'wan-i2v-2.1-tiny' "
          "(Wan 2.1 I2V kind, CLIP) or 'wan-ti2v-tiny' "
          "(TI2V-5B kind, expand_timesteps); "
          "real pipelines come from their publishers");
    }
    RETURN_IF_ERROR(WriteTinyFlux2Pipeline(args.Get("out"), static_cast<uint64_t>(seed)));
    std::printf("wrote tiny FLUX.2 pipeline %s (transformer/, vae/, text_encoder/, tokenizer/, scheduler/)\n",
                args.Get("out").c_str());
    if (args.Has("trained")) {
      // The trained transformer learned from the seed-0 text encoder's embeddings: another seed would feed it
      // strangers.
      if (seed != 0) return absl::InvalidArgumentError("--trained needs --seed 0 (its text encoder's)");
      RETURN_IF_ERROR(CopyTrainedParts(args.Get("trained"), args.Get("out")));
      std::printf("took the trained transformer/ and vae/ from %s\n", args.Get("trained").c_str());
    }
    return absl::OkStatus();
  }
  if (!args.Has("config")) return absl::InvalidArgumentError("--config is required");
  ASSIGN_OR_RETURN(Flux2Config config, LoadFlux2Config(args.Get("config")));
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed"));
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(args.Get("dtype")));
  ASSIGN_OR_RETURN(int64_t shard_mb, args.GetInt("shard-mb"));
  std::string out = args.Get("out");
  if (args.Get("format") == "bfl") {
    auto diffusers = RandomFlux2StateDict(config, static_cast<uint64_t>(seed), dtype);
    ASSIGN_OR_RETURN(auto bfl, DiffusersToBflStateDict(diffusers));
    RETURN_IF_ERROR(MakeDirs(DirName(out)));
    RETURN_IF_ERROR(WriteSafetensors(out, bfl));
    std::printf("wrote BFL single file %s (%zu tensors)\n", out.c_str(), bfl.size());
    return absl::OkStatus();
  }
  if (args.Get("format") != "diffusers") return absl::InvalidArgumentError("--format must be diffusers or bfl");
  RETURN_IF_ERROR(WriteRandomFlux2Weights(config, out, static_cast<uint64_t>(seed), dtype, shard_mb << 20));
  std::printf("wrote %s: %.3f M parameters, diffusers layout, seed %lld\n", out.c_str(),
              static_cast<double>(config.TotalParams()) / 1e6, static_cast<long long>(seed));
  return absl::OkStatus();
}

absl::Status SyntheticCache(const Args& args) {
  ASSIGN_OR_RETURN(Flux2Config config, LoadFlux2Config(args.Get("config")));
  ASSIGN_OR_RETURN(int64_t samples, args.GetInt("samples"));
  ASSIGN_OR_RETURN(int64_t text_len, args.GetInt("text-len"));
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed"));
  std::vector<std::pair<int64_t, int64_t>> grids;
  for (absl::string_view g : absl::StrSplit(args.Get("grids"), ',', absl::SkipEmpty())) {
    std::vector<std::string> hw = absl::StrSplit(g, 'x');
    int64_t h, w;
    if (hw.size() != 2 || !absl::SimpleAtoi(hw[0], &h) || !absl::SimpleAtoi(hw[1], &w) || h <= 0 || w <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--grids: '", g, "' is not HxW (token grid, e.g. 8x8)"));
    }
    grids.emplace_back(h, w);
  }
  RETURN_IF_ERROR(WriteSyntheticCache(args.Get("out"), config.in_channels, config.joint_attention_dim, samples, grids,
                                      text_len, static_cast<uint64_t>(seed)));
  std::printf("wrote synthetic cache %s: %lld samples, grids %s, text length %lld\n", args.Get("out").c_str(),
              static_cast<long long>(samples), args.Get("grids").c_str(), static_cast<long long>(text_len));
  return absl::OkStatus();
}

absl::Status Forward(const Args& args) {
  if (IsWanModel(args.Get("model"), args.Get("config"))) return WanForward(args);
  SetComputeThreads(1);
  // The family comes from the model folder's config.json (_class_name); it checks the inputs before they run.
  ASSIGN_OR_RETURN(std::unique_ptr<ModelFamily> model, OpenModel(args.Get("model"), args.Get("config")));
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(args.Get("dtype")));
  ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(args.Get("inputs")));
  RETURN_IF_ERROR(model->CheckModelInputs(inputs, args.Get("inputs")));
  ASSIGN_OR_RETURN(std::unique_ptr<ShellModel> shell, model->BuildShell(dtype, at::kCPU));
  ASSIGN_OR_RETURN(WeightQuant quant, ParseWeightQuant(args.Get("quantize")));
  ASSIGN_OR_RETURN(std::unique_ptr<StageModel> stage,
                   model->BuildStage(model->FullRange(), dtype, at::kCPU, nullptr, false, quant));
  RETURN_IF_ERROR(AttachLoraFromArgs(args, *stage));
  ASSIGN_OR_RETURN(ShellOutputs shell_out, shell->Run(inputs, dtype));
  return ForwardAndWriteOutput(args, *stage, shell_out, "");
}

absl::Status VaeEncode(const Args& args) {
  ASSIGN_OR_RETURN(VaeFolder folder, FindVaeFolder(args.Get("model")));
  if (folder.class_name == "AutoencoderKLWan") return WanVaeEncode(args, folder.dir);
  if (!args.Has("inputs")) return absl::InvalidArgumentError("--inputs is required for a FLUX.2 VAE");
  SetComputeThreads(1);
  ASSIGN_OR_RETURN(auto vae, Flux2VaeEncoder::Load(folder.dir, at::kFloat, at::kCPU));
  ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(args.Get("inputs")));
  RETURN_IF_ERROR(CheckPixels(inputs, vae->config().pixel_multiple(), args.Get("inputs")));
  ASSIGN_OR_RETURN(at::Tensor latents, vae->EncodeMean(inputs["pixels"].to(at::kFloat)));
  at::Tensor packed;
  RETURN_IF_ERROR(TorchCall("patchify", [&] { packed = vae->PatchifyAndNormalize(latents); }));
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), {{"latents", latents}, {"packed", packed}}));
  std::printf("wrote %s: latents %s, packed %s\n", args.Get("output").c_str(), ShapeString(latents.sizes()).c_str(),
              ShapeString(packed.sizes()).c_str());
  return absl::OkStatus();
}

absl::Status TextEncode(const Args& args) {
  SetComputeThreads(1);
  if (args.Has("prompt") == args.Has("input-ids")) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --input-ids");
  }
  // Only text_encoder/ (and tokenizer/ for --prompt) are read: a folder without vae/ will do.
  const std::string model = args.Get("model");
  if (IsUmt5Pipeline(model)) return WanTextEncode(args);  // Wan: umT5 (core/text/wan_prompt.h)
  ASSIGN_OR_RETURN(auto encoder, TextEncoder::Open(JoinPath(model, "text_encoder"), at::kFloat, at::kCPU));
  ASSIGN_OR_RETURN(TextEncoderFamily family, Flux2FamilyForConfig(encoder->config()));
  at::Tensor ids, embeds;
  if (args.Has("prompt")) {
    ASSIGN_OR_RETURN(int64_t max_length, args.GetInt("max-sequence-length"));
    ASSIGN_OR_RETURN(auto tokenizer, BpeTokenizer::Load(JoinPath(model, "tokenizer/tokenizer.json")));
    ASSIGN_OR_RETURN(auto padding_side, ReadTokenizerPaddingSide(JoinPath(model, "tokenizer/tokenizer_config.json")));
    ASSIGN_OR_RETURN(PromptIds prompt,
                     BuildFlux2PromptIds(*tokenizer, args.Get("prompt"), family, max_length, padding_side));
    ids = prompt.input_ids;
    ASSIGN_OR_RETURN(embeds, EncodeFlux2Prompt(*encoder, prompt, family));
  } else {
    ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(args.Get("input-ids")));
    RETURN_IF_ERROR(CheckInputIds(inputs, encoder->config().vocab_size, args.Get("input-ids")));
    ids = inputs["input_ids"].to(at::kLong);
    // Straight into the text encoder: no template, no padding, positions 0..L-1.
    ASSIGN_OR_RETURN(embeds, encoder->Encode(ids, at::Tensor(), Flux2HiddenStateLayers(family)));
  }
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), {{"input_ids", ids}, {"prompt_embeds", embeds}}));
  std::printf("wrote %s: input_ids %s, prompt_embeds %s\n", args.Get("output").c_str(),
              ShapeString(ids.sizes()).c_str(), ShapeString(embeds.sizes()).c_str());
  return absl::OkStatus();
}

absl::Status TrainLocal(const Args& args) {
  ASSIGN_OR_RETURN(JobConfig job, LoadJob(args.Get("job")));
  int64_t steps = job.steps;
  if (args.Has("steps")) {
    ASSIGN_OR_RETURN(steps, args.GetInt("steps"));
  }
  std::printf("train-local: job %s, %lld steps, batch %lld in %lld micro-batches, output %s\n", job.source.c_str(),
              static_cast<long long>(steps), static_cast<long long>(job.batch_size),
              static_cast<long long>(job.micro_batches), args.Get("output").c_str());
  double elapsed = 0;
  auto on_step = [&](const StepRecord& r) {
    elapsed += r.step_seconds;
    double eta = elapsed / static_cast<double>(r.step) * static_cast<double>(steps - r.step);
    std::printf("step %4lld/%lld  loss %.5f  lr %.2e  grad_norm %.4f  %.3f s/step  %.1f samples/s  ETA %.0fs\n",
                static_cast<long long>(r.step), static_cast<long long>(steps), r.loss, r.lr, r.grad_norm,
                r.step_seconds, r.samples_per_second, eta);
    std::fflush(stdout);
  };
  ASSIGN_OR_RETURN(LocalTrainResult result, RunLocalTraining(job, args.Get("output"), steps, on_step));
  std::printf("done: loss %.5f → %.5f; wrote %s/lora.safetensors and %s/train_log.jsonl\n", result.steps.front().loss,
              result.steps.back().loss, args.Get("output").c_str(), args.Get("output").c_str());
  return absl::OkStatus();
}

absl::Status PrintSchedule(const Args& args) {
  ASSIGN_OR_RETURN(int64_t stages, args.GetInt("stages"));
  ASSIGN_OR_RETURN(int64_t m, args.GetInt("micro-batches"));
  ASSIGN_OR_RETURN(int64_t width, args.GetInt("width"));
  ASSIGN_OR_RETURN(int64_t chunks, args.GetInt("chunks"));
  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(args.Get("kind")));
  const bool interleaved = kind == ScheduleKind::kInterleaved1F1B;
  if (chunks == 0) chunks = interleaved ? 2 : 1;  // as the job key chunks: defaults
  if (chunks > 1 && !interleaved) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunks ", chunks, " needs --kind interleaved (", ScheduleKindName(kind), " runs 1 chunk)"));
  }
  if (interleaved && chunks < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kind interleaved needs --chunks >= 2 (model chunks per stage); got ", chunks));
  }
  if (chunks > 1000) return absl::InvalidArgumentError(absl::StrCat("--chunks ", chunks, " is too large"));
  ASSIGN_OR_RETURN(Schedule schedule,
                   MakeSchedule(kind, static_cast<int>(stages), static_cast<int>(m), static_cast<int>(chunks)));
  ASSIGN_OR_RETURN(Timeline timeline, SimulateSchedule(schedule, 1.0, 2.0));
  if (interleaved) {
    std::printf(
        "%s schedule, %lld stages x %lld chunks (virtual stages), %lld micro-batches (a stage's F = 1 unit, "
        "B = 2 units; each chunk 1/%lld of that)\n",
        ScheduleKindName(kind), static_cast<long long>(stages), static_cast<long long>(chunks),
        static_cast<long long>(m), static_cast<long long>(chunks));
  } else {
    std::printf("%s schedule, %lld stages, %lld micro-batches (F = 1 unit, B = 2 units)\n", ScheduleKindName(kind),
                static_cast<long long>(stages), static_cast<long long>(m));
  }
  std::fputs(RenderTimeline(timeline, static_cast<int>(width)).c_str(), stdout);
  return absl::OkStatus();
}

// `baton plan`'s partitioner options, less the stage count and the budgets.
absl::StatusOr<PartitionOptions> PlanOptionsFromArgs(const Args& args) {
  PartitionOptions opts;
  ASSIGN_OR_RETURN(opts.tokens_per_micro_batch, args.GetInt("tokens"));
  ASSIGN_OR_RETURN(opts.text_tokens_per_micro_batch, args.GetInt("text-tokens"));
  ASSIGN_OR_RETURN(int64_t references, args.GetInt("references"));
  if (references < 0 || references > kMaxReferences) {
    return absl::InvalidArgumentError(absl::StrCat("--references must be 0..", kMaxReferences, "; got ", references));
  }
  // Each reference image adds the target's image tokens (encoder_worker --control caches them at its bucket).
  opts.reference_tokens_per_micro_batch =
      references * std::max<int64_t>(opts.tokens_per_micro_batch - opts.text_tokens_per_micro_batch, 0);
  opts.tokens_per_micro_batch += opts.reference_tokens_per_micro_batch;
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(args.Get("dtype")));
  opts.bytes_per_param = static_cast<int>(c10::elementSize(dtype));
  ASSIGN_OR_RETURN(opts.lora_rank, args.GetInt("rank"));
  ASSIGN_OR_RETURN(opts.lora_type, ParseAdapterType(args.Get("lora-type")));
  ASSIGN_OR_RETURN(opts.lokr_factor, args.GetInt("lokr-factor"));
  const std::string lora_dtype = args.Get("lora-dtype").empty() ? args.Get("dtype") : args.Get("lora-dtype");
  if (lora_dtype != "fp32" && lora_dtype != args.Get("dtype")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora-dtype must be fp32 or the --dtype (", args.Get("dtype"), "); got ", lora_dtype));
  }
  opts.lora_fp32 = lora_dtype == "fp32";
  ASSIGN_OR_RETURN(opts.quantize, ParseWeightQuant(args.Get("quantize")));
  ASSIGN_OR_RETURN(opts.recompute, ParseRecomputePolicy(args.Get("recompute")));
  if (args.Get("offload") == "auto") {
    opts.offload_blocks = PartitionOptions::kOffloadAuto;
  } else if (!absl::SimpleAtoi(args.Get("offload"), &opts.offload_blocks) || opts.offload_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--offload takes a block count ≥ 0 or auto; got '", args.Get("offload"), "'"));
  }
  ASSIGN_OR_RETURN(opts.device, ParsePlanDevice(args.Get("device")));
  ASSIGN_OR_RETURN(int64_t micro_batches, args.GetInt("micro-batches"));
  opts.micro_batches = static_cast<int>(micro_batches);
  const std::string exchange = args.Get("replica-exchange");
  if (exchange != "auto" && exchange != "coordinator" && exchange != "allreduce") {
    return absl::InvalidArgumentError("--replica-exchange must be auto, allreduce or coordinator");
  }
  opts.local_optimizer = exchange != "coordinator";  // auto: allreduce, unless the replicas differ (PrintPlan)
  return opts;
}

// Each replica's stage count: --replica-stages, else --replicas copies of --stages.
absl::StatusOr<std::vector<int>> PlanReplicaStages(const Args& args) {
  if (args.Has("replica-stages")) {
    std::vector<int> counts;
    for (absl::string_view part : absl::StrSplit(args.Get("replica-stages"), ',')) {
      int count = 0;
      if (!absl::SimpleAtoi(part, &count) || count < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--replica-stages: '", part, "' is not a stage count ≥ 1 (e.g. --replica-stages 1,2)"));
      }
      counts.push_back(count);
    }
    return counts;
  }
  if (args.Get("stages").empty()) return absl::InvalidArgumentError("--stages (or --replica-stages) is required");
  ASSIGN_OR_RETURN(int64_t stages, args.GetInt("stages"));
  ASSIGN_OR_RETURN(int64_t replicas, args.GetInt("replicas"));
  if (stages < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  if (replicas < 1) return absl::InvalidArgumentError("--replicas must be ≥ 1");
  return std::vector<int>(replicas, static_cast<int>(stages));
}

absl::Status PrintPlan(const Args& args) {
  // FLUX.2 or Wan, by the config's _class_name; no weights are read.
  ASSIGN_OR_RETURN(std::unique_ptr<ModelFamily> model, OpenModelConfig(args.Get("model-config")));
  ASSIGN_OR_RETURN(PlanSource source, PlanSourceFor(*model));
  ASSIGN_OR_RETURN(PartitionOptions opts, PlanOptionsFromArgs(args));
  ASSIGN_OR_RETURN(std::vector<int> counts, PlanReplicaStages(args));
  std::vector<int64_t> budgets;
  if (args.Has("memory-per-stage")) {
    for (absl::string_view part : absl::StrSplit(args.Get("memory-per-stage"), ',')) {
      ASSIGN_OR_RETURN(int64_t bytes, ParseByteSize(part));
      budgets.push_back(bytes);
    }
  }
  // Replicas of one stage count share one plan; of different counts, each gets its own (budgets: one for all, or
  // one per worker, replica after replica).
  const bool unequal = UnequalStageCounts(counts);
  if (unequal && args.Get("replica-exchange") == "auto") opts.local_optimizer = false;  // auto's choice for them
  const int total = std::accumulate(counts.begin(), counts.end(), 0);
  std::optional<Plan> first;
  std::string unfit;
  for (size_t r = 0, worker = 0; r < (unequal ? counts.size() : 1); worker += counts[r], ++r) {
    opts.stages = counts[r];
    opts.memory_budget_bytes = budgets;
    if (unequal && static_cast<int>(budgets.size()) == total) {
      opts.memory_budget_bytes.assign(budgets.begin() + worker, budgets.begin() + worker + counts[r]);
    }
    ASSIGN_OR_RETURN(Plan plan, Partition(source, opts));
    if (unequal) std::printf("replica %zu (%d stages):\n", r, counts[r]);
    std::fputs(RenderPlan(plan).c_str(), stdout);
    if (!plan.fits && unfit.empty()) unfit = unequal ? absl::StrCat("replica ", r, ": ", plan.message) : plan.message;
    if (!first) first = std::move(plan);
  }
  if (opts.local_optimizer && unequal) {
    return absl::InvalidArgumentError("--replica-exchange allreduce needs replicas of the same stage count");
  }
  if (counts.size() > 1) std::fputs(RenderReplicaLoad(*first, counts, opts.local_optimizer).c_str(), stdout);
  if (!unfit.empty()) return absl::FailedPreconditionError(unfit);
  return absl::OkStatus();
}

// `baton schedule`: a schedule's timeline and bubble.
Command ScheduleCommand() {
  return {"schedule",
          "Print a pipeline schedule's timeline (GPipe, 1F1B or interleaved 1F1B) with its bubble.",
          {{"stages", "pipeline stages", "", true},
           {"micro-batches", "micro-batches per step", "", true},
           {"kind", "gpipe | 1f1b | interleaved (the job key schedule: takes the same names)", "1f1b"},
           {"chunks",
            "model chunks per stage (virtual stages), > 1 only with --kind interleaved; 0: as the job key (2 "
            "interleaved, else 1)",
            "0"},
           {"width", "timeline width in characters (0 = automatic)", "0"}},
          PrintSchedule};
}

// `baton plan`: the planner's split of a model config, per replica.
Command PlanCommand() {
  return {
      "plan",
      "Partition a model config into stages by cost within per-stage memory, without allocating weights.",
      {{"model-config", "diffusers config.json of the transformer (FLUX.2 or Wan, by its _class_name)", "", true},
       {"stages", "number of stages (of each replica; or --replica-stages)", ""},
       {"replicas", "data-parallel replicas of this plan (job key replicas:): adds the LoRA exchange per step", "1"},
       {"replica-stages",
        "each replica's stages where they differ, e.g. 1,2 (job key replica_stages:): plans each replica; "
        "--memory-per-stage may then list every worker's budget, replica after replica"},
       {"tokens",
        "tokens per micro-batch after patchify, text included (FLUX.2 1024x1024: 4096 + 512; Wan 81 frames at "
        "480x832: 21x30x52 = 32760 + 512)",
        "4608"},
       {"text-tokens", "the text part of --tokens", "512"},
       {"references",
        "FLUX.2 reference images per sample (editing): each adds the image part of --tokens, as encoder_worker "
        "--control caches them at the target's size",
        "0"},
       {"memory-per-stage", "memory budget per stage, e.g. 24GB (or one per stage, comma-separated)"},
       {"dtype", "frozen weight dtype: bf16 | fp32", "bf16"},
       {"quantize", "block linears stored 8-bit: none | int8 | fp8", "none"},
       {"recompute", "auto (recompute the fewest blocks that fit the budget) | true (all) | false", "auto"},
       {"offload",
        "block swap per stage: N (the first N blocks' frozen weights in host memory, copied in for each use) | auto "
        "(the fewest that fit --memory-per-stage) | 0",
        "0"},
       {"device", "cuda | cpu (the fixed per-process memory: estimated on cuda, measured on cpu)", "cuda"},
       {"micro-batches", "micro-batches per step (in-flight activations); 0 = as many as stages", "0"},
       {"rank", "LoRA rank", "16"},
       {"lora-type", "the adapter (job key lora.type): lora | dora | loha | lokr (their parameters and state)", "lora"},
       {"lokr-factor", "LoKr's factor (job key lora.factor); -1 near the square root", "-1"},
       {"lora-dtype",
        "the adapters' math (job key lora_dtype:): fp32 (each adapted input copied to fp32 under bf16) | the --dtype "
        "(the default, as the job key's)"},
       {"replica-exchange",
        "auto | allreduce | coordinator (job key replica_exchange:): with allreduce (auto's choice unless the replicas "
        "differ in stage counts) the stages hold AdamW's state and the gradient sums (counted per stage), and the "
        "exchange line says what crosses each stage's link",
        "auto"}},
      PrintPlan};
}

}  // namespace

const std::vector<Command>& ToolCommands() {
  static auto* commands = new std::vector<Command>{
      {"train-local",
       "Train a LoRA in one process (the reference the pipeline must match).",
       {{"job", "job YAML file", "", true},
        {"output", "output folder (lora.safetensors, train_log.jsonl)", "", true},
        {"steps", "override the job's step count"}},
       TrainLocal},
      {"init-weights",
       "Write deterministic random FLUX.2 transformer weights for a config, or a whole tiny pipeline (tests, demo).",
       {{"config", "diffusers config.json of the transformer"},
        {"out", "output folder (diffusers) or file (bfl)", "", true},
        {"seed", "random seed", "0"},
        {"dtype", "stored dtype: fp32 | bf16", "fp32"},
        {"format", "diffusers | bfl", "diffusers"},
        {"shard-mb", "split into shards of at most this many MiB (0 = one file)", "0"},
        {"pipeline",
         "'tiny' | 'wan-tiny' | 'wan-i2v-tiny' | 'wan-i2v-a14b-tiny' | 'wan-i2v-2.1-tiny' | 'wan-ti2v-tiny': write "
         "a complete tiny FLUX.2 | Wan (T2V, I2V-A14B kind, with both experts, 2.1 I2V kind, TI2V-5B kind) pipeline "
         "folder to --out"},
        {"trained",
         "with --pipeline tiny: take transformer/ and vae/ from this folder instead of random ones "
         "(data/demo_pipeline: "
         "the demo's, trained on drawn shapes by scripts/make_demo_pipeline.py)"}},
       InitWeights},
      {"synthetic-cache",
       "Write a deterministic synthetic latent/text cache for a model config (until real images are encoded).",
       {{"config", "diffusers config.json of the transformer", "", true},
        {"out", "cache folder", "", true},
        {"samples", "number of samples", "32"},
        {"grids", "comma-separated token grids HxW (one bucket each)", "8x8"},
        {"text-len", "text tokens per sample", "16"},
        {"seed", "random seed", "0"}},
       SyntheticCache},
      {"sample",
       "Render one image (FLUX.2) or video (Wan) from a prompt and a LoRA, in this process or through stage workers.",
       {{"model", "FLUX.2 or Wan pipeline folder (transformer/, vae/, text_encoder/, tokenizer/)", "", true},
        {"prompt", "the prompt (encoded by the pipeline's text encoder)"},
        {"prompt_embeds", "safetensors with 'prompt_embeds' [L, D] or [1, L, D] instead of --prompt"},
        {"lora", "LoRA file: diffusers/PEFT or BFL/ComfyUI keys"},
        {"lora-scale", "multiplier on the LoRA's own alpha/r (in this process)", "1.0"},
        {"lora-low",
         "Wan 2.2 A14B: the low-noise expert's LoRA (--lora is the high-noise expert's; an expert: both job's "
         "low_noise/lora.safetensors); two-expert folders sample in this process, switching at boundary_ratio"},
        {"steps", "denoising steps", "28"},
        {"guidance",
         "guidance scale (FLUX.2: the guidance embedding, and for a klein base model (model_index.json: "
         "Flux2KleinPipeline, is_distilled false) classifier-free as that pipeline; Wan: classifier-free; > 1 = on)",
         "4.0"},
        {"size", "WxH, multiples of 16", "1024x1024"},
        {"seed", "initial noise seed (as torch.Generator().manual_seed)", "0"},
        {"max_sequence_length", "prompt tokens", "512"},
        {"frames", "Wan: video frames, 4k + 1", "81"},
        {"negative-prompt",
         "Wan and FLUX.2 klein base: the classifier-free guidance negative prompt (with --guidance > 1; default empty, "
         "Flux2KleinPipeline's)"},
        {"negative_prompt_embeds", "FLUX.2 klein base with --prompt_embeds: the negative prompt's, the same layout"},
        {"image", "Wan image-to-video: the first frame (resized to --size)"},
        {"references",
         "FLUX.2 editing: reference image files, comma-separated (at most 4), as Flux2Pipeline's image=[...]: each "
         "cropped to multiples of 16 (over 1 MP first resized to about 1 MP; sides of 64 pixels at least)"},
        {"scheduler", "Wan: pipeline (the folder's scheduler/, UniPC) | euler (FlowMatchEuler, same shift)",
         "pipeline"},
        {"out", "output PNG (FLUX.2) or video, e.g. .mp4 (Wan, 16 fps)", "", true},
        {"out_latents", "also write the final packed latents (safetensors 'latents')"},
        {"out_pixels", "also write the decoded pixels in [-1, 1] (safetensors 'pixels')"},
        {"stages", "run the transformer on N local stage workers (0: in this process)", "0"},
        {"dtype", "compute dtype: fp32 | bf16", "fp32"},
        {"threads", "compute threads", "1"}},
       Sample},
      {"forward",
       "Run the transformer forward on inputs from a safetensors file (diffusers Flux2Transformer2DModel or "
       "WanTransformer3DModel keys; the family comes from config.json _class_name).",
       {{"model", "diffusers transformer/pipeline folder or BFL .safetensors", "", true},
        {"inputs", "input safetensors: hidden_states, encoder_hidden_states, timestep, guidance, img_ids, txt_ids", "",
         true},
        {"output", "output safetensors (key 'output')", "", true},
        {"config", "config.json for a BFL single file"},
        {"dtype", "compute dtype: fp32 | bf16", "fp32"},
        {"quantize", "blocks' frozen Linear weights: none | int8 | fp8 (a pre-quantized --model is used as stored)",
         "none"},
        {"lora", "LoRA file to apply: diffusers/PEFT or BFL/ComfyUI keys"},
        {"lora-scale", "multiplier on the LoRA's own alpha/r (diffusers' adapter weight)", "1.0"},
        {"expert", "Wan 2.2 A14B: which expert to run, high | low (noise)", "high"}},
       Forward},
      {"vae-encode",
       "Encode pixels with a pipeline's VAE: latents (posterior mean) and packed (patchified, normalised).",
       {{"model", "pipeline folder (or vae/ folder): FLUX.2 (AutoencoderKLFlux2) or Wan (AutoencoderKLWan)", "", true},
        {"inputs", "safetensors with 'pixels' [B, 3, H, W] in [-1, 1] (Wan: also [B, 3, F, H, W], F = 4k+1)"},
        {"video", "Wan: a video file or a folder of frame images, bucketed (instead of --inputs)"},
        {"max-frames", "Wan --video: frames kept, the largest 4k+1 up to this", "81"},
        {"min-frames", "Wan --video: fewer sampled frames is an error (too short)", "1"},
        {"frame-stride", "Wan --video: take every N-th source frame (2 turns 30 fps into ~16)", "1"},
        {"area", "Wan --video: target pixels per frame; sides multiples of 16, never upscaled", "399360"},
        {"output",
         "output safetensors: latents [B, 32, H/8, W/8], packed [B, (H/16)(W/16), 128]; Wan: latents "
         "[B, z, F', H/f, W/f] (posterior mean; f 8 or 16), normalized ((latents - mean) / std)",
         "", true}},
       VaeEncode},
      {"write-video",
       "Write a folder of frame images (sorted names, one size, even sides) as a video file.",
       {{"frames", "folder of .png/.jpg frames", "", true},
        {"output", "video file; the container comes from the extension (.avi, .mp4, .mkv)", "", true},
        {"fps", "frames per second", "16"},
        {"codec", "mpeg4 | h264 | mjpeg", "mpeg4"}},
       WriteVideo},
      {"text-encode",
       "Encode a prompt (or raw token ids) with a pipeline's text encoder, as Flux2Pipeline.encode_prompt (or, for a "
       "Wan folder, WanPipeline._get_t5_prompt_embeds).",
       {{"model", "FLUX.2 or Wan pipeline folder", "", true},
        {"prompt", "prompt text (chat template, tokenizer, padding as the pipeline)"},
        {"input-ids", "safetensors with 'input_ids' int64 [1, L] fed straight to the text encoder"},
        {"output",
         "output safetensors: input_ids [1, L], prompt_embeds [1, L, 3*hidden] (Wan: [B, L, d_model], attention_mask)",
         "", true},
        {"max-sequence-length", "text tokens (pad/truncate) for --prompt", "512"}},
       TextEncode},
      ScheduleCommand(),
      PlanCommand(),
      WanVaeDecodeCommand(),
      DecodeImageCommand(),
      SampleTimestepsCommand(),
      LearningRateScheduleCommand(),
      OptimizerReplayCommand(),
      StepGradsCommand(),
      TokenizeCommand(),
      ClipEncodeImageCommand(),
      QuantizeCommand(),
      LoraConvertCommand(),
      SchedulerReplayCommand(),
      CommandServerCommand(),
  };
  return *commands;
}

int RunTool(const std::vector<std::string>& argv) {
  if (argv.size() == 1 && argv[0] == "--commands") {  // what `baton --help` lists (client/commands.cc)
    for (const Command& c : ToolCommands()) std::printf("%s\t%s\n", c.name.c_str(), c.summary.c_str());
    return 0;
  }
  for (const Command& c : ToolCommands()) {
    if (!argv.empty() && c.name == argv[0])
      return RunCommand(c, std::vector<std::string>(argv.begin() + 1, argv.end()));
  }
  std::fprintf(stderr, "baton-tools: %s: the model tools are run as `baton <command>` (baton --help lists them)\n",
               argv.empty() ? "no command" : absl::StrCat("unknown command '", argv[0], "'").c_str());
  return 2;
}

}  // namespace baton
