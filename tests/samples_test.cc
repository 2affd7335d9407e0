// Validation loss and sample images during training (issue 12), end to end: a tiny FLUX.2 pipeline folder, the
// bundled images encoded by the real encoder_worker, and a job with `validation:` and `samples:` trained by the
// coordinator over two real stage workers. Evaluations run as forward-only passes between steps and must leave
// training exactly as it was: the LoRA equals, bitwise, that of the same job without them.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "coordinator/job_plan.h"
#include "coordinator/pipeline_trainer.h"
#include "core/encode/flux2_encoder.h"
#include "core/image/image.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/train_local/local_trainer.h"
#include "core/util/files.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::SourceDir;

class SamplesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("samples"));
    test_util::WriteTinyPipelineAndSampleCache(*dir_);
  }
  static void TearDownTestSuite() { delete dir_; }

  // The demo's shape at test size; `evals` adds validation (on the training cache itself, so nothing is held out and
  // the training data stay the same) and three sample prompts, every 2 of 4 steps.
  static JobConfig Job(bool evals, const std::string& model = "", const std::string& extra = "") {
    std::string yaml = absl::StrCat("model: ", model.empty() ? JoinPath(*dir_, "pipeline") : model,
                                    "\ndataset: ", JoinPath(*dir_, "cache"),
                                    "\nlora: {rank: 4, targets: all-linear}\noptimizer: {lr: 0.01}\nsteps: 4\n"
                                    "batch_size: 4\nmicro_batches: 2\nseed: 3\ncheckpoint_every: 2\n",
                                    extra);
    if (evals) {
      absl::StrAppend(&yaml, "validation: {every: 2, dataset: ", JoinPath(*dir_, "cache"),
                      ", samples: 3, timesteps: [0.25, 0.75]}\n"
                      "samples: {every: 2, prompts: [a red circle, a blue square, a green triangle], steps: 4, "
                      "guidance: 4.0, size: [48, 32], seed: 5}\n");
    }
    auto job = ParseJobYaml(yaml, "samples-test.yaml");
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  static CoordinatorOptions Options(const std::string& out) {
    return test_util::LocalStagesOptions(2, JoinPath(*dir_, out));
  }

  static std::map<std::string, at::Tensor> Lora(const std::string& out) {
    return test_util::LoadRunLora(JoinPath(*dir_, out));
  }

  // train_log.jsonl's lines of one event kind, of the trained adapters or (`weights` "ema") of their EMA.
  static std::vector<nlohmann::json> Events(const std::string& out, const std::string& event,
                                            const std::string& weights = "") {
    auto text = ReadFile(JoinPath(JoinPath(*dir_, out), "train_log.jsonl"));
    EXPECT_TRUE(text.ok());
    std::vector<nlohmann::json> lines;
    std::istringstream in(text.ok() ? *text : "");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.value("event", "") == event && j.value("weights", "") == weights) lines.push_back(j);
    }
    return lines;
  }

  static Image Png(const std::string& out, int64_t step, const std::string& file, const std::string& suffix = "") {
    auto image = ReadImageFile(JoinPath(*dir_, absl::StrCat(out, "/samples/step-", step, suffix, "/", file)));
    EXPECT_TRUE(image.ok()) << image.status();
    return image.ok() ? *image : Image();
  }

  static std::string* dir_;
};
std::string* SamplesTest::dir_ = nullptr;

