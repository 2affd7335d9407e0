#include "stage_driver/local_workers.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/strip.h>
#include <absl/time/clock.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <thread>

#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kListeningPrefix[] = "LISTENING ";
constexpr char kMetricsPrefix[] = "metrics: http://";
constexpr size_t kTailLines = 10;
constexpr size_t kMaxLineBytes = 64 << 10;  // a longer line without '\n' is forwarded in pieces

std::string ErrnoText() { return std::strerror(errno); }

std::string DescribeWaitStatus(int status) {
  if (status == -1) return "exited (status unknown: already reaped elsewhere)";
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("stopped (wait status ", status, ")");
}

void WriteAllToStderr(const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report it
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// "host:port" with a port in 1..65535.
bool ValidAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port = 0;
  return absl::SimpleAtoi(address.substr(colon + 1), &port) && port > 0 && port <= 65535;
}

// Appends the decimal digits of v to buf (async-signal-safe).
size_t FormatInt(int v, char* buf) {
  char tmp[16];
  size_t n = 0;
  unsigned u = v < 0 ? 0u - static_cast<unsigned>(v) : static_cast<unsigned>(v);
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u > 0);
  size_t out = 0;
  if (v < 0) buf[out++] = '-';
  while (n > 0) buf[out++] = tmp[--n];
  return out;
}

}  // namespace

struct LocalWorkers::Child {
  int index = 0;
  std::vector<std::string> argv;
  std::string command;     // argv joined, for messages
  std::thread reader;      // forks the child, then forwards its output until told to stop
  int wake[2] = {-1, -1};  // writing to wake[1] tells the reader to drain and exit

  // Under LocalWorkers::mu_ (an annotation here cannot name another class's mutex).
  bool spawn_done = false;
  std::string spawn_error;
  pid_t pid = -1;
  std::string listening;  // address from the LISTENING line
  std::string metrics;    // host:port from the `metrics: http://host:port/metrics` line
  bool eof = false;       // the child closed its output (usually: it exited)
  std::deque<std::string> tail;
  bool reaped = false;
  int wait_status = 0;
};

