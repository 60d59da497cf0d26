// tilefeed.Loader's keywords into loader::LoaderOptions and RemoteOptions: one setter per
// keyword, each range checked once in C++ (loader::OptionsProblem) with the option table's
// words (loader/option_specs.h). See options_binding.h.

#include "options_binding.h"

#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "loader/option_specs.h"

namespace py = pybind11;

namespace tilefeed::python {
namespace {

template <typename T>
T Cast(const std::string& name, py::handle value) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error("tilefeed.Loader: " + name + "=" + py::repr(value).cast<std::string>() +
                         " has the wrong type");
  }
}

// The enum keywords' spellings, in each enum's order as the option table's kChoice specs
// (loader::kModeChoices, ...): Choose reads them, DefaultOptions and the Batch write them.
constexpr std::string_view kLayoutChoices[] = {"nhwc", "nchw"};
constexpr std::string_view kDTypeChoices[] = {"uint8", "float16", "bfloat16", "float32"};
constexpr std::string_view kRemainderChoices[] = {"pad", "drop"};
constexpr std::string_view kCorruptDataChoices[] = {"fail", "accept"};

// `value` as the enum E whose values are `choices` in order.
template <typename E>
E Choose(const std::string& name, py::handle value, std::span<const std::string_view> choices) {
  const std::string text = Cast<std::string>(name, value);
  std::string names;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (text == choices[i]) return static_cast<E>(i);
    names += names.empty() ? "" : ", ";
    names += '"' + std::string(choices[i]) + '"';
  }
  throw py::value_error("tilefeed.Loader: " + name + "=\"" + text + "\"; expected one of " + names);
}

// The spelling of `value`, an enum whose values are `choices` in order (string literals,
// so null-terminated).
template <typename E>
const char* Spelling(std::span<const std::string_view> choices, E value) {
  return choices[static_cast<std::size_t>(value)].data();
}

template <typename T>
std::pair<T, T> Pair(const std::string& name, py::handle value) {
  return Cast<std::pair<T, T>>(name, value);
}

using Setter = std::function<void(loader::LoaderOptions&, const std::string&, py::handle)>;
using Setters = std::vector<std::pair<std::string, Setter>>;
using O = loader::LoaderOptions;

// ValueError "tilefeed.Loader: PROBLEM" for a problem the C++ checks found.
void Refuse(const std::optional<std::string>& problem) {
  if (problem) throw py::value_error("tilefeed.Loader: " + *problem);
}

// `value` as the field type T of the shared option `spec` (loader/option_specs.h). The
// range is checked once, by loader::OptionsProblem; a whole number that T cannot hold at all
// (a negative count) is out of the table's range too, and refused here in RangeProblem's words.
template <typename T>
T Number(const loader::OptionSpec& spec, const std::string& name, py::handle value) {
  if (!py::isinstance<py::bool_>(value)) {
    try {
      return value.cast<T>();
    } catch (const py::cast_error&) {
      if (PyIndex_Check(value.ptr()) != 0) {
        const py::object whole = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
        const double approx = whole ? PyLong_AsDouble(whole.ptr()) : 0;
        const bool converted = whole && PyErr_Occurred() == nullptr;
        PyErr_Clear();
        if (converted) Refuse(loader::RangeProblem(spec, name, approx));
        // In the table's range, past the field's: the tools' words for the same value.
        throw py::value_error("tilefeed.Loader: " + name + " must be at most " +
                              std::to_string(std::numeric_limits<T>::max()) + ", got " +
                              py::repr(value).cast<std::string>());
      }
    }
  }
  throw py::type_error("tilefeed.Loader: " + name + "=" + py::repr(value).cast<std::string>() +
                       " has the wrong type");
}

// A setter of the plain field `Member`, cast to its type.
template <auto Member>
void Assign(O& o, const std::string& name, py::handle value) {
  using T = std::remove_reference_t<decltype(o.*Member)>;
  o.*Member = Cast<T>(name, value);
}

