// File helpers: whole-file reads and crash-safe writes (temporary file, fsync, rename, fsync of the
// directory), so a reader never sees a half-written file under the final name.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <string>

namespace baton {

absl::StatusOr<std::string> ReadFile(const std::string& path);

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

}  // namespace baton
