#include "ui/job_page.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <vector>

#include "ui/gallery.h"
#include "ui/html.h"
#include "ui/job_words.h"
#include "ui/jobs_page.h"
#include "ui/svg_chart.h"

namespace baton {
namespace {

struct Axis {
  double x_min, x_max;
};

Axis StepAxis(const v1::HistoryResponse& h) {
  double lo = h.job().first_step(), hi = std::max<double>(h.job().total_steps(), 1);
  if (h.points_size() > 0) hi = std::max<double>(hi, static_cast<double>(h.points(h.points_size() - 1).step()));
  for (const v1::ValidationProgress& v : h.validations()) lo = std::min<double>(lo, static_cast<double>(v.step()));
  return {std::min(lo, 0.0), hi};
}

ChartOptions Options(const std::string& id, const std::string& title, Axis axis, double height) {
  ChartOptions o;
  o.id = id;
  o.title = title;
  o.x_min = axis.x_min;
  o.x_max = axis.x_max;
  o.height = height;
  return o;
}

std::string Charts(const v1::HistoryResponse& h, double smoothing) {
  const Axis axis = StepAxis(h);
  ChartSeries raw{"loss", "s-raw", {}, {}, {}, {}, false};
  ChartSeries lr{"learning rate", "s-lr", {}, {}, {}, {}, false};
  ChartSeries gn{"gradient norm", "s-gn", {}, {}, {}, {}, false};
  bool runs = false;
  for (const v1::HistoryPoint& p : h.points()) {
    raw.x.push_back(static_cast<double>(p.step()));
    raw.y.push_back(p.loss());
    raw.low.push_back(p.loss_min());
    raw.high.push_back(p.loss_max());
    runs = runs || p.first_step() != p.step();
    lr.x.push_back(static_cast<double>(p.step()));
    lr.y.push_back(p.learning_rate());
    gn.x.push_back(static_cast<double>(p.step()));
    gn.y.push_back(p.grad_norm());
  }
  if (!runs) raw.low.clear(), raw.high.clear();  // one step a point: no band
  ChartSeries smooth{
      absl::StrFormat("smoothed %.2f", smoothing), "s-smooth", raw.x, Smooth(raw.y, smoothing), {}, {}, false};
  // The mean validation loss at each validation: the trained adapters', and their EMA's beside them (ema.evals: both).
  ChartSeries val{"validation", "s-val", {}, {}, {}, {}, true};
  ChartSeries ema{"validation (EMA)", "s-ema", {}, {}, {}, {}, true};
  for (const v1::ValidationProgress& v : h.validations()) {
    ChartSeries& s = v.ema() ? ema : val;
    s.x.push_back(static_cast<double>(v.step()));
    s.y.push_back(v.mean());
  }
  std::vector<ChartSeries> loss = {raw, smooth};
  if (!val.x.empty()) loss.push_back(val);
  if (!ema.x.empty()) loss.push_back(ema);
  std::string title = "training loss";
  if (runs) absl::StrAppend(&title, " (", h.logged_steps(), " steps in ", h.points_size(), " runs: mean, min-max)");
  return absl::StrCat(SvgLineChart(Options("chart-loss", title, axis, 260), loss),
                      SvgLineChart(Options("chart-lr", "learning rate", axis, 130), {lr}),
                      SvgLineChart(Options("chart-grad", "gradient norm", axis, 130), {gn}));
}

// The trained adapters' validations per timestep and their mean, and their EMA's mean beside it (ema.evals: both).
std::string ValidationChart(const v1::HistoryResponse& h) {
  std::vector<const v1::ValidationProgress*> trained;
  ChartSeries ema_mean{"EMA mean", "s-ema", {}, {}, {}, {}, true};
  for (const v1::ValidationProgress& v : h.validations()) {
    if (!v.ema()) {
      trained.push_back(&v);
      continue;
    }
    ema_mean.x.push_back(static_cast<double>(v.step()));
    ema_mean.y.push_back(v.mean());
  }
  if (trained.empty()) return "";
  const Axis axis = StepAxis(h);
  std::vector<ChartSeries> series;
  const v1::ValidationProgress& last = *trained.back();
  for (int t = 0; t < last.timesteps_size(); ++t) {
    ChartSeries s{absl::StrFormat("t=%.2g", last.timesteps(t)), absl::StrCat("s-t", t % 6), {}, {}, {}, {}, true};
    for (const v1::ValidationProgress* v : trained) {
      if (t >= v->losses_size()) continue;
      s.x.push_back(static_cast<double>(v->step()));
      s.y.push_back(v->losses(t));
    }
    series.push_back(std::move(s));
  }
  ChartSeries mean{"mean", "s-val", {}, {}, {}, {}, true};
  for (const v1::ValidationProgress* v : trained) {
    mean.x.push_back(static_cast<double>(v->step()));
    mean.y.push_back(v->mean());
  }
  series.push_back(std::move(mean));
  if (!ema_mean.x.empty()) series.push_back(std::move(ema_mean));
  return absl::StrCat("<h2>Validation loss per timestep</h2>",
                      SvgLineChart(Options("chart-validation", "validation loss by timestep", axis, 200), series),
                      absl::StrFormat("<p class=\"hint\">after step %d: mean %.5f</p>", last.step(), last.mean()));
}

std::string StageTable(const v1::HistoryResponse& h) {
  const v1::JobInfo& job = h.job();
  if (job.stage_totals_size() == 0) return "";
  double bytes = 0, steps = 0;  // the run's mean, however the points were downsampled
  for (const v1::HistoryPoint& p : h.points()) {
    const double n = static_cast<double>(p.step() - p.first_step() + 1);
    bytes += n * static_cast<double>(p.link_bytes());
    steps += n;
  }
  std::string out =
      "<h2>Stage activity</h2><table class=\"stages\" id=\"stages\"><thead><tr><th>Stage</th><th>Worker</th>"
      "<th>Busy s</th><th>Idle s</th><th>Busy</th><th>Last step busy / idle s</th><th>Memory held / planned</th>"
      "</tr></thead><tbody>";
  for (int i = 0; i < job.stage_totals_size(); ++i) {
    const v1::StageStats& t = job.stage_totals(i);
    const double total = t.busy_seconds() + t.idle_seconds();
    const double share = total > 0 ? t.busy_seconds() / total : 0;
    std::string last = "-";
    if (i < job.last_step().stages_size()) {
      last = absl::StrFormat("%.3f / %.3f", job.last_step().stages(i).busy_seconds(),
                             job.last_step().stages(i).idle_seconds());
    }
    const int64_t held = i < job.last_step().stages_size() ? job.last_step().stages(i).memory_bytes() : 0;
    const int64_t planned = i < job.stage_planned_bytes_size() ? job.stage_planned_bytes(i) : 0;
    std::string memory = held > 0 ? absl::StrFormat("%.0f MB", held / 1e6) : "-";
    if (planned > 0) {
      absl::StrAppend(&memory, absl::StrFormat(" / %.0f MB", planned / 1e6));
      if (held > 0) absl::StrAppend(&memory, absl::StrFormat(" (%.0f%%)", 100.0 * held / planned));
    }
    absl::StrAppend(&out, "<tr><td>", i, "</td><td>",
                    i < job.stage_addresses_size() ? HtmlEscape(job.stage_addresses(i)) : "-",
                    absl::StrFormat("</td><td class=\"num\">%.1f</td><td class=\"num\">%.1f</td>", t.busy_seconds(),
                                    t.idle_seconds()),
                    absl::StrFormat("<td><div class=\"meter\"><div style=\"width:%.1f%%\"></div></div>%.0f%%</td>",
                                    share * 100, share * 100),
                    "<td class=\"num\">", last, "</td><td class=\"num memory\">", memory, "</td></tr>");
  }
  absl::StrAppend(
      &out, "</tbody></table>",
      absl::StrFormat("<p class=\"hint\">Memory held: on a GPU the device's peak allocated bytes in the last "
                      "step, on the CPU the worker's resident set; planned: the planner's estimate. "
                      "Coordinator links: %.2f MB a step on average.</p>",
                      steps > 0 ? bytes / steps / 1e6 : 0.0));
  return out;
}

std::string Outages(const v1::JobInfo& job) {
  std::string out;
  for (const v1::StageOutage& o : job.outages()) {
    absl::StrAppend(&out, "<p class=\"error outage\">", HtmlEscape(o.message()), "</p>");
  }
  return out;
}

std::string Header(const v1::HistoryResponse& h, const std::string& csrf) {
  const v1::JobInfo& job = h.job();
  const v1::StepProgress& s = job.last_step();
  std::string pace;
  if (job.has_last_step()) {
    pace =
        absl::StrFormat("%.3f s/step · %.2f samples/s · loss %.5f", s.step_seconds(), s.samples_per_second(), s.loss());
    if (job.state() == v1::JOB_STATE_RUNNING) absl::StrAppend(&pace, " · ", FormatDuration(s.eta_seconds()), " left");
  }
  std::string error;
  if (!job.error().empty())
    error = absl::StrCat("<pre class=\"error\" id=\"job-error\">", HtmlEscape(job.error()), "</pre>");
  return absl::StrCat("<div class=\"job-head\"><h1>", HtmlEscape(job.name()), " <small>job ", HtmlEscape(job.job_id()),
                      "</small></h1><span class=\"state ", JobStateName(job.state()), "\" id=\"job-state\">",
                      JobStateName(job.state()), "</span>", ProgressBar(job), "<p class=\"pace\">", pace, "</p>",
                      JobActions(job, csrf), "</div>", error, Outages(job));
}

std::string LogTail(const v1::HistoryResponse& h) {
  if (h.log_tail_size() == 0) return "";
  std::vector<std::string> lines;
  for (const std::string& l : h.log_tail()) lines.push_back(HtmlEscape(l));
  return absl::StrCat("<h2>Train log <small>train_log.jsonl, last ", h.log_tail_size(),
                      " lines</small></h2><pre class=\"log\" id=\"log\">", absl::StrJoin(lines, "\n"), "</pre>");
}

std::string Checkpoints(const v1::JobInfo& job, const v1::ListCheckpointsResponse& checkpoints) {
  if (checkpoints.checkpoints_size() == 0) return "";
  std::string out = "<h2>Checkpoints</h2><ul class=\"checkpoints\">";
  for (const v1::CheckpointInfo& c : checkpoints.checkpoints()) {
    const std::string href =
        absl::StrCat("/jobs/", HtmlEscape(job.job_id()), "/lora.safetensors?checkpoint=", c.step());
    absl::StrAppend(&out, "<li>step ", c.step(), absl::StrFormat(" · %.1f MB · ", c.lora_bytes() / 1e6), "<a href=\"",
                    href, "\" download>diffusers</a> · <a href=\"", href,
                    "&amp;format=original\" download>BFL/ComfyUI</a></li>");
  }
  return out + "</ul>";
}

}  // namespace

std::string JobPanel(const v1::HistoryResponse& h, const std::string& csrf, double smoothing) {
  return absl::StrCat(Header(h, csrf), "<section class=\"card\">", Charts(h, smoothing), "</section>");
}

std::string JobDetails(const v1::HistoryResponse& h) {
  return absl::StrCat(ValidationChart(h), StageTable(h), LogTail(h));
}

std::string JobPage(const v1::HistoryResponse& h, const v1::ListCheckpointsResponse& checkpoints,
                    const std::string& csrf, double smoothing) {
  const std::string id = HtmlEscape(h.job().job_id());
  // An ended job's page does not follow it (continuing it reloads the page, which then does).
  const bool live = h.job().state() < v1::JOB_STATE_FINISHED;
  return HtmlPage(
      h.job().name(),
      absl::StrCat("<div id=\"job\" data-job=\"", id, "\"",
                   live ? absl::StrCat(" data-poll=\"/jobs/", id, "/version\"") : "", ">",
                   "<div class=\"controls\"><label>Smoothing <input type=\"range\" id=\"smoothing\" min=\"0\" "
                   "max=\"0.99\" step=\"0.01\" value=\"",
                   absl::StrFormat("%.2f", smoothing), "\"></label></div><div id=\"panel\" data-src=\"/jobs/", id,
                   "/panel\">", JobPanel(h, csrf, smoothing), "</div><div id=\"gallery\" data-src=\"/jobs/", id,
                   "/gallery\">", Gallery(h), "</div><div id=\"details\" data-src=\"/jobs/", id, "/details\">",
                   JobDetails(h), "</div>", Checkpoints(h.job(), checkpoints), "</div>"),
      csrf);
}

}  // namespace baton