TEST_F(SamplesTest, EvaluationsThroughTheStagesLeaveTheLoraBitwiseUnchanged) {
  ASSERT_TRUE(RunCoordinator(Job(true), Options("with")).ok());
  ASSERT_TRUE(RunCoordinator(Job(false), Options("without")).ok());
  auto with = Lora("with"), without = Lora("without");
  ASSERT_EQ(with.size(), without.size());
  ASSERT_FALSE(with.empty());
  for (const auto& [name, w] : without) {
    ASSERT_TRUE(with.count(name)) << name;
    EXPECT_TRUE(at::equal(w, with.at(name))) << name << " differs: sampling changed training";
  }

  // Samples before the first step, after step 2 and after the last, each complete with its contact sheet.
  for (int64_t step : {0, 2, 4}) {
    for (int k = 0; k < 3; ++k) {
      Image image = Png("with", step, absl::StrCat(k, ".png"));
      EXPECT_EQ(image.width, 48);
      EXPECT_EQ(image.height, 32);
    }
    Image sheet = Png("with", step, "contact_sheet.png");
    EXPECT_GT(sheet.width, 48);
    EXPECT_GT(sheet.height, 32);
    EXPECT_FALSE(PathExists(JoinPath(*dir_, absl::StrCat("with/samples/step-", step, ".partial"))));
  }
  EXPECT_FALSE(PathExists(JoinPath(*dir_, "with/samples/step-1")));
  // Learning shows: the last step's pictures differ from the first's.
  EXPECT_NE(Png("with", 0, "0.png").pixels, Png("with", 4, "0.png").pixels);

  auto validations = Events("with", "validation");
  ASSERT_EQ(validations.size(), 3u);
  for (size_t i = 0; i < validations.size(); ++i) {
    const auto& v = validations[i];
    EXPECT_EQ(v["step"].get<int64_t>(), static_cast<int64_t>(2 * i));
    EXPECT_EQ(v["records"].get<int64_t>(), 3);
    const double mean = v["validation_loss"]["mean"].get<double>();
    const double a = v["validation_loss"]["0.25"].get<double>(), b = v["validation_loss"]["0.75"].get<double>();
    EXPECT_TRUE(std::isfinite(mean) && mean > 0);
    EXPECT_NEAR(mean, (a + b) / 2, 1e-9 * mean);
  }
  EXPECT_NE(validations[0]["validation_loss"]["mean"], validations[2]["validation_loss"]["mean"]);
  auto samples = Events("with", "samples");
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[2]["images"].get<int64_t>(), 3);
  EXPECT_GT(samples[2]["seconds_per_sample"].get<double>(), 0);
  EXPECT_TRUE(Events("without", "samples").empty());
}

TEST_F(SamplesTest, OneProcessRendersWhatTheStagesRender) {
  if (!PathExists(JoinPath(*dir_, "with/samples/step-4/0.png"))) {
    ASSERT_TRUE(RunCoordinator(Job(true), Options("with")).ok());
  }
  auto local = RunLocalTraining(Job(true), JoinPath(*dir_, "local"), 0);
  ASSERT_TRUE(local.ok()) << local.status();
  // The same ops in the same order: equal after 8-bit rounding up to a rare pixel on a rounding boundary.
  for (int64_t step : {0, 4}) {
    for (int k = 0; k < 3; ++k) {
      Image a = Png("with", step, absl::StrCat(k, ".png")), b = Png("local", step, absl::StrCat(k, ".png"));
      ASSERT_EQ(a.pixels.size(), b.pixels.size());
      int worst = 0;
      for (size_t i = 0; i < a.pixels.size(); ++i) worst = std::max(worst, std::abs(a.pixels[i] - b.pixels[i]));
      EXPECT_LE(worst, 1) << "step " << step << " prompt " << k;
    }
  }
  auto pipe = Events("with", "validation"), one = Events("local", "validation");
  ASSERT_EQ(pipe.size(), one.size());
  for (size_t i = 0; i < pipe.size(); ++i) {
    const double a = pipe[i]["validation_loss"]["mean"].get<double>(),
                 b = one[i]["validation_loss"]["mean"].get<double>();
    EXPECT_NEAR(a, b, 1e-5 * a);
  }
}

// The most any pixel of two renderings differs.
int WorstPixel(const Image& a, const Image& b) {
  EXPECT_EQ(a.pixels.size(), b.pixels.size());
  int worst = a.pixels.size() == b.pixels.size() ? 0 : 255;
  for (size_t i = 0; i < a.pixels.size() && i < b.pixels.size(); ++i) {
    worst = std::max(worst, std::abs(a.pixels[i] - b.pixels[i]));
  }
  return worst;
}