// A setter of the enum field o.*Path (a member, or a member's member) spelled as one of
// `choices` (Choose).
template <auto... Path>
Setter Chosen(std::span<const std::string_view> choices) {
  return [choices](O& o, const std::string& name, py::handle value) {
    auto& field = (o.*....*Path);
    field = Choose<std::remove_reference_t<decltype(field)>>(name, value, choices);
  };
}

// A setter of the field `Member` of the shared option `spec`.
template <auto Member>
Setter Ranged(const loader::OptionSpec& spec) {
  return [&spec](O& o, const std::string& name, py::handle value) {
    using T = std::remove_reference_t<decltype(o.*Member)>;
    o.*Member = Number<T>(spec, name, value);
  };
}

// A setter of the field `Member` of a shared option that also takes "auto" (kWorkers,
// kPrefetchDepth): the string "auto", else a number in the range (not the auto value itself).
template <auto Member>
Setter Tunable(const loader::OptionSpec& spec) {
  return [&spec](O& o, const std::string& name, py::handle value) {
    using T = std::remove_reference_t<decltype(o.*Member)>;
    if (py::isinstance<py::str>(value) && value.cast<std::string>() == "auto") {
      o.*Member = static_cast<T>(*spec.auto_value);
      return;
    }
    if (py::isinstance<py::str>(value)) {
      throw py::value_error("tilefeed.Loader: " + name + " must be " + loader::RangeText(spec) +
                            ", got " + py::repr(value).cast<std::string>());
    }
    o.*Member = Number<T>(spec, name, value);
    if (o.*Member == static_cast<T>(*spec.auto_value)) {
      Refuse(loader::RangeProblem(spec, name, *spec.auto_value));
    }
  };
}

// The output images: their size, crop, flip, layout and element type.
Setters ImageSetters() {
  return {
      {"batch_size", Ranged<&O::batch_size>(loader::kBatchSize)},
      {"image_size",
       [](O& o, const std::string& n, py::handle v) {
         // The schedule's text (tilefeed's Python writes every form as text), or a side.
         if (!py::isinstance<py::str>(v))
           return void(o.image_size = Number<int>(loader::kImageSize, n, v));
         try {
           o.image_size = loader::SizeSchedule::Parse(v.cast<std::string>());
         } catch (const std::invalid_argument& e) {
           throw py::value_error(std::string("tilefeed.Loader: ") + e.what());
         }
       }},
      {"mode", Chosen<&O::mode>(loader::kModeChoices)},
      {"eval_resize", Ranged<&O::eval_resize>(loader::kEvalResize)},
      {"augment",  // the text form (tilefeed.augment's reprs); a bad one is a ValueError
       [](O& o, const std::string& n, py::handle v) {
         try {
           o.augment = loader::ParseAugmentSpec(Cast<std::string>(n, v));
         } catch (const std::invalid_argument& e) {
           Refuse(e.what());
         }
       }},
      {"layout", Chosen<&O::output, &loader::OutputFormat::layout>(kLayoutChoices)},
      {"dtype", Chosen<&O::output, &loader::OutputFormat::dtype>(kDTypeChoices)},
      {"mean", [](O& o, const std::string& n,
                  py::handle v) { o.output.mean = Cast<std::array<float, 3>>(n, v); }},
      {"std", [](O& o, const std::string& n,
                 py::handle v) { o.output.std = Cast<std::array<float, 3>>(n, v); }},
  };
}

