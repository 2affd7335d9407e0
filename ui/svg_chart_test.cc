#include "ui/svg_chart.h"

#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include <regex>

#include "ui/html.h"

namespace baton {
namespace {

int PolylinePoints(const std::string& svg, const std::string& series) {
  std::smatch m;
  const std::regex re("data-series=\"" + series + "\" points=\"([^\"]*)\"");
  if (!std::regex_search(svg, m, re)) return -1;
  const std::string pts = m[1];
  return pts.empty() ? 0 : static_cast<int>(std::count(pts.begin(), pts.end(), ' ')) + 1;
}

TEST(SvgChartTest, EverySeriesKeepsEveryPlottablePoint) {
  ChartSeries loss{"loss", "s-raw", {1, 2, 3, 4}, {2.0, 1.5, std::nan(""), 1.0}, {}, {}, false};
  ChartSeries val{"validation", "s-val", {0, 4}, {2.5, 1.2}, {}, {}, true};
  ChartOptions o;
  o.id = "c";
  o.title = "loss <&>";
  o.x_min = 0;
  o.x_max = 4;
  const std::string svg = SvgLineChart(o, {loss, val});
  EXPECT_EQ(PolylinePoints(svg, "loss"), 3);  // the NaN is left out
  EXPECT_EQ(PolylinePoints(svg, "validation"), 2);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n'), 0);
  EXPECT_TRUE(absl::StrContains(svg, "loss &lt;&amp;&gt;"));
  EXPECT_FALSE(absl::StrContains(svg, "loss <&>"));
  EXPECT_EQ(static_cast<int>(std::count(svg.begin(), svg.end(), 'r') > 0), 1);
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
  EXPECT_EQ(circles, 2u);  // markers only on the validation series
}

TEST(SvgChartTest, ALogAxisLeavesOutValuesAtOrBelowZero) {
  ChartSeries s{"lr", "s-lr", {1, 2, 3}, {0.0, 1e-4, 1e-3}, {}, {}, false};
  ChartOptions o;
  o.log_y = true;
  o.x_max = 3;
  EXPECT_EQ(PolylinePoints(SvgLineChart(o, {s}), "lr"), 2);
}

TEST(SvgChartTest, ABandIsDrawnAroundItsSeries) {
  ChartSeries s{"loss", "s-raw", {1, 2}, {1.0, 2.0}, {0.5, 1.5}, {1.5, 2.5}, false};
  ChartOptions o;
  o.x_max = 2;
  const std::string svg = SvgLineChart(o, {s});
  EXPECT_TRUE(absl::StrContains(svg, "<polygon class=\"band s-raw\""));
}

TEST(SmoothTest, ZeroKeepsTheValuesAndTheFirstValueIsNotPulledToZero) {
  const std::vector<double> v = {4, 2, 6, 0};
  EXPECT_EQ(Smooth(v, 0), v);
  const auto s = Smooth(v, 0.9);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_DOUBLE_EQ(s[0], 4);  // debiased
  EXPECT_GT(s[3], 2.0);       // heavily smoothed: the last 0 moves it little
  EXPECT_LT(s[3], 4.0);
}

TEST(NiceTicksTest, RoundStepsCoveringTheRange) {
  EXPECT_EQ(NiceTicks(0, 100, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(NiceTicks(0.3, 1.1, 4), (std::vector<double>{0.4, 0.6, 0.8, 1.0}));
  EXPECT_TRUE(NiceTicks(1, 1, 4).empty());
}

TEST(HtmlEscapeTest, EscapesWhatCouldOpenATagOrCloseAnAttribute) {
  EXPECT_EQ(HtmlEscape("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;");
}

}  // namespace
}  // namespace baton
