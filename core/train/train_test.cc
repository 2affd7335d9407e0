// Tests of the training pieces: job parsing, sampling, the optimizer and the single-process trainer.
#include <gtest/gtest.h>

#include <cmath>

#include "core/data/cache.h"
#include "core/device/readback.h"
#include "core/lora/lora.h"
#include "core/model/flux2_family.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/batches.h"
#include "core/train/job.h"
#include "core/train/optimizer.h"
#include "core/train_local/local_trainer.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::MakeTempDir;
using test_util::TinyFlux2Config;

TEST(JobTest, ParsesAFullJob) {
  auto job = ParseJobYaml(R"(
model: m
dataset: d
lora: {rank: 4, targets: [to_q, to_k], dropout: 0.1}
optimizer: {lr: 0.001, betas: [0.8, 0.99], clip: 0.5, warmup_steps: 3}
timesteps: {sampling: uniform, shift: "3.0"}
steps: 7
batch_size: 6
micro_batches: 3
schedule: gpipe
seed: 5
)");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->lora.rank, 4);
  EXPECT_EQ(job->lora.alpha, 4.0);  // alpha defaults to rank
  EXPECT_EQ(job->lora.targets, (std::vector<std::string>{"to_q", "to_k"}));
  EXPECT_EQ(job->optimizer.beta1, 0.8);
  EXPECT_EQ(job->micro_batch_size(), 2);
  EXPECT_EQ(job->schedule, "gpipe");
  EXPECT_EQ(job->lora.seed, 5u);
}

TEST(JobTest, QuantizeIsNoneInt8OrFp8) {
  auto plain = ParseJobYaml("model: m\ndataset: d\n");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->quantize, "none");
  auto int8 = ParseJobYaml("model: m\ndataset: d\nquantize: int8\n");
  ASSERT_TRUE(int8.ok());
  EXPECT_EQ(int8->quantize, "int8");
  EXPECT_NE(JobHash(*int8), JobHash(*plain));  // stages configured for the other storage are not reused
  auto bad = ParseJobYaml("model: m\ndataset: d\nquantize: int4\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("job.yaml:3: 'quantize' must be none, int8 or fp8"), std::string::npos)
      << bad.status();
}

TEST(JobTest, NameIsTheNameKeyElseTheFileStem) {
  auto named = ParseJobYaml("name: dog-lora\nmodel: m\ndataset: d\n", "jobs/x.yaml");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(JobName(*named), "dog-lora");
  auto file = ParseJobYaml("model: m\ndataset: d\n", "jobs/flux2-dog.yaml");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(JobName(*file), "flux2-dog");
  EXPECT_EQ(JobName(*ParseJobYaml("model: m\ndataset: d\n")), "job");
  EXPECT_EQ(JobHash(*named), JobHash(*file)) << "the name changes no number";
}

TEST(JobTest, ErrorsNameTheLine) {
  auto unknown = ParseJobYaml("model: m\ndataset: d\nstepz: 3\n", "job.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("job.yaml:3: unknown key 'stepz'"), std::string::npos) << unknown.status();
  auto nested = ParseJobYaml("model: m\ndataset: d\noptimizer:\n  lr: 0.1\n  momentum: 0.9\n", "job.yaml");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("job.yaml:5: unknown key 'momentum' in optimizer"), std::string::npos)
      << nested.status();
  auto twice = ParseJobYaml("model: m\ndataset: d\nsteps: 3\nseed: 1\nsteps: 30\n", "job.yaml");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("job.yaml:5: 'steps' appears twice in the job"), std::string::npos)
      << twice.status();
  auto type = ParseJobYaml("model: m\ndataset: d\nsteps: many\n", "job.yaml");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("job.yaml:3: 'steps' has the wrong type"), std::string::npos) << type.status();
  auto divide = ParseJobYaml("model: m\ndataset: d\nbatch_size: 5\nmicro_batches: 2\n", "job.yaml");
  ASSERT_FALSE(divide.ok());
  EXPECT_NE(divide.status().message().find("job.yaml:4: 'micro_batches'"), std::string::npos) << divide.status();
  EXPECT_FALSE(ParseJobYaml("dataset: d\n").ok());
  auto syntax = ParseJobYaml("model: [unclosed\n", "job.yaml");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("YAML syntax error"), std::string::npos);
}

