// Every synchronization between the host and a CUDA device that the calling thread makes while a SyncWatch lives,
// with where it was made: c10's sync debug mode (Python's torch.cuda.set_sync_debug_mode; process-wide, so other
// threads' syncs print c10's warning meanwhile) set to warn, and this thread's warnings caught with a backtrace.
// ReadBack, a step's one intended read, is not counted (ReadBackCount is). A CPU run makes none; without CUDA in the
// build nothing is watched. For tests and the GPU check, one watch at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace baton {

class SyncWatch {
 public:
  SyncWatch();
  ~SyncWatch();
  SyncWatch(const SyncWatch&) = delete;
  SyncWatch& operator=(const SyncWatch&) = delete;

  // One entry per synchronization so far: the first frames of its backtrace.
  std::vector<std::string> sites() const;

 private:
  struct State;  // the handler and the mode it replaced, in CUDA builds
  std::unique_ptr<State> state_;
};

// While one lives, synchronizations are not reported (ReadBack's own). Writes the process-wide mode only while a
// SyncWatch has set it (tests, the GPU check), one thread at a time.
class IntendedSync {
 public:
  IntendedSync();
  ~IntendedSync();
  IntendedSync(const IntendedSync&) = delete;
  IntendedSync& operator=(const IntendedSync&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace baton
