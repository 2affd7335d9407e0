// The embedded default: `coordinator --stages N` without --workers starts N local stage_worker processes
// on free loopback ports and stops them on exit. Each child runs
//   <binary> --listen 127.0.0.1:0 --threads K --device D [extra_args...]
// and must print one line `LISTENING <host>:<port>` on stdout (flushed) once its gRPC server is up; a child
// started with --metrics prints `metrics: http://<host>:<port>/metrics` before it. Every other line a child
// prints on stdout or stderr is forwarded to our stderr as `[stage i] ...`.
// Children run in their own process group (Ctrl-C reaches only the coordinator, which stops them in order)
// and get SIGKILL if the coordinator dies (PR_SET_PDEATHSIG). Thread-safe.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/time/time.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace baton {

// "stage_worker" in the directory of /proc/self/exe (the build puts every binary in one bin/ folder).
std::string DefaultStageWorkerBinary();

struct LocalWorkerOptions {
  std::string binary;  // path to stage_worker; empty = DefaultStageWorkerBinary()
  int threads = 1;     // --threads for each worker
  std::string device = "cpu";
  absl::Duration start_timeout = absl::Seconds(30);   // for all N to print LISTENING
  std::vector<std::string> extra_args;                // appended to every worker's command line
  std::vector<std::vector<std::string>> worker_args;  // [i]: appended to worker i's command line only
};

class LocalWorkers {
 public:
  // Starts n workers concurrently and waits until each has printed LISTENING. If one exits first or the
  // timeout passes, returns an error naming its stage index, command line, exit status and last output
  // lines, after stopping every child already started.
  static absl::StatusOr<std::unique_ptr<LocalWorkers>> Start(int n, const LocalWorkerOptions& options);
  ~LocalWorkers();  // Stop()

  LocalWorkers(const LocalWorkers&) = delete;
  LocalWorkers& operator=(const LocalWorkers&) = delete;

  int size() const { return static_cast<int>(children_.size()); }
  // "host:port" per worker as it printed it; index = stage.
  std::vector<std::string> addresses() const;
  // "host:port" of each worker's metrics server from its `metrics:` line; "" for a worker that printed none.
  std::vector<std::string> metrics_addresses() const;
  std::vector<pid_t> pids() const;

  // False once stage i has exited (reaps it; waitpid WNOHANG).
  bool Alive(int i);
  // "running (pid 123)", "exited with code 3", "killed by signal 9 (Killed)" — for error messages.
  std::string Describe(int i);
  // Sends `signal` to stage i's process (failure tests). FailedPrecondition if it has already been reaped.
  absl::Status Kill(int i, int signal);
  // Replaces stage i's process (the coordinator's recovery of a lost or stalled worker): SIGKILL to the old one if
  // it still runs, then the same command line again, waiting up to `timeout` for its LISTENING line. Returns the
  // new address (a new port: the neighbours must be told).
  absl::StatusOr<std::string> Restart(int i, absl::Duration timeout);
  // SIGTERM to every child's process group, waits up to `grace`, then SIGKILL; reaps all and joins the
  // output readers. Idempotent.
  absl::Status Stop(absl::Duration grace = absl::Seconds(5));

 private:
  struct Child;
  LocalWorkers();
  // Runs on one thread per child: forks and execs it (that thread is the PDEATHSIG parent, and lives until
  // Stop has reaped the child), then forwards its output line by line.
  void ReaderMain(Child* c);
  void HandleLine(Child* c, std::string line);
  bool ReapLocked(Child& c, bool block);  // requires mu_
  absl::Status WaitListening(int i, std::chrono::steady_clock::time_point deadline);

  // std::mutex rather than absl::Mutex: Debian's Abseil is not TSan-instrumented, so TSan builds would
  // report false races on everything absl::Mutex guards.
  mutable std::mutex mu_;
  std::condition_variable cv_;                    // a child's start state changed (spawned, LISTENING, output closed)
  std::vector<std::unique_ptr<Child>> children_;  // index = stage; set in Start, then fixed (Restart renews one)
  std::vector<std::string> addresses_;            // guarded by mu_; set in Start and by Restart
  std::vector<std::string> metrics_addresses_;    // guarded by mu_; set in Start and by Restart
  bool stopped_ = false;                          // guarded by mu_
};

}  // namespace baton
