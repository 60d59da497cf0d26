#pragma once

// The median the benchmarks report: of repetitions, rounds or paired ratios. The mean of
// the two middle values for an even count; 0 for none.

#include <algorithm>
#include <vector>

namespace tilefeed::bench {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace tilefeed::bench
