#include "tilefeed/loader/augment.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "codecs/image_ops.h"
#include "loader/option_specs.h"

namespace tilefeed::loader {
namespace {

// Python's round(): halves go to even. std::nearbyint does the same in the default
// rounding mode, which is what torchvision's int(round(...)) gives; std::lround would not.
double RoundHalfEven(double x) { return std::nearbyint(x); }

void RequireImageSize(const char* function, int width, int height) {
  if (width < 1 || height < 1) {
    throw std::invalid_argument(std::string(function) + ": image size must be positive, got " +
                                std::to_string(width) + "x" + std::to_string(height));
  }
}

void RequireRange(const char* function, const char* name, double min, double max) {
  if (!std::isfinite(min) || !std::isfinite(max) || min <= 0 || min > max) {
    throw std::invalid_argument(std::string(function) + ": " + name +
                                " range must satisfy 0 < min <= max, got [" + std::to_string(min) +
                                ", " + std::to_string(max) + "]");
  }
}

double UniformIn(SampleRng& rng, double lo, double hi) { return lo + (hi - lo) * rng.Uniform(); }

// Rounds a positive length to whole pixels in [1, limit].
int ClampLength(double length, int limit) {
  return static_cast<int>(std::clamp(RoundHalfEven(length), 1.0, static_cast<double>(limit)));
}

}  // namespace

codecs::Rect RandomResizedCrop(int width, int height, const RandomResizedCropParams& params,
                               SampleRng& rng) {
  RequireImageSize("RandomResizedCrop", width, height);
  RequireRange("RandomResizedCrop", "scale", params.scale_min, params.scale_max);
  RequireRange("RandomResizedCrop", "ratio", params.ratio_min, params.ratio_max);

  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_ratio_min = std::log(params.ratio_min);
  const double log_ratio_max = std::log(params.ratio_max);
  // Draw order (area, ratio, then y before x) mirrors torchvision, so the two consume
  // their streams in the same pattern.
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * UniformIn(rng, params.scale_min, params.scale_max);
    const double aspect_ratio = std::exp(UniformIn(rng, log_ratio_min, log_ratio_max));
    // Compared as doubles: a huge scale_max may not fit in an int.
    const double w = RoundHalfEven(std::sqrt(target_area * aspect_ratio));
    const double h = RoundHalfEven(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int crop_width = static_cast<int>(w);
      const int crop_height = static_cast<int>(h);
      const auto y = static_cast<int>(rng.UniformInt(0, height - crop_height));
      const auto x = static_cast<int>(rng.UniformInt(0, width - crop_width));
      return {x, y, crop_width, crop_height};
    }
  }

  // Fallback: the largest central crop whose aspect ratio is inside the range. Clamping to
  // at least one pixel only matters for extreme ratio ranges on tiny images.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int crop_width = width;
  int crop_height = height;
  if (in_ratio < params.ratio_min) {
    crop_height = ClampLength(width / params.ratio_min, height);
  } else if (in_ratio > params.ratio_max) {
    crop_width = ClampLength(height * params.ratio_max, width);
  }
  return {(width - crop_width) / 2, (height - crop_height) / 2, crop_width, crop_height};
}

