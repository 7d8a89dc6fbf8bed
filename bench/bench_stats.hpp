// Summary statistics the bench programs print: the median (the mean of the two middle values for
// an even count), the mean, the sample standard deviation (n - 1) and the CV in percent of the mean.
// 0 where a figure is not defined (no values; one value for the sd).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace d2k::bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

inline double sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double q = 0;
  for (double x : v) q += (x - m) * (x - m);
  return std::sqrt(q / static_cast<double>(v.size() - 1));
}

inline double cv_percent(const std::vector<double>& v) {
  const double m = mean(v);
  return m > 0 ? 100 * sd(v) / m : 0;
}

}  // namespace d2k::bench
