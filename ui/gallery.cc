#include "ui/gallery.h"

#include <absl/strings/str_cat.h>

#include <map>
#include <vector>

#include "ui/html.h"

namespace baton {
namespace {

std::string Media(const std::string& job_id, int64_t step, const v1::SampleFile& f) {
  const std::string src = absl::StrCat("/jobs/", HtmlEscape(job_id), "/samples/", step, "/", HtmlEscape(f.name()));
  if (f.video()) {
    return absl::StrCat("<video class=\"sample\" src=\"", src,
                        "\" muted loop autoplay playsinline preload=\"auto\"></video>");
  }
  return absl::StrCat("<img class=\"sample\" src=\"", src, "\" alt=\"", HtmlEscape(f.prompt()), "\">");
}

std::string Figure(const std::string& job_id, int64_t step, const v1::SampleFile& f) {
  return absl::StrCat("<figure data-step=\"", step, "\">", Media(job_id, step, f), "<figcaption>Step ", step, " · ",
                      HtmlEscape(f.prompt()), "</figcaption></figure>");
}

// Prompt → its files by step, in the order the prompts first appear.
std::vector<std::pair<std::string, std::vector<std::pair<int64_t, const v1::SampleFile*>>>> ByPrompt(
    const v1::HistoryResponse& h) {
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, const v1::SampleFile*>>>> out;
  std::map<std::string, size_t> index;
  for (const v1::SampleRendering& r : h.samples()) {
    for (const v1::SampleFile& f : r.files()) {
      auto [it, added] = index.emplace(f.prompt(), out.size());
      if (added) out.push_back({f.prompt(), {}});
      out[it->second].second.push_back({r.step(), &f});
    }
  }
  return out;
}

}  // namespace

std::string Gallery(const v1::HistoryResponse& h) {
  if (h.samples_size() == 0) return "";
  const std::string& id = h.job().job_id();
  std::string by_step = "<div class=\"by-step\">";
  for (auto it = h.samples().rbegin(); it != h.samples().rend(); ++it) {  // newest first
    absl::StrAppend(&by_step, "<div class=\"rendering\"><h3>Step ", it->step(), "</h3><div class=\"strip\">");
    for (const v1::SampleFile& f : it->files()) absl::StrAppend(&by_step, Figure(id, it->step(), f));
    by_step += "</div></div>";
  }
  by_step += "</div>";
  std::string compare = "<div class=\"compare\"><select id=\"compare-prompt\">";
  const auto prompts = ByPrompt(h);
  for (size_t k = 0; k < prompts.size(); ++k) {
    absl::StrAppend(&compare, "<option value=\"", k, "\">", HtmlEscape(prompts[k].first), "</option>");
  }
  compare += "</select>";
  for (size_t k = 0; k < prompts.size(); ++k) {
    absl::StrAppend(&compare, "<div class=\"strip compare-row\" data-prompt=\"", k, "\"", k == 0 ? "" : " hidden", ">");
    for (const auto& [step, f] : prompts[k].second) absl::StrAppend(&compare, Figure(id, step, *f));
    compare += "</div>";
  }
  compare += "</div>";
  return absl::StrCat("<section class=\"card\"><h2>Samples</h2>", by_step, "<h2>One prompt across steps</h2>", compare,
                      "</section>");
}

}  // namespace baton
