// What the stage-local optimizer's host copy costs per step at FLUX.2-dev's size (stage_worker/host_state_copy.h):
// one stage of two holding rank-16 all-linear adapters (154 MB fp32) and AdamW's two moments (308 MB), written to
// host shared memory after every update. Both ways in one run: the copy as the worker writes it (from the tensors'
// own memory) and as it first did (clones, the file gathered in memory, then written), with a plain copy of the same
// bytes as the floor; the median of --reps each. The step it stays under 2 % of is 50 x the copy.
#include <ATen/ATen.h>
#include <absl/flags/flag.h>
#include <absl/strings/str_cat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "core/tensor/safetensors.h"
#include "core/train/optimizer.h"
#include "core/util/files.h"
#include "stage_worker/host_state_copy.h"

ABSL_FLAG(int, adapters, 196, "adapted linears on the stage (each rank x 6144 down and 6144 x rank up)");
ABSL_FLAG(int, rank, 16, "LoRA rank");
ABSL_FLAG(int, reps, 5, "timed writes of each kind");

int main(int argc, char** argv) {
  using namespace baton;
  if (absl::Status s = ParseBenchFlags(argc, argv, "bench_state_copy [--adapters=392] [--rank=16] [--reps=5]");
      !s.ok()) {
    BenchDie(std::string(s.message()));
  }
  const int adapters = absl::GetFlag(FLAGS_adapters), rank = absl::GetFlag(FLAGS_rank),
            reps = absl::GetFlag(FLAGS_reps);
  if (adapters < 1 || rank < 1 || reps < 1) BenchDie("--adapters, --rank and --reps must be >= 1");
  std::map<std::string, at::Tensor> state;
  for (int i = 0; i < adapters; ++i) {
    for (const char* half : {"lora_A", "lora_B"}) {
      const std::string name = absl::StrCat("blocks.", i, ".", half, ".weight");
      const std::vector<int64_t> shape =
          half[5] == 'A' ? std::vector<int64_t>{rank, 6144} : std::vector<int64_t>{6144, rank};
      state[name] = at::randn(shape);
      state[name + ".exp_avg"] = at::randn(shape);
      state[name + ".exp_avg_sq"] = at::rand(shape);
    }
  }
  state[kOptimizerStepKey] = at::scalar_tensor(100, at::kLong);
  uint64_t bytes = 0;
  for (const auto& [name, t] : state) bytes += static_cast<uint64_t>(t.numel()) * t.element_size();

  const std::string dir = HostStateCopyDir();
  HostStateCopy copy;
  copy.Use("bench", absl::StrCat(::getpid()), 0);
  if (!copy.active()) BenchDie(absl::StrCat("no folder ", dir, " for the copy"));
  const double streamed = MedianSeconds(reps, [&] {
    if (!copy.Write(state).ok()) BenchDie("the copy could not be written");
  });
  const std::string gathered_path = JoinPath(dir, absl::StrCat("bench-state-copy-gathered-", ::getpid()));
  const double gathered = MedianSeconds(reps, [&] {
    std::map<std::string, at::Tensor> cloned;
    for (const auto& [name, t] : state) cloned[name] = t.clone();
    auto file = SerializeSafetensors(cloned);
    if (!file.ok() || !WriteFileAtomic(gathered_path, *file).ok()) BenchDie("the gathered copy could not be written");
  });
  const double floor = MedianSeconds(reps, [&] {
    for (const auto& [name, t] : state) (void)t.clone();
  });
  copy.Drop();
  (void)RemoveAll(gathered_path);
  std::printf("host copy of one stage's state: %.0f MB (%d adapters at rank %d, fp32, AdamW's moments) in %s\n",
              bytes / 1e6, adapters, rank, dir.c_str());
  std::printf(
      "as written (from the tensors): %.1f ms (%.2f GB/s); as gathered first: %.1f ms: %.2fx faster; "
      "a plain copy of the bytes: %.1f ms\n",
      streamed * 1e3, bytes / streamed / 1e9, gathered * 1e3, gathered / streamed, floor * 1e3);
  std::printf("under 2%% of any step longer than %.1f s\n", streamed * 50);
  return 0;
}
