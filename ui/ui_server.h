// `baton ui`: the browser view of a job service. Every page and action is a call to the job service made with the
// signed-in user's token (job_client.h); the view keeps no job state of its own. Sign-in checks the token against
// the job service (or, when it runs without TLS and so without a token, against the view's own --token-file) and
// sets an HttpOnly, SameSite=Strict session cookie; every POST also carries the session's form token and, when the
// browser says where it comes from, an Origin equal to the view's own. Files come only through the job service's
// Download (a job's LoRA, checkpoints and samples), so no path reaches the disk.
#pragma once

#include <memory>
#include <string>

#include "ui/http_server.h"
#include "ui/job_client.h"
#include "ui/sessions.h"

namespace baton {

struct UiOptions {
  // Without TLS the job service has no token: sign-in then compares with this one (the view's --token-file).
  std::string local_token;
  // Where relative paths in submitted jobs are read from (as `baton submit` sends its working directory).
  std::string working_dir;
  size_t max_job_bytes = 256 << 10;  // the job service's kMaxJobFileBytes
};

class UiServer {
 public:
  UiServer(JobClient* jobs, UiOptions options) : jobs_(jobs), options_(std::move(options)) {}
  // Answers one request (HttpServer's handler; any thread).
  void Handle(const HttpRequest& req, HttpResponder& out);

 private:
  struct Call;  // one request: its session, once signed in
  void Route(Call& call);
  // Answers a failed call with an error page; one the job service refused as unauthenticated (its token changed)
  // also ends the session and sends the browser to sign in again.
  void Fail(Call& call, const absl::Status& status);
  void Login(Call& call);
  void Logout(Call& call);
  void JobsPage(Call& call);
  void JobsFragment(Call& call);
  void Submit(Call& call);
  void JobRoute(Call& call, const std::string& job_id, const std::string& rest);
  void JobPage(Call& call, const std::string& job_id);
  // A live part of a job's page alone: "panel", "gallery" or "details".
  void Part(Call& call, const std::string& job_id, const std::string& part);
  void Version(Call& call, const std::string& job_id);
  void Action(Call& call, const std::string& job_id, const std::string& action);
  void LoraFile(Call& call, const std::string& job_id);
  void SampleFile(Call& call, const std::string& job_id, const std::string& step, const std::string& file);

  JobClient* const jobs_;
  const UiOptions options_;
  SessionStore sessions_;
};

}  // namespace baton
