// The Loader's options: OptionsProblem, the one check of every LoaderOptions field, and
// Loader::Impl::Validate, which applies it to a source and fixes the sizes the pipeline
// runs with (workers, slots, chunks), refusing slots the machine cannot hold.

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "loader/file_io.h"
#include "loader/loader_impl.h"
#include "loader/option_specs.h"

namespace tilefeed::loader {

namespace {

// Slots may take this share of the memory the process may use unless memory_budget says.
constexpr long double kSlotShare = 0.75;

// The bytes all slots may take: memory_budget, or kSlotShare of the process's memory. Refuses a
// budget above that memory and fixed slots above the budget, with the arithmetic, before any
// allocation (a huge depth or batch was std::bad_alloc or an OOM kill without a line).
std::uint64_t SlotBudget(const LoaderOptions& o, int height, int width, std::size_t image_bytes) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  const detail::MemoryLimit memory = detail::MemoryLimitOf(
      "/", pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : ~0ULL);
  const std::string limit = " bytes this process may use (" + memory.where + ")";
  if (o.memory_budget > memory.bytes) {
    throw std::invalid_argument("LoaderOptions: memory_budget " + std::to_string(o.memory_budget) +
                                " is more than the " + std::to_string(memory.bytes) + limit);
  }
  const long double allowed = o.memory_budget != 0
                                  ? static_cast<long double>(o.memory_budget)
                                  : kSlotShare * static_cast<long double>(memory.bytes);
  const long double slot = static_cast<long double>(image_bytes + 12) * o.batch_size;
  const std::size_t depth = o.prefetch_depth == kAutoDepth ? 1 : o.prefetch_depth;
  const long double total = slot * static_cast<long double>(depth);
  if (total <= allowed) return static_cast<std::uint64_t>(allowed);
  auto text = [](long double v) { return std::to_string(static_cast<unsigned long long>(v)); };
  throw std::invalid_argument(
      "LoaderOptions: prefetch_depth " + std::to_string(depth) + " slots x batch " +
      std::to_string(o.batch_size) + " x " + std::to_string(height) + " x " +
      std::to_string(width) + " x 3 (+ 12 bytes of label and index each) = " + text(total) +
      " bytes, more than " +
      (o.memory_budget != 0 ? "memory_budget " + text(allowed) + " bytes"
                            : "3/4 of the " + std::to_string(memory.bytes) + limit + " = " +
                                  text(allowed) + " bytes") +
      "; raise memory_budget, or lower the batch or prefetch_depth (auto takes one slot)");
}

// "(0.5, 0.25, nan)": three channel values, as %g writes them.
std::string ChannelsText(const std::array<float, 3>& v) {
  char text[96];
  std::snprintf(text, sizeof text, "(%g, %g, %g)", v[0], v[1], v[2]);
  return text;
}

// The problem of mean/std: finite, std > 0, and 0 and 1 for uint8 (which is not normalised).
std::optional<std::string> NormalisationProblem(const OutputFormat& f) {
  const auto all = [](const std::array<float, 3>& values, auto ok) {
    return std::all_of(values.begin(), values.end(), ok);
  };
  if (!all(f.mean, [](float v) { return std::isfinite(v); })) {
    return "mean must be finite, got " + ChannelsText(f.mean);
  }
  if (!all(f.std, [](float v) { return std::isfinite(v) && v > 0; })) {
    return "std must be finite and > 0, got " + ChannelsText(f.std);
  }
  if (f.dtype == OutputDType::kUint8 && (!all(f.mean, [](float v) { return v == 0; }) ||
                                         !all(f.std, [](float v) { return v == 1; }))) {
    return "mean and std must be 0 and 1 for dtype uint8 (ask for a float dtype to "
           "normalise), got " +
           ChannelsText(f.mean) + " and " + ChannelsText(f.std);
  }
  return std::nullopt;
}

}  // namespace

