// The flags of a bench that trains the scaled-down FLUX.2 transformer (flux2_bench_model.h): its shape and the LoRA.
// They are defined here, so exactly one .cc of a bench binary includes this file. The defaults below are
// bench_pipeline's; a bench with others sets them (SetFlux2BenchDefaults) before it parses its command line.
#pragma once

#include <absl/flags/flag.h>

#include <cstdint>
#include <string>

#include "bench/flux2_bench_model.h"

ABSL_FLAG(int64_t, dim, 384, "hidden size D (a multiple of 64: head_dim 64)");
ABSL_FLAG(int64_t, double, 2, "double-stream blocks");
ABSL_FLAG(int64_t, single, 4, "single-stream blocks");
ABSL_FLAG(int64_t, joint, 256, "joint_attention_dim (text embedding width)");
ABSL_FLAG(int64_t, grid, 16, "latent grid side: grid^2 image tokens");
ABSL_FLAG(int64_t, text, 64, "text tokens");
ABSL_FLAG(int64_t, rank, 16, "LoRA rank");
ABSL_FLAG(std::string, targets, "all-linear", "LoRA targets");

namespace baton {

// The model and adapters a bench trains, as its flags give them.
struct Flux2BenchRun : Flux2BenchShape {
  int64_t rank = 16;
  std::string targets = "all-linear";
};

// The bench's defaults for the flags above: call before ParseBenchFlags.
inline void SetFlux2BenchDefaults(const Flux2BenchRun& d) {
  absl::SetFlag(&FLAGS_dim, d.dim);
  absl::SetFlag(&FLAGS_double, d.double_blocks);
  absl::SetFlag(&FLAGS_single, d.single_blocks);
  absl::SetFlag(&FLAGS_joint, d.joint);
  absl::SetFlag(&FLAGS_grid, d.grid);
  absl::SetFlag(&FLAGS_text, d.text);
  absl::SetFlag(&FLAGS_rank, d.rank);
  absl::SetFlag(&FLAGS_targets, d.targets);
}

// The flags' values, after ParseBenchFlags.
inline Flux2BenchRun Flux2BenchFromFlags() {
  Flux2BenchRun r;
  r.dim = absl::GetFlag(FLAGS_dim);
  r.double_blocks = absl::GetFlag(FLAGS_double);
  r.single_blocks = absl::GetFlag(FLAGS_single);
  r.joint = absl::GetFlag(FLAGS_joint);
  r.grid = absl::GetFlag(FLAGS_grid);
  r.text = absl::GetFlag(FLAGS_text);
  r.rank = absl::GetFlag(FLAGS_rank);
  r.targets = absl::GetFlag(FLAGS_targets);
  return r;
}

}  // namespace baton
