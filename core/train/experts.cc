#include "core/train/experts.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_cat.h>

#include "core/model/wan_weights.h"
#include "core/train/timesteps.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

// `job` retargeted at one expert: its transformer folder and its side [lo, hi] of the boundary.
absl::StatusOr<JobConfig> ExpertJob(const JobConfig& job, WanExpert expert, double lo, double hi) {
  JobConfig e = job;
  ASSIGN_OR_RETURN(e.model, WanExpertDir(job.model, expert));
  e.expert.clear();
  e.timesteps.min = lo;
  e.timesteps.max = hi;
  return e;
}

absl::Status CheckBothExperts(const JobConfig& job) {
  if (job.timesteps.min != 0.0 || job.timesteps.max != 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        job.source, ": expert: both sets each expert's timestep range from the boundary; drop timesteps min/max"));
  }
  const std::string& shift = job.timesteps.shift;
  if (shift == "flux2_empirical" || shift == "flux1_linear") {
    return absl::InvalidArgumentError(absl::StrCat(job.source,
                                                   ": expert: both draws each step's expert before its "
                                                   "samples, so its shift cannot depend on their size: use a number"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> DescribeExpertRuns(const std::vector<ExpertRun>& runs, int64_t steps) {
  std::vector<std::string> lines;
  if (runs.size() == 2) {
    lines.push_back(
        absl::StrCat("experts: each step's expert is drawn from the job's timesteps against boundary_ratio ",
                     runs[0].job.timesteps.min,
                     "; each expert has its own LoRA and optimizer, so the two runs are independent and "
                     "run one after the other, each loading its expert's weights once (never both experts at a time)"));
  }
  for (const ExpertRun& run : runs) {
    if (run.name.empty()) continue;
    lines.push_back(absl::StrCat("expert ", run.name, ": ", run.steps, " of ", steps, " steps, timesteps [",
                                 run.job.timesteps.min, ", ", run.job.timesteps.max, "], ", run.job.model, " -> ",
                                 run.output_dir));
  }
  return lines;
}

bool StepTrainsHighNoiseExpert(const JobConfig& job, int64_t step, double boundary) {
  auto gen = at::detail::createCPUGenerator(MixSeed(MixSeed(job.seed, 0xe4be47), static_cast<uint64_t>(step)));
  return SampleTimesteps(job.timesteps, 1, /*image_tokens=*/0, gen).item<double>() >= boundary;
}

absl::StatusOr<std::vector<ExpertRun>> PlanExpertRuns(const JobConfig& job, const std::string& output_dir,
                                                      int64_t steps) {
  if (job.expert.empty()) return std::vector<ExpertRun>{{"", job, output_dir, steps}};
  ASSIGN_OR_RETURN(WanExperts experts, DescribeWanExperts(job.model));
  if (!experts.two_experts || experts.boundary_ratio <= 0.0 || experts.boundary_ratio >= 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        job.source, ": expert: ", job.expert,
        " needs a Wan 2.2 A14B folder with two experts (transformer/ + "
        "transformer_2/, or high_noise_model/ + low_noise_model/) and model_index.json's boundary_ratio in (0, 1); ",
        job.model, experts.two_experts ? " has no usable boundary_ratio" : " holds one transformer"));
  }
  const double b = experts.boundary_ratio;
  ASSIGN_OR_RETURN(JobConfig high, ExpertJob(job, WanExpert::kHighNoise, b, 1.0));
  ASSIGN_OR_RETURN(JobConfig low, ExpertJob(job, WanExpert::kLowNoise, 0.0, b));
  if (job.expert == "high") return std::vector<ExpertRun>{{"high_noise", high, output_dir, steps}};
  if (job.expert == "low") return std::vector<ExpertRun>{{"low_noise", low, output_dir, steps}};
  RETURN_IF_ERROR(CheckBothExperts(job));
  int64_t high_steps = 0;
  for (int64_t s = 0; s < steps; ++s) high_steps += StepTrainsHighNoiseExpert(job, s, b) ? 1 : 0;
  high.steps = high_steps;
  low.steps = steps - high_steps;
  low.encode = EncodeConfig();  // the cache is built once, before the first run
  return std::vector<ExpertRun>{{"high_noise", high, JoinPath(output_dir, "high_noise"), high_steps},
                                {"low_noise", low, JoinPath(output_dir, "low_noise"), steps - high_steps}};
}

}  // namespace baton
