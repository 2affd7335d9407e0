// Wan through the same pipeline as FLUX.2, end to end with the real binaries: a tiny Wan pipeline folder (2.1 T2V,
// 2.2 I2V-A14B kind, 2.2 TI2V-5B kind), the bundled clips of data/wan_sample/ encoded by encoder_worker (Wan VAE +
// umT5, with the image-to-video conditioning), and the Wan demo jobs (configs/jobs/wan-demo.yaml, wan-i2v-demo.yaml)
// trained by `coordinator --stages 2` must give the LoRA `baton train-local` gives in one process. Tolerance as
// tests/pipeline_test.cc: the same ops in the same order, so 1e-6 on weights of ~0.1 allows only BLAS blocking
// differences.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::RunCommand;
using test_util::SourceDir;

// A demo job (`demo`: wan-demo or wan-i2v-demo) with its paths moved under `dir` and fewer steps (each step is
// seconds on 2 cores).
std::string WriteJob(const std::string& dir, const std::string& demo) {
  std::ifstream in(JoinPath(SourceDir(), absl::StrCat("configs/jobs/", demo, ".yaml")));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {absl::StrCat("out/", demo, "/pipeline"), JoinPath(dir, "pipeline")},
           {absl::StrCat("out/", demo, "/cache"), JoinPath(dir, "cache")},
           {"steps: 20", "steps: 4"},
           {"checkpoint_every: 10", "checkpoint_every: 2"}}) {
    EXPECT_NE(text.find(from), std::string::npos) << from;
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  }
  // An image-to-video job's sample image is relative to the repository, the test runs elsewhere.
  const std::string image = "image: data/";
  if (size_t at = text.find(image); at != std::string::npos) {
    text.replace(at, image.size(), absl::StrCat("image: ", JoinPath(SourceDir(), "data/")));
  }
  const std::string path = JoinPath(dir, "wan-demo.yaml");
  std::ofstream(path) << text;
  return path;
}

// Writes the tiny `pipeline` kind, encodes the bundled clips with `encode_flags`, trains `demo` both ways and demands
// the same LoRA.
void TrainBothWays(const std::string& name, const std::string& pipeline, const std::string& encode_flags,
                   const std::string& demo, const std::string& conditioning) {
  const std::string dir = test_util::MakeTempDir(name);
  const std::string bin = BinDir();
  auto run = [](const std::string& cmd) {
    auto r = RunCommand(cmd, /*with_stderr=*/true);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    return r.output;
  };
  run(absl::StrCat(JoinPath(bin, "baton"), " init-weights --pipeline ", pipeline, " --out ",
                   JoinPath(dir, "pipeline")));
  run(absl::StrCat(JoinPath(bin, "encoder_worker"), " --dataset ", JoinPath(SourceDir(), "data/wan_sample"),
                   " --cache ", JoinPath(dir, "cache"), " --model ", JoinPath(dir, "pipeline"),
                   " --resolution 64 --max_frames 9 --max_sequence_length 32 --threads 1", encode_flags));
  auto index = ReadFile(JoinPath(dir, "cache/index.json"));
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->find("\"conditioning\""),
            conditioning.empty() ? std::string::npos : index->find("\"conditioning\""));
  if (!conditioning.empty()) EXPECT_NE(index->find(absl::StrCat("\"", conditioning, "\"")), std::string::npos);
  const std::string job = WriteJob(dir, demo);
  const std::string pipe_log =
      run(absl::StrCat(JoinPath(bin, "coordinator"), " --stages 2 --job ", job, " --output ", JoinPath(dir, "pp2")));
  EXPECT_NE(pipe_log.find("4/4  loss"), std::string::npos) << pipe_log;
  run(absl::StrCat(JoinPath(bin, "baton"), " train-local --job ", job, " --output ", JoinPath(dir, "local")));

  auto pp = LoadAllSafetensors(JoinPath(dir, "pp2/lora.safetensors"));
  auto local = LoadAllSafetensors(JoinPath(dir, "local/lora.safetensors"));
  ASSERT_TRUE(pp.ok()) << pp.status();
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ(pp->size(), local->size());
  // Attention LoRA on the tiny transformer's 3 blocks: attn1/attn2 to_q, to_k, to_v, to_out.0, A and B each (the
  // CLIP image branch adds attn2.add_k_proj and add_v_proj).
  EXPECT_EQ(pp->size(), 3u * 2 * (pipeline == "wan-i2v-2.1-tiny" ? 5 : 4) * 2);
  bool moved = false;
  for (const auto& [name, w] : *local) {
    ASSERT_TRUE(pp->count(name)) << name;
    EXPECT_LE((w - pp->at(name)).abs().max().item<double>(), 1e-6) << name;
    if (name.find("lora_B") != std::string::npos) moved |= w.abs().max().item<double>() > 0;
  }
  EXPECT_TRUE(moved) << "training left every lora_B at zero";
}

TEST(WanPipelineTest, TwoStagesTrainTheDemoJobAsOneProcessDoes) {
  TrainBothWays("wan_pipeline", "wan-tiny", "", "wan-demo", "");
}

// Wan 2.2 I2V-A14B's kind: cat(noisy, mask, first-frame latents) into a 2·z + 4 channel patch embedding on stage 0.
TEST(WanPipelineTest, TwoStagesTrainImageToVideoAsOneProcessDoes) {
  TrainBothWays("wan_pipeline_i2v", "wan-i2v-tiny", "", "wan-i2v-demo", "wan_first_frame");
}

// Wan 2.1 I2V's kind: the CLIP image embeddings travel once per micro-batch inside the shell's context constant (the
// image branch takes the last 512 context tokens as text, so the prompts are 512 tokens).
TEST(WanPipelineTest, TwoStagesTrainWan21ImageToVideoWithClipAsOneProcessDoes) {
  TrainBothWays("wan_pipeline_i2v21", "wan-i2v-2.1-tiny", " --max_sequence_length 512", "wan-i2v-demo",
                "wan_first_frame");
}

// TI2V-5B's image-to-video mode: per-token timesteps on the wire and a loss mask with the last stage's target.
TEST(WanPipelineTest, TwoStagesTrainTi2vImageToVideoAsOneProcessDoes) {
  TrainBothWays("wan_pipeline_ti2v", "wan-ti2v-tiny", " --conditioning first-frame", "wan-i2v-demo",
                "wan_clean_first_frame");
}

}  // namespace
}  // namespace baton