namespace detail {

MemoryLimit MemoryLimitOf(const std::filesystem::path& root, std::uint64_t physical) {
  MemoryLimit limit{physical, "physical memory"};
  std::ifstream groups(root / "proc/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {  // "ID:CONTROLLERS:PATH"; v2's CONTROLLERS are empty
    const std::size_t first = line.find(':');
    const std::size_t second = line.find(':', first + 1);  // npos when `first` is
    if (second == std::string::npos) continue;
    std::string controllers = ",";  // ",memory," or ",cpu,memory,": v1's memory controller
    controllers.append(line, first + 1, second - first - 1).append(",");
    const bool v2 = controllers == ",,";
    if (!v2 && controllers.find(",memory,") == std::string::npos) continue;
    const std::filesystem::path group = std::filesystem::path(line.substr(second + 1));
    // The usual mount points: v2 alone, v2 beside v1 (hybrid), v1's memory controller.
    for (const char* mount : {"sys/fs/cgroup", "sys/fs/cgroup/unified", "sys/fs/cgroup/memory"}) {
      for (auto dir = group.relative_path();; dir = dir.parent_path()) {
        const auto file = root / mount / dir / (v2 ? "memory.max" : "memory.limit_in_bytes");
        std::uint64_t bytes = 0;  // v2's "max" (no limit) does not read as a number
        if (std::ifstream(file) >> bytes && bytes > 0 && bytes < limit.bytes) {
          limit = {bytes, file.lexically_normal().string()};
        }
        if (dir.empty()) break;
      }
    }
  }
  return limit;
}

}  // namespace detail

std::optional<std::string> OptionsProblem(const LoaderOptions& o) {
  std::optional<std::string> problem;
  const auto check = [&problem](const OptionSpec& spec, const char* name, double value) {
    if (!problem) problem = RangeProblem(spec, name, value);
  };
  const auto require = [&problem](std::optional<std::string> found) {
    if (!problem) problem = std::move(found);
  };
  check(kBatchSize, "batch_size", static_cast<double>(o.batch_size));
  for (const auto& [epoch, size] : o.image_size.steps()) {
    check(kImageSize, "image_size", std::min(size.height, size.width));
    check(kImageSize, "image_size", std::max(size.height, size.width));
  }
  check(kEvalResize, "eval_resize", o.eval_resize);
  const ImageSize largest = o.image_size.Largest();
  const int longer = std::max(largest.height, largest.width);
  if (o.mode == Mode::kEval && !o.image_size.fixed()) {
    require("image_size must be one size in eval mode, got '" + o.image_size.text() + "'");
  }
  if (o.mode == Mode::kEval && o.eval_resize < longer) {
    require("eval_resize must be at least image_size (" + std::to_string(longer) +
            ") in eval mode, got " + std::to_string(o.eval_resize));
  }
  if (o.mode == Mode::kEval && o.augment != DefaultAugment()) {
    require("augment applies to mode=train only (eval is Resize + CenterCrop), got '" +
            AugmentSpecText(o.augment) + "'");
  }
  require(AugmentProblem(o.augment));
  require(NormalisationProblem(o.output));
  if (o.slice.count < 1 || o.slice.index < 0 || o.slice.index >= o.slice.count) {
    require("slice=(index, count) needs count >= 1 and 0 <= index < count, got (" +
            std::to_string(o.slice.index) + ", " + std::to_string(o.slice.count) + ")");
  }
  if (o.workers != kAutoWorkers) check(kWorkers, "workers", o.workers);
  if (o.prefetch_depth != kAutoDepth) {
    check(kPrefetchDepth, "prefetch_depth", static_cast<double>(o.prefetch_depth));
  } else if (o.slot_memory) {
    require("prefetch_depth auto needs the loader's own slots (slot_memory is set)");
  }
  check(kCpuShare, "cpu_share", o.cpu_share);
  check(kMaxSubstituteAttempts, "max_substitute_attempts", o.max_substitute_attempts);
  if (o.held_slots_timeout != std::chrono::milliseconds::max()) {  // max(): wait forever
    check(kHeldSlotsTimeout, "held_slots_timeout",
          static_cast<double>(o.held_slots_timeout.count()) / 1000.0);
  }
  if (o.jpeg.max_pixels < 1) {
    require("max_pixels must be at least 1, got " + std::to_string(o.jpeg.max_pixels));
  }
  if (o.jpeg.max_scans < 1) {
    require("max_scans must be at least 1, got " + std::to_string(o.jpeg.max_scans));
  }
  return problem;
}