// Which samples come when: threads, slots, order, this instance's slice, the epochs.
Setters OrderSetters() {
  return {
      {"workers", Tunable<&O::workers>(loader::kWorkers)},
      {"prefetch_depth", Tunable<&O::prefetch_depth>(loader::kPrefetchDepth)},
      {"cpu_share", Ranged<&O::cpu_share>(loader::kCpuShare)},
      {"memory_budget",
       [](O& o, const std::string& n, py::handle v) {
         if (!py::isinstance<py::str>(v)) {
           o.memory_budget = Number<std::uint64_t>(loader::kMemoryBudget, n, v);
         } else if (const auto bytes = loader::ParseByteSize(v.cast<std::string>())) {
           o.memory_budget = *bytes;
         } else {
           throw py::value_error("tilefeed.Loader: " + n +
                                 " must be a size such as 8GiB, 512M or 1000000 (bytes), got " +
                                 py::repr(v).cast<std::string>());
         }
       }},
      {"seed", Ranged<&O::seed>(loader::kSeed)},
      {"shuffle", &Assign<&O::shuffle>},
      {"slice", [](O& o, const std::string& n,
                   py::handle v) { std::tie(o.slice.index, o.slice.count) = Pair<int>(n, v); }},
      {"remainder", Chosen<&O::remainder>(kRemainderChoices)},
      {"drop_last_batch", &Assign<&O::drop_last_batch>},
      {"epochs",
       [](O& o, const std::string& n, py::handle v) {
         // None: no end, the C++ 0; a number is a count of epochs, so 0 is out of range.
         o.epochs = v.is_none() ? 0 : Number<std::uint64_t>(loader::kEpochs, n, v);
         if (!v.is_none()) {
           Refuse(loader::RangeProblem(loader::kEpochs, n, static_cast<double>(o.epochs)));
         }
       }},
  };
}

// Bad samples and the decoder's limits.
Setters PolicySetters() {
  return {
      {"bad_sample_policy", Chosen<&O::bad_sample_policy>(loader::kBadSamplePolicyChoices)},
      {"held_slots_timeout",
       [](O& o, const std::string& n, py::handle v) {
         const double seconds = Number<double>(loader::kHeldSlotsTimeout, n, v);
         // Beyond what milliseconds hold (or NaN) is out of the table's range too.
         if (!(std::fabs(seconds) < 1e15)) {
           Refuse(loader::RangeProblem(loader::kHeldSlotsTimeout, n, seconds));
         }
         o.held_slots_timeout =
             std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
       }},
      {"max_pixels", [](O& o, const std::string& n,
                        py::handle v) { o.jpeg.max_pixels = Cast<std::int64_t>(n, v); }},
      {"max_scans",
       [](O& o, const std::string& n, py::handle v) { o.jpeg.max_scans = Cast<int>(n, v); }},
      {"corrupt_data", Chosen<&O::jpeg, &codecs::JpegOptions::corrupt_data>(kCorruptDataChoices)},
      {"decode_scaling",
       Chosen<&O::jpeg, &codecs::JpegOptions::decode_scaling>(loader::kDecodeScalingChoices)},
      {"fast_dct",
       [](O& o, const std::string& n, py::handle v) { o.jpeg.fast_dct = Cast<bool>(n, v); }},
      {"fast_upsample",
       [](O& o, const std::string& n, py::handle v) { o.jpeg.fast_upsample = Cast<bool>(n, v); }},
  };
}

// Every keyword of tilefeed.Loader that becomes a LoaderOptions field, and its setter.
const std::map<std::string, Setter>& AllSetters() {
  static const std::map<std::string, Setter> kSetters = [] {
    std::map<std::string, Setter> all;
    for (const Setters& group : {ImageSetters(), OrderSetters(), PolicySetters()}) {
      all.insert(group.begin(), group.end());
    }
    return all;
  }();
  return kSetters;
}

}  // namespace

const char* LayoutName(loader::Layout layout) { return Spelling(kLayoutChoices, layout); }

const char* DTypeName(loader::OutputDType dtype) { return Spelling(kDTypeChoices, dtype); }

// The shared option table (option_specs.h) for tilefeed/__init__.py: keyword -> its flag,
// kind, range (min, max, min_exclusive, and the words "at least 1"), default and help. The
// Python checks take their ranges and messages from here.
py::dict OptionSpecs() {
  static constexpr const char* kKinds[] = {"integer", "number", "seconds", "size",
                                           "choice",  "flag",   "slice",   "text"};
  py::dict table;
  for (const loader::OptionSpec& spec : loader::SharedOptions()) {
    if (spec.keyword.empty()) continue;
    py::dict d;
    d["flag"] = std::string(spec.flag);
    d["kind"] = kKinds[static_cast<int>(spec.kind)];
    d["min"] = spec.min;
    d["max"] = spec.max;
    d["min_exclusive"] = spec.min_exclusive;
    d["range"] = loader::RangeText(spec);
    d["default"] = std::string(spec.default_text);
    d["help"] = std::string(spec.help);
    py::list choices;
    for (std::string_view choice : spec.choices) choices.append(std::string(choice));
    d["choices"] = choices;
    table[py::str(std::string(spec.keyword))] = d;
  }
  return table;
}

