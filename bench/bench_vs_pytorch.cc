// The Baton half of bench/bench_vs_pytorch.py: Baton's single-process LoRA training step, timed on weights,
// inputs and initial adapters that the Python script wrote, so that diffusers + peft on the same torch can be
// timed on exactly the same problem. Run that script, not this binary (it starts and drives this one).
//
// The step is RunLocalStep (core/train/local_step.h), the function `baton train-local` runs every step, on one
// fixed micro-batch instead of the sampler's: shell without grad, stage forward, FlowMatchingLoss, backward,
// the gradients' squared norms read back with the loss (one readback), clipping and the fused AdamW on the adapters
// themselves (the fp32 masters), on the step's device.
//
//   bench_vs_pytorch --model DIR --inputs FILE --lora FILE [--threads 1] [--rank 16] [--alpha 16]
//                    [--targets attention] [--lr 1e-3] [--clip 1.0] [--cpu_linear onednn|aten]
//                    [--device cpu|cuda:N] [--dtype fp32|bf16] [--lora_dtype fp32|bf16] [--grads_out FILE]
//                    [--sync_sites_out FILE] [--trace_out FILE]
//
// --device/--dtype place the frozen weights, adapters and step on a device in a compute dtype (the masters and
// AdamW stay fp32, on that device, as in train-local); --lora_dtype is the adapters' math (default: --dtype, as the
// job key lora_dtype); on CUDA each step ends with a device synchronize and every
// reply carries the caching allocator's peak allocated and reserved bytes (scripts/gpu_check.sh reads them).
//
// --cpu_linear picks the GEMM behind the frozen Linears on CPU (core/lora/cpu_linear.h): onednn (default) or
// aten (at::matmul → MKL sgemm, what eager PyTorch runs), to measure what the choice buys.
//
// --inputs holds hidden_states [1, Si, C], encoder_hidden_states [1, St, Dj], timestep [1], guidance [1],
// img_ids [Si, 4], txt_ids [St, 4], target [1, Si, C]; --lora holds every adapter under its PEFT name
// ("transformer_blocks.0.attn.to_q.lora_A.weight"): a missing or extra name is an error, which is how the
// script knows both sides put LoRA on the same Linears. Once loaded it prints {"ready": ...}, then reads one
// integer per stdin line, runs that many steps and prints one JSON line of per-step seconds, losses and
// gradient norms; it exits at end of input.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <absl/flags/flag.h>
#include <absl/status/statusor.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_flags.h"
#include "core/device/device.h"
#include "core/device/kineto_trace.h"
#include "core/device/readback.h"
#include "core/device/sync_watch.h"
#include "core/device/threads.h"
#include "core/lora/cpu_linear.h"
#include "core/lora/lora.h"
#include "core/model/flux2_model.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/train/common.h"
#include "core/train/local_step.h"
#include "core/train/optimizer.h"
#include "core/util/files.h"
#include "core/util/status.h"

#ifdef BATON_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

ABSL_FLAG(std::string, model, "", "a FLUX.2 transformer folder (required)");
ABSL_FLAG(std::string, inputs, "", "safetensors with the step's inputs and target (required)");
ABSL_FLAG(std::string, lora, "", "safetensors with every adapter's initial weights under its PEFT name (required)");
ABSL_FLAG(int, threads, 1, "compute threads");
ABSL_FLAG(int64_t, rank, 16, "LoRA rank");
ABSL_FLAG(double, alpha, 16, "LoRA alpha");
ABSL_FLAG(std::string, targets, "attention", "LoRA targets");
ABSL_FLAG(double, lr, 1e-3, "AdamW learning rate");
ABSL_FLAG(double, clip, 1.0, "gradient norm clip");
ABSL_FLAG(std::string, cpu_linear, "onednn", "the GEMM behind the frozen Linears on CPU: onednn | aten");
ABSL_FLAG(std::string, device, "cpu", "cpu | cuda:N");
ABSL_FLAG(std::string, dtype, "fp32", "compute dtype: fp32 | bf16");
ABSL_FLAG(std::string, lora_dtype, "", "the adapters' math: fp32 | the compute dtype (default)");
ABSL_FLAG(std::string, grads_out, "",
          "also write the LoRA gradients of the first micro-batch at the initial adapters (fp32, PEFT names; "
          "metadata: the loss) to this safetensors file before the first step (the GPU check's agreement row)");
ABSL_FLAG(std::string, sync_sites_out, "",
          "after the steps, run one more under c10's sync debug mode and write every host-device synchronization "
          "outside its read-back, with a backtrace, to this JSON file");
ABSL_FLAG(std::string, trace_out, "",
          "after stdin closes, run 2 more steps under libtorch's profiler (Kineto: CPU ops and CUDA kernels) and save "
          "their Chrome trace here");