TEST(JobTest, EveryYamlShapeIsAnErrorWithItsLineNotACrash) {
  // Keys that are lists or mappings, at the top and nested, and values of unexpected shapes.
  for (const char* text : {"model: m\n? [a, b]\n: 3\n", "model: m\n{a: 1}: 2\n", "model: m\noptimizer:\n  [x]: 1\n",
                           "model: m\ndataset: d\nlora: [1, 2]\n", "model: m\ndataset: d\ndevices: {a: b}\n",
                           "model: m\ndataset: d\ntimesteps: 3\n", "- a\n- b\n", "model: {x: 1}\ndataset: d\n"}) {
    absl::StatusOr<JobConfig> job = ParseJobYaml(text, "job.yaml");
    ASSERT_FALSE(job.ok()) << text;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(job.status().message().find("job.yaml"), std::string::npos) << job.status();
  }
  auto key = ParseJobYaml("model: m\n{a: 1}: 2\n", "job.yaml");
  EXPECT_NE(key.status().message().find("job.yaml:2: a key in the job must be a plain name"), std::string::npos)
      << key.status();
}

TEST(JobTest, InterleavedScheduleTakesChunks) {
  auto job = ParseJobYaml("model: m\ndataset: d\nschedule: interleaved\n", "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->schedule, "interleaved");
  EXPECT_EQ(job->chunks, 2);  // the default with interleaved
  auto three = ParseJobYaml("model: m\ndataset: d\nschedule: interleaved\nchunks: 3\n", "job.yaml");
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->chunks, 3);
  auto plain = ParseJobYaml("model: m\ndataset: d\n", "job.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->chunks, 1);
  auto one = ParseJobYaml("model: m\ndataset: d\nschedule: interleaved\nchunks: 1\n", "job.yaml");
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("job.yaml:4: 'chunks' must be 2 to 26"), std::string::npos) << one.status();
  auto stray = ParseJobYaml("model: m\ndataset: d\nschedule: 1f1b\nchunks: 2\n", "job.yaml");
  ASSERT_FALSE(stray.ok());
  EXPECT_NE(stray.status().message().find("'chunks' needs schedule: interleaved"), std::string::npos) << stray.status();
  auto unknown = ParseJobYaml("model: m\ndataset: d\nschedule: zigzag\n", "job.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("must be gpipe, 1f1b or interleaved"), std::string::npos)
      << unknown.status();
}

TEST(AdamWTest, OneStepMatchesTheFormula) {
  OptimizerConfig opt;
  opt.lr = 0.1;
  opt.weight_decay = 0.01;
  Optimizer adamw(opt);
  std::map<std::string, at::Tensor> params = {{"w", at::tensor({1.0f, -2.0f})}};
  std::map<std::string, at::Tensor> grads = {{"w", at::tensor({0.5f, 0.25f})}};
  ASSERT_TRUE(adamw.Step(params, grads, opt.lr).ok());
  // Step 1: m̂ = g, v̂ = g², update = g / (|g| + eps) = sign(g); decoupled decay first.
  for (int i = 0; i < 2; ++i) {
    double p0 = i == 0 ? 1.0 : -2.0, g = i == 0 ? 0.5 : 0.25;
    double expect = p0 * (1 - 0.1 * 0.01) - 0.1 * g / (std::abs(g) + 1e-8);
    EXPECT_NEAR(params["w"][i].item<double>(), expect, 1e-6);
  }
  auto state = adamw.StateDict();
  Optimizer restored(opt);
  ASSERT_TRUE(restored.LoadStateDict(state).ok());
  EXPECT_EQ(restored.steps(), 1);
}

// Three steps against the formula of torch.optim.AdamW (bias corrections, decoupled decay), a parameter's update
// independent of the others in the call (bitwise: what lets N stages equal one process), and moments that live beside
// the parameters.
TEST(AdamWTest, StepsMatchTorchsAdamWAndEachParameterStandsAlone) {
  OptimizerConfig opt;
  opt.lr = 0.05;
  opt.weight_decay = 0.1;
  std::map<std::string, at::Tensor> both = {{"a", at::tensor({1.0f, -2.0f, 0.5f})}, {"b", at::tensor({3.0f})}};
  std::map<std::string, at::Tensor> alone = {{"a", both["a"].clone()}};
  Optimizer together(opt), by_itself(opt);
  std::vector<double> p = {1.0, -2.0, 0.5}, m(3, 0.0), v(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const at::Tensor g = at::tensor({0.3f * t, -0.2f, 0.05f / t});
    ASSERT_TRUE(together.Step(both, {{"a", g}, {"b", at::tensor({1.0f})}}, opt.lr).ok());
    ASSERT_TRUE(by_itself.Step(alone, {{"a", g.clone()}}, opt.lr).ok());
    for (int i = 0; i < 3; ++i) {
      const double gi = g[i].item<double>();
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.999 * v[i] + 0.001 * gi * gi;
      p[i] *= 1 - opt.lr * opt.weight_decay;
      p[i] -= opt.lr / (1 - std::pow(0.9, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
      EXPECT_NEAR(both["a"][i].item<double>(), p[i], 1e-6) << "step " << t << " element " << i;
    }
    EXPECT_TRUE(at::equal(both["a"], alone["a"])) << "step " << t;
  }
  EXPECT_EQ(together.steps(), 3);
  EXPECT_TRUE(at::equal(together.StateDict().at("a.exp_avg"), by_itself.StateDict().at("a.exp_avg")));
  // Params on one device, fp32: anything else is refused by name.
  std::map<std::string, at::Tensor> half = {{"h", at::zeros({2}, at::kHalf)}};
  absl::Status refused = Optimizer(opt).Step(half, {{"h", at::zeros({2})}}, 0.1);
  EXPECT_NE(refused.message().find("h: the optimizer steps fp32 parameters"), std::string::npos) << refused;
}

// LoRA+: the up projections (lora_B) step at plus_ratio × the rate, the rest at the rate; AdamW's first step moves an
// element by its rate whatever the gradient.
TEST(OptimizerTest, LoraPlusStepsTheUpProjectionsAtTheRatio) {
  OptimizerConfig opt;
  opt.plus_ratio = 4;
  Optimizer optimizer(opt);
  std::map<std::string, at::Tensor> params = {{"m.lora_A.weight", at::zeros({2})}, {"m.lora_B.weight", at::zeros({2})}};
  const at::Tensor g = at::tensor({0.5f, -0.25f});
  ASSERT_TRUE(optimizer.Step(params, {{"m.lora_A.weight", g}, {"m.lora_B.weight", g}}, 0.01).ok());
  for (int i = 0; i < 2; ++i) {
    const double sign = i == 0 ? -1 : 1;
    EXPECT_NEAR(params["m.lora_A.weight"][i].item<double>(), sign * 0.01, 1e-7);
    EXPECT_NEAR(params["m.lora_B.weight"][i].item<double>(), sign * 0.04, 1e-7);
  }
  EXPECT_TRUE(IsUpProjection("transformer.blocks.0.attn.to_q.lora_B.weight"));
  EXPECT_FALSE(IsUpProjection("transformer.blocks.0.attn.to_q.lora_A.weight"));
}

// The EMA as diffusers' EMAModel keeps it: the first step's decay is 0 (the EMA is the parameters), then
// min(decay, (1 + j)/(10 + j)) with j = step − 1; it is part of the state, which refuses what does not fit the job.
TEST(OptimizerTest, EmaFollowsEmaModelsDecayAndTravelsWithTheState) {
  OptimizerConfig opt;
  opt.ema.decay = 0.2;
  Optimizer optimizer(opt);
  std::map<std::string, at::Tensor> params = {{"w", at::tensor({1.0f, -2.0f})}};
  const std::map<std::string, at::Tensor> grads = {{"w", at::tensor({0.5f, 0.25f})}};
  ASSERT_TRUE(optimizer.Step(params, grads, 0.1).ok());
  EXPECT_TRUE(at::allclose(optimizer.StateDict().at("w.ema"), params["w"]));
  const at::Tensor ema1 = optimizer.StateDict().at("w.ema").clone();
  ASSERT_TRUE(optimizer.Step(params, grads, 0.1).ok());
  const double d = std::min(0.2, 2.0 / 11.0);  // step 2: j = 1
  EXPECT_TRUE(at::allclose(optimizer.StateDict().at("w.ema"), ema1 * d + params["w"] * (1 - d), 0, 1e-7));
  EXPECT_DOUBLE_EQ(EmaDecay(opt.ema, 1), 0.0);
  EXPECT_DOUBLE_EQ(EmaDecay(opt.ema, 5), 0.2);
  EmaConfig warm;
  warm.decay = 0.999;
  warm.use_ema_warmup = true;
  warm.update_after_step = 2;
  EXPECT_DOUBLE_EQ(EmaDecay(warm, 3), 0.0);
  EXPECT_DOUBLE_EQ(EmaDecay(warm, 6), 1 - std::pow(1 + 3.0, -2.0 / 3.0));

  Optimizer restored(opt);
  ASSERT_TRUE(restored.LoadStateDict(optimizer.StateDict()).ok());
  EXPECT_TRUE(at::equal(restored.StateDict().at("w.ema"), optimizer.StateDict().at("w.ema")));
  absl::Status no_ema = Optimizer(OptimizerConfig{}).LoadStateDict(optimizer.StateDict());
  EXPECT_NE(no_ema.message().find("the job keeps none"), std::string::npos) << no_ema;
  auto without = optimizer.StateDict();
  without.erase("w.ema");
  absl::Status missing = Optimizer(opt).LoadStateDict(without);
  EXPECT_NE(missing.message().find("a run begun without `ema:`"), std::string::npos) << missing;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("trainer");
    Flux2Config c = TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir_, "model"), 1).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(dir_, "cache"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
            .ok());
    auto job = ParseJobYaml(absl::StrCat("model: ", JoinPath(dir_, "model"), "\ndataset: ", JoinPath(dir_, "cache"),
                                         "\nlora: {rank: 4, targets: all-linear}\noptimizer: {lr: 0.01}\n"
                                         "steps: 6\nbatch_size: 4\nmicro_batches: 2\nseed: 3\n"));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
  }
  std::string dir_;
  JobConfig job_;
};

