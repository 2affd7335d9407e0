#include "ui/ui_server.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "rpc/tls.h"
#include "ui/assets.h"
#include "ui/downloads.h"
#include "ui/gallery.h"
#include "ui/html.h"
#include "ui/job_page.h"
#include "ui/jobs_page.h"

namespace baton {
namespace {

constexpr char kCookie[] = "baton_session";

HttpResponse Html(int status, std::string body) { return {status, "text/html; charset=utf-8", {}, std::move(body)}; }
HttpResponse Text(int status, std::string text) { return {status, "text/plain; charset=utf-8", {}, std::move(text)}; }
HttpResponse Redirect(const std::string& to) { return {303, "text/plain; charset=utf-8", {{"Location", to}}, ""}; }

int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    default:
      return 502;  // the job service did not answer as it should
  }
}

// `retry`: the job service did not answer a page's GET; the page says so and loads itself again every 2 s (app.js),
// so that it shows what was asked for once the service is back.
HttpResponse ErrorPage(const absl::Status& s, const std::string& csrf, bool retry = false) {
  const int status = HttpStatusOf(s);
  retry = retry && status == 502;
  return Html(status,
              HtmlPage(retry ? "The job service does not answer" : "Error",
                       absl::StrCat(retry ? "<h1>The job service does not answer</h1>" : "<h1>Refused</h1>",
                                    "<pre class=\"error\" id=\"error\"", retry ? " data-retry" : "", ">",
                                    HtmlEscape(std::string(s.message())), "</pre>",
                                    retry ? "<p>Trying again every 2 s: this page loads by itself when it is back.</p>"
                                          : "<p><a href=\"/\">Back to the jobs</a></p>"),
                       csrf));
}

// A "." or ".." segment anywhere: refused before routing (the view serves no path of the disk, and says so).
bool HasDotSegment(const std::string& path) {
  for (absl::string_view seg : absl::StrSplit(path, absl::ByAnyChar("/\\"))) {
    if (seg == ".." || seg == ".") return true;
  }
  return false;
}

bool IsJobId(const std::string& id) {
  static const std::regex kJobId("[0-9]{1,18}");
  return std::regex_match(id, kJobId);
}

double SmoothingOf(const HttpRequest& req) {
  double v = 0.6;
  if (!absl::SimpleAtod(req.Param("smoothing"), &v) || !(v >= 0)) v = 0.6;
  return std::min(v, 0.99);
}

std::string SessionCookie(const std::string& id, bool expire) {
  return absl::StrCat(kCookie, "=", expire ? "" : id, "; Path=/; HttpOnly; SameSite=Strict",
                      expire ? "; Max-Age=0" : "");
}

// Where the browser says a post comes from, if it says: it must be this view (scheme and host as it was reached).
bool SameOrigin(const HttpRequest& req) {
  const std::string origin = req.Header("origin");
  if (origin.empty()) return true;  // older browsers omit it on same-origin posts; the form token still holds
  return origin == absl::StrCat("http://", req.Header("host")) ||
         origin == absl::StrCat("https://", req.Header("host"));
}

}  // namespace

struct UiServer::Call {
  const HttpRequest& req;
  HttpResponder& out;
  std::string session_id;
  std::optional<Session> session;
  const std::string& token() const { return session->token; }
  const std::string& csrf() const { return session->csrf; }
};

void UiServer::Handle(const HttpRequest& req, HttpResponder& out) {
  Call call{req, out, req.Cookie(kCookie), std::nullopt};
  if (HasDotSegment(req.path)) {
    out.Send(Text(400, "refused: the path names '.' or '..'\n"));
    return;
  }
  // A job page's own asks of what moved keep no session alive: a tab left open does not stay signed in.
  const bool asked_by_page =
      req.method == "GET" && absl::StartsWith(req.path, "/jobs/") && absl::EndsWith(req.path, "/version");
  call.session = sessions_.Find(call.session_id, /*touch=*/!asked_by_page);
  Route(call);
}

void UiServer::Route(Call& call) {
  const HttpRequest& req = call.req;
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
  if (get && (path == "/static/app.css" || path == "/static/app.js")) {
    const bool css = absl::EndsWith(path, ".css");
    call.out.Send({200,
                   css ? "text/css; charset=utf-8" : "text/javascript; charset=utf-8",
                   {{"Cache-Control", "no-cache"}},
                   css ? AppCss() : AppJs()});
    return;
  }
  if (path == "/login") {
    if (post) return Login(call);
    call.out.Send(Html(200, LoginPage("")));
    return;
  }
  if (!call.session) {  // nothing else without signing in: pages go to the sign-in form, the rest is refused
    const bool page =
        get && (path == "/" || (absl::StartsWith(path, "/jobs/") && path.find('/', 6) == std::string::npos));
    call.out.Send(page ? Redirect("/login") : Text(401, "sign in first (/login)\n"));
    return;
  }
  if (post && (!SameOrigin(req) || !ConstantTimeEquals(req.Param("csrf", true), call.csrf()))) {
    call.out.Send(ErrorPage(absl::PermissionDeniedError("refused: the form token is missing or wrong (reload the "
                                                        "page and try again); nothing was changed"),
                            call.csrf()));
    return;
  }
  if (post && path == "/logout") return Logout(call);
  if (get && path == "/") return JobsPage(call);
  if (get && path == "/fragments/jobs") return JobsFragment(call);
  if (post && path == "/submit") return Submit(call);
  if (absl::StartsWith(path, "/jobs/")) {
    std::pair<std::string, std::string> id_rest = absl::StrSplit(path.substr(6), absl::MaxSplits('/', 1));
    if (!IsJobId(id_rest.first)) {
      call.out.Send(ErrorPage(absl::NotFoundError(absl::StrCat("no job '", id_rest.first, "'")), call.csrf()));
      return;
    }
    return JobRoute(call, id_rest.first, id_rest.second);
  }
  call.out.Send(ErrorPage(absl::NotFoundError(absl::StrCat("no page ", path)), call.csrf()));
}

