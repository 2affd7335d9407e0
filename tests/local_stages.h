// What the integration tests share to run the coordinator on local stage workers (build/bin/stage_worker) and to
// read the LoRA a run wrote.
#pragma once

#include <absl/time/time.h>
#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/encode/flux2_encoder.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton::test_util {

// `stages` local stage workers writing to `output_dir`, quiet, with timeouts generous enough for a loaded CI machine.
inline CoordinatorOptions LocalStagesOptions(int stages, const std::string& output_dir) {
  CoordinatorOptions o;
  o.stages = stages;
  o.output_dir = output_dir;
  o.stage_worker_binary = JoinPath(BinDir(), "stage_worker");
  o.rpc_timeout = absl::Seconds(60);
  o.connect_timeout = absl::Seconds(20);
  o.worker_restart_timeout = absl::Seconds(30);
  o.quiet = true;
  return o;
}

// A tiny FLUX.2 transformer at <dir>/model and a synthetic cache of 12 records at <dir>/cache in two resolution
// buckets (steps mix micro-batches of 4 and 6 image tokens): what the pipeline, recovery and replicas suites train.
inline void WriteTinyModelAndTwoBucketCache(const std::string& dir) {
  Flux2Config c = TinyFlux2Config();
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "model"), 1).ok());
  ASSERT_TRUE(
      WriteSyntheticCache(JoinPath(dir, "cache"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
          .ok());
}

// A tiny FLUX.2 pipeline folder at <dir>/pipeline and the bundled sample images (data/sample) encoded into
// <dir>/cache by the real encoder_worker (64 px, 32 text tokens): a job that renders samples needs both.
inline void WriteTinyPipelineAndSampleCache(const std::string& dir) {
  ASSERT_TRUE(WriteTinyFlux2Pipeline(JoinPath(dir, "pipeline"), 0).ok());
  const std::string cmd =
      absl::StrCat(JoinPath(BinDir(), "encoder_worker"), " --dataset ", JoinPath(SourceDir(), "data/sample"),
                   " --cache ", JoinPath(dir, "cache"), " --model ", JoinPath(dir, "pipeline"),
                   " --resolution 64 --max_sequence_length 32 --threads 1");
  auto r = RunCommand(cmd, /*with_stderr=*/true);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
}

// `<output_dir>/train_log.jsonl`, one JSON object per line (none while it does not exist; a torn line is skipped).
inline std::vector<nlohmann::json> ReadTrainLog(const std::string& output_dir) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(ReadFile(JoinPath(output_dir, "train_log.jsonl")).value_or(""));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) lines.push_back(std::move(j));
  }
  return lines;
}

// step → the validation losses of that step's line in `<output_dir>/train_log.jsonl` (the last one written for that
// step: a resume validates its step again).
inline std::map<int64_t, std::string> ValidationLosses(const std::string& output_dir) {
  std::map<int64_t, std::string> v;
  for (const auto& j : ReadTrainLog(output_dir)) {
    if (j.value("event", "") == "validation") v[j["step"].get<int64_t>()] = j["validation_loss"].dump();
  }
  return v;
}

// Runs `cmd` (stderr included) and expects it to succeed; its output.
inline std::string RunOk(const std::string& cmd) {
  auto r = RunCommand(cmd, /*with_stderr=*/true);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return r.output;
}

// `<output_dir>/lora.safetensors` (or another of its files), every tensor (empty, with a test failure, when it cannot
// be read).
inline std::map<std::string, at::Tensor> LoadRunLora(const std::string& output_dir,
                                                     const std::string& file = "lora.safetensors") {
  auto t = LoadAllSafetensors(JoinPath(output_dir, file));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : std::map<std::string, at::Tensor>{};
}

// Caption dropout's empty caption, as the encoder worker cached it in `cache` (folder 0), equals `baton text-encode
// --model PIPELINE --prompt ''` at `text_len` tokens (which the upstream referees hold to Flux2Pipeline's and
// WanPipeline's encoding of prompt=""), written to `scratch`.
inline void ExpectEmptyCaptionOfTextEncode(const CacheReader& cache, const std::string& pipeline, int64_t text_len,
                                           const std::string& scratch) {
  auto encoded = RunCommand(absl::StrCat(JoinPath(BinDir(), "baton"), " text-encode --model ", pipeline,
                                         " --prompt '' --max-sequence-length ", text_len, " --output ", scratch));
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  auto want = LoadAllSafetensors(scratch);
  ASSERT_TRUE(want.ok()) << want.status();
  auto empty = cache.EmptyPrompt(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(at::allclose(*empty, want->at("prompt_embeds")[0], 1e-5, 1e-6)) << "not text-encode's empty caption";
}

// Live stage workers among the children of `parent`'s threads (a coordinator forks them from reader threads).
inline std::vector<pid_t> StageWorkersOf(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", parent, "/task"), ec)) {
    std::ifstream children(task.path() / "children");
    pid_t pid;
    while (children >> pid) {
      std::ifstream cmdline(absl::StrCat("/proc/", pid, "/cmdline"));
      std::string argv0;
      std::getline(cmdline, argv0, '\0');
      std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
      std::string pid_text, comm, state;
      stat >> pid_text >> comm >> state;
      if (argv0.find("stage_worker") != std::string::npos && state != "Z") out.push_back(pid);
    }
  }
  return out;
}

// The stage workers this process started (the coordinator runs in it), by pid.
inline std::vector<pid_t> OurStageWorkers() { return StageWorkersOf(::getpid()); }

// Lines in a file (0 while it does not exist).
inline int64_t Lines(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? std::count(text->begin(), text->end(), '\n') : 0;
}

// Waits (up to 30 s) until `path` has at least n lines.
inline void WaitForLines(const std::string& path, int64_t n) {
  for (int i = 0; i < 1200 && Lines(path) < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
}

}  // namespace baton::test_util
