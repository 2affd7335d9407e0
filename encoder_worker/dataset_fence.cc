#include "encoder_worker/dataset_fence.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Closes a descriptor on every way out.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  // The descriptor, no longer closed here.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// The canonical path of the file open as `fd`; where /proc is not mounted, `path` resolved by name.
absl::StatusOr<std::string> OpenedPath(int fd, const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(absl::StrCat("/proc/self/fd/", fd).c_str(), buf, sizeof(buf));
  if (n > 0 && static_cast<size_t>(n) < sizeof(buf)) return std::string(buf, static_cast<size_t>(n));
  return RealPath(path);
}

absl::Status OverLimit(const std::string& path, absl::string_view what, absl::string_view size, uint64_t max_bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", what, " is ", size, " bytes, over the limit of ", max_bytes, " bytes"));
}

}  // namespace

bool SomethingAt(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

absl::StatusOr<DatasetFence> DatasetFence::Make(const std::string& dir, const std::vector<std::string>& link_roots) {
  std::vector<std::string> roots;
  auto real = RealPath(dir);
  if (!real.ok()) return Annotate(real.status(), "dataset folder");
  roots.push_back(*std::move(real));
  for (const std::string& root : link_roots) {
    auto r = RealPath(root);
    if (!r.ok()) return Annotate(r.status(), "--follow_links_into");
    roots.push_back(*std::move(r));
  }
  return DatasetFence(dir, std::move(roots));
}

absl::Status DatasetFence::Judge(const std::string& path, const std::string& real) const {
  for (const std::string& root : roots_) {
    if (PathIsInside(root, real)) return absl::OkStatus();
  }
  const std::string opened = roots_.size() > 1
                                 ? absl::StrCat(" and the --follow_links_into folders (",
                                                absl::StrJoin(roots_.begin() + 1, roots_.end(), ", "), ")")
                                 : "";
  return absl::PermissionDeniedError(
      absl::StrCat(path, " resolves to ", real, ", outside the dataset folder ", roots_[0], opened,
                   ": links out of the dataset are not followed (an operator may allow a folder with encoder_worker "
                   "--follow_links_into=",
                   DirName(real), ")"));
}

absl::Status DatasetFence::Check(const std::string& path) const {
  auto real = RealPath(path);
  if (real.ok()) return Judge(path, *real);
  std::error_code ec;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec))) {
    const std::string target = std::filesystem::read_symlink(path, ec).string();
    if (!std::filesystem::exists(path, ec)) {
      return absl::NotFoundError(absl::StrCat(path, " is a dangling link (to ", target, ")"));
    }
  }
  return real.status();
}

absl::StatusOr<int> DatasetFence::OpenJudged(const std::string& path, uint64_t* size) const {
  RETURN_IF_ERROR(Check(path));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot open ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  FdCloser closer(fd);
  ASSIGN_OR_RETURN(const std::string opened, OpenedPath(fd, path));
  RETURN_IF_ERROR(Judge(path, opened));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  *size = static_cast<uint64_t>(st.st_size);
  return closer.release();
}

absl::Status DatasetFence::HashFramed(const std::string& path, Sha256& h) const {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(const int fd, OpenJudged(path, &size));
  FdCloser closer(fd);
  h.UpdateFrameLength(size);
  std::string buffer(1 << 20, '\0');
  uint64_t got = 0;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
    if (got > size) break;
    h.Update(buffer.data(), static_cast<size_t>(n));
  }
  if (got != size) {
    return absl::InvalidArgumentError(absl::StrCat(path, " changed while read (", size, " bytes, then ", got, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DatasetFence::Read(const std::string& path, uint64_t max_bytes,
                                               absl::string_view what) const {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(const int fd, OpenJudged(path, &size));
  FdCloser closer(fd);
  if (size > max_bytes) return OverLimit(path, what, absl::StrCat(size), max_bytes);
  // Up to one byte past the limit: enough to tell a file that grew while read, never more.
  const uint64_t cap = max_bytes == kNoLimit ? kNoLimit : max_bytes + 1;
  std::string out;
  size_t got = 0;
  while (true) {
    if (got == out.size()) {
      const uint64_t grown =
          std::min<uint64_t>(cap, out.empty() ? size + 1 : std::max<uint64_t>(2 * out.size(), 64 << 10));
      if (grown <= got) break;
      out.resize(static_cast<size_t>(grown));
    }
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) return OverLimit(path, what, absl::StrCat("more than ", max_bytes), max_bytes);
  out.resize(got);
  return out;
}

}  // namespace baton
