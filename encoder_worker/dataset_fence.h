// Which files a dataset scan may read. A job names a dataset folder, and the job service's --data_root judges that
// folder; a symlink inside it may point anywhere (`p.txt -> /etc/passwd`). So every file the scan and the encode read
// -- image, caption, clip, frame, conditioning image -- must resolve, links followed on every part of its path,
// inside the dataset folder or inside a folder the operator opened to links (encoder_worker --follow_links_into).
// Links that stay inside are followed as before.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/util/sha256.h"

namespace baton {

// True when anything is at `path`, a dangling link included (lstat, not stat).
bool SomethingAt(const std::string& path);

class DatasetFence {
 public:
  static constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

  // `dir` (the dataset folder) and each of `link_roots` are resolved now; a missing one is NOT_FOUND naming it.
  static absl::StatusOr<DatasetFence> Make(const std::string& dir, const std::vector<std::string>& link_roots = {});

  // OK when `path` resolves inside the fence. NOT_FOUND when nothing is there or it is a dangling link (naming its
  // target); PERMISSION_DENIED naming `path`, what it resolves to, the dataset folder and the flag that allows it.
  absl::Status Check(const std::string& path) const;

  // The regular file at `path`, judged as Check does both by name (so nothing outside is even opened) and as opened
  // (/proc/self/fd: a link swapped in between is caught), at most `max_bytes` long. Never holds more than
  // max_bytes + 1 bytes: a bigger file is refused by its size before a byte is read, one that grows while read (or
  // whose size stat does not tell) by the extra byte. INVALID_ARGUMENT "PATH: <what> is N bytes, over the limit of
  // M bytes" or "PATH is not a regular file".
  absl::StatusOr<std::string> Read(const std::string& path, uint64_t max_bytes = kNoLimit,
                                   absl::string_view what = "file") const;
  // The regular file at `path`, judged as Read judges it, into `h` as h.UpdateFramed(Read(path)) would put it, read a
  // MiB at a time (a video of any size costs no memory). INVALID_ARGUMENT when it changes size while read.
  absl::Status HashFramed(const std::string& path, Sha256& h) const;

  const std::string& dir() const { return dir_; }

 private:
  DatasetFence(std::string dir, std::vector<std::string> roots) : dir_(std::move(dir)), roots_(std::move(roots)) {}
  // OK when canonical `real` lies inside one of roots_; else PERMISSION_DENIED naming `path`.
  absl::Status Judge(const std::string& path, const std::string& real) const;
  // `path` checked, opened and judged as opened: its descriptor (the caller's to close) and, when a regular file, its
  // size.
  absl::StatusOr<int> OpenJudged(const std::string& path, uint64_t* size) const;

  std::string dir_;                 // the dataset folder as given, for messages
  std::vector<std::string> roots_;  // canonical: the dataset folder, then the operator's --follow_links_into
};

}  // namespace baton
