// Device placement held on the CPU: a stage's forward and backward (FLUX.2 and Wan; full precision, int8, fp8;
// recompute on and off; LoRA with dropout), the shell, the sampler and the FLUX.2 VAE decoder run with every model
// tensor on libtorch's meta device, built through ModelFamily::BuildStage / BuildShell as the stage worker builds
// them. An op mixing a CPU tensor with a meta one throws, as it would with a CUDA one, so a tensor made without the
// device in hand fails here; a dispatcher watch (RecordFunction) also fails any host→device copy inside a stage's
// forward and backward and the decoder, where nothing may cross (a mask drawn on the host and moved, say).
// On the host by design: integer metadata the code reads as numbers (FLUX.2's txt_len and position ids, Wan's grid);
// 0-dim CPU tensors, which CUDA ops take as scalars too.
// Ops without a meta kernel in libtorch's C++ build (their meta registrations live in Python,
// torch/_meta_registrations.py, and the C++ fallbacks end in native_batch_norm, convolution_overrideable,
// complex.out and where.self_out, which have none either): native_layer_norm (+ backward), native_group_norm,
// convolution (+ backward), complex (RoPE), where (SDPA's safe softmax) and _fused_adamw_ (AdamW). MetaKernels
// registers shape-only kernels for them, each refusing a tensor that is not on meta, as built-in meta kernels do.
// Module::to(meta) is refused by set_data only because meta is missing from libtorch's list of dense backends
// (TensorImpl::has_compatible_shallow_copy_type, which out-of-tree backends override the same way): MetaKernels lets
// it make the shallow copy it makes between the CPU and CUDA, so a stage built on the CPU (8 bits) and the VAE
// decoder (torch::nn modules, created on the CPU) reach meta as they reach a GPU.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/device/readback.h"
#include "core/lora/lora.h"
#include "core/lora/lora_linear.h"
#include "core/model/flux2_model.h"
#include "core/model/flux2_weights.h"
#include "core/model/model_family.h"
#include "core/model/stage_build.h"
#include "core/model/wan_weights.h"
#include "core/quant/quantize_tensor.h"
#include "core/sample/flux2_sampler.h"
#include "core/sample/model_denoiser.h"
#include "core/testing/tiny_flux2.h"
#include "core/testing/tiny_wan.h"
#include "core/train/common.h"
#include "core/train/local_step.h"
#include "core/train/optimizer.h"
#include "core/vae/flux2_vae.h"
#include "core/vae/flux2_vae_decoder.h"