namespace baton {
namespace {

struct Args {
  std::string model, inputs, lora;
  int threads = 1;
  int64_t rank = 16;
  double alpha = 16;
  std::string targets = "attention";
  double lr = 1e-3;
  double clip = 1.0;
  CpuLinearBackend cpu_linear = CpuLinearBackend::kOnednn;
  std::string device = "cpu";
  std::string dtype = "fp32";
  std::string lora_dtype;  // empty: dtype
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  RETURN_IF_ERROR(
      ParseBenchFlags(argc, argv,
                      "bench_vs_pytorch --model DIR --inputs FILE --lora FILE [--threads 1] [--rank 16] [--alpha 16] "
                      "[--targets attention] [--lr 1e-3] [--clip 1.0] [--cpu_linear onednn|aten] [--device cpu|cuda:N] "
                      "[--dtype fp32|bf16] [--lora_dtype fp32|bf16] [--trace_out FILE] (see the comment atop "
                      "bench/bench_vs_pytorch.cc)"));
  Args a;
  a.model = absl::GetFlag(FLAGS_model);
  a.inputs = absl::GetFlag(FLAGS_inputs);
  a.lora = absl::GetFlag(FLAGS_lora);
  a.targets = absl::GetFlag(FLAGS_targets);
  a.threads = absl::GetFlag(FLAGS_threads);
  a.rank = absl::GetFlag(FLAGS_rank);
  a.alpha = absl::GetFlag(FLAGS_alpha);
  a.lr = absl::GetFlag(FLAGS_lr);
  a.clip = absl::GetFlag(FLAGS_clip);
  a.device = absl::GetFlag(FLAGS_device);
  a.dtype = absl::GetFlag(FLAGS_dtype);
  a.lora_dtype = absl::GetFlag(FLAGS_lora_dtype);
  if (a.lora_dtype.empty()) a.lora_dtype = a.dtype;
  ASSIGN_OR_RETURN(a.cpu_linear, ParseCpuLinearBackend(absl::GetFlag(FLAGS_cpu_linear)));
  if (a.threads < 1) return absl::InvalidArgumentError(absl::StrCat("bad value '", a.threads, "' for --threads"));
  if (a.model.empty() || a.inputs.empty() || a.lora.empty()) {
    return absl::InvalidArgumentError("--model, --inputs and --lora are required");
  }
  return a;
}

absl::StatusOr<at::Tensor> Get(const std::map<std::string, at::Tensor>& tensors, const std::string& key,
                               const std::string& file) {
  auto it = tensors.find(key);
  if (it == tensors.end()) return absl::InvalidArgumentError(absl::StrCat(file, " lacks tensor '", key, "'"));
  return it->second;
}

// Everything one step touches, built once.
struct Trainer {
  LocalModel model;
  std::map<std::string, at::Tensor> master;  // the adapters (fp32 masters, on the step's device), PEFT names
  std::unique_ptr<Optimizer> optimizer;
  OptimizerConfig opt;
  std::vector<MicroBatch> micro_batches;  // the one fixed micro-batch of every step
  int64_t step = 0;
};

struct StepResult {
  double seconds = 0, loss = 0, grad_norm = 0;
};

// Waits for the device's queued work (CUDA), so that a step's time covers its kernels.
void Synchronize(at::Device device) {
#ifdef BATON_WITH_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
}

// The CUDA caching allocator's peak allocated and reserved bytes on `device` since the start (0, 0 on CPU).
std::pair<int64_t, int64_t> DevicePeakBytes(at::Device device) {
#ifdef BATON_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device.index() < 0 ? 0 : device.index()));
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return {stats.allocated_bytes[all].peak, stats.reserved_bytes[all].peak};
  }
#endif
  return {0, 0};
}

absl::StatusOr<std::unique_ptr<Trainer>> Build(const Args& a) {
  auto t = std::make_unique<Trainer>();
  ASSIGN_OR_RETURN(const at::Device device, ParseDevice(a.device));
  ASSIGN_OR_RETURN(const at::ScalarType dtype, ParseDtype(a.dtype));
  t->model.device = device;
  t->model.dtype = dtype;
  ASSIGN_OR_RETURN(auto checkpoint, Flux2Checkpoint::Open(a.model));
  LoraSpec spec;
  spec.rank = a.rank;
  spec.alpha = a.alpha;
  ASSIGN_OR_RETURN(spec.targets, ResolveLoraTargets(a.targets));
  ASSIGN_OR_RETURN(spec.dtype, ParseDtype(a.lora_dtype));
  ASSIGN_OR_RETURN(Flux2Shell shell, BuildFlux2Shell(*checkpoint, dtype, device));
  t->model.shell = WrapFlux2Shell(std::move(shell), checkpoint->config());
  ASSIGN_OR_RETURN(Flux2Stage stage, BuildFlux2Stage(*checkpoint, Flux2StageRange::Full(checkpoint->config()), dtype,
                                                     device, &spec, true));
  t->model.stage = WrapFlux2Stage(std::move(stage), dtype);
  ASSIGN_OR_RETURN(auto lora, LoadAllSafetensors(a.lora));
  RETURN_IF_ERROR(Annotate(AssignLoraParameters(t->model.stage->module(), lora), a.lora));
  t->master = LoraParameters(t->model.stage->module());
  t->opt.lr = a.lr;
  t->opt.clip = a.clip;
  t->optimizer = std::make_unique<Optimizer>(t->opt);

  ASSIGN_OR_RETURN(auto in, LoadAllSafetensors(a.inputs));
  MicroBatch mb;
  mb.samples = {0};
  for (const char* name : {"hidden_states", "encoder_hidden_states", "timestep", "guidance", "img_ids", "txt_ids"}) {
    ASSIGN_OR_RETURN(mb.model_inputs[name], Get(in, name, a.inputs));
  }
  ASSIGN_OR_RETURN(mb.target, Get(in, "target", a.inputs));
  t->micro_batches.push_back(std::move(mb));
  return t;
}

absl::StatusOr<StepResult> Step(Trainer& t) {
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(LocalStepResult step,
                   RunLocalStep(t.model, t.micro_batches, t.step, t.step + 1, t.opt, *t.optimizer, t.master));
  Synchronize(t.model.device);
  ++t.step;
  StepResult r;
  r.loss = step.loss;
  r.grad_norm = step.grad_norm;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Two steps under libtorch's Kineto profiler, saved as a Chrome trace (chrome://tracing, Perfetto) at `path`.
absl::Status TraceSteps(Trainer& t, const std::string& path) {
  KinetoTrace trace(t.model.device);
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(Step(t).status());
  return trace.Save(path);
}

// The gradients at the initial adapters, before any step changes them (RunLocalForwardBackward zeroes them again).
absl::Status WriteInitialGradients(Trainer& t, const std::string& path) {
  ASSIGN_OR_RETURN(LocalGradients g, RunLocalForwardBackward(t.model, t.micro_batches));
  return WriteSafetensors(path, g.grads, {{"loss", absl::StrFormat("%.17g", g.losses.at(0))}});
}

// One step under SyncWatch: its synchronizations besides the read-back, as JSON.
absl::Status WriteSyncSites(Trainer& t, const std::string& path) {
  const int64_t readbacks = ReadBackCount();
  nlohmann::ordered_json out;
  {
    SyncWatch watch;
    RETURN_IF_ERROR(RunLocalStep(t.model, t.micro_batches, t.step, t.step + 1, t.opt, *t.optimizer, t.master).status());
    out["syncs_outside_readback"] = watch.sites().size();
    out["sites"] = watch.sites();
  }
  ++t.step;
  Synchronize(t.model.device);  // the bench's own, outside the watch
  out["readbacks"] = ReadBackCount() - readbacks;
  return WriteFileAtomic(path, out.dump(1) + "\n");
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv));
  SetComputeThreads(a.threads);
  SetCpuLinearBackend(a.cpu_linear);
  ASSIGN_OR_RETURN(auto trainer, Build(a));
  nlohmann::ordered_json ready;
  ready["ready"] = true;
  ready["threads"] = at::get_num_threads();
  ready["lora_tensors"] = trainer->master.size();
  ready["cpu_linear"] = a.cpu_linear == CpuLinearBackend::kOnednn ? "onednn" : "aten";
  ready["device"] = trainer->model.device.str();
  ready["dtype"] = a.dtype;
  ready["device_peak_allocated_bytes"] = DevicePeakBytes(trainer->model.device).first;
  const std::string grads_out = absl::GetFlag(FLAGS_grads_out);
  if (!grads_out.empty()) RETURN_IF_ERROR(WriteInitialGradients(*trainer, grads_out));
  std::cout << ready.dump() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(line, &n) || n < 0) {
      return absl::InvalidArgumentError(absl::StrCat("expected a step count on stdin, got '", line, "'"));
    }
    nlohmann::ordered_json out;
    out["seconds"] = nlohmann::json::array();
    out["loss"] = nlohmann::json::array();
    out["grad_norm"] = nlohmann::json::array();
    for (int64_t i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(StepResult r, Step(*trainer));
      out["seconds"].push_back(r.seconds);
      out["loss"].push_back(r.loss);
      out["grad_norm"].push_back(r.grad_norm);
    }
    const auto [peak_allocated, peak_reserved] = DevicePeakBytes(trainer->model.device);
    out["device_peak_allocated_bytes"] = peak_allocated;
    out["device_peak_reserved_bytes"] = peak_reserved;
    std::cout << out.dump() << std::endl;
  }
  const std::string sync_sites = absl::GetFlag(FLAGS_sync_sites_out);
  if (!sync_sites.empty()) RETURN_IF_ERROR(WriteSyncSites(*trainer, sync_sites));
  const std::string trace = absl::GetFlag(FLAGS_trace_out);
  if (!trace.empty()) RETURN_IF_ERROR(TraceSteps(*trainer, trace));
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  absl::Status s = baton::Run(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "bench_vs_pytorch: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
