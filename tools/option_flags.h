#pragma once

// Command-line flags from the shared option table (loader/option_specs.h): the one
// place where a CLI11 flag is made from an OptionSpec, so every tool and benchmark driver
// spells, bounds, explains and defaults a shared option the same way.
//
//   loader::LoaderOptions options;
//   tools::AddLoaderFlags(app, options);                 // --batch-size ... --seed
//   tools::AddOption(app, loader::kSplit, split);        // std::string
//   tools::AddOption(app, loader::kCacheLimit, bytes);   // std::uint64_t, "10GiB" accepted
//   tools::AddOption(app, loader::kHeartbeat, seconds);  // double, in seconds
//   tools::AddSliceOption(app, slice);                   // --slice I/N
//
// What each registered flag gets from its spec:
//   - the flag and its help; "[default]" is the bound variable's value when registered (a
//     tool that starts from another default shows it there);
//   - numbers: the spec's range, refused as "--image-size must be between 1 and 16384, got 0"
//     by tools::ParseArgs (cli_checks.h; integers also refuse "1.5" and wrapped negatives);
//   - choices: only the spec's values; sizes: ParseByteSize's spellings within the range.
// Each option has one spelling: the project has no release, so a renamed flag keeps no alias.
// Header-only; tools/ is a folder of executables, not a library.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "loader/option_specs.h"
#include "tilefeed/loader/loader.h"
#include "tools/cli_checks.h"

namespace tilefeed::tools {

namespace detail {

inline std::string Text(std::string_view view) { return std::string(view); }

// The range of a numeric spec as a validator of T's kind, worded with RangeText.
template <typename T>
CLI::Validator SpecRange(const loader::OptionSpec& spec) {
  std::optional<T> max;
  if (spec.max != loader::kNoMax) max = static_cast<T>(spec.max);
  return RangeCheck<T>(static_cast<T>(spec.min), max, spec.min_exclusive, loader::RangeText(spec));
}

inline CLI::Validator SizeCheck(const loader::OptionSpec& spec) {
  return CLI::Validator(
      [spec](std::string& text) -> std::string {
        const std::optional<std::uint64_t> bytes = loader::ParseByteSize(text);
        if (!bytes)
          return "must be a size such as 20GiB, 512M or 1000000 (bytes), got '" + text + "'";
        if (loader::InRange(spec, static_cast<double>(*bytes))) return {};
        return "must be " + loader::RangeText(spec) + ", got " + text;
      },
      "SIZE");
}

}  // namespace detail

// A numeric spec (kInteger, kNumber, kSeconds) bound to a number of any arithmetic type.
template <typename T>
requires std::is_arithmetic_v<T> &&
    (!std::is_same_v<T, bool>)CLI::Option* AddOption(CLI::App& app, const loader::OptionSpec& spec,
                                                     T& value) {
  CLI::Option* option = app.add_option(detail::Text(spec.flag), value, detail::Text(spec.help))
                            ->check(detail::SpecRange<T>(spec))
                            ->capture_default_str();
  if (spec.kind == loader::OptionKind::kSeconds) option->type_name("SECONDS");
  return option;
}

// A kSize spec bound to a byte count: "10GiB", "512M", "1000000".
inline CLI::Option* AddSizeOption(CLI::App& app, const loader::OptionSpec& spec,
                                  std::uint64_t& bytes) {
  return app
      .add_option_function<std::string>(
          detail::Text(spec.flag),
          [&bytes](const std::string& text) { bytes = *loader::ParseByteSize(text); },
          detail::Text(spec.help))
      ->check(detail::SizeCheck(spec))
      ->type_name("SIZE")
      ->default_str(loader::ByteSizeText(bytes));
}

// A kChoice or kText spec bound to its text.
inline CLI::Option* AddOption(CLI::App& app, const loader::OptionSpec& spec, std::string& value) {
  CLI::Option* option = app.add_option(detail::Text(spec.flag), value, detail::Text(spec.help));
  if (spec.kind == loader::OptionKind::kChoice) {
    std::vector<std::string> choices(spec.choices.begin(), spec.choices.end());
    option->check(CLI::IsMember(choices));
  }
  if (!value.empty()) option->capture_default_str();
  return option;
}

// A kFlag spec. A flag that starts on also gets --no-NAME to turn it off.
inline CLI::Option* AddOption(CLI::App& app, const loader::OptionSpec& spec, bool& value) {
  std::string names = detail::Text(spec.flag);
  if (value) names += ",!--no-" + names.substr(2);
  return app.add_flag(names, value, detail::Text(spec.help))->capture_default_str();
}

// loader::kMode bound to the enum.
inline CLI::Option* AddOption(CLI::App& app, const loader::OptionSpec& spec, loader::Mode& mode) {
  return app
      .add_option_function<std::string>(
          detail::Text(spec.flag),
          [&mode](const std::string& text) {
            mode = text == "eval" ? loader::Mode::kEval : loader::Mode::kTrain;
          },
          detail::Text(spec.help))
      ->check(CLI::IsMember({"train", "eval"}))
      ->default_str(mode == loader::Mode::kEval ? "eval" : "train");
}

// loader::kBadSamplePolicy bound to the enum.
inline CLI::Option* AddOption(CLI::App& app, const loader::OptionSpec& spec,
                              loader::BadSamplePolicy& policy) {
  return app
      .add_option_function<std::string>(
          detail::Text(spec.flag),
          [&policy](const std::string& text) {
            policy =
                text == "fail" ? loader::BadSamplePolicy::kFail : loader::BadSamplePolicy::kSkip;
          },
          detail::Text(spec.help))
      ->check(CLI::IsMember({"skip", "fail"}))
      ->default_str(policy == loader::BadSamplePolicy::kFail ? "fail" : "skip");
}

// loader::kSlice as --slice INDEX/COUNT. `slice` stays nullopt when it is not given (the
// launcher's instance, or 0/1).
inline CLI::Option* AddSliceOption(CLI::App& app, std::optional<loader::InstanceSlice>& slice,
                                   const loader::OptionSpec& spec = loader::kSlice) {
  const auto set = [&slice](const std::string& text) {
    const auto parsed = loader::ParseSliceText(text);
    slice = loader::InstanceSlice{parsed->first, parsed->second};
  };
  const CLI::Validator check(
      [](std::string& text) -> std::string {
        if (loader::ParseSliceText(text)) return {};
        return "must be INDEX/COUNT with 0 <= INDEX < COUNT, got '" + text + "'";
      },
      "INDEX/COUNT");
  return app
      .add_option_function<std::string>(detail::Text(spec.flag), set, detail::Text(spec.help))
      ->check(check);
}

// The loader options every loading tool takes: --batch-size, --image-size, --mode,
// --eval-dct-scaling, --workers, --prefetch-depth and --seed, bound to `options`.
inline void AddLoaderFlags(CLI::App& app, loader::LoaderOptions& options) {
  AddOption(app, loader::kBatchSize, options.batch_size);
  AddOption(app, loader::kImageSize, options.image_size);
  AddOption(app, loader::kMode, options.mode);
  AddOption(app, loader::kEvalDctScaling, options.eval_dct_scaling);
  AddOption(app, loader::kWorkers, options.workers);
  AddOption(app, loader::kPrefetchDepth, options.prefetch_depth);
  AddOption(app, loader::kSeed, options.seed);
}

}  // namespace tilefeed::tools
