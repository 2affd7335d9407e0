// A stage's copy of its adapters and optimizer state in host shared memory (/dev/shm): rewritten after every update
// and load, it outlives a killed worker, so the worker that takes the stage's place on the same host takes the run's
// state back and the run loses one step, not those since the coordinator last read the state (state_every).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace baton {

// The folder of the copies: $BATON_STATE_COPY_DIR, else /dev/shm.
std::string HostStateCopyDir();

// Not thread-safe: the StageRunner calls it under its run lock.
class HostStateCopy {
 public:
  using Tensors = std::map<std::string, at::Tensor>;

  HostStateCopy() = default;
  HostStateCopy(const HostStateCopy&) = delete;
  HostStateCopy& operator=(const HostStateCopy&) = delete;
  ~HostStateCopy() { Drop(); }  // a worker that exits in order leaves nothing behind (a killed one leaves its copy)

  // Copies from now on for stage `stage` of run `run_id` of job `job_id` (the names a restarted worker is configured
  // with: the same file). Copies of the same job and stage from other runs whose writer is gone (a coordinator killed
  // with its workers) are deleted, and any copy whose writer is gone and that nobody took for 30 minutes (its run
  // failed or was abandoned).
  void Use(const std::string& job_id, const std::string& run_id, int stage);
  // No copies from now on; the current one deleted (the run ended, or the stage was built for another).
  void Drop();
  bool active() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  int64_t writes() const { return writes_; }  // since Use

  // The copy replaced by `state` (adapters and optimizer state, "__step__" included; any device, written from the
  // tensors' own memory when on the CPU), atomically: a kill during the write leaves the previous copy. The seconds
  // it took.
  absl::StatusOr<double> Write(const Tensors& state);
  // The copy, when there is one holding `steps` optimizer steps (nullopt otherwise: none, another step count, or
  // unreadable, which is logged).
  std::optional<Tensors> Take(int64_t steps) const;

 private:
  void DeleteOrphans(const std::string& prefix, const std::string& suffix) const;
  std::string SparePath() const { return path_ + ".spare"; }

  std::string path_;
  int64_t writes_ = 0;
};

}  // namespace baton
