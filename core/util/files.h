// File helpers: whole-file reads and crash-safe writes (temporary file, fsync, rename, fsync of the
// directory), so a reader never sees a half-written file under the final name.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

absl::StatusOr<std::string> ReadFile(const std::string& path);
// ReadFile for an optional file: "" when nothing exists at `path`.
absl::StatusOr<std::string> ReadFileIfExists(const std::string& path);
// Reads a regular file of at most `max_bytes`; anything else (a device such as /dev/zero, a FIFO, a directory,
// a bigger file) fails at once, before a byte is read, with a message naming the path and the limit.
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, uint64_t max_bytes);

// The canonical absolute path (symlinks resolved) of `path`, which must exist.
absl::StatusOr<std::string> RealPath(const std::string& path);
// `path` resolved (symlinks included) when it lies inside `root` (also resolved), else PERMISSION_DENIED naming
// both; `what` says whose path it is ("model path"). Symlinks that point out of `root` are refused too.
absl::StatusOr<std::string> ResolveInsideRoot(const std::string& root, const std::string& path, absl::string_view what);
// Like ResolveInsideRoot for a path that may not exist yet (a folder to create): its deepest existing ancestor is
// resolved and the rest appended; PERMISSION_DENIED when the result is outside `root`.
absl::StatusOr<std::string> ResolveForWriteInsideRoot(const std::string& root, const std::string& path,
                                                      absl::string_view what);
// The deepest directory holding every one of `paths` (resolved; a file counts as its directory). Empty entries
// are skipped. Used to give embedded workers a --model_root that covers exactly the job's model files.
absl::StatusOr<std::string> CommonRoot(const std::vector<std::string>& paths);
// True when canonical `path` is `root` or below it (both canonical).
bool PathIsInside(const std::string& root, const std::string& path);

// Writes `data` to `path` atomically: path.tmp.<pid> → fsync → rename → fsync(dir).
absl::Status WriteFileAtomic(const std::string& path, absl::string_view data);

// Renames `from` to `to` and fsyncs the parent directory of `to`.
absl::Status RenameDurable(const std::string& from, const std::string& to);

absl::Status FsyncPath(const std::string& path);
absl::Status MakeDirs(const std::string& path);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
std::string JoinPath(absl::string_view a, absl::string_view b);
std::string DirName(const std::string& path);
// Removes a directory tree; missing is fine.
absl::Status RemoveAll(const std::string& path);
// A new private (0700) folder $TMPDIR/<prefix>XXXXXX (TMPDIR unset or empty: /tmp); the caller removes it.
absl::StatusOr<std::string> MakePrivateTempDir(const std::string& prefix);

}  // namespace baton