codecs::CropPlan CenterCropAfterResize(int width, int height, int resize_shorter, int crop_width,
                                       int crop_height, bool dct_scaling) {
  RequireImageSize("CenterCropAfterResize", width, height);
  if (resize_shorter < 1 || crop_width < 1 || crop_height < 1) {
    throw std::invalid_argument(
        "CenterCropAfterResize: resize and crop sizes must be positive, got resize " +
        std::to_string(resize_shorter) + ", crop " + std::to_string(crop_width) + "x" +
        std::to_string(crop_height));
  }
  // torchvision's _compute_resized_output_size: Python's int(new_short * long / short),
  // a correctly rounded division of exact integers, truncated; so is this.
  const std::int64_t shorter = std::min(width, height);
  const std::int64_t longer = std::max(width, height);
  const auto new_long = static_cast<std::int64_t>(static_cast<double>(resize_shorter * longer) /
                                                  static_cast<double>(shorter));
  const std::int64_t new_width = width <= height ? resize_shorter : new_long;
  const std::int64_t new_height = width <= height ? new_long : resize_shorter;
  if (crop_width > new_width || crop_height > new_height) {
    throw std::invalid_argument("CenterCropAfterResize: a " + std::to_string(crop_width) + "x" +
                                std::to_string(crop_height) + " crop does not fit the " +
                                std::to_string(new_width) + "x" + std::to_string(new_height) +
                                " resized image");
  }
  // torchvision's CenterCrop: int(round((size - crop) / 2.0)), in resized pixels.
  const double left = RoundHalfEven(static_cast<double>(new_width - crop_width) / 2.0);
  const double top = RoundHalfEven(static_cast<double>(new_height - crop_height) / 2.0);
  // PIL maps resized pixel i to source [i * s, (i + 1) * s) with s = source / resized.
  const double sx = static_cast<double>(width) / static_cast<double>(new_width);
  const double sy = static_cast<double>(height) / static_cast<double>(new_height);
  codecs::CropPlan plan;
  // (Clamped: (new_width) * sx may round past `width` by an ulp.)
  plan.box = {left * sx, top * sy, std::min((left + crop_width) * sx, double(width)),
              std::min((top + crop_height) * sy, double(height))};
  plan.dct_scaling = dct_scaling;
  // PIL's filter for output i is centred at c = box0 + (i + 1/2) s and reads the pixels
  // [trunc(c - support + 1/2), trunc(c + support + 1/2)), support = max(s, 1). With
  // r = support - s/2 - 1/2, the first output reads from floor(box0 - r) and the last up
  // to, not including, floor(box1 + r + 1), which ceil(box1 + r + 0.01) reaches; the
  // 0.01 also absorbs the rounding of c. The crop is exactly those pixels: the least
  // decoding, with every pixel PIL weighs (a test compares with the whole image decoded
  // and resized). A DCT-scaled decode's pixels are up to max(s, 1) source pixels wide (it
  // scales only while they stay under s): one and a half such pixels more on each side,
  // and half a source pixel for rounding them.
  auto reach = [dct_scaling](double s) {
    const double support = std::max(s, 1.0);
    const double r = support - 0.5 * s - 0.5;
    return (dct_scaling ? r + 0.5 + 1.5 * support : r) + 0.01;
  };
  const double reach_x = reach(sx);
  const double reach_y = reach(sy);
  const auto x0 = static_cast<int>(std::max(0.0, std::floor(plan.box.x0 - reach_x)));
  const auto y0 = static_cast<int>(std::max(0.0, std::floor(plan.box.y0 - reach_y)));
  const auto x1 = static_cast<int>(std::min(double(width), std::ceil(plan.box.x1 + reach_x)));
  const auto y1 = static_cast<int>(std::min(double(height), std::ceil(plan.box.y1 + reach_y)));
  plan.crop = {x0, y0, x1 - x0, y1 - y0};
  return plan;
}

bool DrawFlip(SampleRng& rng, double probability) {
  if (!(probability >= 0.0 && probability <= 1.0)) {
    throw std::invalid_argument("DrawFlip: probability must be in [0, 1], got " +
                                std::to_string(probability));
  }
  // Uniform() < 1 always, so probability 1 always flips and 0 never does.
  return rng.Uniform() < probability;
}

}  // namespace tilefeed::loader

// ---- The augment spec ------------------------------------------------------------------------