namespace {

// In the forked child: only async-signal-safe calls until execv.
[[noreturn]] void ExecChild(char* const* argv, int out_fd, int devnull, pid_t parent, const char* exec_error,
                            size_t exec_error_len) {
  // The "parent" for PDEATHSIG is the forking thread: the reader thread, which outlives the child.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the driving process died before prctl took effect
  ::setpgid(0, 0);
  ::dup2(devnull, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(out_fd, STDERR_FILENO);
  // Nothing else of the driving process reaches the worker (a checkpoint file being written, a TLS folder's lock, a
  // socket): an inherited descriptor would keep a pruned file's space or a dead owner's flock alive with the worker.
  if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
    for (int fd = 3; fd < 65536; ++fd) ::close(fd);  // kernels before 5.9
  }
  // Blocked signals and ignored dispositions survive exec; the worker must see SIGTERM and SIGPIPE normally.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  ::execv(argv[0], argv);
  char buf[512];
  size_t n = exec_error_len < sizeof(buf) - 16 ? exec_error_len : sizeof(buf) - 16;
  std::memcpy(buf, exec_error, n);
  n += FormatInt(errno, buf + n);
  buf[n++] = '\n';
  ssize_t ignored = ::write(STDERR_FILENO, buf, n);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

void LocalWorkers::HandleLine(Child* c, std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  WriteAllToStderr(absl::StrCat("[stage ", c->index, "] ", line, "\n"));
  absl::MutexLock lock(&mu_);
  if (c->listening.empty() && absl::StartsWith(line, kListeningPrefix)) {
    c->listening = std::string(absl::StripAsciiWhitespace(line.substr(std::strlen(kListeningPrefix))));
  }
  absl::string_view metrics = line;
  if (c->metrics.empty() && absl::ConsumePrefix(&metrics, kMetricsPrefix) &&
      absl::ConsumeSuffix(&metrics, "/metrics")) {
    c->metrics = std::string(metrics);
  }
  c->tail.push_back(std::move(line));
  if (c->tail.size() > kTailLines) c->tail.pop_front();
}

void LocalWorkers::ReaderMain(Child* c) {
  const int out = Spawn(c);
  if (out >= 0) ReadOutput(c, out);
}

int LocalWorkers::Spawn(Child* c) {
  auto fail = [&](std::string why) {
    absl::MutexLock lock(&mu_);
    c->spawn_error = std::move(why);
    c->spawn_done = true;
    return -1;
  };
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return fail(absl::StrCat("pipe: ", ErrnoText()));
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return fail(absl::StrCat("open /dev/null: ", ErrnoText()));
  }
  std::vector<char*> argv;
  for (std::string& a : c->argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string exec_error = absl::StrCat("exec ", c->argv[0], " failed: errno ");
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid == 0) ExecChild(argv.data(), out[1], devnull, parent, exec_error.data(), exec_error.size());
  const int fork_errno = errno;
  ::close(out[1]);
  ::close(devnull);
  if (pid < 0) {
    ::close(out[0]);
    errno = fork_errno;
    return fail(absl::StrCat("fork: ", ErrnoText()));
  }
  ::setpgid(pid, pid);  // also here, so a killpg right after Start cannot race the child's own setpgid
  {
    absl::MutexLock lock(&mu_);
    c->pid = pid;
    c->spawn_done = true;
  }
  return out[0];
}

void LocalWorkers::ReadOutput(Child* c, int out_fd) {
  ::fcntl(out_fd, F_SETFL, ::fcntl(out_fd, F_GETFL) | O_NONBLOCK);
  std::string pending;
  bool stopping = false;
  size_t drained_after_stop = 0;  // bounded, in case something in the group still writes after SIGKILL
  char buf[4096];
  while (true) {
    if (out_fd >= 0) {
      ssize_t n = ::read(out_fd, buf, sizeof(buf));
      if (n > 0 && stopping && (drained_after_stop += static_cast<size_t>(n)) > kMaxLineBytes * 16) break;
      if (n > 0) {
        pending.append(buf, static_cast<size_t>(n));
        size_t start = 0, nl;
        while ((nl = pending.find('\n', start)) != std::string::npos) {
          HandleLine(c, pending.substr(start, nl - start));
          start = nl + 1;
        }
        pending.erase(0, start);
        if (pending.size() > kMaxLineBytes) {
          HandleLine(c, std::move(pending));
          pending.clear();
        }
        continue;
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        if (!pending.empty()) {
          HandleLine(c, std::move(pending));
          pending.clear();
        }
        ::close(out_fd);
        out_fd = -1;
        absl::MutexLock lock(&mu_);
        c->eof = true;
        continue;
      }
    }
    // Nothing to read right now: drained everything; exit if Stop asked for it.
    if (stopping) break;
    struct pollfd fds[2] = {{c->wake[0], POLLIN, 0}, {out_fd, POLLIN, 0}};
    int rc = ::poll(fds, 2, -1);  // poll ignores the negative fd after EOF
    if (rc < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) stopping = true;
  }
  if (out_fd >= 0) ::close(out_fd);
}

std::string DefaultStageWorkerBinary() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "stage_worker";
  std::string self(buf, static_cast<size_t>(n));
  size_t slash = self.rfind('/');
  return slash == std::string::npos ? "stage_worker" : self.substr(0, slash + 1) + "stage_worker";
}

LocalWorkers::LocalWorkers() = default;

LocalWorkers::~LocalWorkers() {
  absl::Status s = Stop();
  if (!s.ok()) LogWarning("stopping local stage workers: ", s.message());
}

absl::StatusOr<std::unique_ptr<LocalWorkers>> LocalWorkers::Start(int n, const LocalWorkerOptions& options) {
  if (n <= 0) return absl::InvalidArgumentError(absl::StrCat("local workers: need n > 0 stages, got ", n));
  const std::string binary = options.binary.empty() ? DefaultStageWorkerBinary() : options.binary;
  if (::access(binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage worker binary ", binary, " is not executable: ", ErrnoText(),
                     options.binary.empty() ? " (build stage_worker next to this program, or pass --workers)" : ""));
  }
  std::unique_ptr<LocalWorkers> w(new LocalWorkers());
  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<Child>();
    c->index = i;
    c->argv = {binary,     "--listen",    "127.0.0.1:0", "--threads", absl::StrCat(options.threads),
               "--device", options.device};
    c->argv.insert(c->argv.end(), options.extra_args.begin(), options.extra_args.end());
    if (i < static_cast<int>(options.worker_args.size())) {
      c->argv.insert(c->argv.end(), options.worker_args[i].begin(), options.worker_args[i].end());
    }
    c->command = absl::StrJoin(c->argv, " ");
    if (::pipe2(c->wake, O_CLOEXEC) != 0) {
      absl::Status s = absl::InternalError(absl::StrCat("local workers: pipe: ", ErrnoText()));
      (void)w->Stop();
      return s;
    }
    Child* raw = c.get();
    w->children_.push_back(std::move(c));
    raw->reader = std::thread(&LocalWorkers::ReaderMain, w.get(), raw);
  }
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(options.start_timeout);
  for (int i = 0; i < n; ++i) {
    absl::Status s = w->WaitListening(i, deadline);
    if (!s.ok()) {
      absl::Status stop = w->Stop();
      if (!stop.ok()) LogWarning("stopping local stage workers after a failed start: ", stop.message());
      return s;
    }
  }
  absl::MutexLock lock(&w->mu_);
  for (const auto& c : w->children_) {
    w->addresses_.push_back(c->listening);
    w->metrics_addresses_.push_back(c->metrics);
  }
  return w;
}

