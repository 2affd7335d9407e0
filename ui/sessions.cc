#include "ui/sessions.h"

#include <absl/strings/escaping.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/util/log.h"

namespace baton {

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      LogError("getrandom failed: no randomness for session ids");
      std::abort();  // a predictable session id would let anyone in
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(raw);
}

std::string SessionStore::Create(const std::string& token) {
  const std::string id = RandomHex(32);
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (auto it = sessions_.begin(); it != sessions_.end();) {  // expired ones go
    it = now - it->second.last_used > lifetime_ ? sessions_.erase(it) : std::next(it);
  }
  sessions_[id] = Session{token, RandomHex(16), now};
  return id;
}

std::optional<Session> SessionStore::Find(const std::string& id, bool touch) {
  if (id.empty()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  const absl::Time now = absl::Now();
  if (now - it->second.last_used > lifetime_) {
    sessions_.erase(it);
    return std::nullopt;
  }
  if (touch) it->second.last_used = now;
  return it->second;
}

void SessionStore::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(id);
}

}  // namespace baton