// `ema: {evals: both}`: each evaluation runs with the trained adapters and again with their EMA. Through the stages
// (whose stage-local optimizer holds the adapters: the EMA's passes must not leave its weights there) and in one
// process (which swaps the EMA in and back), the LoRA and its EMA are bitwise the same; the EMA's validation losses
// agree; at step 0, when the EMA is the adapters, they equal the trained ones; and the EMA's images after the last
// step are what `baton sample` renders with lora_ema.safetensors.
TEST_F(SamplesTest, EmaEvaluationsRunTheEmaAndLeaveTrainingAsItWas) {
  const JobConfig job = Job(true, "", "ema: {decay: 0.8, evals: both}\n");
  ASSERT_TRUE(RunCoordinator(job, Options("ema_pipe")).ok());
  auto local = RunLocalTraining(job, JoinPath(*dir_, "ema_local"), 0);
  ASSERT_TRUE(local.ok()) << local.status();
  for (const char* file : {"lora.safetensors", "lora_ema.safetensors"}) {
    auto pipe = LoadAllSafetensors(JoinPath(*dir_, absl::StrCat("ema_pipe/", file)));
    auto one = LoadAllSafetensors(JoinPath(*dir_, absl::StrCat("ema_local/", file)));
    ASSERT_TRUE(pipe.ok() && one.ok()) << file;
    ASSERT_EQ(pipe->size(), one->size()) << file;
    for (const auto& [name, w] : *one) EXPECT_TRUE(at::equal(w, pipe->at(name))) << file << " " << name;
  }

  auto trained = Events("ema_pipe", "validation"), ema = Events("ema_pipe", "validation", "ema");
  auto ema_one = Events("ema_local", "validation", "ema");
  ASSERT_EQ(trained.size(), 3u);
  ASSERT_EQ(ema.size(), 3u);
  ASSERT_EQ(ema_one.size(), 3u);
  EXPECT_EQ(ema[0]["validation_loss"]["mean"], trained[0]["validation_loss"]["mean"]);
  EXPECT_NE(ema[2]["validation_loss"]["mean"], trained[2]["validation_loss"]["mean"]);
  for (size_t i = 0; i < ema.size(); ++i) {
    const double a = ema[i]["validation_loss"]["mean"].get<double>(),
                 b = ema_one[i]["validation_loss"]["mean"].get<double>();
    EXPECT_NEAR(a, b, 1e-5 * a) << "step " << ema[i]["step"];
  }

  ASSERT_EQ(Events("ema_pipe", "samples", "ema").size(), 3u);
  EXPECT_EQ(Events("ema_pipe", "samples", "ema")[2]["dir"].get<std::string>(),
            JoinPath(*dir_, "ema_pipe/samples/step-4-ema"));
  EXPECT_EQ(WorstPixel(Png("ema_pipe", 0, "0.png"), Png("ema_pipe", 0, "0.png", "-ema")), 0);
  EXPECT_GT(WorstPixel(Png("ema_pipe", 4, "0.png"), Png("ema_pipe", 4, "0.png", "-ema")), 1);
  const std::string png = JoinPath(*dir_, "ema_sample.png");
  const std::string cmd = absl::StrCat(JoinPath(BinDir(), "baton"), " sample --model ", JoinPath(*dir_, "pipeline"),
                                       " --prompt 'a red circle' --max_sequence_length 32 --size 48x32 --steps 4 "
                                       "--guidance 4.0 --seed 5 --lora ",
                                       JoinPath(*dir_, "ema_pipe/lora_ema.safetensors"), " --out ", png);
  auto r = test_util::RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  auto sampled = ReadImageFile(png);
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  EXPECT_LE(WorstPixel(*sampled, Png("ema_pipe", 4, "0.png", "-ema")), 1);
}