namespace tilefeed::loader {
namespace {

using Field = double AugmentOp::*;
constexpr OptionSpec kProbability{.kind = OptionKind::kNumber, .max = 1};
constexpr OptionSpec kPositive{.kind = OptionKind::kNumber, .min_exclusive = true};
constexpr OptionSpec kLevel{.kind = OptionKind::kInteger, .max = 255};
constexpr OptionSpec kBins{.kind = OptionKind::kInteger, .min = 2, .max = 1 << 20};
constexpr const char* kNotANumber = "expected a number";

// One parameter: a number, or a (min, max) pair when `second` is set, in `range`. A pair with
// a `center` may also be given as a number x: (center - x, center + x), the first at least
// range.min (torchvision's ColorJitter). `not_number` is the refusal of a value that is not one.
struct Param {
  std::string_view name;
  Field first;
  Field second;
  double default_first;
  double default_second;
  OptionSpec range;
  double center = std::numeric_limits<double>::quiet_NaN();
  const char* not_number = kNotANumber;
};

using O = AugmentOp;
constexpr Param kCropParams[] = {
    {"scale", &O::scale_min, &O::scale_max, 0.08, 1.0, kPositive},
    {"ratio", &O::ratio_min, &O::ratio_max, 3.0 / 4.0, 4.0 / 3.0, kPositive}};
constexpr Param kFlipParams[] = {{"p", &O::p, nullptr, 0.5, 0, kProbability}};
constexpr OptionSpec kFactor{.kind = OptionKind::kNumber};
constexpr OptionSpec kHue{.kind = OptionKind::kNumber, .min = -0.5, .max = 0.5};
constexpr Param kJitterParams[] = {
    {"brightness", &O::brightness_min, &O::brightness_max, 1, 1, kFactor, 1},
    {"contrast", &O::contrast_min, &O::contrast_max, 1, 1, kFactor, 1},
    {"saturation", &O::saturation_min, &O::saturation_max, 1, 1, kFactor, 1},
    {"hue", &O::hue_min, &O::hue_max, 0, 0, kHue, 0}};
constexpr Param kRandAugmentParams[] = {
    {"num_ops", &O::num_ops, nullptr, 2, 0, {.kind = OptionKind::kInteger, .max = 64}},
    {"magnitude", &O::magnitude, nullptr, 9, 0, {.kind = OptionKind::kInteger}},
    {"num_magnitude_bins", &O::num_magnitude_bins, nullptr, 31, 0, kBins},
    {"fill", &O::fill, nullptr, 0, 0, kLevel}};
constexpr Param kTrivialParams[] = {
    {"num_magnitude_bins", &O::num_magnitude_bins, nullptr, 31, 0, kBins},
    {"fill", &O::fill, nullptr, 0, 0, kLevel}};
constexpr Param kErasingParams[] = {
    {"p", &O::p, nullptr, 0.5, 0, kProbability},
    {"scale", &O::scale_min, &O::scale_max, 0.02, 0.33, kProbability},
    {"ratio", &O::ratio_min, &O::ratio_max, 0.3, 3.3, kPositive},
    {"value", &O::fill, nullptr, 0, 0, kLevel, std::numeric_limits<double>::quiet_NaN(),
     "RandomErasing value takes one uint8 level (the erase runs on the uint8 crop, before any "
     "normalisation); \"random\" and per-channel values are not supported"}};
constexpr Param kGrayscaleParams[] = {{"p", &O::p, nullptr, 0.1, 0, kProbability}};

// The ops in AugmentKind's order.
constexpr std::pair<std::string_view, std::span<const Param>> kOps[] = {
    {"RandomResizedCrop", kCropParams},     {"RandomHorizontalFlip", kFlipParams},
    {"ColorJitter", kJitterParams},         {"RandAugment", kRandAugmentParams},
    {"TrivialAugmentWide", kTrivialParams}, {"RandomErasing", kErasingParams},
    {"RandomGrayscale", kGrayscaleParams}};

std::string_view NameOf(AugmentKind kind) { return kOps[static_cast<int>(kind)].first; }
std::span<const Param> ParamsOf(AugmentKind kind) { return kOps[static_cast<int>(kind)].second; }

// Appends `item` to the comma-separated `list`.
void Listed(std::string& list, std::string_view item) {
  if (!list.empty()) list += ", ";
  list += item;
}

// Why `op` cannot be drawn from (a parameter out of its range), or "".
std::string OpProblem(const AugmentOp& op) {
  const std::string name(NameOf(op.kind));
  for (const Param& param : ParamsOf(op.kind)) {
    const std::string what = name + " " + std::string(param.name);
    for (const Field field : {param.first, param.second}) {
      if (field == nullptr) continue;
      if (std::isinf(op.*field)) return what + " must be finite, got " + NumberText(op.*field);
      if (auto problem = RangeProblem(param.range, what, op.*field)) return *problem;
      if (param.range.kind == OptionKind::kInteger && op.*field != std::floor(op.*field)) {
        return what + " must be a whole number, got " + NumberText(op.*field);
      }
    }
    if (param.second != nullptr && op.*param.first > op.*param.second) {
      return what + "=(min, max) needs min <= max, got (" + NumberText(op.*param.first) + ", " +
             NumberText(op.*param.second) + ")";
    }
  }
  if (op.kind == AugmentKind::kRandAugment && op.magnitude >= op.num_magnitude_bins) {
    return "RandAugment magnitude must be below num_magnitude_bins (" +
           NumberText(op.num_magnitude_bins) + "), got " + NumberText(op.magnitude);
  }
  return {};
}

// Reads the text form; a failure names the column.
class SpecReader {
 public:
  explicit SpecReader(std::string_view text) : text_(text) {}