absl::Status LocalWorkers::WaitListening(int i, std::chrono::steady_clock::time_point deadline) {
  Child& c = *children_[i];
  absl::MutexLock lock(&mu_);
  auto started = [&] { return !c.listening.empty() || c.eof || !c.spawn_error.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&started), absl::FromChrono(deadline - std::chrono::steady_clock::now()));
  auto last_output = [&] {
    if (c.tail.empty()) return std::string("; it printed nothing");
    return absl::StrCat("; last output:\n  ", absl::StrJoin(c.tail, "\n  "));
  };
  if (!c.spawn_error.empty()) {
    return absl::InternalError(absl::StrCat("stage ", i, ": cannot start `", c.command, "`: ", c.spawn_error));
  }
  if (!c.listening.empty()) {
    if (ValidAddress(c.listening)) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("stage ", i, " (`", c.command, "`) printed a malformed line '",
                                            kListeningPrefix, c.listening, "' (expected LISTENING host:port)"));
  }
  if (c.eof) {
    // Its output closed; give it a moment to exit so the status can be reported.
    const absl::Time reap_deadline = absl::Now() + absl::Seconds(2);
    while (!ReapLocked(c, /*block=*/false) && absl::Now() < reap_deadline) {
      mu_.Unlock();  // for the sleep; `lock` releases it again at the end
      absl::SleepFor(absl::Milliseconds(10));
      mu_.Lock();
    }
    std::string how = c.reaped ? DescribeWaitStatus(c.wait_status) : "closed its output";
    return absl::UnavailableError(
        absl::StrCat("stage ", i, " ", how, " before printing LISTENING; command: `", c.command, "`", last_output()));
  }
  return absl::DeadlineExceededError(absl::StrCat("stage ", i, " (pid ", c.pid,
                                                  ") did not print LISTENING before the start timeout; command: `",
                                                  c.command, "`", last_output()));
}

bool LocalWorkers::ReapLocked(Child& c, bool block) {
  if (c.reaped || c.pid <= 0) return c.reaped;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(c.pid, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == c.pid) {
    c.reaped = true;
    c.wait_status = status;
  } else if (r < 0 && errno == ECHILD) {  // someone else reaped it (e.g. SIGCHLD set to SIG_IGN)
    c.reaped = true;
    c.wait_status = -1;
  }
  return c.reaped;
}

std::vector<std::string> LocalWorkers::addresses() const {
  absl::MutexLock lock(&mu_);
  return addresses_;
}

std::vector<std::string> LocalWorkers::metrics_addresses() const {
  absl::MutexLock lock(&mu_);
  return metrics_addresses_;
}

