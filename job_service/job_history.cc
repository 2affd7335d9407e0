#include "job_service/job_history.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/sample/sample_renderer.h"
#include "core/util/files.h"

namespace baton {
namespace {

constexpr std::streamoff kTailBytes = 256 << 10;

v1::HistoryPoint Summarize(const std::vector<v1::StepProgress>& steps, size_t begin, size_t end) {
  v1::HistoryPoint p;
  p.set_first_step(steps[begin].step());
  p.set_step(steps[end - 1].step());
  p.set_learning_rate(steps[end - 1].learning_rate());
  double loss = 0, grad_norm = 0, seconds = 0, bytes = 0;
  double lo = steps[begin].loss(), hi = steps[begin].loss();
  for (size_t i = begin; i < end; ++i) {
    loss += steps[i].loss();
    lo = std::min(lo, steps[i].loss());
    hi = std::max(hi, steps[i].loss());
    grad_norm += steps[i].grad_norm();
    seconds += steps[i].step_seconds();
    bytes += static_cast<double>(steps[i].link_bytes());
  }
  const double n = static_cast<double>(end - begin);
  p.set_loss(loss / n);
  p.set_loss_min(lo);
  p.set_loss_max(hi);
  p.set_grad_norm(grad_norm / n);
  p.set_step_seconds(seconds / n);
  p.set_link_bytes(static_cast<int64_t>(bytes / n));
  return p;
}

// K.png or K.mp4, as Download serves them (nothing else: no path leaves the step's folder).
bool IsSampleFileName(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == 0 || dot > 4 || dot == std::string::npos) return false;
  for (size_t i = 0; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  const std::string ext = name.substr(dot);
  return ext == ".png" || ext == ".mp4";
}

v1::StepProgress StepFromLine(const nlohmann::json& j, int64_t total_steps) {
  v1::StepProgress s;
  s.set_step(j.value("step", int64_t{0}));
  s.set_total_steps(total_steps);
  s.set_loss(j.value("loss", 0.0));
  s.set_learning_rate(j.value("lr", 0.0));
  s.set_grad_norm(j.value("grad_norm", 0.0));
  s.set_step_seconds(j.value("step_seconds", 0.0));
  s.set_samples_per_second(j.value("samples_per_second", 0.0));
  if (j.contains("stage_busy_seconds") && j.contains("stage_idle_seconds")) {
    // CUDA stages: the device's own time (BusySeconds), as the live events said
    const auto& busy =
        j.contains("stage_device_busy_seconds") ? j["stage_device_busy_seconds"] : j["stage_busy_seconds"];
    const auto& idle = j["stage_idle_seconds"];
    const nlohmann::json memory = j.value("stage_memory_bytes", nlohmann::json::array());
    for (size_t i = 0; i < busy.size() && i < idle.size(); ++i) {
      v1::StageStats* stage = s.add_stages();
      stage->set_busy_seconds(busy[i].get<double>());
      stage->set_idle_seconds(idle[i].get<double>());
      if (i < memory.size()) stage->set_memory_bytes(memory[i].get<int64_t>());
    }
  }
  if (j.contains("coordinator_link_bytes")) {
    int64_t bytes = 0;
    for (const auto& [kind, n] : j["coordinator_link_bytes"].items()) bytes += n.get<int64_t>();
    s.set_link_bytes(bytes);
  }
  return s;
}

v1::WatchEvent ValidationFromLine(const nlohmann::json& j) {
  std::vector<std::pair<double, double>> by_timestep;
  double mean = 0;
  for (const auto& [key, loss] : j["validation_loss"].items()) {
    double t = 0;
    if (key == "mean") {
      mean = loss.get<double>();
    } else if (absl::SimpleAtod(key, &t)) {
      by_timestep.emplace_back(t, loss.get<double>());
    }
  }
  std::sort(by_timestep.begin(), by_timestep.end());
  v1::WatchEvent e;
  v1::ValidationProgress* v = e.mutable_validation();
  v->set_step(j.value("step", int64_t{0}));
  for (const auto& [t, loss] : by_timestep) {
    v->add_timesteps(t);
    v->add_losses(loss);
  }
  v->set_mean(mean);
  return e;
}

v1::WatchEvent SamplesFromLine(const nlohmann::json& j) {
  v1::WatchEvent e;
  v1::SamplesProgress* s = e.mutable_samples();
  s->set_step(j.value("step", int64_t{0}));
  s->set_images(j.value("images", int64_t{0}));
  s->set_seconds_per_sample(j.value("seconds_per_sample", 0.0));
  s->set_contact_sheet(j.value("contact_sheet", std::string()));
  return e;
}

}  // namespace

std::vector<v1::HistoryPoint> DownsampleSteps(const std::vector<v1::StepProgress>& steps, int max_points) {
  std::vector<v1::HistoryPoint> points;
  if (steps.empty()) return points;
  const size_t cap =
      static_cast<size_t>(std::clamp(max_points <= 0 ? kDefaultHistoryPoints : max_points, 1, kMaxHistoryPoints));
  const size_t run = (steps.size() + cap - 1) / cap;
  points.reserve((steps.size() + run - 1) / run);
  for (size_t begin = 0; begin < steps.size(); begin += run) {
    points.push_back(Summarize(steps, begin, std::min(steps.size(), begin + run)));
  }
  return points;
}

LoggedHistory ReadTrainLogHistory(const std::string& path, int64_t total_steps) {
  LoggedHistory history;
  // Every evaluation in the log's order, and whether it ran with the adapters' EMA ("weights": "ema").
  std::vector<std::pair<v1::WatchEvent, bool>> evals;
  bool trained_validations = false, trained_samples = false;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step")) continue;
    try {
      const std::string event = j.value("event", std::string());
      const bool ema = j.value("weights", std::string()) == "ema";
      if (event == "validation" && j.contains("validation_loss")) {
        evals.emplace_back(ValidationFromLine(j), ema);
        trained_validations = trained_validations || !ema;
      } else if (event == "samples") {
        evals.emplace_back(SamplesFromLine(j), ema);
        trained_samples = trained_samples || !ema;
      } else if (event.empty() && j.contains("loss")) {
        history.steps.push_back(StepFromLine(j, total_steps));
        history.run_seconds += history.steps.back().step_seconds();
      }
    } catch (const nlohmann::json::exception&) {
      continue;  // a line of other types than the log writes: not ours to show
    }
  }
  // The EMA's validations beside the trained adapters' (marked) or alone (ema.evals: ema); its renderings only when
  // the run made no others (with both, the gallery shows the trained adapters').
  for (auto& [event, ema] : evals) {
    if (ema && event.has_samples() && trained_samples) continue;
    if (ema && event.has_validation() && trained_validations) event.mutable_validation()->set_ema(true);
    history.evals.push_back(std::move(event));
  }
  return history;
}

