// A job's page with the adapters' EMA evaluated beside them (ema.evals: both): the EMA's mean validation loss is a
// series of its own on the loss chart and beside the per-timestep chart's mean, and the trained adapters' stay theirs.
#include "ui/job_page.h"

#include <gtest/gtest.h>

#include <regex>

namespace baton {
namespace {

v1::HistoryResponse History(bool with_ema) {
  v1::HistoryResponse h;
  h.mutable_job()->set_job_id("3");
  h.mutable_job()->set_total_steps(20);
  for (int64_t step : {0, 10, 20}) {
    v1::HistoryPoint* p = h.add_points();
    p->set_step(step);
    p->set_first_step(step);
    p->set_loss(1.0);
    for (bool ema : {false, true}) {
      if (ema && !with_ema) continue;
      v1::ValidationProgress* v = h.add_validations();
      v->set_step(step);
      v->add_timesteps(0.5);
      v->add_losses(ema ? 0.5 : 0.8);
      v->set_mean(ema ? 0.5 : 0.8);
      v->set_ema(ema);
    }
  }
  return h;
}

// The points of the polyline `series` in the chart `chart` of `html` ("" when there is none).
std::string Points(const std::string& html, const std::string& chart, const std::string& series) {
  const size_t at = html.find("id=\"" + chart + "\"");
  if (at == std::string::npos) return "";
  const size_t end = html.find("</svg>", at);
  const std::string svg = html.substr(at, end - at);
  std::smatch m;
  const std::regex line("<polyline[^>]*data-series=\"" + series + "\"[^>]*points=\"([^\"]*)\"");
  return std::regex_search(svg, m, line) ? m[1].str() : "";
}

TEST(JobPageTest, TheEmasValidationIsASeriesOfItsOwn) {
  const std::string panel = JobPanel(History(true), "csrf", 0.6), details = JobDetails(History(true));
  const std::string trained = Points(panel, "chart-loss", "validation"),
                    ema = Points(panel, "chart-loss", R"(validation \(EMA\))");
  EXPECT_EQ(std::count(trained.begin(), trained.end(), ','), 3) << panel;
  EXPECT_EQ(std::count(ema.begin(), ema.end(), ','), 3) << panel;
  EXPECT_NE(trained, ema) << "the EMA's losses (0.5) are not the adapters' (0.8)";
  const std::string mean = Points(details, "chart-validation", "mean");
  const std::string ema_mean = Points(details, "chart-validation", "EMA mean");
  EXPECT_EQ(std::count(mean.begin(), mean.end(), ','), 3) << details;
  EXPECT_EQ(std::count(ema_mean.begin(), ema_mean.end(), ','), 3) << details;
  EXPECT_NE(mean, ema_mean);

  const std::string alone = JobPanel(History(false), "csrf", 0.6);
  EXPECT_NE(Points(alone, "chart-loss", "validation"), "");
  EXPECT_EQ(alone.find("(EMA)"), std::string::npos);
}

}  // namespace
}  // namespace baton