// The defaults of loader::LoaderOptions under their Python names; AllSetters() reads the same
// names back. tilefeed.Loader's signature is built from this, so the two cannot drift.
py::dict DefaultOptions() {
  const loader::LoaderOptions o;
  py::dict d;
  d["batch_size"] = o.batch_size;
  d["image_size"] = o.image_size.At(0).height;
  d["mode"] = Spelling(loader::kModeChoices, o.mode);
  d["eval_resize"] = o.eval_resize;
  d["augment"] = loader::AugmentSpecText(o.augment);
  d["layout"] = LayoutName(o.output.layout);
  d["dtype"] = DTypeName(o.output.dtype);
  d["mean"] = py::make_tuple(o.output.mean[0], o.output.mean[1], o.output.mean[2]);
  d["std"] = py::make_tuple(o.output.std[0], o.output.std[1], o.output.std[2]);
  d["workers"] = o.workers;
  d["prefetch_depth"] = o.prefetch_depth;
  d["cpu_share"] = o.cpu_share;
  d["memory_budget"] = o.memory_budget;
  d["seed"] = o.seed;
  d["shuffle"] = o.shuffle;
  d["slice"] = py::make_tuple(o.slice.index, o.slice.count);
  d["remainder"] = Spelling(kRemainderChoices, o.remainder);
  d["drop_last_batch"] = o.drop_last_batch;
  d["epochs"] = o.epochs;
  d["bad_sample_policy"] = Spelling(loader::kBadSamplePolicyChoices, o.bad_sample_policy);
  d["max_pixels"] = o.jpeg.max_pixels;
  d["max_scans"] = o.jpeg.max_scans;
  d["corrupt_data"] = Spelling(kCorruptDataChoices, o.jpeg.corrupt_data);
  d["decode_scaling"] = Spelling(loader::kDecodeScalingChoices, o.jpeg.decode_scaling);
  d["fast_dct"] = o.jpeg.fast_dct;
  d["fast_upsample"] = o.jpeg.fast_upsample;
  return d;
}

loader::LoaderOptions ParseOptions(const py::dict& kwargs) {
  loader::LoaderOptions options;
  const auto& setters = AllSetters();
  for (const auto& [key, value] : kwargs) {
    const std::string name = key.cast<std::string>();
    const auto it = setters.find(name);
    if (it == setters.end()) {
      throw py::type_error("tilefeed.Loader: unknown option '" + name + "'");
    }
    it->second(options, name, value);
  }
  Refuse(loader::OptionsProblem(options));
  return options;
}

// RemoteOptions from the dict that tilefeed.Loader builds (absent keys keep the defaults),
// with the AWS environment's keys, region and endpoint.
loader::RemoteOptions ToRemoteOptions(const py::dict& remote) {
  loader::RemoteOptions o;
  if (remote.contains("cache_dir")) o.cache_dir = remote["cache_dir"].cast<std::string>();
  if (remote.contains("s3_endpoint")) o.s3_endpoint = remote["s3_endpoint"].cast<std::string>();
  o = loader::WithAwsEnvironment(std::move(o));
  if (remote.contains("cache_limit")) {
    o.cache_limit =
        Number<std::uint64_t>(loader::kCacheLimit, "cache_limit", remote["cache_limit"]);
  }
  if (remote.contains("retries")) {
    o.retries = Number<int>(loader::kRemoteRetries, "remote_retries", remote["retries"]);
  }
  Refuse(loader::RemoteOptionsProblem(o));
  // From worker threads, without the GIL: straight to the process's stderr.
  o.warn = [](const std::string& line) {
    std::fprintf(stderr, "tilefeed: warning: %s\n", line.c_str());
  };
  return o;
}

}  // namespace tilefeed::python
