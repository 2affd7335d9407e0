// Signed-in browsers: a session is a random id (the HttpOnly cookie) → the user's job-service token and a random
// form token every POST must echo (a page of another origin can neither read it nor forge the post). Sessions expire
// after `lifetime` without use. Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <map>
#include <optional>
#include <string>

namespace baton {

struct Session {
  std::string token;  // the job service's bearer token, as the user typed it
  std::string csrf;   // echoed by every form post
  absl::Time last_used;
};

class SessionStore {
 public:
  explicit SessionStore(absl::Duration lifetime = absl::Hours(12)) : lifetime_(lifetime) {}
  // A new session for `token`; returns its id.
  std::string Create(const std::string& token) ABSL_LOCKS_EXCLUDED(mu_);
  // The live session of `id` (`touch`: its use refreshed), or none.
  std::optional<Session> Find(const std::string& id, bool touch = true) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const absl::Duration lifetime_;
  absl::Mutex mu_;
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
};

// `bytes` random bytes from the kernel (getrandom), as lower-case hex.
std::string RandomHex(size_t bytes);

}  // namespace baton