  AugmentSpec Read() {
    AugmentSpec spec;
    const bool bracket = Take('[');
    if (bracket ? !Take(']') : Skip() != text_.size()) {
      do spec.push_back(ReadOp());
      while (Take(','));
      if (bracket) Expect(']');
    }
    if (Skip() != text_.size()) Fail("unexpected '" + std::string(text_.substr(pos_, 1)) + "'");
    return spec;
  }

 private:
  AugmentOp ReadOp() {
    const std::size_t start = Skip();
    const std::string name = Word();
    std::string names;
    AugmentOp op;
    for (std::size_t k = 0; k < std::size(kOps); ++k) {
      if (kOps[k].first == name) op = DefaultOp(static_cast<AugmentKind>(k));
      Listed(names, kOps[k].first);
    }
    if (NameOf(op.kind) != name) Fail("unknown op '" + name + "' (the ops: " + names + ")", start);
    const std::span<const Param> params = ParamsOf(op.kind);
    std::string takes;
    for (const Param& p : params) Listed(takes, p.name);
    Expect('(');
    std::vector<const Param*> given;
    while (!Take(')')) {
      if (!given.empty()) Expect(',');
      const std::size_t mark = Skip();
      std::string key = Word();
      if (key.empty() || !Take('=')) {
        pos_ = mark;
        key.clear();
      }
      const auto named = std::ranges::find(params, key, &Param::name);
      const Param* param = key.empty()
                               ? (given.size() < params.size() ? &params[given.size()] : nullptr)
                               : (named == params.end() ? nullptr : &*named);
      if (param == nullptr) {
        std::string why = name;
        why += key.empty() ? " has too many arguments" : " has no parameter '" + key + "'";
        Fail(why.append(" (it takes ").append(takes).append(")"), mark);
      }
      if (std::ranges::find(given, param) != given.end()) {
        Fail(name + " " + std::string(param->name) + " given twice");
      }
      given.push_back(param);
      if (param->second != nullptr && !std::isnan(param->center) && !Take('(')) {
        const double x = Number();  // ColorJitter's number form: x >= 0 (hue: <= 0.5)
        const OptionSpec number{.kind = OptionKind::kNumber, .max = param->range.max};
        if (auto problem = RangeProblem(number, name + " " + std::string(param->name), x)) {
          Fail(*problem);
        }
        op.*param->first = std::max(param->range.min, param->center - x);
        op.*param->second = param->center + x;
        continue;
      }
      if (param->second != nullptr && std::isnan(param->center)) Expect('(');  // a pair
      op.*param->first = Number(param->not_number);
      if (param->second != nullptr) {
        Expect(',');
        op.*param->second = Number();
        Expect(')');
      }
    }
    if (std::string problem = OpProblem(op); !problem.empty()) Fail(problem);
    return op;
  }