// One readback per step (the losses and the gradients' squared norms together): nothing else waits on the device,
// whatever the optimizer; Prodigy reads its estimate's sums back once more.
TEST_F(TrainerTest, EachStepReadsBackFromTheDeviceOnce) {
  for (const std::string type : {"adamw", "adamw8bit", "adafactor", "prodigy"}) {
    JobConfig job = job_;
    job.optimizer.type = type;
    job.optimizer.min_8bit_size = 0;  // every adapter's moments in 8 bits
    const int64_t before = ReadBackCount();
    auto result = RunLocalTraining(job, JoinPath(dir_, "readbacks_" + type), 3);
    ASSERT_TRUE(result.ok()) << type << ": " << result.status();
    EXPECT_EQ(ReadBackCount() - before, type == "prodigy" ? 6 : 3) << type;
  }
}

TEST_F(TrainerTest, SamplerIsDeterministicAndMixesBuckets) {
  auto cache = CacheReader::Open(JoinPath(dir_, "cache"));
  ASSERT_TRUE(cache.ok());
  Flux2Family family(TinyFlux2Config(), nullptr);
  auto sampler = StepSampler::Create(cache->get(), job_, &family);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  std::set<int64_t> seq_lens;
  for (int64_t step = 0; step < 6; ++step) {
    auto a = sampler->Step(step), b = sampler->Step(step);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), 2u);
    for (size_t i = 0; i < a->size(); ++i) {
      EXPECT_EQ((*a)[i].samples, (*b)[i].samples);
      const at::Tensor& hidden_states = (*a)[i].model_inputs.at("hidden_states");
      EXPECT_TRUE(at::equal(hidden_states, (*b)[i].model_inputs.at("hidden_states")));
      EXPECT_TRUE(at::equal((*a)[i].target, (*b)[i].target));
      EXPECT_EQ(hidden_states.size(0), 2);
      seq_lens.insert(hidden_states.size(1));
      at::Tensor t = (*a)[i].model_inputs.at("timestep");
      EXPECT_TRUE((t > 0).all().item<bool>() && (t < 1).all().item<bool>());
    }
  }
  EXPECT_EQ(seq_lens, (std::set<int64_t>{4, 6}));  // both buckets appear
}

