// What the integration tests share to run the coordinator on local stage workers (build/bin/stage_worker) and to
// read the LoRA a run wrote.
#pragma once

#include <absl/time/time.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/pipeline_trainer.h"
#include "core/encode/flux2_encoder.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
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

// `<output_dir>/lora.safetensors`, every tensor (empty, with a test failure, when it cannot be read).
inline std::map<std::string, at::Tensor> LoadRunLora(const std::string& output_dir) {
  auto t = LoadAllSafetensors(JoinPath(output_dir, "lora.safetensors"));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : std::map<std::string, at::Tensor>{};
}

}  // namespace baton::test_util