  double Number(const char* why = kNotANumber) {
    double value = 0;
    const char* begin = text_.data() + Skip();
    const auto [end, error] = std::from_chars(begin, text_.data() + text_.size(), value);
    if (error != std::errc()) Fail(why);
    pos_ += static_cast<std::size_t>(end - begin);
    return value;
  }
  std::string Word() {
    const std::size_t start = Skip();
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) != 0 || text_[pos_] == '_')) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  std::size_t Skip() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])) != 0) {
      ++pos_;
    }
    return pos_;
  }
  bool Take(char c) {
    const bool here = Skip() < text_.size() && text_[pos_] == c;
    pos_ += here ? 1 : 0;
    return here;
  }
  void Expect(char c) {
    if (!Take(c)) Fail(std::string("expected '") + c + "'");
  }
  [[noreturn]] void Fail(const std::string& why, std::optional<std::size_t> at = {}) const {
    throw std::invalid_argument("augment: " + why + " at column " +
                                std::to_string(at.value_or(pos_) + 1) + " of '" +
                                std::string(text_) + "'");
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

AugmentOp DefaultOp(AugmentKind kind) {
  AugmentOp op{.kind = kind};
  for (const Param& param : ParamsOf(kind)) {
    op.*param.first = param.default_first;
    if (param.second != nullptr) op.*param.second = param.default_second;
  }
  return op;
}

AugmentSpec DefaultAugment() {
  return {DefaultOp(AugmentKind::kRandomResizedCrop),
          DefaultOp(AugmentKind::kRandomHorizontalFlip)};
}

AugmentSpec ParseAugmentSpec(std::string_view text) { return SpecReader(text).Read(); }

std::string AugmentSpecText(const AugmentSpec& spec) {
  std::string text;
  for (const AugmentOp& op : spec) {
    std::string args;
    for (const Param& param : ParamsOf(op.kind)) {
      const bool pair = param.second != nullptr;
      if (op.*param.first == param.default_first &&
          (!pair || op.*param.second == param.default_second)) {
        continue;
      }
      std::string arg = std::string(param.name) + "=";
      if (pair) arg += '(';
      arg += NumberText(op.*param.first);
      if (pair) arg += ", " + NumberText(op.*param.second) + ")";
      Listed(args, arg);
    }
    Listed(text, std::string(NameOf(op.kind)) + "(" + args + ")");
  }
  return text;
}

std::optional<std::string> AugmentProblem(const AugmentSpec& spec) {
  if (spec.empty() || spec[0].kind != AugmentKind::kRandomResizedCrop) {
    return "augment must start with RandomResizedCrop (train mode draws the crop before the "
           "decode), got '" +
           AugmentSpecText(spec) + "'";
  }
  for (std::size_t i = 0; i < spec.size(); ++i) {
    const AugmentKind kind = spec[i].kind;
    if ((i > 0 && kind == AugmentKind::kRandomResizedCrop) ||
        (i != 1 && kind == AugmentKind::kRandomHorizontalFlip)) {
      return "augment: " + std::string(NameOf(kind)) + " can only come " +
             (i > 0 && kind == AugmentKind::kRandomResizedCrop ? "first"
                                                               : "right after RandomResizedCrop") +
             ", got '" + AugmentSpecText(spec) + "'";
    }
    if (std::string problem = OpProblem(spec[i]); !problem.empty()) return "augment: " + problem;
  }
  return std::nullopt;
}

// ---- Draws and pixels ------------------------------------------------------------------------

namespace {

// ColorJitter.get_params: a random order of the four, then each factor that is on (a range of
// just its center is torchvision's None: no draw, no op).
void DrawColorJitter(const AugmentOp& op, SampleRng& rng, std::vector<PixelOp>& out) {
  int order[4] = {0, 1, 2, 3};
  for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.UniformInt(0, i)]);
  bool on[4] = {};
  double factors[4] = {};
  for (int k = 0; k < 4; ++k) {  // kJitterParams' order is PixelOpKind's, from kBrightness
    const Param& p = kJitterParams[k];
    on[k] = op.*p.first != p.center || op.*p.second != p.center;
    if (on[k]) factors[k] = UniformIn(rng, op.*p.first, op.*p.second);
  }
  for (const int k : order) {
    if (on[k]) {
      out.push_back({.kind = static_cast<PixelOpKind>(k + 1), .value = factors[k], .area = {}});
    }
  }
}

// RandAugment (num_ops ops at a fixed magnitude) or TrivialAugmentWide (`wide`: one op at a
// uniform bin): an op uniform among the 14, its magnitude, a sign for the signed ones.
void DrawPolicy(const AugmentOp& op, bool wide, int width, int height, SampleRng& rng,
                std::vector<PixelOp>& out) {
  const int bins = static_cast<int>(op.num_magnitude_bins);
  for (int n = 0; n < (wide ? 1 : static_cast<int>(op.num_ops)); ++n) {
    const auto policy = static_cast<codecs::PolicyOp>(rng.UniformInt(0, codecs::kPolicyOps - 1));
    double magnitude = 0;
    if (policy != codecs::PolicyOp::kIdentity && policy != codecs::PolicyOp::kAutoContrast &&
        policy != codecs::PolicyOp::kEqualize) {
      const auto bin = wide ? rng.UniformInt(0, bins - 1) : static_cast<std::int64_t>(op.magnitude);
      magnitude = codecs::PolicyMagnitude(policy, static_cast<int>(bin), bins, wide, height, width);
    }
    if (codecs::PolicyOpSigned(policy) && rng.UniformInt(0, 1) == 1) magnitude = -magnitude;
    if (policy == codecs::PolicyOp::kIdentity) continue;
    out.push_back({.kind = PixelOpKind::kPolicy,
                   .policy_op = static_cast<int>(policy),
                   .value = magnitude,
                   .fill = static_cast<int>(op.fill),
                   .area = {}});
  }
}

// RandomErasing.get_params: p, then up to 10 tries of an area and a log-uniform ratio.
void DrawErasing(const AugmentOp& op, int width, int height, SampleRng& rng,
                 std::vector<PixelOp>& out) {
  if (!(rng.Uniform() < op.p)) return;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double area = double(width) * height * UniformIn(rng, op.scale_min, op.scale_max);
    const double ratio = std::exp(UniformIn(rng, std::log(op.ratio_min), std::log(op.ratio_max)));
    const double h_size = RoundHalfEven(std::sqrt(area * ratio));  // may not fit an int
    const double w_size = RoundHalfEven(std::sqrt(area / ratio));
    if (!(h_size < height && w_size < width)) continue;
    const auto h = static_cast<int>(h_size), w = static_cast<int>(w_size);
    const auto y = static_cast<int>(rng.UniformInt(0, height - h));
    const auto x = static_cast<int>(rng.UniformInt(0, width - w));
    out.push_back(
        {.kind = PixelOpKind::kErase, .fill = static_cast<int>(op.fill), .area = {x, y, w, h}});
    return;
  }
}

constexpr std::string_view kPolicyNames[] = {
    "Identity", "ShearX",   "ShearY",    "TranslateX", "TranslateY", "Rotate",       "Brightness",
    "Color",    "Contrast", "Sharpness", "Posterize",  "Solarize",   "AutoContrast", "Equalize"};
static_assert(std::size(kPolicyNames) == codecs::kPolicyOps);

}  // namespace

std::string_view PixelOpName(const PixelOp& op) {
  static constexpr std::string_view kNames[] = {"",
                                                "adjust_brightness",
                                                "adjust_contrast",
                                                "adjust_saturation",
                                                "adjust_hue",
                                                "rgb_to_grayscale",
                                                "erase"};
  return op.kind == PixelOpKind::kPolicy ? kPolicyNames[op.policy_op]
                                         : kNames[static_cast<int>(op.kind)];
}

std::vector<PixelOp> DrawPixelOps(const AugmentSpec& spec, int width, int height, SampleRng& rng) {
  std::vector<PixelOp> ops;
  for (const AugmentOp& op : spec) {
    if (op.kind == AugmentKind::kColorJitter) DrawColorJitter(op, rng, ops);
    if (op.kind == AugmentKind::kRandAugment || op.kind == AugmentKind::kTrivialAugmentWide) {
      DrawPolicy(op, op.kind == AugmentKind::kTrivialAugmentWide, width, height, rng, ops);
    }
    if (op.kind == AugmentKind::kRandomErasing) DrawErasing(op, width, height, rng, ops);
    if (op.kind == AugmentKind::kRandomGrayscale && rng.Uniform() < op.p) {
      ops.push_back({.kind = PixelOpKind::kGrayscale, .area = {}});
    }
  }
  return ops;
}

void ApplyPixelOps(std::span<const PixelOp> ops, const codecs::PixelView& image,
                   codecs::ImageOpScratch& scratch) {
  using Adjust = void (*)(const codecs::PixelView&, double);
  static constexpr Adjust kAdjust[] = {nullptr, codecs::AdjustBrightness, codecs::AdjustContrast,
                                       codecs::AdjustSaturation, codecs::AdjustHue};
  for (const PixelOp& op : ops) {
    const auto level = static_cast<std::uint8_t>(op.fill);
    if (op.kind == PixelOpKind::kPolicy) {
      codecs::ApplyPolicyOp(image, static_cast<codecs::PolicyOp>(op.policy_op), op.value,
                            {level, level, level}, scratch);
    } else if (op.kind == PixelOpKind::kGrayscale) {
      codecs::Grayscale(image);
    } else if (op.kind == PixelOpKind::kErase) {
      codecs::Erase(image, op.area, {level, level, level});
    } else {
      kAdjust[static_cast<int>(op.kind)](image, op.value);
    }
  }
}

}  // namespace tilefeed::loader