namespace baton {
namespace {

const at::Device kMeta(at::kMeta);

using torch::jit::Stack;

std::vector<int64_t> Ints(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  for (const c10::SymInt& s : v.toSymIntVector()) out.push_back(s.expect_int());
  return out;
}

// The op's arguments (the last `n` entries of the stack), after checking every tensor among them is on meta.
std::vector<c10::IValue> MetaArgs(const c10::OperatorHandle& op, Stack* stack) {
  const size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> args(stack->end() - n, stack->end());
  torch::jit::drop(*stack, n);
  for (const c10::IValue& a : args) {
    if (a.isTensor() && a.toTensor().defined()) {
      TORCH_CHECK(a.toTensor().is_meta(), op.schema().name(), ": a ", a.toTensor().device(), " tensor among meta ones");
    }
  }
  return args;
}

at::Tensor EmptyIf(bool wanted, const c10::IValue& like) {
  return wanted && like.isTensor() && like.toTensor().defined() ? at::empty_like(like.toTensor()) : at::Tensor();
}

void LayerNormMeta(const c10::OperatorHandle& op, Stack* stack) {
  const auto a = MetaArgs(op, stack);  // input, normalized_shape, weight, bias, eps
  const at::Tensor& x = a[0].toTensor();
  std::vector<int64_t> stat = x.sizes().vec();
  for (size_t i = stat.size() - Ints(a[1]).size(); i < stat.size(); ++i) stat[i] = 1;
  torch::jit::push(*stack, at::empty_like(x), at::empty(stat, x.options()), at::empty(stat, x.options()));
}

void LayerNormBackwardMeta(const c10::OperatorHandle& op, Stack* stack) {
  // grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask
  const auto a = MetaArgs(op, stack);
  const c10::List<bool> mask = a[7].toBoolList();
  torch::jit::push(*stack, EmptyIf(mask[0], a[1]), EmptyIf(mask[1], a[5]), EmptyIf(mask[2], a[6]));
}

void GroupNormMeta(const c10::OperatorHandle& op, Stack* stack) {
  const auto a = MetaArgs(op, stack);  // input, weight, bias, N, C, HxW, group, eps
  const at::Tensor& x = a[0].toTensor();
  const int64_t n = a[3].isInt() ? a[3].toInt() : a[3].toSymInt().expect_int();
  const int64_t g = a[6].toInt();
  torch::jit::push(*stack, at::empty_like(x), at::empty({n, g}, x.options()), at::empty({n, g}, x.options()));
}

void ConvolutionMeta(const c10::OperatorHandle& op, Stack* stack) {
  // input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
  const auto a = MetaArgs(op, stack);
  const at::Tensor &x = a[0].toTensor(), &w = a[1].toTensor();
  TORCH_CHECK(!a[6].toBool(), "the test's meta convolution covers no transposed convolution");
  const std::vector<int64_t> stride = Ints(a[3]), padding = Ints(a[4]), dilation = Ints(a[5]);
  auto at_or_first = [](const std::vector<int64_t>& v, size_t i) { return v.size() == 1 ? v[0] : v[i]; };
  std::vector<int64_t> sizes = {x.size(0), w.size(0)};
  for (int64_t d = 2; d < x.dim(); ++d) {
    const size_t i = static_cast<size_t>(d - 2);
    sizes.push_back((x.size(d) + 2 * at_or_first(padding, i) - at_or_first(dilation, i) * (w.size(d) - 1) - 1) /
                        at_or_first(stride, i) +
                    1);
  }
  torch::jit::push(*stack, at::empty(sizes, x.options()));
}

void ConvolutionBackwardMeta(const c10::OperatorHandle& op, Stack* stack) {
  // grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask
  const auto a = MetaArgs(op, stack);
  const c10::List<bool> mask = a[9].toBoolList();
  const at::Tensor& w = a[2].toTensor();
  torch::jit::push(*stack, EmptyIf(mask[0], a[1]), EmptyIf(mask[1], a[2]),
                   mask[2] ? at::empty({w.size(0)}, w.options()) : at::Tensor());
}

void ComplexMeta(const c10::OperatorHandle& op, Stack* stack) {
  const auto a = MetaArgs(op, stack);  // real, imag
  const at::Tensor &re = a[0].toTensor(), &im = a[1].toTensor();
  torch::jit::push(*stack, at::empty(at::infer_size(re.sizes(), im.sizes()),
                                     re.options().dtype(c10::toComplexType(re.scalar_type()))));
}

void WhereMeta(const c10::OperatorHandle& op, Stack* stack) {
  const auto a = MetaArgs(op, stack);  // condition, self, other
  const at::Tensor &c = a[0].toTensor(), &x = a[1].toTensor(), &y = a[2].toTensor();
  torch::jit::push(*stack, at::empty(at::infer_size(c.sizes(), at::infer_size(x.sizes(), y.sizes())),
                                     x.options().dtype(at::result_type(x, y))));
}

void WhereOutMeta(const c10::OperatorHandle& op, Stack* stack) {
  const auto a = MetaArgs(op, stack);  // condition, self, other, out
  const at::Tensor &c = a[0].toTensor(), &x = a[1].toTensor(), &y = a[2].toTensor();
  at::Tensor out = a[3].toTensor();
  out.resize_(at::infer_size(c.sizes(), at::infer_size(x.sizes(), y.sizes())));
  torch::jit::push(*stack, out);
}

// AdamW's fused kernel updates in place and returns nothing: its meta form checks that every tensor is on meta.
void FusedAdamWMeta(const c10::OperatorHandle& op, Stack* stack) {
  const size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> args(stack->end() - n, stack->end());
  torch::jit::drop(*stack, n);
  for (const c10::IValue& a : args) {
    if (!a.isTensorList()) continue;
    for (const at::Tensor& t : a.toTensorVector()) TORCH_CHECK(t.is_meta(), "_fused_adamw_: a ", t.device(), " tensor");
  }
}

void ShallowCopyCompatibleMeta(const c10::OperatorHandle& op, Stack* stack) {
  const c10::IValue from = torch::jit::pop(*stack), self = torch::jit::pop(*stack);
  const at::Tensor &s = self.toTensor(), &f = from.toTensor();
  const bool cpu_meta = s.layout() == at::kStrided && f.layout() == at::kStrided &&
                        ((s.is_cpu() && f.is_meta()) || (s.is_meta() && f.is_cpu()));
  torch::jit::push(*stack, cpu_meta || s.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(f.key_set()));
}

// Installed once, for the process (the registrations outlive every test here).
class MetaKernels {
 public:
  static void Install() {
    static const MetaKernels* const kernels = new MetaKernels();
    (void)kernels;
  }

