// SizeSchedule: the one parser and writer of the image-size text (loader.h). A ramp is
// expanded into its steps once here, so At() is the same binary search for every shape.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "loader/option_specs.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace {

constexpr std::uint64_t kMaxRampEpoch = 1000000;

std::string SizeText(ImageSize s) {
  return s.height == s.width ? std::to_string(s.height)
                             : std::to_string(s.height) + "x" + std::to_string(s.width);
}

struct Reader {
  std::string_view whole;
  [[noreturn]] void Fail(const std::string& why) const {
    throw std::invalid_argument("image_size '" + std::string(whole) + "': " + why);
  }
  std::uint64_t Number(std::string_view token, const char* what) const {
    std::uint64_t value = 0;
    const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (token.empty() || error != std::errc() || end != token.data() + token.size()) {
      Fail(std::string(what) + " '" + std::string(token) + "' is not a whole number");
    }
    return value;
  }
  int Side(std::string_view token) const {
    const std::uint64_t side = Number(token, "size");
    if (auto problem = RangeProblem(kImageSize, "size", static_cast<double>(side))) Fail(*problem);
    return static_cast<int>(side);
  }
  ImageSize Size(std::string_view token) const {
    const std::size_t x = token.find('x');
    if (x == std::string_view::npos) return {Side(token), Side(token)};
    return {Side(token.substr(0, x)), Side(token.substr(x + 1))};
  }
};

std::vector<std::string_view> Split(std::string_view text, char at) {
  std::vector<std::string_view> parts;
  for (std::size_t begin = 0;;) {
    const std::size_t end = text.find(at, begin);
    parts.push_back(text.substr(begin, end - begin));
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

}  // namespace

SizeSchedule::SizeSchedule(int side) : SizeSchedule(ImageSize{side, side}) {}

SizeSchedule::SizeSchedule(ImageSize size) : steps_{{0, size}}, text_(SizeText(size)) {}

SizeSchedule SizeSchedule::Parse(std::string_view text) {
  const Reader r{text};
  SizeSchedule s;
  s.steps_.clear();
  if (text.starts_with("ramp:")) {
    const auto parts = Split(text.substr(5), ',');
    if (parts.size() != 4 && parts.size() != 5) r.Fail("a ramp is START,END,FIRST,LAST[,STEP]");
    const int start = r.Side(parts[0]);
    const int end = r.Side(parts[1]);
    const std::uint64_t first = r.Number(parts[2], "first epoch");
    const std::uint64_t last = r.Number(parts[3], "last epoch");
    const std::uint64_t step = parts.size() == 5 ? r.Number(parts[4], "step") : 32;
    if (start > end) r.Fail("the ramp's start size is above its end size");
    if (first >= last) r.Fail("the ramp's first epoch must be before its last");
    if (last > kMaxRampEpoch) r.Fail("the ramp's last epoch must be at most 1000000");
    if (step < 1 || step > 16384) r.Fail("step must be between 1 and 16384");
    s.steps_.push_back({0, {start, start}});
    // FFCV's get_resolution: np.interp, then np.round (half to even, as nearbyint) to STEP.
    const double slope = static_cast<double>(end - start) / static_cast<double>(last - first);
    for (std::uint64_t epoch = first + 1; epoch <= last; ++epoch) {
      double side = end;
      if (epoch < last) {
        const double interp = slope * static_cast<double>(epoch - first) + start;
        side = std::nearbyint(interp / static_cast<double>(step)) * static_cast<double>(step);
      }
      if (side < 1) r.Fail("epoch " + std::to_string(epoch) + " rounds to size 0");
      const int v = static_cast<int>(side);
      if (s.steps_.back().second.height != v) s.steps_.push_back({epoch, {v, v}});
    }
    s.text_ = "ramp:" + std::to_string(start) + "," + std::to_string(end) + "," +
              std::to_string(first) + "," + std::to_string(last) + "," + std::to_string(step);
    return s;
  }
  const auto parts = Split(text, ',');
  s.steps_.push_back({0, r.Size(parts[0])});
  s.text_ = SizeText(s.steps_[0].second);
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::size_t colon = parts[i].find(':');
    if (colon == std::string_view::npos)
      r.Fail("'" + std::string(parts[i]) + "' is not EPOCH:SIZE");
    const std::uint64_t epoch = r.Number(parts[i].substr(0, colon), "epoch");
    if (epoch <= s.steps_.back().first) {
      r.Fail("epochs must rise (" + std::to_string(epoch) + " after " +
             std::to_string(s.steps_.back().first) + ")");
    }
    s.steps_.push_back({epoch, r.Size(parts[i].substr(colon + 1))});
    s.text_.append(",").append(std::to_string(epoch)).append(":");
    s.text_.append(SizeText(s.steps_.back().second));
  }
  return s;
}

ImageSize SizeSchedule::At(std::uint64_t epoch) const {
  const auto after =
      std::upper_bound(steps_.begin(), steps_.end(), epoch,
                       [](std::uint64_t e, const auto& step) { return e < step.first; });
  return std::prev(after)->second;
}

ImageSize SizeSchedule::Largest() const {
  ImageSize largest;
  for (const auto& [epoch, size] : steps_) {
    if (std::int64_t{size.height} * size.width > std::int64_t{largest.height} * largest.width) {
      largest = size;
    }
  }
  return largest;
}

}  // namespace tilefeed::loader
