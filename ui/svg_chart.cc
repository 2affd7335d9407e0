#include "ui/svg_chart.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ui/html.h"

namespace baton {
namespace {

constexpr double kLeft = 64, kRight = 16, kTop = 26, kBottom = 26;

struct Frame {
  double x_min, x_max, y_min, y_max, width, height;
  bool log_y;
  double X(double x) const {
    return kLeft + (x_max > x_min ? (x - x_min) / (x_max - x_min) : 0.5) * (width - kLeft - kRight);
  }
  double Y(double y) const {
    const double v = log_y ? std::log10(y) : y;
    return height - kBottom - (y_max > y_min ? (v - y_min) / (y_max - y_min) : 0.5) * (height - kTop - kBottom);
  }
};

bool Plottable(double y, bool log_y) { return std::isfinite(y) && (!log_y || y > 0); }

std::string Label(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e5 || a < 1e-3) return absl::StrFormat("%.1e", v);
  return absl::StrFormat("%.4g", v);
}

std::string Points(const Frame& f, const std::vector<double>& x, const std::vector<double>& y) {
  std::string out;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!Plottable(y[i], f.log_y)) continue;
    absl::StrAppendFormat(&out, "%s%.1f,%.1f", out.empty() ? "" : " ", f.X(x[i]), f.Y(y[i]));
  }
  return out;
}

// The y range of every plottable value (the bands' included), in axis units (log10 for a log axis).
void YRange(const std::vector<ChartSeries>& series, bool log_y, double* lo, double* hi) {
  *lo = std::numeric_limits<double>::infinity();
  *hi = -*lo;
  auto take = [&](const std::vector<double>& v) {
    for (double y : v) {
      if (!Plottable(y, log_y)) continue;
      const double a = log_y ? std::log10(y) : y;
      *lo = std::min(*lo, a);
      *hi = std::max(*hi, a);
    }
  };
  for (const ChartSeries& s : series) {
    take(s.y);
    take(s.low);
    take(s.high);
  }
  if (!std::isfinite(*lo)) *lo = 0, *hi = 1;
  if (*hi - *lo < 1e-12) *lo -= 0.5, *hi += 0.5;
  const double pad = (*hi - *lo) * 0.05;
  *lo -= pad;
  *hi += pad;
}

std::string Axes(const Frame& f) {
  std::string out;
  for (double t : NiceTicks(f.x_min, f.x_max, 6)) {
    absl::StrAppendFormat(&out, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", f.X(t),
                          f.X(t), kTop, f.height - kBottom);
    absl::StrAppendFormat(&out, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", f.X(t),
                          f.height - 8, Label(t));
  }
  for (double t : NiceTicks(f.y_min, f.y_max, 4)) {
    const double v = f.log_y ? std::pow(10.0, t) : t;
    const double y = f.height - kBottom - (t - f.y_min) / (f.y_max - f.y_min) * (f.height - kTop - kBottom);
    absl::StrAppendFormat(&out, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", kLeft,
                          f.width - kRight, y, y);
    absl::StrAppendFormat(&out, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>", kLeft - 6,
                          y + 4, Label(v));
  }
  return out;
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int count) {
  std::vector<double> ticks;
  if (!(hi > lo) || count < 1) return ticks;
  const double raw = (hi - lo) / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
  // k × step, rounded to the step's decimals (0.6, not 0.6000000000000001)
  const double decimals = std::pow(10.0, std::max(0.0, -std::floor(std::log10(step))) + 1);
  for (double k = std::ceil(lo / step); k * step <= hi + step * 1e-9; k += 1) {
    ticks.push_back(std::round(k * step * decimals) / decimals);
  }
  return ticks;
}

std::vector<double> Smooth(const std::vector<double>& values, double smoothing) {
  smoothing = std::clamp(smoothing, 0.0, 0.999);
  std::vector<double> out;
  out.reserve(values.size());
  double last = 0, weight = 0;
  for (double v : values) {
    if (!std::isfinite(v)) {
      out.push_back(v);
      continue;
    }
    last = last * smoothing + (1 - smoothing) * v;
    weight = weight * smoothing + (1 - smoothing);
    out.push_back(last / weight);
  }
  return out;
}

std::string SvgLineChart(const ChartOptions& o, const std::vector<ChartSeries>& series) {
  Frame f{o.x_min, o.x_max, 0, 1, o.width, o.height, o.log_y};
  YRange(series, o.log_y, &f.y_min, &f.y_max);
  std::string svg = absl::StrFormat(
      "<svg id=\"%s\" class=\"chart\" viewBox=\"0 0 %.0f %.0f\" preserveAspectRatio=\"none\" "
      "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"%s\">",
      HtmlEscape(o.id), o.width, o.height, HtmlEscape(o.title));
  absl::StrAppend(&svg, Axes(f));
  absl::StrAppendFormat(&svg, "<text class=\"title\" x=\"%.0f\" y=\"16\">%s</text>", kLeft, HtmlEscape(o.title));
  double legend_x = o.width - kRight;
  for (auto it = series.rbegin(); it != series.rend(); ++it) {  // right-aligned legend, last series rightmost
    legend_x -= 10.0 + 7.0 * static_cast<double>(it->name.size());
    absl::StrAppendFormat(&svg, "<text class=\"legend %s\" x=\"%.0f\" y=\"16\">%s</text>", HtmlEscape(it->css_class),
                          legend_x, HtmlEscape(it->name));
  }
  for (const ChartSeries& s : series) {
    if (!s.low.empty() && s.low.size() == s.x.size() && s.high.size() == s.x.size()) {
      std::vector<double> rx(s.x.rbegin(), s.x.rend()), rhigh(s.high.rbegin(), s.high.rend());
      absl::StrAppend(&svg, "<polygon class=\"band ", HtmlEscape(s.css_class), "\" points=\"", Points(f, s.x, s.low),
                      " ", Points(f, rx, rhigh), "\"/>");
    }
    absl::StrAppend(&svg, "<polyline class=\"series ", HtmlEscape(s.css_class), "\" data-series=\"", HtmlEscape(s.name),
                    "\" points=\"", Points(f, s.x, s.y), "\"/>");
    if (!s.markers) continue;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!Plottable(s.y[i], o.log_y)) continue;
      absl::StrAppendFormat(&svg,
                            "<circle class=\"marker %s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\"><title>%s at step %s: %s"
                            "</title></circle>",
                            HtmlEscape(s.css_class), f.X(s.x[i]), f.Y(s.y[i]), HtmlEscape(s.name), Label(s.x[i]),
                            Label(s.y[i]));
    }
  }
  svg += "</svg>";
  return svg;
}

}  // namespace baton