 private:
  MetaKernels() : lib_(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__) {
    Add<&LayerNormMeta>("native_layer_norm");
    Add<&LayerNormBackwardMeta>("native_layer_norm_backward");
    Add<&GroupNormMeta>("native_group_norm");
    Add<&ConvolutionMeta>("convolution_overrideable");
    Add<&ConvolutionBackwardMeta>("convolution_backward_overrideable");
    Add<&ComplexMeta>("complex");
    Add<&WhereMeta>("where", "self");
    Add<&WhereOutMeta>("where", "self_out");
    Add<&ShallowCopyCompatibleMeta>("_has_compatible_shallow_copy_type");
    Add<&FusedAdamWMeta>("_fused_adamw_");
  }
  // Only where libtorch has none: a later libtorch's own kernel wins.
  template <c10::BoxedKernel::BoxedKernelFunction* fn>
  void Add(const char* name, const char* overload = "") {
    const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(c10::str("aten::", name).c_str(), overload);
    if (op.hasKernelForDispatchKey(c10::DispatchKey::Meta)) return;
    const std::string full = *overload ? c10::str(name, ".", overload) : std::string(name);
    lib_.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<fn>());
  }
  torch::Library lib_;
};

// Records every copy of a CPU tensor with more than one element into another device's tensor (aten::copy_, which
// every .to(device) ends in) while it lives.
class HostCopyWatch {
 public:
  HostCopyWatch() {
    std::lock_guard<std::mutex> lock(Mu());
    Copies().clear();
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&OnStart).needsInputs(true));
  }
  ~HostCopyWatch() { at::removeCallback(handle_); }
  std::vector<std::string> copies() const {
    std::lock_guard<std::mutex> lock(Mu());
    return Copies();
  }

 private:
  static std::mutex& Mu() {
    static std::mutex mu;
    return mu;
  }
  static std::vector<std::string>& Copies() {
    static std::vector<std::string> copies;
    return copies;
  }
  static std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
    if (std::strcmp(fn.name(), "aten::copy_") != 0) return nullptr;
    const auto in = fn.inputs();
    if (in.size() < 2 || !in[0].isTensor() || !in[1].isTensor()) return nullptr;
    const at::Tensor &dst = in[0].toTensor(), &src = in[1].toTensor();
    if (src.is_cpu() && !dst.is_cpu() && src.numel() > 1) {
      std::lock_guard<std::mutex> lock(Mu());
      Copies().push_back(c10::str("cpu ", src.sizes(), " ", src.scalar_type(), " -> ", dst.device()));
    }
    return nullptr;
  }
  at::CallbackHandle handle_;
};

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "; ";
  return s;
}

// Every parameter and buffer of `module` on the meta device; returns the names of those that are not.
std::vector<std::string> OffMeta(torch::nn::Module& module) {
  std::vector<std::string> off;
  for (const auto& p : module.named_parameters()) {
    if (!p.value().is_meta()) off.push_back(p.key());
  }
  for (const auto& b : module.named_buffers()) {
    if (!b.value().is_meta()) off.push_back(b.key());
  }
  return off;
}

WanConfig TinyWan() { return test_util::TinyWanConfig(2); }

// Tiny checkpoints on disk, written once per process.
const std::string& Flux2Dir() {
  static const std::string* dir = [] {
    auto* d = new std::string(test_util::MakeTempDir("placement_flux2"));
    EXPECT_TRUE(WriteRandomFlux2Weights(test_util::TinyFlux2Config(), *d, 3).ok());
    return d;
  }();
  return *dir;
}
const std::string& WanDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(test_util::MakeTempDir("placement_wan"));
    EXPECT_TRUE(WriteRandomWanWeights(TinyWan(), *d, 3).ok());
    return d;
  }();
  return *dir;
}