absl::StatusOr<std::string> LocalWorkers::Restart(int i, absl::Duration timeout) {
  if (i < 0 || i >= static_cast<int>(children_.size())) {
    return absl::OutOfRangeError(absl::StrCat("no stage ", i, " (have ", children_.size(), ")"));
  }
  Child& c = *children_[i];
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return absl::FailedPreconditionError("local workers: Restart after Stop");
    if (c.pid > 0 && !ReapLocked(c, /*block=*/false)) {
      ::killpg(c.pid, SIGKILL);  // a stalled (e.g. SIGSTOPped) process is replaced, not waited for
      ReapLocked(c, /*block=*/true);
    }
  }
  // The old reader drains the dead child's output and exits once woken.
  if (c.wake[1] >= 0) {
    ssize_t ignored = ::write(c.wake[1], "x", 1);
    (void)ignored;
  }
  if (c.reader.joinable()) c.reader.join();
  for (int& fd : c.wake) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  {
    absl::MutexLock lock(&mu_);
    c.spawn_done = false;
    c.spawn_error.clear();
    c.pid = -1;
    c.listening.clear();
    c.metrics.clear();
    c.eof = false;
    c.tail.clear();
    c.reaped = false;
    c.wait_status = 0;
  }
  if (::pipe2(c.wake, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("local workers: pipe: ", ErrnoText()));
  c.reader = std::thread(&LocalWorkers::ReaderMain, this, &c);
  RETURN_IF_ERROR(WaitListening(i, std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout)));
  absl::MutexLock lock(&mu_);
  addresses_[i] = c.listening;
  metrics_addresses_[i] = c.metrics;
  return c.listening;
}

std::vector<pid_t> LocalWorkers::pids() const {
  absl::MutexLock lock(&mu_);
  std::vector<pid_t> out;
  for (const auto& c : children_) out.push_back(c->pid);
  return out;
}

bool LocalWorkers::Alive(int i) {
  if (i < 0 || i >= static_cast<int>(children_.size())) return false;
  absl::MutexLock lock(&mu_);
  Child& c = *children_[i];
  return c.pid > 0 && !ReapLocked(c, /*block=*/false);
}

std::string LocalWorkers::Describe(int i) {
  if (i < 0 || i >= static_cast<int>(children_.size())) return absl::StrCat("no stage ", i);
  absl::MutexLock lock(&mu_);
  Child& c = *children_[i];
  if (c.pid <= 0) return "not started";
  if (!ReapLocked(c, /*block=*/false)) return absl::StrCat("running (pid ", c.pid, ")");
  return DescribeWaitStatus(c.wait_status);
}

absl::Status LocalWorkers::Kill(int i, int signal) {
  if (i < 0 || i >= static_cast<int>(children_.size())) {
    return absl::OutOfRangeError(absl::StrCat("no stage ", i, " (have ", children_.size(), ")"));
  }
  absl::MutexLock lock(&mu_);
  Child& c = *children_[i];
  if (c.pid <= 0 || ReapLocked(c, /*block=*/false)) {
    return absl::FailedPreconditionError(absl::StrCat("stage ", i, " is not running (pid ", c.pid, ")"));
  }
  if (::kill(c.pid, signal) != 0) {
    return absl::InternalError(absl::StrCat("kill(stage ", i, " pid ", c.pid, ", ", signal, "): ", ErrnoText()));
  }
  return absl::OkStatus();
}

absl::Status LocalWorkers::Stop(absl::Duration grace) {
  std::vector<std::string> errors;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return absl::OkStatus();
    stopped_ = true;
    auto spawned = [&] {
      for (const auto& c : children_) {
        if (!c->spawn_done) return false;
      }
      return true;
    };
    mu_.Await(absl::Condition(&spawned));
    for (auto& c : children_) {
      if (c->pid > 0 && !ReapLocked(*c, false) && ::killpg(c->pid, SIGTERM) != 0 && errno != ESRCH) {
        errors.push_back(absl::StrCat("SIGTERM stage ", c->index, " (pid ", c->pid, "): ", ErrnoText()));
      }
    }
    const absl::Time deadline = absl::Now() + grace;
    while (true) {
      bool all = true;
      for (auto& c : children_) all = (c->pid <= 0 || ReapLocked(*c, false)) && all;
      if (all || absl::Now() >= deadline) break;
      mu_.Unlock();  // for the sleep; `lock` releases it again at the end
      absl::SleepFor(absl::Milliseconds(10));
      mu_.Lock();
    }
    for (auto& c : children_) {
      if (c->pid <= 0) continue;
      if (!ReapLocked(*c, false)) {
        LogWarning("stage ", c->index, " (pid ", c->pid, ") ignored SIGTERM for ", absl::FormatDuration(grace),
                   "; sending SIGKILL");
        ::killpg(c->pid, SIGKILL);
        ReapLocked(*c, /*block=*/true);
      }
    }
  }
  for (auto& c : children_) {
    if (c->wake[1] >= 0) {
      ssize_t ignored = ::write(c->wake[1], "x", 1);
      (void)ignored;
    }
    if (c->reader.joinable()) c->reader.join();
    for (int& fd : c->wake) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrJoin(errors, "; "));
}

}  // namespace baton