TEST_F(TrainerTest, TrainLocalIsBitwiseRepeatableAndWritesItsFiles) {
  auto a = RunLocalTraining(job_, JoinPath(dir_, "a"), 4);
  auto b = RunLocalTraining(job_, JoinPath(dir_, "b"), 4);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->steps.size(), 4u);
  for (size_t i = 0; i < a->steps.size(); ++i) EXPECT_EQ(a->steps[i].loss, b->steps[i].loss);
  auto la = LoadAllSafetensors(JoinPath(dir_, "a/lora.safetensors"));
  auto lb = LoadAllSafetensors(JoinPath(dir_, "b/lora.safetensors"));
  ASSERT_TRUE(la.ok() && lb.ok());
  ASSERT_FALSE(la->empty());
  for (const auto& [k, v] : *la) EXPECT_TRUE(at::equal(v, lb->at(k))) << k;
  // The LoRA moved away from its init (B started at zero).
  EXPECT_GT(la->at("transformer.transformer_blocks.0.attn.to_q.lora_B.weight").abs().sum().item<double>(), 0.0);
  auto log = ReadFile(JoinPath(dir_, "a/train_log.jsonl"));
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(std::count(log->begin(), log->end(), '\n'), 4);
  for (const char* key : {"\"step\":4", "\"loss\":", "\"lr\":", "\"step_seconds\":", "\"samples_per_second\":"}) {
    EXPECT_NE(log->find(key), std::string::npos) << key;
  }
}

