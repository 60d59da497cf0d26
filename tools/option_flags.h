#pragma once

// Command-line flags from the shared option table (loader/option_specs.h): the one
// place where a CLI11 flag is made from an OptionSpec, so every tool and benchmark driver
// spells, bounds, explains and defaults a shared option the same way.
//
//   loader::LoaderOptions options;
//   tools::AddLoaderFlags(app, options);                 // --batch-size ... --seed
//   tools::AddOption(app, loader::kSplit, split);        // std::string
//   tools::AddOption(app, loader::kHeartbeat, seconds);  // double, in seconds
//   tools::AddSliceOption(app, slice);                   // --slice I/N
//   tools::AddGroupOption(app, loader::kRemote,          // --remote cache-limit=20GiB,...
//                         {tools::BindKey(loader::kRemoteKeys[1], bytes), ...});
//   tools::AddMetricsFlags(app, metrics_flags);          // --metrics file=F,interval=S
//
// What each registered flag gets from its spec:
//   - the flag and its help; "[default]" is the bound variable's value when registered (a
//     tool that starts from another default shows it there);
//   - numbers: the spec's range, refused as "--image-size must be between 1 and 16384, got 0"
//     by tools::ParseArgs (cli_checks.h; integers also refuse "1.5" and wrapped negatives);
//   - choices: only the spec's values; sizes: ParseByteSize's spellings within the range;
//   - a group (loader::OptionGroup) is one flag of KEY=VALUE pairs, each key checked by its
//     own spec as above ("--remote cache-limit must be at least 4MiB, got 1M"), an unknown key
//     refused naming the group's keys, and --help lists each key with its range and default.
// Each option has one spelling: the project has no release, so a renamed flag keeps no alias.
// Header-only; tools/ is a folder of executables, not a library.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "loader/bad_sample_log.h"
#include "loader/option_specs.h"
#include "metrics/cli.h"
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

inline std::string ChoicesText(const loader::OptionSpec& spec) {
  std::string out;
  for (std::string_view choice : spec.choices) out.append(out.empty() ? "" : ",").append(choice);
  return out;
}