void Loader::Impl::Validate(const std::optional<LoaderState>& start) {
  if (start) options.seed = start->seed;  // a checkpoint's seed is the run's
  const LoaderOptions& o = options;
  auto require = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string("LoaderOptions: ") + what);
  };
  require(source != nullptr, "no source");
  require(source->size() > 0, "the source is empty");
  if (auto problem = OptionsProblem(o)) throw std::invalid_argument("LoaderOptions: " + *problem);
  if (o.output.dtype != OutputDType::kUint8) converter.emplace(o.output);  // writes output.layout
  layout = converter ? Layout::kNhwc : o.output.layout;                    // the workers' decode
  if (start && start->dataset_size != source->size()) {
    throw std::invalid_argument("Loader: the start state is for a dataset of " +
                                std::to_string(start->dataset_size) + " samples; this source has " +
                                std::to_string(source->size()));
  }
  const LoaderState at = start.value_or(LoaderState{o.seed, 0, 0, source->size()});
  if (at.position > source->size()) {
    throw std::invalid_argument("Loader: the start state's position " +
                                std::to_string(at.position) + " is past the dataset's end (" +
                                std::to_string(source->size()) + " samples)");
  }
  position = at;
  first_epoch = start_epoch = at.epoch;
  start_position = at.position;
  // EpochOrder validates the slice; epoch 0 gives the sizes of every epoch.
  const EpochOrder probe(source->size(), o.seed, 0, false, o.slice, o.remainder, 0, o.locality);
  samples_per_epoch = probe.size();
  batches_per_epoch = samples_per_epoch / o.batch_size;
  if (!o.drop_last_batch && samples_per_epoch % o.batch_size != 0) ++batches_per_epoch;
  if (batches_per_epoch == 0) {
    throw std::invalid_argument("LoaderOptions: instance " + std::to_string(o.slice.index) +
                                " of " + std::to_string(o.slice.count) + " gets " +
                                std::to_string(samples_per_epoch) +
                                " samples per epoch, not one full batch of " +
                                std::to_string(o.batch_size) + " (drop_last_batch is set)");
  }
  cores = detail::UsableCores();
  // Under auto the share bounds the threads' busy time (tuner.h), so their number rounds up.
  max_workers = o.workers == kAutoWorkers
                    ? std::max(1, static_cast<int>(std::ceil(o.cpu_share * cores - 1e-9)))
                    : (o.workers > 0 ? o.workers : cores);
  workers = o.workers == kAutoWorkers ? 1 : max_workers;
  // Slots hold the largest size the schedule reaches, so no epoch re-sizes them.
  const ImageSize largest = o.image_size.Largest();
  image_bytes = largest.bytes();
  const std::uint64_t budget = SlotBudget(o, largest.height, largest.width, image_bytes);
  slot_bytes =
      image_bytes * o.batch_size + o.batch_size * (sizeof(std::int32_t) + sizeof(std::uint64_t));
  // Auto depth starts at 2 and grows within the budget, to at most kMaxAutoDepth.
  max_depth = o.prefetch_depth != kAutoDepth
                  ? o.prefetch_depth
                  : std::clamp<std::size_t>(budget / slot_bytes, 1, detail::kMaxAutoDepth);
  depth = o.prefetch_depth != kAutoDepth ? max_depth : std::min<std::size_t>(2, max_depth);
  // Chunks small enough that every worker has several per batch, large enough that the
  // per-token overhead vanishes next to a decode.
  chunk_size =
      std::clamp<std::size_t>(o.batch_size / (4 * static_cast<std::size_t>(max_workers)), 1, 16);
}

}  // namespace tilefeed::loader
