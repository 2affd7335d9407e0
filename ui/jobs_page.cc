#include "ui/jobs_page.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <algorithm>

#include "ui/html.h"
#include "ui/job_words.h"

namespace baton {
namespace {

std::string Cell(const std::string& text, const std::string& css_class = "") {
  return absl::StrCat("<td", css_class.empty() ? "" : absl::StrCat(" class=\"", css_class, "\""), ">", text, "</td>");
}

// The model's folder as people name it: its last two path parts ("demo/pipeline").
std::string ShortModel(const std::string& model) {
  std::string m = model;
  while (!m.empty() && m.back() == '/') m.pop_back();
  size_t cut = m.rfind('/');
  if (cut != std::string::npos && cut > 0) cut = m.rfind('/', cut - 1);
  return cut == std::string::npos ? m : m.substr(cut + 1);
}

std::string JobRow(const v1::JobInfo& job, const std::string& csrf) {
  const v1::StepProgress& s = job.last_step();
  const bool running = job.state() == v1::JOB_STATE_RUNNING;
  std::string state =
      absl::StrCat("<span class=\"state ", JobStateName(job.state()), "\">", JobStateName(job.state()), "</span>");
  if (job.state() == v1::JOB_STATE_QUEUED) absl::StrAppend(&state, " #", job.queue_position());
  if (!job.waiting_for().empty()) {
    absl::StrAppend(&state, "<div class=\"waiting\">waiting for ", HtmlEscape(job.waiting_for()), "</div>");
  }
  if (!job.error().empty()) absl::StrAppend(&state, "<div class=\"error\">", HtmlEscape(job.error()), "</div>");
  return absl::StrCat(
      "<tr data-job=\"", HtmlEscape(job.job_id()), "\" data-state=\"", JobStateName(job.state()), "\">",
      Cell(absl::StrCat("<a href=\"/jobs/", HtmlEscape(job.job_id()), "\">", HtmlEscape(job.job_id()), "</a>")),
      Cell(absl::StrCat("<a href=\"/jobs/", HtmlEscape(job.job_id()), "\">", HtmlEscape(job.name()), "</a>")),
      Cell(HtmlEscape(ShortModel(job.model())), "model"), Cell(state, "state-cell"), Cell(ProgressBar(job)),
      Cell(job.has_last_step() ? absl::StrFormat("%.3f", s.step_seconds()) : "-", "num"),
      Cell(running && job.has_last_step() ? FormatDuration(s.eta_seconds()) : "-", "num"),
      Cell(job.has_last_step() ? absl::StrFormat("%.5f", s.loss()) : "-", "num"), Cell(JobActions(job, csrf)), "</tr>");
}

std::string SubmitSection(const SubmitForm& form, const std::string& csrf) {
  std::string error;
  if (!form.error.empty()) {
    error = absl::StrCat("<pre class=\"error\" id=\"submit-error\">", HtmlEscape(form.error), "</pre>");
  }
  return absl::StrCat(
      "<section class=\"card\"><h2>Submit a job</h2>", error,
      "<form method=\"post\" action=\"/submit\" id=\"submit-form\">"
      "<input type=\"hidden\" name=\"csrf\" value=\"",
      HtmlEscape(csrf),
      "\"><label>Job file <input type=\"file\" id=\"job-upload\" accept=\".yaml,.yml,text/yaml\"></label>"
      "<input type=\"hidden\" name=\"job_file\" id=\"job-file-name\" value=\"",
      HtmlEscape(form.job_file),
      "\"><textarea name=\"job_yaml\" id=\"job-yaml\" rows=\"10\" spellcheck=\"false\" "
      "placeholder=\"paste a job file (YAML), or choose one above\">",
      HtmlEscape(form.job_yaml),
      "</textarea><div class=\"row\"><label>Name <input name=\"name\" id=\"job-name\" value=\"", HtmlEscape(form.name),
      "\"></label><label>Steps <input name=\"steps\" id=\"job-steps\" inputmode=\"numeric\" value=\"",
      HtmlEscape(form.steps),
      "\" placeholder=\"the job's\"></label><button type=\"submit\" id=\"submit-button\">Submit</button></div>"
      "<p class=\"hint\">Relative paths in the job are read from the folder <code>baton ui</code> was started in, "
      "as <code>baton submit</code> reads them from yours.</p></form></section>");
}

}  // namespace

std::string ProgressBar(const v1::JobInfo& job) {
  const int64_t step = job.last_step().step();
  const int64_t total = std::max<int64_t>(job.total_steps(), 1);
  const double pct = std::clamp(100.0 * static_cast<double>(step) / static_cast<double>(total), 0.0, 100.0);
  return absl::StrFormat(
      "<div class=\"progress\" role=\"progressbar\" aria-valuenow=\"%d\" aria-valuemax=\"%d\"><div style=\"width:%.1f%%"
      "\"></div><span>%d / %d</span></div>",
      step, job.total_steps(), pct, step, job.total_steps());
}

std::string JobActions(const v1::JobInfo& job, const std::string& csrf) {
  const std::string base = absl::StrCat("/jobs/", HtmlEscape(job.job_id()));
  std::string out = "<div class=\"actions\">";
  const v1::JobState st = job.state();
  if (st == v1::JOB_STATE_RUNNING || st == v1::JOB_STATE_QUEUED) {
    absl::StrAppend(&out, PostButton(base + "/stop", csrf, "Stop", "stop"));
  }
  if (st == v1::JOB_STATE_STOPPED || st == v1::JOB_STATE_FAILED) {
    absl::StrAppend(&out, PostButton(base + "/continue", csrf, "Continue", "continue"));
  }
  if (st == v1::JOB_STATE_FINISHED || job.last_checkpoint_step() > 0) {
    absl::StrAppend(&out, "<a class=\"download\" href=\"", base,
                    "/lora.safetensors\" download>LoRA (diffusers)</a><a class=\"download\" href=\"", base,
                    "/lora.safetensors?format=original\" download>LoRA (BFL/ComfyUI)</a>");
  }
  return out + "</div>";
}

std::string LoginPage(const std::string& message) {
  std::string error;
  if (!message.empty()) error = absl::StrCat("<p class=\"error\" id=\"login-error\">", HtmlEscape(message), "</p>");
  return HtmlPage("Sign in",
                  absl::StrCat("<section class=\"card narrow\"><h1>Sign in</h1>", error,
                               "<form method=\"post\" action=\"/login\" id=\"login-form\"><label>Job service token "
                               "<input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"current-password\" "
                               "autofocus></label><button type=\"submit\">Sign in</button></form><p class=\"hint\">"
                               "The token the coordinator's job service checks: <code>baton certs</code> wrote it to "
                               "<code>DIR/client/token</code>.</p></section>"));
}

std::string JobsTable(const std::vector<v1::JobInfo>& jobs, const std::string& csrf) {
  std::string out =
      "<table class=\"jobs\" id=\"jobs\"><thead><tr><th>ID</th><th>Name</th><th>Model</th><th>State</th>"
      "<th>Progress</th><th>s/step</th><th>Left</th><th>Loss</th><th></th></tr></thead><tbody>";
  for (const v1::JobInfo& job : jobs) absl::StrAppend(&out, JobRow(job, csrf));
  if (jobs.empty()) out += "<tr><td colspan=\"9\" class=\"hint\">No jobs yet: submit one below.</td></tr>";
  return out + "</tbody></table>";
}

std::string JobsPage(const std::vector<v1::JobInfo>& jobs, const std::string& csrf, const SubmitForm& form) {
  return HtmlPage("Jobs",
                  absl::StrCat("<h1>Jobs</h1><div id=\"jobs-live\" data-refresh=\"/fragments/jobs\">",
                               JobsTable(jobs, csrf), "</div>", SubmitSection(form, csrf)),
                  csrf);
}

}  // namespace baton
