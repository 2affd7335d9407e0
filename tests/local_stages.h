// What the integration tests share to run the coordinator on local stage workers (build/bin/stage_worker) and to
// read the LoRA a run wrote.
#pragma once

#include <absl/time/time.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "coordinator/pipeline_trainer.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
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

// `<output_dir>/lora.safetensors`, every tensor (empty, with a test failure, when it cannot be read).
inline std::map<std::string, at::Tensor> LoadRunLora(const std::string& output_dir) {
  auto t = LoadAllSafetensors(JoinPath(output_dir, "lora.safetensors"));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : std::map<std::string, at::Tensor>{};
}

}  // namespace baton::test_util
