#include "core/util/files.h"

#include <absl/strings/str_cat.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/util/status.h"
#include "core/util/write_fault.h"

namespace baton {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return ErrnoError("cannot read", path);
  return ss.str();
}

absl::StatusOr<std::string> ReadFileIfExists(const std::string& path) {
  if (!PathExists(path)) return std::string();
  return ReadFile(path);
}

absl::StatusOr<std::string> ReadFileBounded(const std::string& path, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    std::string msg = absl::StrCat("cannot open ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  std::string out;
  absl::Status status;
  if (::fstat(fd, &st) != 0) {
    status = ErrnoError("cannot stat", path);
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, " is ", st.st_size, " bytes; the limit for this file is ", max_bytes));
  } else {
    out.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    out.resize(got);  // a file that shrank while read is simply shorter
  }
  ::close(fd);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::string> RealPath(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) {
    const int err = errno;
    std::string msg = absl::StrCat("cannot resolve ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  std::string out(resolved);
  std::free(resolved);
  return out;
}

bool PathIsInside(const std::string& root, const std::string& path) {
  if (root == "/") return true;
  return path == root ||
         (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

absl::StatusOr<std::string> ResolveForWriteInsideRoot(const std::string& root, const std::string& path,
                                                      absl::string_view what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec).lexically_normal();
  if (ec) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": ", ec.message()));
  std::filesystem::path rest;
  while (!std::filesystem::exists(std::filesystem::symlink_status(p, ec)) && p.has_relative_path()) {
    rest = rest.empty() ? p.filename() : p.filename() / rest;
    p = p.parent_path();
  }
  auto existing = ResolveInsideRoot(root, p.string(), what);
  if (!existing.ok() && existing.status().code() == absl::StatusCode::kPermissionDenied) {
    // Name the path asked for, not the ancestor that decided it.
    auto real_root = RealPath(root.empty() ? "." : root);
    return absl::PermissionDeniedError(
        absl::StrCat(what, " ", path, " is outside the allowed root ", real_root.ok() ? *real_root : root));
  }
  if (!existing.ok()) return existing.status();
  return rest.empty() ? *existing : JoinPath(*existing, rest.string());
}

absl::StatusOr<std::string> CommonRoot(const std::vector<std::string>& paths) {
  std::string common;
  bool first = true;
  for (const std::string& p : paths) {
    if (p.empty()) continue;
    ASSIGN_OR_RETURN(std::string real, RealPath(p));
    if (!IsDirectory(real)) real = DirName(real);
    if (first) {
      common = real;
      first = false;
    }
    while (!PathIsInside(common, real)) common = DirName(common);
  }
  if (first) return absl::InvalidArgumentError("CommonRoot: no paths");
  return common;
}

absl::StatusOr<std::string> ResolveInsideRoot(const std::string& root, const std::string& path,
                                              absl::string_view what) {
  auto real_root = RealPath(root.empty() ? "." : root);
  if (!real_root.ok()) return Annotate(real_root.status(), "the allowed root");
  auto real = RealPath(path);
  if (!real.ok()) return Annotate(real.status(), what);
  if (!PathIsInside(*real_root, *real)) {
    const std::string resolved = *real == path ? "" : absl::StrCat(" (resolves to ", *real, ")");
    return absl::PermissionDeniedError(
        absl::StrCat(what, " ", path, resolved, " is outside the allowed root ", *real_root));
  }
  return real;
}

absl::Status FsyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open for fsync", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync failed for", path);
  return absl::OkStatus();
}

std::string DirName(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

absl::Status RenameDurable(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoError("cannot rename to", to);
  return FsyncPath(DirName(to));
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view data) {
  RETURN_IF_ERROR(WriteFault(path));  // tests: a full disk on demand (write_fault.h)
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoError("cannot write", tmp);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoError("fsync failed for", tmp);
  }
  ::close(fd);
  absl::Status renamed = RenameDurable(tmp, path);
  if (!renamed.ok()) ::unlink(tmp.c_str());  // nothing left behind (a folder in the way, a vanished parent)
  return renamed;
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create directory ", path, ": ", ec.message()));
  return absl::OkStatus();
}

// The error_code overloads: a name too long, a link loop or a folder without search permission is "no", never an
// exception out of a scan.
bool PathExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}
bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

std::string JoinPath(absl::string_view a, absl::string_view b) {
  if (a.empty()) return std::string(b);
  if (a.back() == '/') return absl::StrCat(a, b);
  return absl::StrCat(a, "/", b);
}

namespace {
int RemoveOne(const char* path, const struct stat*, int type, struct FTW*) {
  return (type == FTW_DP ? ::rmdir(path) : ::unlink(path)) == 0 || errno == ENOENT ? 0 : -1;
}
}  // namespace

// nftw, depth first, never following links; not std::filesystem::remove_all: libtorch 2.11 exports a std::filesystem
// of its own whose remove_all jumped to a null pointer in a coordinator on the first GPU machine (local_tls.cc), and
// the checkpoints remove folders at the last step, where a coordinator there exited -11 intermittently.
absl::Status RemoveAll(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
  }
  if (::nftw(path.c_str(), RemoveOne, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakePrivateTempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = JoinPath(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", prefix + "XXXXXX");
  if (::mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a temporary folder ", dir, ": ", std::strerror(errno)));
  }
  return dir;
}

}  // namespace baton