void UiServer::Fail(Call& call, const absl::Status& status) {
  if (absl::IsUnauthenticated(status)) {
    sessions_.Remove(call.session_id);
    HttpResponse r = Redirect("/login");
    r.headers.push_back({"Set-Cookie", SessionCookie("", true)});
    return call.out.Send(r);
  }
  call.out.Send(ErrorPage(status, call.csrf(), /*retry=*/call.req.method == "GET"));
}

void UiServer::Login(Call& call) {
  if (!SameOrigin(call.req)) {
    call.out.Send(Html(403, LoginPage("refused: this form was posted from another site")));
    return;
  }
  const std::string token = call.req.Param("token", true);
  absl::Status ok = absl::OkStatus();
  if (token.empty()) {
    ok = absl::UnauthenticatedError("empty token");
  } else if (!options_.local_token.empty()) {
    if (!ConstantTimeEquals(token, options_.local_token)) ok = absl::UnauthenticatedError("wrong token");
  } else {
    ok = jobs_->List(token).status();
  }
  if (absl::IsUnauthenticated(ok)) {
    call.out.Send(Html(401, LoginPage("Wrong token: the job service refused it.")));
    return;
  }
  if (!ok.ok()) {
    call.out.Send(Html(502, LoginPage(absl::StrCat("The job service does not answer: ", ok.message()))));
    return;
  }
  HttpResponse r = Redirect("/");
  r.headers.push_back({"Set-Cookie", SessionCookie(sessions_.Create(token), false)});
  call.out.Send(r);
}

void UiServer::Logout(Call& call) {
  sessions_.Remove(call.session_id);
  HttpResponse r = Redirect("/login");
  r.headers.push_back({"Set-Cookie", SessionCookie("", true)});
  call.out.Send(r);
}

void UiServer::JobsPage(Call& call) {
  auto list = jobs_->List(call.token());
  if (!list.ok()) return Fail(call, list.status());
  std::vector<v1::JobInfo> jobs(list->jobs().begin(), list->jobs().end());
  call.out.Send(Html(200, baton::JobsPage(jobs, call.csrf(), SubmitForm{})));
}

void UiServer::JobsFragment(Call& call) {
  auto list = jobs_->List(call.token());
  if (!list.ok()) return call.out.Send(Text(HttpStatusOf(list.status()), std::string(list.status().message())));
  std::vector<v1::JobInfo> jobs(list->jobs().begin(), list->jobs().end());
  call.out.Send(Html(200, JobsTable(jobs, call.csrf())));
}

void UiServer::Submit(Call& call) {
  const HttpRequest& req = call.req;
  SubmitForm form{req.Param("job_yaml", true), req.Param("job_file", true), req.Param("name", true),
                  req.Param("steps", true), ""};
  int64_t steps = 0;
  int status = 400;
  if (form.job_yaml.size() > options_.max_job_bytes) {
    form.error = absl::StrCat("The job file is ", form.job_yaml.size(), " bytes; a job file may have at most ",
                              options_.max_job_bytes, ". Nothing was submitted.");
    form.job_yaml.clear();
    status = 413;
  } else if (absl::StripAsciiWhitespace(form.job_yaml).empty()) {
    form.error = "Paste a job file, or choose one. Nothing was submitted.";
  } else if (!form.steps.empty() && (!absl::SimpleAtoi(form.steps, &steps) || steps < 0)) {
    form.error = absl::StrCat("Steps must be a whole number, not '", form.steps, "'. Nothing was submitted.");
  } else {
    v1::SubmitRequest s;
    s.set_job_yaml(form.job_yaml);
    s.set_job_file(form.job_file.empty() ? "job.yaml" : form.job_file);
    s.set_working_dir(options_.working_dir);
    s.set_name(form.name);
    s.set_steps(steps);
    auto submitted = jobs_->Submit(call.token(), s);
    if (submitted.ok()) return call.out.Send(Redirect(absl::StrCat("/jobs/", submitted->job_id())));
    form.error = std::string(submitted.status().message());
    status = HttpStatusOf(submitted.status());
  }
  auto list = jobs_->List(call.token());
  std::vector<v1::JobInfo> jobs;
  if (list.ok()) jobs.assign(list->jobs().begin(), list->jobs().end());
  call.out.Send(Html(status, baton::JobsPage(jobs, call.csrf(), form)));
}