v1::SampleRendering ListSampleRendering(const std::string& output_dir, const v1::SamplesProgress& samples) {
  v1::SampleRendering rendering;
  rendering.set_step(samples.step());
  rendering.set_seconds_per_sample(samples.seconds_per_sample());
  const std::string dir = SampleStepDir(output_dir, samples.step());
  auto listing = ReadFile(JoinPath(dir, "prompts.txt"));  // "K.png<TAB>prompt" per line, as the renderers write it
  if (!listing.ok()) return rendering;
  for (absl::string_view line : absl::StrSplit(*listing, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> name_prompt = absl::StrSplit(line, absl::MaxSplits('\t', 1));
    const std::string& name = name_prompt.first;
    const bool video = absl::EndsWith(name, ".mp4");
    if (!IsSampleFileName(name) || !PathExists(JoinPath(dir, name))) continue;
    v1::SampleFile* f = rendering.add_files();
    f->set_name(name);
    f->set_prompt(name_prompt.second);
    f->set_video(video);
  }
  return rendering;
}

std::vector<std::string> TailLines(const std::string& path, int lines) {
  std::vector<std::string> tail;
  lines = std::min(lines, kMaxLogTailLines);
  if (lines <= 0) return tail;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return tail;
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - kTailBytes);
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<std::string> all = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (start > 0 && !all.empty()) all.erase(all.begin());  // the first line was cut
  const size_t keep = std::min(all.size(), static_cast<size_t>(lines));
  tail.assign(all.end() - static_cast<std::ptrdiff_t>(keep), all.end());
  return tail;
}

}  // namespace baton
