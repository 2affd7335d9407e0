// Wan through the same pipeline as FLUX.2, end to end with the real binaries: a tiny Wan 2.1 T2V pipeline folder,
// the bundled clips of data/wan_sample/ encoded by encoder_worker (Wan VAE + umT5), and the Wan demo job
// (configs/jobs/wan-demo.yaml) trained by `coordinator --stages 2` must give the LoRA `baton train-local` gives in one
// process. Tolerance as tests/pipeline_test.cc: the same ops in the same order, so 1e-6 on weights of ~0.1 allows only
// BLAS blocking differences.
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

// The demo job with its paths moved under `dir` and fewer steps (each step is seconds on 2 cores).
std::string WriteJob(const std::string& dir) {
  std::ifstream in(JoinPath(SourceDir(), "configs/jobs/wan-demo.yaml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{{"out/wan-demo/pipeline", JoinPath(dir, "pipeline")},
                                                        {"out/wan-demo/cache", JoinPath(dir, "cache")},
                                                        {"steps: 20", "steps: 4"},
                                                        {"checkpoint_every: 10", "checkpoint_every: 2"}}) {
    EXPECT_NE(text.find(from), std::string::npos) << from;
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  }
  const std::string path = JoinPath(dir, "wan-demo.yaml");
  std::ofstream(path) << text;
  return path;
}

TEST(WanPipelineTest, TwoStagesTrainTheDemoJobAsOneProcessDoes) {
  const std::string dir = test_util::MakeTempDir("wan_pipeline");
  const std::string bin = BinDir();
  auto run = [](const std::string& cmd) {
    auto r = RunCommand(cmd, /*with_stderr=*/true);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    return r.output;
  };
  run(absl::StrCat(JoinPath(bin, "baton"), " init-weights --pipeline wan-tiny --out ", JoinPath(dir, "pipeline")));
  run(absl::StrCat(JoinPath(bin, "encoder_worker"), " --dataset ", JoinPath(SourceDir(), "data/wan_sample"),
                   " --cache ", JoinPath(dir, "cache"), " --model ", JoinPath(dir, "pipeline"),
                   " --resolution 64 --max_frames 9 --max_sequence_length 32 --threads 1"));
  const std::string job = WriteJob(dir);
  const std::string pipe_log =
      run(absl::StrCat(JoinPath(bin, "coordinator"), " --stages 2 --job ", job, " --output ", JoinPath(dir, "pp2")));
  EXPECT_NE(pipe_log.find("4/4  loss"), std::string::npos) << pipe_log;
  run(absl::StrCat(JoinPath(bin, "baton"), " train-local --job ", job, " --output ", JoinPath(dir, "local")));

  auto pp = LoadAllSafetensors(JoinPath(dir, "pp2/lora.safetensors"));
  auto local = LoadAllSafetensors(JoinPath(dir, "local/lora.safetensors"));
  ASSERT_TRUE(pp.ok()) << pp.status();
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ(pp->size(), local->size());
  // Attention LoRA on the tiny transformer's 3 blocks: attn1/attn2 to_q, to_k, to_v, to_out.0, A and B each.
  EXPECT_EQ(pp->size(), 3u * 2 * 4 * 2);
  bool moved = false;
  for (const auto& [name, w] : *local) {
    ASSERT_TRUE(pp->count(name)) << name;
    EXPECT_LE((w - pp->at(name)).abs().max().item<double>(), 1e-6) << name;
    if (name.find("lora_B") != std::string::npos) moved |= w.abs().max().item<double>() > 0;
  }
  EXPECT_TRUE(moved) << "training left every lora_B at zero";
}

}  // namespace
}  // namespace baton