// quantize: int8 trains (the loss moves like the full-precision run's) and the LoRA file holds only the fp32
// adapters: no 8-bit tensor and no scale ever reaches it.
TEST_F(TrainerTest, LoraTrainedOnAnInt8BaseHoldsNoQuantizedTensors) {
  JobConfig job = job_;
  job.quantize = "int8";
  auto q = RunLocalTraining(job, JoinPath(dir_, "int8"), 3);
  auto full = RunLocalTraining(job_, JoinPath(dir_, "full"), 3);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE(full.ok());
  EXPECT_NE(q->steps[0].loss, full->steps[0].loss);  // the base really was quantized
  EXPECT_NEAR(q->steps[2].loss, full->steps[2].loss, 0.02 * full->steps[2].loss);
  auto file = SafetensorsFile::Open(JoinPath(dir_, "int8/lora.safetensors"));
  ASSERT_TRUE(file.ok());
  ASSERT_FALSE((*file)->Keys().empty());
  for (const auto& key : (*file)->Keys()) {
    EXPECT_TRUE(key.find(".lora_A.") != std::string::npos || key.find(".lora_B.") != std::string::npos) << key;
    EXPECT_EQ(key.find("scale"), std::string::npos) << key;
    EXPECT_EQ((*file)->Entry(key)->dtype, "F32") << key;
  }
}

TEST_F(TrainerTest, CorruptCacheRecordIsAnErrorNotData) {
  auto cache = CacheReader::Open(JoinPath(dir_, "cache"));
  ASSERT_TRUE(cache.ok());
  std::string path = JoinPath(JoinPath(dir_, "cache"), (*cache)->index().records[0].file);
  auto bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(WriteFileAtomic(path, bytes->substr(0, bytes->size() / 2)).ok());
  auto loaded = (*cache)->Load(0);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("cache record 000000"), std::string::npos) << loaded.status();
  EXPECT_TRUE((*cache)->Load(1).ok());
}

}  // namespace
}  // namespace baton
