#include "core/device/kineto_trace.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <vector>

namespace baton {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

torch::profiler::impl::ProfilerConfig Config() {
  return torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::KINETO);
}

}  // namespace

KinetoTrace::KinetoTrace(at::Device device) {
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  prof::prepareProfiler(Config(), activities);
  prof::enableProfiler(Config(), activities);
  running_ = true;
  thread_ = std::this_thread::get_id();
}

KinetoTrace::~KinetoTrace() {
  if (running_ && std::this_thread::get_id() == thread_) prof::disableProfiler();
}

absl::Status KinetoTrace::Save(const std::string& path) {
  if (!running_) return absl::FailedPreconditionError("the trace was saved already");
  if (std::this_thread::get_id() != thread_) {
    return absl::FailedPreconditionError("a trace is saved on the thread that started it");
  }
  running_ = false;
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  if (!result) return absl::InternalError("the profiler returned no result");
  result->save(path);
  return absl::OkStatus();
}

StageTraceWindow StageTraceWindow::FromEnvironment() {
  StageTraceWindow w;
  if (const char* prefix = std::getenv("BATON_KINETO_TRACE")) w.prefix = prefix;
  if (const char* steps = std::getenv("BATON_KINETO_TRACE_STEPS")) {
    const std::vector<std::string> parts = absl::StrSplit(steps, ',');
    int64_t first = 0, count = 0;
    if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &first) && absl::SimpleAtoi(parts[1], &count) && first >= 0 &&
        count > 0) {
      w.first = first;
      w.count = count;
    }
  }
  return w;
}

std::string StageTraceWindow::Path(int stage, int64_t step) const {
  return absl::StrCat(prefix, "_stage", stage, "_step", step, "_trace.json");
}

}  // namespace baton