void UiServer::JobRoute(Call& call, const std::string& id, const std::string& rest) {
  const std::string& method = call.req.method;
  const bool get = method == "GET" || method == "HEAD", post = method == "POST";
  if (get && rest.empty()) return JobPage(call, id);
  if (get && (rest == "panel" || rest == "gallery" || rest == "details")) return Part(call, id, rest);
  if (get && rest == "version") return Version(call, id);
  if (post && (rest == "stop" || rest == "continue")) return Action(call, id, rest);
  if (get && rest == "lora.safetensors") return LoraFile(call, id);
  if (get && absl::StartsWith(rest, "samples/")) {
    std::pair<std::string, std::string> step_file = absl::StrSplit(rest.substr(8), absl::MaxSplits('/', 1));
    return SampleFile(call, id, step_file.first, step_file.second);
  }
  call.out.Send(ErrorPage(absl::NotFoundError(absl::StrCat("no page ", call.req.path, " for ", method)), call.csrf()));
}

void UiServer::JobPage(Call& call, const std::string& id) {
  v1::HistoryRequest req;
  req.set_job_id(id);
  req.set_max_points(kChartPoints);
  req.set_log_lines(kLogLines);
  auto history = jobs_->History(call.token(), req);
  if (!history.ok()) return Fail(call, history.status());
  auto checkpoints = jobs_->Checkpoints(call.token(), id);
  call.out.Send(Html(200, baton::JobPage(*history, checkpoints.ok() ? *checkpoints : v1::ListCheckpointsResponse(),
                                         call.csrf(), SmoothingOf(call.req))));
}

void UiServer::Part(Call& call, const std::string& id, const std::string& part) {
  v1::HistoryRequest req;
  req.set_job_id(id);
  req.set_max_points(part == "panel" ? kChartPoints : 1);  // the details and the gallery show no step series
  req.set_log_lines(part == "details" ? kLogLines : 0);
  auto history = jobs_->History(call.token(), req);
  if (!history.ok()) {
    return call.out.Send(Text(HttpStatusOf(history.status()), std::string(history.status().message())));
  }
  call.out.Send(Html(200, part == "gallery"   ? Gallery(*history)
                          : part == "details" ? JobDetails(*history)
                                              : JobPanel(*history, call.csrf(), SmoothingOf(call.req))));
}

// What a shown job page asks once a second: a key that changes whenever the job moved (a step, a state, a checkpoint,
// an evaluation, an outage, a stop asked), one that changes with a new rendering, and whether the job ended. One
// Status call per ask and nothing held between asks: open pages hold none of the view's threads (a stream per page
// did, and 48 of them stopped the view).
void UiServer::Version(Call& call, const std::string& id) {
  auto job = jobs_->Status(call.token(), id);
  if (!job.ok()) {
    if (absl::IsUnauthenticated(job.status())) sessions_.Remove(call.session_id);  // the token changed: sign in
    return call.out.Send(Text(HttpStatusOf(job.status()), std::string(job.status().message())));
  }
  const std::string moved =
      absl::StrCat(job->last_step().step(), "/", job->state(), "/", job->last_checkpoint_step(), "/",
                   job->last_validation().step(), "/", job->outages_size(), "/", job->stop_requested());
  const std::string samples = absl::StrCat(job->has_last_samples(), "/", job->last_samples().step());
  // A job its service's shutdown stopped is resumed by the restarted service: the page keeps following it.
  const bool ended = job->state() >= v1::JOB_STATE_FINISHED && !job->resumes_on_restart();
  call.out.Send({200,
                 "application/json",
                 {},
                 absl::StrCat("{\"moved\":\"", moved, "\",\"samples\":\"", samples,
                              "\",\"ended\":", ended ? "true" : "false", "}")});
}

void UiServer::Action(Call& call, const std::string& id, const std::string& action) {
  auto done = action == "stop" ? jobs_->Stop(call.token(), id) : jobs_->Continue(call.token(), id);
  if (!done.ok()) return Fail(call, done.status());
  call.out.Send(Redirect(absl::StrCat("/jobs/", id)));
}

void UiServer::LoraFile(Call& call, const std::string& id) {
  absl::Status s = SendLora(*jobs_, call.token(), id, call.req.Param("checkpoint"), call.req.Param("format"), call.out);
  if (!s.ok() && !call.out.started()) Fail(call, s);
}

void UiServer::SampleFile(Call& call, const std::string& id, const std::string& step, const std::string& file) {
  absl::Status s = SendSample(*jobs_, call.token(), id, step, file, call.req.Header("range"), call.out);
  if (!s.ok() && !call.out.started()) call.out.Send(Text(HttpStatusOf(s), absl::StrCat(s.message(), "\n")));
}

}  // namespace baton
