// The embedded default: a driving process given no --workers (a training run with --stages N, `baton sample --stages
// N`) starts N local stage_worker processes on free loopback ports and stops them on exit (LocalWorkers). Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
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

// Each child runs
//   <binary> --listen 127.0.0.1:0 --threads K --device D [extra_args...]
// and must print one line `LISTENING <host>:<port>` on stdout (flushed) once its gRPC server is up; a child
// started with --metrics prints `metrics: http://<host>:<port>/metrics` before it. Every other line a child
// prints on stdout or stderr is forwarded to our stderr as `[stage i] ...`.
// Children run in their own process group (Ctrl-C reaches only the driving process, which stops them in order)
// and get SIGKILL if the driving process dies (PR_SET_PDEATHSIG).
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
  std::vector<std::string> addresses() const ABSL_LOCKS_EXCLUDED(mu_);
  // "host:port" of each worker's metrics server from its `metrics:` line; "" for a worker that printed none.
  std::vector<std::string> metrics_addresses() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<pid_t> pids() const ABSL_LOCKS_EXCLUDED(mu_);

  // False once stage i has exited (reaps it; waitpid WNOHANG).
  bool Alive(int i) ABSL_LOCKS_EXCLUDED(mu_);
  // "running (pid 123)", "exited with code 3", "killed by signal 9 (Killed)" — for error messages.
  std::string Describe(int i) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends `signal` to stage i's process (failure tests). FailedPrecondition if it has already been reaped.
  absl::Status Kill(int i, int signal) ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces stage i's process (the recovery of a lost or stalled worker): SIGKILL to the old one if
  // it still runs, then the same command line again, waiting up to `timeout` for its LISTENING line. Returns the
  // new address (a new port: the neighbours must be told).
  absl::StatusOr<std::string> Restart(int i, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // SIGTERM to every child's process group, waits up to `grace`, then SIGKILL; reaps all and joins the
  // output readers. Idempotent.
  absl::Status Stop(absl::Duration grace = absl::Seconds(5)) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Child;
  LocalWorkers();
  // Runs on one thread per child: forks and execs it (that thread is the PDEATHSIG parent, and lives until
  // Stop has reaped the child), then forwards its output line by line.
  void ReaderMain(Child* c) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the child with its output on a pipe; returns the pipe's read end, or -1 (c->spawn_error says why).
  int Spawn(Child* c) ABSL_LOCKS_EXCLUDED(mu_);
  // Hands each line of the child's output to HandleLine until its end, or until Stop wakes it (then drains it).
  void ReadOutput(Child* c, int out_fd) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleLine(Child* c, std::string line) ABSL_LOCKS_EXCLUDED(mu_);
  bool ReapLocked(Child& c, bool block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitListening(int i, std::chrono::steady_clock::time_point deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Also guards each Child's start state (Child says which fields).
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Child>> children_;  // index = stage; set in Start, then fixed (Restart renews one)
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);          // set in Start and by Restart
  std::vector<std::string> metrics_addresses_ ABSL_GUARDED_BY(mu_);  // set in Start and by Restart
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton
