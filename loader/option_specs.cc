#include "loader/option_specs.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace tilefeed::loader {
namespace {

// The table in one array; SharedOptions() and FindOption() read it.
constexpr std::array kSharedOptions = {
    kBatchSize,
    kImageSize,
    kMode,
    kEvalResize,
    kDecodeScaling,
    kAugment,
    kWorkers,
    kPrefetchDepth,
    kCpuShare,
    kMemoryBudget,
    kSeed,
    kSlice,
    kEpochs,
    kDropLast,
    kBadSamplePolicy,
    kMaxSubstituteAttempts,
    kHeldSlotsTimeout,
    kSplit,
    kCacheDir,
    kCacheLimit,
    kS3Endpoint,
    kS3Addressing,
    kRemoteRetries,
    kRemoteInFlight,
    kBadSampleLines,
    kHeartbeat,
    kPeerTimeout,
    kReaderTimeout,
    kReconnectWindow,
};

// A byte count in the largest binary unit that divides it: 4MiB, 10GiB, 1000.
std::string SizeText(double bytes) {
  static constexpr std::pair<double, const char*> kUnits[] = {
      {1ULL << 40, "TiB"}, {1ULL << 30, "GiB"}, {1ULL << 20, "MiB"}, {1ULL << 10, "KiB"}};
  for (const auto& [scale, unit] : kUnits) {
    if (bytes >= scale && std::fmod(bytes, scale) == 0) return NumberText(bytes / scale) + unit;
  }
  return NumberText(bytes);
}

bool Numeric(OptionKind kind) {
  return kind == OptionKind::kInteger || kind == OptionKind::kNumber ||
         kind == OptionKind::kSeconds || kind == OptionKind::kSize;
}

}  // namespace

std::string NumberText(double value) {
  char text[64];
  const bool whole = std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e18;
  return {text, (whole ? std::to_chars(text, text + sizeof text, value, std::chars_format::fixed)
                       : std::to_chars(text, text + sizeof text, value))
                    .ptr};
}

std::string RangeText(const OptionSpec& spec) {
  if (!Numeric(spec.kind)) return {};
  const std::string either = spec.auto_value ? "auto or " : "";
  const auto text = [&](double v) {
    return spec.kind == OptionKind::kSize ? SizeText(v) : NumberText(v);
  };
  if (spec.max == kNoMax) {
    return either + (spec.min_exclusive ? "above " : "at least ") + text(spec.min);
  }
  if (spec.min_exclusive) {
    return either + "above " + text(spec.min) + " and at most " + text(spec.max);
  }
  return either + "between " + text(spec.min) + " and " + text(spec.max);
}

bool InRange(const OptionSpec& spec, double value) {
  if (std::isnan(value)) return false;
  const bool low = spec.min_exclusive ? value <= spec.min : value < spec.min;
  return !low && value <= spec.max;
}

std::optional<std::string> RangeProblem(const OptionSpec& spec, std::string_view name,
                                        double value) {
  if (InRange(spec, value)) return std::nullopt;
  return std::string(name) + " must be " + RangeText(spec) + ", got " + NumberText(value);
}

std::optional<std::uint64_t> ParseByteSize(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 19) return std::nullopt;
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const std::uint64_t digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  std::string unit;
  for (const char c : text.substr(digits)) {
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ULL << 10},
      {"kib", 1ULL << 10},
      {"m", 1ULL << 20},
      {"mib", 1ULL << 20},
      {"g", 1ULL << 30},
      {"gib", 1ULL << 30},
      {"t", 1ULL << 40},
      {"tib", 1ULL << 40},
      {"kb", 1000},
      {"mb", 1000 * 1000},
      {"gb", 1000 * 1000 * 1000},
      {"tb", 1000ULL * 1000 * 1000 * 1000},
  };
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    if (value > UINT64_MAX / scale) return std::nullopt;
    return value * scale;
  }
  return std::nullopt;
}

std::string ByteSizeText(std::uint64_t bytes) { return SizeText(static_cast<double>(bytes)); }

std::optional<std::pair<int, int>> ParseSliceText(std::string_view text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const auto number = [](std::string_view digits) -> std::optional<int> {
    if (digits.empty() || digits.size() > 9) return std::nullopt;
    int value = 0;
    for (const char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + (c - '0');
    }
    return value;
  };
  const std::optional<int> index = number(text.substr(0, slash));
  const std::optional<int> count = number(text.substr(slash + 1));
  if (!index || !count || *count < 1 || *index >= *count) return std::nullopt;
  return std::pair(*index, *count);
}

std::span<const OptionSpec> SharedOptions() { return kSharedOptions; }

const OptionSpec* FindOption(std::string_view name) {
  for (const OptionSpec& spec : kSharedOptions) {
    if (name == spec.flag || (!spec.keyword.empty() && name == spec.keyword)) {
      return &spec;
    }
  }
  return nullptr;
}

}  // namespace tilefeed::loader