// One training micro-batch as the trainer draws it (on the CPU, as MicroBatchInputs documents), for either family.
NoisyBatch Batch(const std::string& family) {
  NoisyBatch b;
  if (family == "flux2") {
    b.noisy = at::randn({1, 6, 4});  // [b, Si = 2·3, C]
    b.prompt_embeds = at::randn({1, 5, 12});
    b.grid_h = 2;
    b.grid_w = 3;
    b.guidance = 4.0;
  } else {
    b.noisy = at::randn({1, 4, 2, 4, 4});  // [b, C, F, H, W]
    b.prompt_embeds = at::randn({1, 5, 16});
  }
  b.timestep = at::full({1}, 0.4);
  return b;
}

// The shell's outputs on meta as a stage receives them: CONSTANTS and TABLES merged; integer metadata stays on the
// host (the runner keeps FLUX.2's txt_len there; Wan's grid likewise).
TensorMap StageConstants(const ShellOutputs& shell) {
  TensorMap k = shell.constants;
  k.insert(shell.tables.begin(), shell.tables.end());
  return k;
}

struct Case {
  std::string family;
  WeightQuant quant;
  bool recompute;
};

std::string CaseString(const Case& c) {
  return c.family + "_" + WeightQuantName(c.quant) + (c.recompute ? "_recompute" : "_graph");
}
std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return CaseString(info.param); }
void PrintTo(const Case& c, std::ostream* os) { *os << CaseString(c); }

class StagePlacementTest : public ::testing::TestWithParam<Case> {};