// `samples: {references: [...]}` (FLUX.2 editing): the step-0 image of a prompt is what `baton sample --references`
// renders with the same prompt, size, steps, guidance and seed (that command is held to Flux2Pipeline(image=[...]) in
// tests/upstream/test_sample.py), and not what the prompt renders without references.
TEST_F(SamplesTest, SamplesWithReferenceImagesAreBatonSamplesWithThem) {
  const std::string reference = JoinPath(SourceDir(), "data/sample/blue_square.png");
  auto job = ParseJobYaml(
      absl::StrCat("model: ", JoinPath(*dir_, "pipeline"), "\ndataset: ", JoinPath(*dir_, "cache"),
                   "\nlora: {rank: 4}\nsteps: 1\nbatch_size: 2\nseed: 3\n"
                   "samples: {every: 1, prompts: [a red circle], steps: 3, guidance: 4.0, size: [48, 32], seed: 5, "
                   "references: [",
                   reference, "]}\n"),
      "references.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(CheckJobPlan(*job, 1).ok());
  auto local = RunLocalTraining(*job, JoinPath(*dir_, "refs"), 0);
  ASSERT_TRUE(local.ok()) << local.status();
  auto sample = [&](const std::string& out, const std::string& extra) {
    const std::string cmd = absl::StrCat(JoinPath(BinDir(), "baton"), " sample --model ", JoinPath(*dir_, "pipeline"),
                                         " --prompt 'a red circle' --max_sequence_length 32 --size 48x32 --steps 3 "
                                         "--guidance 4.0 --seed 5 --out ",
                                         JoinPath(*dir_, out), extra);
    auto r = test_util::RunCommand(cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    auto image = ReadImageFile(JoinPath(*dir_, out));
    EXPECT_TRUE(image.ok()) << image.status();
    return image.ok() ? *image : Image();
  };
  const Image rendered = Png("refs", 0, "0.png");
  const Image with = sample("with_refs.png", absl::StrCat(" --references ", reference));
  const Image without = sample("without_refs.png", "");
  ASSERT_EQ(rendered.pixels.size(), with.pixels.size());
  int worst = 0, changed = 0;
  for (size_t i = 0; i < rendered.pixels.size(); ++i) {
    worst = std::max(worst, std::abs(rendered.pixels[i] - with.pixels[i]));
    changed += rendered.pixels[i] != without.pixels[i];
  }
  EXPECT_LE(worst, 1);
  EXPECT_GT(changed, static_cast<int>(rendered.pixels.size() / 10)) << "the references changed nothing";

  auto wrong = ParseJobYaml(absl::StrCat("model: m\ndataset: d\nsamples: {every: 1, prompts: [a], references: [",
                                         "a.png, b.png, c.png, d.png, e.png]}\n"),
                            "refs.yaml");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("refs.yaml:3:"), std::string::npos) << wrong.status();
  EXPECT_NE(wrong.status().message().find("at most 4"), std::string::npos) << wrong.status();
}

TEST_F(SamplesTest, SamplesNeedAPipelineFolder) {
  // A bare transformer folder has no VAE to decode with: refused at submit, saying what is missing.
  absl::Status s = CheckJobPlan(Job(true, JoinPath(*dir_, "pipeline/transformer/..")), 2);
  EXPECT_TRUE(s.ok()) << s;  // the pipeline folder, spelled through its transformer/
  const std::string bare = JoinPath(*dir_, "bare");
  ASSERT_TRUE(MakeDirs(bare).ok());
  std::filesystem::copy(JoinPath(*dir_, "pipeline/transformer"), JoinPath(bare, "transformer"),
                        std::filesystem::copy_options::recursive);
  s = CheckJobPlan(Job(true, JoinPath(bare, "transformer")), 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("vae/"), std::string::npos) << s;
}

}  // namespace
}  // namespace baton