// A kChoice spec's values: "must be one of a,b,c, got 'x'".
inline CLI::Validator ChoiceCheck(const loader::OptionSpec& spec) {
  const auto check = [spec](std::string& text) -> std::string {
    if (std::ranges::find(spec.choices, text) != spec.choices.end()) return {};
    return "must be one of " + ChoicesText(spec) + ", got '" + text + "'";
  };
  return CLI::Validator(check, "");
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
  if (spec.auto_value) {  // "auto" or a number in the range (--workers, --prefetch-depth)
    const auto automatic = static_cast<T>(*spec.auto_value);
    const auto set = [&value, automatic](const std::string& text) {
      if (text == "auto") {
        value = automatic;
      } else {
        (void)CLI::detail::lexical_cast(text, value);
      }
    };
    const CLI::Validator range = detail::SpecRange<T>(spec);
    const CLI::Validator check(
        [range, words = loader::RangeText(spec)](std::string& text) {
          if (text == "auto") return std::string();
          std::string problem = range(text);  // a word other than auto: one line with the range
          if (problem.starts_with("must be an integer"))
            problem = "must be " + words + ", got '" + text + "'";
          return problem;
        },
        loader::RangeText(spec));
    return app
        .add_option_function<std::string>(detail::Text(spec.flag), set, detail::Text(spec.help))
        ->check(check)
        ->default_str(value == automatic ? "auto" : std::to_string(value));
  }
  CLI::Option* option = app.add_option(detail::Text(spec.flag), value, detail::Text(spec.help))
                            ->check(detail::SpecRange<T>(spec))
                            ->capture_default_str();
  if (spec.kind == loader::OptionKind::kSeconds) option->type_name("SECONDS");
  return option;
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

// loader::kImageSize bound to a schedule, given as its text (SizeSchedule::Parse's) and
// refused with Parse's line.
inline CLI::Option* AddOption(CLI::App& app, const loader::OptionSpec& spec,
                              loader::SizeSchedule& value) {
  const CLI::Validator check(
      [](std::string& text) -> std::string {
        try {
          (void)loader::SizeSchedule::Parse(text);
          return {};
        } catch (const std::invalid_argument& e) {
          return std::string(e.what()).substr(std::string_view("image_size ").size());
        }
      },
      "SCHEDULE");
  const auto set = [&value](const std::string& text) { value = loader::SizeSchedule::Parse(text); };
  return app
      .add_option_function<std::string>(detail::Text(spec.flag), set, detail::Text(spec.help))
      ->check(check)
      ->default_str(value.text());
}

// A kFlag spec. A flag that starts on also gets --no-NAME to turn it off.
inline CLI::Option* AddOption(CLI::App& app, const loader::OptionSpec& spec, bool& value) {
  std::string names = detail::Text(spec.flag);
  if (value) names += ",!--no-" + names.substr(2);
  return app.add_flag(names, value, detail::Text(spec.help))->capture_default_str();
}

// A kChoice spec bound to an enum whose values are the spec's choices in order (kMode: Mode,
// kBadSamplePolicy: BadSamplePolicy, kS3Addressing: RemoteOptions::S3Addressing).
template <typename E>
requires std::is_enum_v<E> CLI::Option* AddOption(CLI::App& app, const loader::OptionSpec& spec,
                                                  E& value) {
  const std::vector<std::string> choices(spec.choices.begin(), spec.choices.end());
  const auto set = [&value, choices](const std::string& text) {
    value = static_cast<E>(std::find(choices.begin(), choices.end(), text) - choices.begin());
  };
  return app
      .add_option_function<std::string>(detail::Text(spec.flag), set, detail::Text(spec.help))
      ->check(CLI::IsMember(choices))
      ->default_str(choices.at(static_cast<std::size_t>(value)));
}

// loader::kAugment as --augment SPEC: a bad spec is refused with ParseAugmentSpec's line.
inline CLI::Option* AddAugmentOption(CLI::App& app, loader::AugmentSpec& spec) {
  const auto set = [&spec](const std::string& text) {
    try {
      spec = loader::ParseAugmentSpec(text);
    } catch (const std::invalid_argument& e) {
      throw CLI::ValidationError(e.what());
    }
    if (const auto problem = loader::AugmentProblem(spec)) throw CLI::ValidationError(*problem);
  };
  return app
      .add_option_function<std::string>(detail::Text(loader::kAugment.flag), set,
                                        detail::Text(loader::kAugment.help))
      ->default_str(loader::AugmentSpecText(spec));
}

// A kSize spec bound to a byte count, written as ParseByteSize reads it (--memory-budget 8GiB).
inline CLI::Option* AddSizeOption(CLI::App& app, const loader::OptionSpec& spec,
                                  std::uint64_t& bytes) {
  const auto set = [&bytes](const std::string& text) { bytes = *loader::ParseByteSize(text); };
  return app
      .add_option_function<std::string>(detail::Text(spec.flag), set, detail::Text(spec.help))
      ->check(detail::SizeCheck(spec))
      ->default_str(loader::ByteSizeText(bytes));
}

// loader::kSlice as --slice INDEX/COUNT. `slice` stays nullopt when it is not given (the
// launcher's instance, or 0/1).
inline CLI::Option* AddSliceOption(CLI::App& app, std::optional<loader::InstanceSlice>& slice) {
  const loader::OptionSpec& spec = loader::kSlice;
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

// Names the loader's bad samples on stderr after `prefix`, the first `lines` in full.
inline void LogBadSamples(loader::LoaderOptions& o, const std::string& prefix, std::size_t lines) {
  const auto log = std::make_shared<loader::BadSampleLog>(
      [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }, prefix, lines);
  o.on_bad_sample = [log](const loader::BadSample& bad) { (*log)(bad); };
}

// The loader options every loading tool takes: --batch-size, --image-size, --mode,
// --decode-scaling, --augment, --workers, --prefetch-depth, --cpu-share, --memory-budget and
// --seed, bound to `options`.
inline void AddLoaderFlags(CLI::App& app, loader::LoaderOptions& options) {
  AddOption(app, loader::kBatchSize, options.batch_size);
  AddOption(app, loader::kImageSize, options.image_size);
  AddOption(app, loader::kMode, options.mode);
  AddAugmentOption(app, options.augment);
  AddOption(app, loader::kDecodeScaling, options.jpeg.decode_scaling);
  AddOption(app, loader::kWorkers, options.workers);
  AddOption(app, loader::kPrefetchDepth, options.prefetch_depth);
  AddOption(app, loader::kCpuShare, options.cpu_share);
  AddSizeOption(app, loader::kMemoryBudget, options.memory_budget);
  AddOption(app, loader::kSeed, options.seed);
}

// ---- Group flags: --remote cache-dir=DIR,cache-limit=20GiB -------------------------------

// One key of a group flag bound to a variable (BindKey): `take` checks a value's text against
// the key's spec ("" or "KEY must be ..., got ...") and sets the variable when `store`.
struct GroupKeyBinding {
  loader::OptionGroupKey key;
  std::function<std::string(const std::string& text, bool store)> take;
};

// Binds a key to a number (kInteger, kNumber, kSeconds), a byte count (kSize), text (kChoice,
// kText) or an enum (kChoice, as AddOption), checked with the same validators and words as
// the spec's own flag.
template <typename T>
GroupKeyBinding BindKey(const loader::OptionGroupKey& key, T& value) {
  const loader::OptionSpec& spec = key.spec;
  CLI::Validator check;
  if constexpr (std::is_arithmetic_v<T>) {
    check = spec.kind == loader::OptionKind::kSize ? detail::SizeCheck(spec)
                                                   : detail::SpecRange<T>(spec);
  } else if (!spec.choices.empty()) {
    check = detail::ChoiceCheck(spec);
  }
  auto take = [&value, spec, check, name = std::string(key.key)](const std::string& text,
                                                                 bool store) -> std::string {
    std::string copy = text;
    if (std::string problem = check(copy); !problem.empty()) return name + " " + problem;
    if (!store) return {};
    if constexpr (std::is_enum_v<T>) {  // the spec's choices in the enum's order
      value = static_cast<T>(std::ranges::find(spec.choices, text) - spec.choices.begin());
    } else if (spec.kind == loader::OptionKind::kSize) {
      if constexpr (std::is_integral_v<T>) value = static_cast<T>(*loader::ParseByteSize(text));
    } else {
      CLI::detail::lexical_cast(text, value);  // as CLI11 reads a flag's value
    }
    return {};
  };
  return {key, std::move(take)};
}

// Checks (and, when `store`, sets) every KEY=VALUE of `text`: "" or the first problem (a pair
// without '=', a key the group lacks -- naming its keys --, a key twice, a value refused).
inline std::string TakeGroup(const std::string& text, const std::vector<GroupKeyBinding>& keys,
                             bool store) {
  std::string names, seen = ",";
  for (const GroupKeyBinding& k : keys) names.append(names.empty() ? "" : ", ").append(k.key.key);
  std::string malformed =
      "must be KEY=VALUE[,KEY=VALUE...] with KEY one of " + names + ", got '" + text + "'";
  const std::string its_keys = "' (its keys: " + names + ")";  // after "has no key 'KEY"
  std::stringstream items(text + ",");
  for (std::string item; std::getline(items, item, ',');) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return malformed;
    const std::string key = item.substr(0, eq);
    const auto bound = std::find_if(keys.begin(), keys.end(),
                                    [&key](const GroupKeyBinding& k) { return k.key.key == key; });
    if (bound == keys.end()) return std::string("has no key '").append(key).append(its_keys);
    if (seen.find("," + key + ",") != std::string::npos) return "names " + key + " twice";
    seen.append(key).append(",");
    std::string problem = bound->take(item.substr(eq + 1), store);
    if (!problem.empty()) return problem;
  }
  return {};
}

// The lines --help shows under a group flag, one per key: "KEY (RANGE, default D): HELP".
inline std::string GroupKeysHelp(const std::vector<GroupKeyBinding>& keys) {
  std::ostringstream out;
  for (const GroupKeyBinding& k : keys) {
    const loader::OptionSpec& spec = k.key.spec;
    std::string notes =
        spec.choices.empty() ? loader::RangeText(spec) : "{" + detail::ChoicesText(spec) + "}";
    if (!spec.default_text.empty()) notes.append(notes.empty() ? "" : ", ").append("default ");
    notes.append(spec.default_text);
    out << "\n  " << k.key.key << (notes.empty() ? "" : " (" + notes + ")") << ": " << spec.help;
  }
  return out.str();
}

// A group flag (loader::OptionGroup) whose keys are bound by `keys` (BindKey). `between`, when
// given, checks the keys together once they are stored: "" or the whole line of a problem
// ("--metrics bind=0.0.0.0 needs port=PORT, ...").
inline CLI::Option* AddGroupOption(CLI::App& app, const loader::OptionGroup& group,
                                   std::vector<GroupKeyBinding> keys,
                                   std::function<std::string()> between = {}) {
  std::string help = std::string(group.help) + GroupKeysHelp(keys);
  // A problem is thrown as the whole line, "--remote cache-limit must be ..." (a validator's
  // ValidationError would read "--remote: cache-limit must be ..."); ParseArgs prints it.
  const auto take = [keys = std::move(keys), between = std::move(between),
                     flag = std::string(group.flag)](const std::string& text, bool store) {
    std::string problem = TakeGroup(text, keys, store);
    if (!problem.empty()) problem.insert(0, flag + " ");
    if (problem.empty() && store && between) problem = between();
    if (!problem.empty()) throw CLI::ConversionError(problem, CLI::ExitCodes::ConversionError);
    return std::string();
  };
  return app
      .add_option_function<std::string>(
          std::string(group.flag), [take](const std::string& text) { take(text, true); },
          std::move(help))
      ->check(CLI::Validator([take](std::string& text) { return take(text, false); }, ""))
      ->type_name("KEY=VALUE,...");
}

// --metrics file=PATH,interval=SECONDS (loader::kMetrics), and with `with_port` port=[HOST:]PORT
// and bind=ADDR, checked together as they are parsed by metrics::ListenAddress: the readers'
// address rules, and bind= only with port=.
inline void AddMetricsFlags(CLI::App& app, metrics::Flags& flags, bool with_port = false) {
  const auto& k = loader::kMetricsKeys;
  std::vector keys{BindKey(k[0], flags.path), BindKey(k[1], flags.interval_seconds)};
  if (with_port) keys.insert(keys.end(), {BindKey(k[2], flags.port), BindKey(k[3], flags.bind)});
  AddGroupOption(app, loader::kMetrics, std::move(keys), [&flags]() -> std::string {
    if (flags.port.empty() && flags.bind.empty()) return {};
    try {
      (void)metrics::ListenAddress(flags);
    } catch (const metrics::MetricsError& e) {
      return e.what();
    }
    return {};
  });
}

}  // namespace tilefeed::tools