// Shell on meta, two stages on meta with LoRA (dropout on), one training micro-batch through both as StageRunner
// runs it (forward, loss, backward, the boundary gradient handed upstream): nothing leaves the device and no host
// tensor enters it; every adapter gets a gradient on the device.
TEST_P(StagePlacementTest, ForwardAndBackwardStayOnTheDevice) {
  MetaKernels::Install();
  const Case& c = GetParam();
  auto model = OpenModel(c.family == "flux2" ? Flux2Dir() : WanDir());
  ASSERT_TRUE(model.ok()) << model.status();
  auto targets = (*model)->LoraTargets("all-linear");
  ASSERT_TRUE(targets.ok()) << targets.status();
  LoraSpec lora;
  lora.rank = 2;
  lora.targets = *targets;
  lora.dropout = 0.25;
  lora.seed = 9;

  auto shell = (*model)->BuildShell(at::kBFloat16, kMeta);
  ASSERT_TRUE(shell.ok()) << shell.status();
  auto inputs = (*model)->MicroBatchInputs(Batch(c.family));
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  auto shell_out = (*shell)->Run(*inputs, at::kBFloat16);
  ASSERT_TRUE(shell_out.ok()) << shell_out.status();
  for (const TensorMap* m : {&shell_out->inputs, &shell_out->constants, &shell_out->tables}) {
    for (const auto& [name, t] : *m) {
      EXPECT_TRUE(t.is_meta() || !t.is_floating_point()) << "shell output " << name << " on " << t.device();
    }
  }
  const TensorMap constants = StageConstants(*shell_out);

  const int64_t n = (*model)->num_blocks(), cut = c.recompute ? 1 : n - 1;
  std::vector<std::unique_ptr<StageModel>> stages;
  for (const StageRange& range : {StageRange{0, cut, true, false}, StageRange{cut, n, false, true}}) {
    auto stage = (*model)->BuildStage(range, at::kBFloat16, kMeta, &lora, /*train=*/true, c.quant);
    ASSERT_TRUE(stage.ok()) << stage.status();
    EXPECT_EQ(OffMeta((*stage)->module()), std::vector<std::string>{});
    int eight_bit = 0;
    for (auto& [name, linear] : NamedLoraLinears((*stage)->module())) {
      if (linear->weight_quant() == WeightQuant::kNone) continue;
      ++eight_bit;
      EXPECT_EQ(linear->weight.scalar_type(), QuantStorageDtype(c.quant)) << name;
    }
    EXPECT_EQ(eight_bit > 0, c.quant != WeightQuant::kNone);
    SetLoraDropoutSeed((*stage)->module(), 77);
    stages.push_back(std::move(*stage));
  }
  // Stage 0's model inputs in the compute dtype, as the runner's leaves; the target on the device.
  TensorMap in0;
  for (const auto& [name, t] : shell_out->inputs) in0[name] = t.to(at::kBFloat16);
  const at::Tensor target = at::zeros_like(inputs->at("hidden_states"), at::TensorOptions().device(kMeta));

  HostCopyWatch watch;
  // Stage 0 runs every block recomputed; stage 1 only its first, so the graph-tail path runs too.
  const int64_t recompute_blocks[2] = {StageModel::kAllBlocks, 1};
  std::vector<TensorMap> checkpoints[2];
  auto forward = [&](int s, const TensorMap& in) {
    if (c.recompute) return stages[s]->ForwardCheckpointed(in, constants, &checkpoints[s], recompute_blocks[s]);
    at::AutoGradMode grad(true);
    return stages[s]->Forward(in, constants);
  };
  TensorMap out0 = forward(0, in0);
  TensorMap in1;
  for (const auto& [name, t] : out0) {
    EXPECT_TRUE(t.is_meta() || (!t.is_floating_point() && t.dim() == 0)) << name << " on " << t.device();
    in1[name] = t.is_floating_point() ? t.detach().requires_grad_(true) : t;
  }
  TensorMap out1 = forward(1, in1);
  ASSERT_TRUE(out1.count("output"));
  EXPECT_TRUE(out1.at("output").is_meta());
  EXPECT_EQ(out1.at("output").sizes(), target.sizes());
  at::Tensor loss;
  auto seed1 = [&](const TensorMap& out) -> std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> {
    loss = FlowMatchingLoss(out.at("output"), target);
    return {{loss * 0.5}, {}};
  };
  auto seed0 = [&](const TensorMap& out) -> std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> {
    std::vector<at::Tensor> roots, grads;
    for (const auto& [name, t] : in1) {
      if (!t.is_floating_point()) continue;
      EXPECT_TRUE(t.grad().defined() && t.grad().is_meta()) << "GRADIENT " << name;
      roots.push_back(out.at(name));
      grads.push_back(t.grad());
    }
    return {roots, grads};
  };
  for (int s = 1; s >= 0; --s) {
    const StageModel::BackwardSeed seed = s == 1 ? StageModel::BackwardSeed(seed1) : StageModel::BackwardSeed(seed0);
    if (c.recompute) {
      stages[s]->BackwardFromCheckpoints(std::move(checkpoints[s]), constants, seed, recompute_blocks[s]);
    } else {
      auto [roots, grads] = seed(s == 1 ? out1 : out0);
      torch::autograd::backward(roots, grads);
    }
  }
  EXPECT_TRUE(loss.defined() && loss.is_meta());
  EXPECT_TRUE(watch.copies().empty()) << "host→device copies: " << Joined(watch.copies());
  for (auto& stage : stages) {
    const auto params = LoraParameters(stage->module());
    EXPECT_FALSE(params.empty());
    for (const auto& [name, p] : params) {
      ASSERT_TRUE(p.grad().defined()) << name << " got no gradient";
      EXPECT_TRUE(p.grad().is_meta()) << name << " gradient on " << p.grad().device();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, StagePlacementTest,
    ::testing::Values(Case{"flux2", WeightQuant::kNone, false}, Case{"flux2", WeightQuant::kNone, true},
                      Case{"flux2", WeightQuant::kInt8, false}, Case{"flux2", WeightQuant::kFp8, true},
                      Case{"wan", WeightQuant::kNone, false}, Case{"wan", WeightQuant::kNone, true},
                      Case{"wan", WeightQuant::kInt8, true}, Case{"wan", WeightQuant::kFp8, false}),
    CaseName);

// The watch itself: a deliberate upload is seen, a 0-dim scalar is not.
TEST(HostCopyWatchTest, SeesAnUpload) {
  HostCopyWatch watch;
  (void)at::ones({4}).to(kMeta);
  (void)at::scalar_tensor(2.0).to(kMeta);
  EXPECT_EQ(watch.copies().size(), 1u) << Joined(watch.copies());
}

// Issue 27 defect 2: an 8-bit stage is created and filled on the CPU, in 8 bits, and only then moved; a
// full-precision one is created where it runs.
TEST(StageBuildTest, QuantizedStageIsFilledOnTheCpuThenMovedIn8Bits) {
  MetaKernels::Install();
  for (WeightQuant q : {WeightQuant::kNone, WeightQuant::kInt8, WeightQuant::kFp8}) {
    SCOPED_TRACE(WeightQuantName(q));
    std::vector<std::string> created, loaded;
    std::shared_ptr<torch::nn::Module> root;
    LoraLinear linear{nullptr};
    at::Tensor norm;
    StageBuild build;
    build.construct = [&](const at::TensorOptions& options) {
      created.push_back(options.device().str());
      root = std::make_shared<torch::nn::Module>();
      linear = root->register_module("proj", LoraLinear(8, 4, options));
      norm = root->register_parameter("norm", at::empty({4}, options), /*requires_grad=*/false);
      return root;
    };
    build.quantized = [](const std::string& weight_name) { return weight_name == "proj.weight"; };
    build.load = [&](torch::nn::Module&) {
      loaded.push_back(c10::str(linear->weight.device(), " ", linear->weight.scalar_type()));
      if (!linear->weight.is_meta()) {
        linear->weight.zero_();
        if (linear->weight_scale.defined()) linear->weight_scale.fill_(1);
        norm.fill_(1);
      }
      return absl::OkStatus();
    };
    ASSERT_TRUE(BuildStageModule(build, "a test stage", at::kBFloat16, kMeta, q, nullptr, /*train=*/true).ok());
    if (q == WeightQuant::kNone) {
      EXPECT_EQ(created, std::vector<std::string>{"meta"});
      EXPECT_EQ(loaded, std::vector<std::string>{"meta BFloat16"});
    } else {
      EXPECT_EQ(created, std::vector<std::string>{"cpu"});
      EXPECT_EQ(loaded, std::vector<std::string>{c10::str("cpu ", QuantStorageDtype(q))});
      EXPECT_EQ(linear->weight.scalar_type(), QuantStorageDtype(q));
      EXPECT_TRUE(linear->weight_scale.is_meta());
    }
    EXPECT_TRUE(linear->weight.is_meta());
    EXPECT_TRUE(norm.is_meta());
    EXPECT_EQ(norm.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(root->is_training());
  }
}

// The sampling loop through ModelDenoiser with the model on meta: the initial latents on the device stay there, and
// so does every velocity; the final latents come back on the device, shaped as the noise.
TEST(SamplerPlacementTest, DenoisingLoopStaysOnTheDevice) {
  MetaKernels::Install();
  auto model = OpenModel(Flux2Dir());
  ASSERT_TRUE(model.ok()) << model.status();
  auto shell = (*model)->BuildShell(at::kBFloat16, kMeta);
  auto stage = (*model)->BuildStage((*model)->FullRange(), at::kBFloat16, kMeta, nullptr, false, WeightQuant::kInt8);
  ASSERT_TRUE(shell.ok() && stage.ok()) << shell.status() << stage.status();
  const Denoiser denoiser = ModelDenoiser(**model, **shell, **stage, at::kBFloat16, kMeta);
  Flux2SampleSettings s;
  s.steps = 2;
  s.width = 48;
  s.height = 32;
  const at::Tensor noise = at::randn({1, 6, 4}, at::TensorOptions().device(kMeta));  // [1, (32/16)·(48/16), C]
  const at::Tensor embeds = at::randn({5, 12}, at::TensorOptions().device(kMeta));
  auto latents = SampleFlux2(denoiser, {embeds}, {noise}, s);
  ASSERT_TRUE(latents.ok()) << latents.status();
  ASSERT_EQ(latents->size(), 1u);
  EXPECT_TRUE((*latents)[0].is_meta());
  EXPECT_EQ((*latents)[0].sizes(), noise.sizes());
}

// A whole train-local step (RunLocalStep: the micro-batches' forwards and backwards, clipping, AdamW) with the model on
// meta, where any read of a value throws: the step reads back exactly once, through ReadBack (the losses and the
// gradients' squared norms together), uploads each micro-batch's floating inputs and target once and nothing else
// (no adapter, gradient or moment; the position ids only for the first step's RoPE tables, which the shell keeps),
// and leaves the adapters and AdamW's moments on the device (for FLUX.2, in bf16 math, one adapter per target Linear).
TEST(TrainStepPlacementTest, AStepReadsBackOnceAndKeepsItsStateOnTheDevice) {
  MetaKernels::Install();
  auto model = OpenModel(Flux2Dir());
  ASSERT_TRUE(model.ok()) << model.status();
  auto targets = (*model)->LoraTargets("all-linear");
  ASSERT_TRUE(targets.ok()) << targets.status();
  LoraSpec lora;
  lora.rank = 2;
  lora.targets = *targets;
  lora.dtype = at::kBFloat16;
  LocalModel local;
  local.device = kMeta;
  local.dtype = at::kBFloat16;
  auto shell = (*model)->BuildShell(at::kBFloat16, kMeta);
  auto stage = (*model)->BuildStage((*model)->FullRange(), at::kBFloat16, kMeta, &lora, true, WeightQuant::kNone);
  ASSERT_TRUE(shell.ok() && stage.ok()) << shell.status() << stage.status();
  local.shell = std::move(*shell);
  local.stage = std::move(*stage);
  std::vector<MicroBatch> mbs(2);
  int64_t uploads = 0;  // per step: the floating inputs of more than one element, and the target
  for (MicroBatch& mb : mbs) {
    auto inputs = (*model)->MicroBatchInputs(Batch("flux2"));
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    mb.model_inputs = *inputs;
    mb.target = at::zeros({1, 6, 4});
    mb.samples = {0};
    for (const auto& [name, t] : mb.model_inputs) uploads += t.is_floating_point() && t.numel() > 1 ? 1 : 0;
    ++uploads;
  }
  ASSERT_EQ(uploads, 6);  // hidden_states, encoder_hidden_states and the target of each micro-batch
  std::map<std::string, at::Tensor> master = LoraParameters(local.stage->module());
  OptimizerConfig opt;
  Optimizer adamw(opt);
  const int64_t before = ReadBackCount();
  for (int64_t step = 0; step < 2; ++step) {
    HostCopyWatch watch;
    auto result = RunLocalStep(local, mbs, step, 10, opt, adamw, master);
    ASSERT_TRUE(result.ok()) << result.status();
    // img_ids and txt_ids once, for the tables of the one grid both micro-batches share
    EXPECT_EQ(static_cast<int64_t>(watch.copies().size()), uploads + (step == 0 ? 2 : 0)) << Joined(watch.copies());
  }
  EXPECT_EQ(ReadBackCount() - before, 2);
  for (const auto& [name, t] : adamw.StateDict()) {
    if (name != kOptimizerStepKey) EXPECT_TRUE(t.is_meta()) << name << " on " << t.device();
  }
  for (const auto& [name, p] : master) EXPECT_TRUE(p.is_meta() && p.scalar_type() == at::kFloat) << name;
}

// The VAE decoder loaded on meta decodes tokens on meta into pixels on meta; nothing is uploaded on the way.
TEST(VaePlacementTest, DecoderStaysOnTheDevice) {
  MetaKernels::Install();
  const std::string dir = test_util::MakeTempDir("placement_vae");
  const Flux2VaeConfig config = TinyFlux2VaeConfig();
  ASSERT_TRUE(WriteRandomFlux2Vae(config, dir, 5).ok());
  auto decoder = Flux2VaeDecoder::Load(dir, at::kBFloat16, kMeta);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const at::Tensor tokens = at::randn({1, 4, config.patched_channels()}, at::TensorOptions().device(kMeta));
  HostCopyWatch watch;
  auto pixels = (*decoder)->DecodeTokens(tokens, 2, 2);
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  EXPECT_TRUE(pixels->is_meta());
  EXPECT_EQ(pixels->sizes(), (std::vector<int64_t>{1, config.out_channels, 32, 32}));
  EXPECT_EQ(pixels->scalar_type(), at::kFloat);
  EXPECT_TRUE(watch.copies().empty()) << "host→device copies: " << Joined(watch.copies());
}

}  // namespace
}  // namespace baton
