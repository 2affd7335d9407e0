// Line charts drawn on the server as SVG (no charting script in the browser): series of (x, y) points as
// polylines, with an optional min/max band and markers, over nice-numbered axes. Several charts that pass the same
// x range share one time axis. Every series keeps all its points (downsampling is the job service's, before this).
#pragma once

#include <string>
#include <vector>

namespace baton {

struct ChartSeries {
  std::string name;       // the legend's label; data-series="..." on its polyline
  std::string css_class;  // colours come from the style sheet: .s-raw, .s-smooth, .s-val, ...
  std::vector<double> x, y;
  std::vector<double> low, high;  // optional band around y (same length as x)
  bool markers = false;           // a dot on every point (sparse series: validations)
};

struct ChartOptions {
  std::string id;               // the <svg> element's id
  std::string title;            // drawn at the top left
  double x_min = 0, x_max = 1;  // the shared axis
  double width = 900, height = 220;
  bool log_y = false;  // a log axis (values ≤ 0 are left out)
};

std::string SvgLineChart(const ChartOptions& options, const std::vector<ChartSeries>& series);

// Exponential moving average, debiased as TensorBoard's smoothing is: smoothing 0 returns the values, 0.99 nearly
// flattens them.
std::vector<double> Smooth(const std::vector<double>& values, double smoothing);

// About `count` round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart).
std::vector<double> NiceTicks(double lo, double hi, int count);

}  // namespace baton
