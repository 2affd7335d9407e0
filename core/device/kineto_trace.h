// libtorch's Kineto profiler over a span of work: the CPU operators of the thread that started it and, on CUDA,
// every kernel, copy and runtime call, saved as a Chrome trace (chrome://tracing, Perfetto; bench/trace_summary.py
// summarises one). A stage worker traces steps when the environment asks (StageTraceWindow), each step in a file of
// its own (steps run on whichever gRPC thread serves them), so the GPU check sees inside the coordinator rows.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>

#include <cstdint>
#include <string>
#include <thread>

namespace baton {

// One at a time per process. libtorch's profiler state is the starting thread's: Save (and the destructor) on another
// thread stops nothing and says so.
class KinetoTrace {
 public:
  explicit KinetoTrace(at::Device device);  // starts tracing
  ~KinetoTrace();                           // stops it, saving nothing, if Save was not called
  KinetoTrace(const KinetoTrace&) = delete;
  KinetoTrace& operator=(const KinetoTrace&) = delete;
  // Stops tracing and writes the trace to `path`.
  absl::Status Save(const std::string& path);

 private:
  bool running_ = false;
  std::thread::id thread_;
};

// Which steps a stage worker traces: $BATON_KINETO_TRACE is a path prefix (step n of stage i goes to
// <prefix>_stage<i>_step<n>_trace.json); $BATON_KINETO_TRACE_STEPS "FIRST,COUNT" (0-based; default "3,2": after the
// GPU check's two checked steps and its warm-up). Unset: no step is traced.
struct StageTraceWindow {
  static StageTraceWindow FromEnvironment();
  bool active() const { return !prefix.empty(); }
  bool Covers(int64_t step) const { return active() && step >= first && step < first + count; }
  std::string Path(int stage, int64_t step) const;

  std::string prefix;
  int64_t first = 3, count = 2;
};

}  // namespace baton
