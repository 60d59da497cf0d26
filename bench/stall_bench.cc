// stall_bench: does the loader keep a training core fed? Measures the loader's capacity,
// sets the synthetic core to demand 50 %, 90 % and 120 % of it, and runs the trainer at each
// point fed by the loader and fed from batches already in memory (trainer::InMemoryStream
// through the same IO tiles). The step-time ratio of the two is the loader's cost to training.
//
//   stall_bench --data DIR [--workers 1] [--demands 0.5,0.9,1.2] [--steps 30] [--json FILE]
//
// Definitions.
//   capacity C: images/s the loader delivers into the trainer (through the IO tiles) when
//     the core costs nothing but normalisation, measured with the compute CPU busy (see
//     placement).
//   demand d: the core's own rate as a fraction of C; the synthetic core is set to
//     1 / (d C) seconds per sample.
//   achieved demand: the core's rate as measured, its in-memory images/s over C. On a
//     loaded machine the core gets less CPU than its calibration assumed, so the bench
//     corrects the cost per sample from the in-memory run (up to --tune-rounds times).
//   fed demand: the core's own rate during the loader-fed run (images per second of its
//     compute time, waits excluded) over C. Lower than the achieved demand when the
//     loader's work slows the core's compute on the other CPU (a shared physical core on a
//     VM, caches, memory bandwidth); the header prints that interference measured alone.
//   validity: a point is INVALID, and its goal not judged, when its achieved demand is more
//     than --tolerance (10 %) off the set point, when its in-memory rate moved by more than
//     that between the runs before and after the loader-fed one, or (above 100 %) when its
//     fed demand is that far off (then the point is not over capacity as set), or when
//     the capacity moved by more than that between just before and just after the point.
//     Each point sets its demand against C measured right before it (the machine's other
//     load can move C by 10-30 % within a minute here); the run is valid when every point
//     is.
//   stall: input wait / (wait + busy) of the steady-state steps (trainer::StallMeter).
//   expected stall: when the core's rate r exceeds C, the loader-bound step takes 1/C per
//     sample of which the core computes 1/r, so stall = 1 - C/r: 1 - 1/d = 16.7 % at the
//     set d = 1.2 ("exp % set"), and 1 - 1/(fed demand) from the rates of the loader-fed run
//     itself ("exp % fed"); 0 when r <= C. Above 100 % the core waits part of each step,
//     so its CPU is busy less than while C was measured; where the CPUs share a physical
//     core (this project's VM: the core computes ~15 % slower while the loader decodes
//     beside it, and the reverse holds too) the loader then runs faster than C. C' = the
//     capacity with the core CPU idle bounds that from above, so the expected stall lies
//     between 1 - C'/r and 1 - C/r (printed as "expected lo-hi %" in the verdict).
//   in-memory beside the loader ("mem+L"): below 100 %, the in-memory runs are repeated
//     with the loader's work beside them, its batches taken and dropped at the core's
//     rate (PacedNeighbour), so the core computes next to the same neighbour as when fed.
//     "ratio+L" (fed step over that) is what delivering the batches costs the core;
//     "ratio" (over the plain in-memory step) adds what sharing the machine's silicon
//     with the decoders costs, which on this VM's shared physical core is up to ~2 % at
//     90 % and which no input pipeline on the same silicon can avoid.
// Goals (issue 7): at 50 % and 90 %, stall <= 1 % and the step time at most 1 % above the
// in-memory run's beside the loader (a stall can only lengthen a step); at 120 % the stall
// within that expected range, give or take 2 points, with C and C' measured again just
// before and after the fed run (the bracket uses the lowest and highest of the four).
//
// Placement. With two or more CPUs the core (the trainer's thread, its compute and IO
// tiles) gets one CPU of its own and the loader's threads (its --workers decode threads and
// its pipeline) all the others, so they never time-slice one CPU; on a 2-CPU machine that
// is one CPU each. The capacity is measured under the same placement with a busy thread
// spinning on the core's CPU, as the compute does during the runs (the IO tiles then land
// batches on a busy CPU, as they do in the runs); otherwise "90 % of capacity" would be
// measured on an idle core CPU and be unreachable. Without pinning (--no-pin, or one CPU)
// everything shares the CPUs and the demands mean less.

#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/median.h"
#include "loader/image_folder.h"
#include "loader/loader.h"
#include "trainer/collectives.h"
#include "trainer/memory_stream.h"
#include "trainer/synthetic_core.h"
#include "trainer/trainer.h"
#include "transport/batch_stream.h"

namespace {

namespace fs = std::filesystem;
using namespace tilefeed;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string data;
  int workers = 1;
  std::size_t batch = 32;
  int image_size = 224;
  std::size_t prefetch_depth = 4;
  std::size_t steps = 30;           // measured steps per run
  std::size_t capacity_steps = 30;  // steps timed for the capacity
  std::size_t memory_batches = 8;   // batches held for the in-memory runs
  std::vector<double> demands = {0.5, 0.9, 1.2};
  int tune_rounds = 2;      // corrections of the core's cost from in-memory runs
  int rounds = 5;           // fed / in-memory-beside-the-loader pairs per point below 100 %
  double tolerance = 0.10;  // allowed deviation of achieved demand / capacity
  bool pin = true;
  std::string json;
};

// Which CPUs the loader and the core run on; empty: not pinned.
struct Placement {
  std::vector<int> loader_cpus;
  std::vector<int> core_cpus;
  bool pinned() const { return !core_cpus.empty(); }
};

std::string CpuList(const std::vector<int>& cpus) {
  std::string out;
  for (int cpu : cpus) out.append(out.empty() ? "" : ",").append(std::to_string(cpu));
  return out;
}

// Moves the calling thread to `cpus` (threads it starts afterwards inherit them).
void PinThisThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::fprintf(stderr, "stall_bench: cannot pin a thread to CPUs %s; running unpinned\n",
                 CpuList(cpus).c_str());
  }
}

// The core gets the last allowed CPU, the loader all the others.
Placement ChoosePlacement(bool pin) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (!pin || sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 2) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  Placement where;
  where.core_cpus = {cpus.back()};
  where.loader_cpus.assign(cpus.begin(), cpus.end() - 1);
  return where;
}

// "N on CPU a, M on CPU b": this process's threads by allowed CPU list, from /proc.
std::string ThreadCensus() {
  std::map<std::string, int> count;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/self/task", ec)) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) {
        ++count[line.substr(line.find_first_not_of(" \t", 18))];
      }
    }
  }
  std::string out;
  for (const auto& [cpus, n] : count) {
    out.append(out.empty() ? "" : ", ").append(std::to_string(n)).append(" on CPU ").append(cpus);
  }
  return out;
}

loader::LoaderOptions LoaderOptionsFor(const Config& c) {
  loader::LoaderOptions o;
  o.batch_size = c.batch;
  o.image_size = c.image_size;
  o.workers = c.workers;
  o.prefetch_depth = c.prefetch_depth;
  o.drop_last_batch = true;
  return o;
}

// A loader whose threads live on the loader CPUs; the caller goes back to the core CPU.
std::unique_ptr<loader::Loader> StartLoader(const Config& c, const fs::path& root,
                                            const Placement& where) {
  PinThisThread(where.loader_cpus);
  auto loader = std::make_unique<loader::Loader>(loader::ImageFolder::Open(root.string()),
                                                 LoaderOptionsFor(c));
  PinThisThread(where.core_cpus);
  return loader;
}

// A thread that keeps the core's CPU busy (the synthetic kernel in a loop) while it lives,
// and counts its rate: the core CPU's speed for compute while whatever else runs.
class BusyCore {
 public:
  explicit BusyCore(const Placement& where) : start_(Clock::now()) {
    thread_ = std::thread([this, cpus = where.core_cpus] {
      PinThisThread(cpus);
      std::vector<float> data(1 << 16, 1.0f);
      float sink = 0;
      while (!stop_.load(std::memory_order_relaxed)) {
        sink += trainer::SyntheticKernel(data, kIterations);
        calls_.fetch_add(1, std::memory_order_relaxed);
      }
      sink_ = sink;
    });
  }
  ~BusyCore() { Stop(); }
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;

  // Stops the thread; returns its kernel iterations per microsecond.
  double Stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start_).count();
      rate_ = us > 0 ? static_cast<double>(calls_.load()) * kIterations / us : 0;
    }
    return rate_;
  }

 private:
  static constexpr std::uint64_t kIterations = 1 << 16;
  Clock::time_point start_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> calls_{0};
  double rate_ = 0;
  volatile float sink_ = 0;
  std::thread thread_;
};

struct RunResult {
  std::uint64_t steps = 0;
  std::uint64_t images = 0;
  double seconds = 0;  // steady state: wait + busy of the measured steps
  double wait_seconds = 0;
  double fill_seconds = 0;
  double stall_percent() const { return seconds > 0 ? 100 * wait_seconds / seconds : 0; }
  double step_ms() const { return steps > 0 ? 1e3 * seconds / static_cast<double>(steps) : 0; }
  double images_per_second() const { return seconds > 0 ? images / seconds : 0; }
  // The core's own rate in this run: images per second of compute (wait excluded).
  double busy_images_per_second() const {
    return seconds > wait_seconds ? images / (seconds - wait_seconds) : 0;
  }
};

// One trainer run of `steps` steps on `stream` with the synthetic core at `us_per_sample`.
RunResult Train(const Config& c, transport::BatchStream& stream, std::size_t steps,
                double us_per_sample, const trainer::KernelCalibration& calibration,
                std::string* census) {
  trainer::LocalCollectives local;
  trainer::TrainerOptions options;
  options.local_batch = c.batch;
  options.sample_bytes = static_cast<std::size_t>(c.image_size) * c.image_size * 3;
  options.max_steps = steps;
  options.compute_threads = 1;  // the core runs on this thread, on the core CPU
  RunResult result;
  trainer::Trainer trainer(
      [&] { return std::make_unique<trainer::SyntheticCore>(us_per_sample, calibration); }, local,
      options, {},
      [&](const trainer::EpochReport& r) {
        // A run may cross epoch boundaries; its epochs add up.
        result.steps += r.steps;
        result.images += r.images;
        result.seconds += r.seconds;
        result.wait_seconds += r.wait_seconds;
        result.fill_seconds += r.fill_seconds;
      });
  if (census != nullptr) {
    // Once the pipeline runs (the IO tiles exist only inside Train), see where threads are.
    trainer.SetProgressSink([census](const trainer::StepProgress& p) {
      if (p.global_step == 2) *census = ThreadCensus();
    });
  }
  trainer.Train(stream, {});
  return result;
}

// The loader's capacity: images/s into the trainer, fed by the loader, with a core that
// costs nothing but normalisation, while the core CPU is kept busy. Also gives the busy
// thread's compute rate on the core CPU meanwhile (iterations/us).
struct Capacity {
  double images_per_second = 0;
  double core_rate_with_loader = 0;
};

// With busy_core false the core CPU only normalises: the capacity when the core leaves its
// CPU idle, an upper bound for a core that waits part of each step.
Capacity LoaderCapacity(const Config& c, const fs::path& root, const Placement& where,
                        const trainer::KernelCalibration& calibration, bool busy_core = true) {
  std::unique_ptr<loader::Loader> loader = StartLoader(c, root, where);
  transport::LoaderStream stream(*loader);
  std::optional<BusyCore> busy;
  if (busy_core) busy.emplace(where);
  Capacity capacity;
  capacity.images_per_second =
      Train(c, stream, c.capacity_steps, 0.0, calibration, nullptr).images_per_second();
  if (busy) capacity.core_rate_with_loader = busy->Stop();
  return capacity;
}

// The loader's work without its delivery to the core: a loader on the loader CPUs whose
// batches a thread there takes at `images_per_second` and drops, so that the loader
// decodes as much per second as while it feeds a core at that rate. An in-memory run with
// this beside it computes next to the same neighbour as a loader-fed run, whatever the
// machine's CPUs share (on this project's VM a physical core: the core computes ~15 %
// slower while the loader decodes); the step-time ratio against it is what delivering the
// batches costs the core, not what sharing the silicon does.
class PacedNeighbour {
 public:
  PacedNeighbour(const Config& c, const fs::path& root, const Placement& where,
                 double images_per_second)
      : loader_(StartLoader(c, root, where)) {
    thread_ = std::jthread([this, cpus = where.loader_cpus,
                            rate = images_per_second](const std::stop_token& stop) {
      PinThisThread(cpus);
      const auto start = Clock::now();
      double images = 0;
      while (!stop.stop_requested()) {
        std::optional<loader::Batch> batch = loader_->Next();
        if (!batch) continue;  // an epoch's end, or Stop(): the stop request says which
        images += static_cast<double>(batch->size());
        batch.reset();
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(images / rate)));
      }
    });
  }
  ~PacedNeighbour() {
    thread_.request_stop();
    loader_->Stop();  // wakes a Next() that waits
    thread_.join();
  }
  PacedNeighbour(const PacedNeighbour&) = delete;
  PacedNeighbour& operator=(const PacedNeighbour&) = delete;

 private:
  std::unique_ptr<loader::Loader> loader_;
  std::jthread thread_;
};

using bench::Median;

// The busy thread's compute rate on the core CPU with nothing of ours beside it.
double CoreRateAlone(const Placement& where, double seconds) {
  BusyCore busy(where);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return busy.Stop();
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{
      "Stall at 50/90/120 % of the loader's measured capacity, against the same synthetic core "
      "fed from batches in memory."};
  app.add_option("--data", c.data, "ImageFolder (DIR/train is used if it exists)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--workers", c.workers, "Loader decode threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch", c.batch, "Batch size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--image-size", c.image_size, "Image side")
      ->check(CLI::Range(16, 4096))
      ->capture_default_str();
  app.add_option("--prefetch-depth", c.prefetch_depth, "Loader batch slots")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", c.steps, "Measured steps per run")
      ->check(CLI::Range(2, 1000000))
      ->capture_default_str();
  app.add_option("--capacity-steps", c.capacity_steps, "Steps timed for the capacity")
      ->check(CLI::Range(2, 1000000))
      ->capture_default_str();
  app.add_option("--memory-batches", c.memory_batches, "Batches held for the in-memory runs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--demands", c.demands, "Core demand as fractions of the loader's capacity")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--tune-rounds", c.tune_rounds,
                 "Corrections of the core's cost per sample from its in-memory rate")
      ->check(CLI::Range(0, 10))
      ->capture_default_str();
  app.add_option("--tolerance", c.tolerance,
                 "A point is invalid when its achieved demand (or the capacity, or the core's "
                 "in-memory rate) is off by more than this fraction")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--rounds", c.rounds,
                 "Below 100 %: pairs of a loader-fed run and an in-memory run beside the "
                 "loader's work, for the median step-time ratio")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_flag("!--no-pin", c.pin, "Do not give the loader and the core separate CPUs");
  app.add_option("--json", c.json, "Write the capacity and one line per demand as JSON lines");
  CLI11_PARSE(app, argc, argv);
  const fs::path root =
      fs::is_directory(fs::path(c.data) / "train") ? fs::path(c.data) / "train" : fs::path(c.data);
  const Placement where = ChoosePlacement(c.pin);
  PinThisThread(where.core_cpus);

  // The kernel is calibrated where the core will run.
  const trainer::KernelCalibration calibration = trainer::CalibrateSyntheticKernel();
  const double core_rate_alone = CoreRateAlone(where, 1.0);
  const Capacity measured = LoaderCapacity(c, root, where, calibration);
  const double capacity = measured.images_per_second;
  // Above 100 % demand the core waits part of each step, so its CPU is neither always busy
  // (C) nor idle: on a machine whose CPUs share a physical core the loader then runs
  // somewhat faster than C. Its capacity with the core CPU idle bounds that from above.
  const double capacity_idle = LoaderCapacity(c, root, where, calibration, false).images_per_second;
  if (!(capacity > 0)) {
    std::fprintf(stderr, "stall_bench: the loader delivered no images from %s\n", root.c_str());
    return 1;
  }
  std::vector<trainer::HeldBatch> held;
  {
    std::unique_ptr<loader::Loader> loader = StartLoader(c, root, where);
    transport::LoaderStream stream(*loader);
    held = trainer::CaptureBatches(stream, c.memory_batches);
  }

  std::printf(
      "stall_bench: %s, batch %zu, %dx%d, %d loader worker(s), prefetch %zu, %zu steps "
      "per run\n",
      root.c_str(), c.batch, c.image_size, c.image_size, c.workers, c.prefetch_depth, c.steps);
  if (where.pinned()) {
    std::printf(
        "placement: loader threads on CPU %s; trainer thread, core and IO tiles on CPU %s\n",
        CpuList(where.loader_cpus).c_str(), CpuList(where.core_cpus).c_str());
  } else {
    std::printf("placement: unpinned (%s)\n", c.pin ? "fewer than 2 CPUs" : "--no-pin");
  }
  std::printf(
      "loader capacity C: %.1f images/s (%.1f ms per batch), into the trainer with a "
      "normalise-only core, core CPU kept busy\n",
      capacity, 1e3 * static_cast<double>(c.batch) / capacity);
  std::printf("loader capacity with the core CPU idle: %.1f images/s (%+.1f %%)\n", capacity_idle,
              100 * (capacity_idle / capacity - 1));
  std::printf("synthetic kernel: %.1f iterations/us; in-memory runs replay %zu held batches\n",
              calibration.iterations_per_us, held.size());
  // If the loader's work slows compute on the other CPU (shared physical core, caches,
  // memory bandwidth), a loader-fed step computes slower than an in-memory one even with
  // no stall; this says how much, independently of the trainer.
  const double interference =
      core_rate_alone > 0 ? measured.core_rate_with_loader / core_rate_alone : 0;
  std::printf(
      "core CPU compute rate while the loader decodes beside it: %.1f %% of its rate alone "
      "(%.0f vs %.0f iterations/us)\n\n",
      100 * interference, measured.core_rate_with_loader, core_rate_alone);
  std::unique_ptr<std::ofstream> json;
  if (!c.json.empty()) {
    json = std::make_unique<std::ofstream>(c.json);
    *json << "{\"capacity_images_per_second\":" << capacity << ",\"workers\":" << c.workers
          << ",\"batch\":" << c.batch << ",\"image_size\":" << c.image_size << ",\"loader_cpus\":\""
          << CpuList(where.loader_cpus) << "\",\"core_cpus\":\"" << CpuList(where.core_cpus)
          << "\",\"core_rate_with_loader_percent\":" << 100 * interference << "}\n";
  }

  // set: the demand asked for; achieved: the core's in-memory rate over C (mean of the
  // in-memory runs before and after the loader-fed one); expected: 1 - 1/demand above 1.
  // "ach fed": the core's own rate during the loader-fed run (its compute time only) over C;
  // lower than "achieved" when the loader's work slows the core's compute.
  // "step ms mem": from memory, the loader CPUs idle; "mem+L": from memory with the
  // loader's work beside (PacedNeighbour); "ratio"/"ratio+L": the loader-fed step over each.
  std::printf("%6s %8s %8s %10s %8s %12s %12s %9s %7s %7s %10s %10s %9s  %s\n", "set", "achieved",
              "ach fed", "us/sample", "stall %", "step ms load", "step ms mem", "mem+L", "ratio",
              "ratio+L", "exp % set", "exp % fed", "img/s", "verdict");
  std::string census;
  bool all_valid = true;
  struct Point {
    double demand, achieved, stall, expected_fed;
    bool valid, met;
  };
  std::vector<Point> points;
  for (double demand : c.demands) {
    // The loader's capacity right before this point (core CPU busy, and idle): the demand
    // is set against it, not against the one from the start of the bench, which the
    // machine's other load may have moved since. It is measured again after the point.
    const double point_capacity = LoaderCapacity(c, root, where, calibration).images_per_second;
    const double point_capacity_idle =
        LoaderCapacity(c, root, where, calibration, false).images_per_second;
    double us_per_sample = 1e6 / (demand * point_capacity);
    // Each in-memory run replays the held batches from a fresh stream.
    auto from_memory = [&](double us) {
      trainer::InMemoryStream memory_stream(held, 0);
      return Train(c, memory_stream, c.steps, us, calibration, nullptr);
    };
    RunResult before = from_memory(us_per_sample);
    // Closed loop: the core gets what CPU the machine leaves it, so its cost per sample is
    // corrected until its in-memory rate is the demand asked for.
    for (int t = 0; t < c.tune_rounds; ++t) {
      const double achieved = before.images_per_second() / point_capacity;
      if (std::abs(achieved / demand - 1) <= c.tolerance / 4) break;
      us_per_sample *= achieved / demand;
      before = from_memory(us_per_sample);
    }
    const auto fed_run = [&](std::string* thread_census) {
      std::unique_ptr<loader::Loader> loader = StartLoader(c, root, where);
      transport::LoaderStream stream(*loader);
      return Train(c, stream, c.steps, us_per_sample, calibration, thread_census);
    };
    const auto beside_loader = [&](double images_per_second) {
      PacedNeighbour neighbour(c, root, where, images_per_second);
      return from_memory(us_per_sample);
    };
    RunResult fed = fed_run(census.empty() ? &census : nullptr);
    // Below capacity: --rounds pairs of a loader-fed run and an in-memory run with the
    // loader's work beside it (PacedNeighbour, at the fed run's rate), the order swapped
    // every round; the step ratio and the stall are the medians over the pairs (the JSON
    // line has the largest stall too). Pairs close in time see the same machine, and a
    // median is not moved by one round in which the machine's other load took the
    // loader's CPU.
    std::vector<double> pair_ratios;
    std::vector<double> beside_steps;
    std::vector<double> stalls = {fed.stall_percent()};
    if (demand <= 1) {
      for (int round = 0; round < c.rounds; ++round) {
        RunResult this_fed;
        RunResult beside;
        if (round % 2 == 0) {
          this_fed = round == 0 ? fed : fed_run(nullptr);
          beside = beside_loader(this_fed.images_per_second());
        } else {
          beside = beside_loader(fed.images_per_second());
          this_fed = fed_run(nullptr);
        }
        if (round > 0) stalls.push_back(this_fed.stall_percent());
        beside_steps.push_back(beside.step_ms());
        pair_ratios.push_back(beside.step_ms() > 0 ? this_fed.step_ms() / beside.step_ms() : 0);
      }
    }
    const RunResult after = from_memory(us_per_sample);
    // The capacity again: the point is INVALID if it moved by more than the tolerance, and
    // above 100 % the gap the fed run should show is bracketed by the lowest and highest
    // capacity measured around it.
    const double point_capacity_after =
        LoaderCapacity(c, root, where, calibration).images_per_second;
    const double point_capacity_idle_after =
        LoaderCapacity(c, root, where, calibration, false).images_per_second;
    const double point_capacity_drift = point_capacity_after / point_capacity - 1;
    const std::vector<double> local_capacities = {point_capacity, point_capacity_idle,
                                                  point_capacity_after, point_capacity_idle_after};
    const double stall = Median(stalls);
    const double worst_stall = *std::max_element(stalls.begin(), stalls.end());

    const double memory_step_ms = (before.step_ms() + after.step_ms()) / 2;
    const double memory_ips = (before.images_per_second() + after.images_per_second()) / 2;
    const double achieved = memory_ips / point_capacity;
    const double drift = before.step_ms() > 0 ? after.step_ms() / before.step_ms() - 1 : 0;
    const double ratio = memory_step_ms > 0 ? fed.step_ms() / memory_step_ms : 0;
    // Against in-memory runs with the loader's work beside them (below capacity only).
    const double beside_step_ms = beside_steps.empty() ? 0 : Median(beside_steps);
    const double ratio_beside = pair_ratios.empty() ? 0 : Median(pair_ratios);
    const double achieved_fed = fed.busy_images_per_second() / point_capacity;
    const double expected_set = demand > 1 ? 100 * (1 - 1 / demand) : 0;
    // The stall the two rates of the loader-fed run imply: the core's own rate then (its
    // compute time only) against the loader's capacity.
    const double expected_fed = achieved_fed > 1 ? 100 * (1 - 1 / achieved_fed) : 0;
    // The same with the capacity the loader has when the core CPU idles: the lower end of
    // the expected stall (the core's CPU is busy only part of the time above 100 %).
    const double fed_rate = achieved_fed * point_capacity;
    const double expected_low =
        fed_rate > point_capacity_idle ? 100 * (1 - point_capacity_idle / fed_rate) : 0;
    // Above 100 % the point is about the capacity gap, so the core must also have run over
    // capacity while fed; below, a slower core when fed is the loader's cost and shows in
    // the step-time ratio (the goal), so it does not invalidate the point.
    const bool valid = std::abs(achieved / demand - 1) <= c.tolerance &&
                       std::abs(drift) <= c.tolerance &&
                       std::abs(point_capacity_drift) <= c.tolerance &&
                       (demand <= 1 || std::abs(achieved_fed / demand - 1) <= c.tolerance);
    all_valid = all_valid && valid;
    // Below 100 %: no more than 1 % stall, and the step no more than 1 % longer than from
    // memory with the loader's work beside it (a stall only lengthens steps; a fed step
    // shorter than the in-memory mean is the core's own run-to-run spread). The ratio
    // against memory with an idle neighbour is printed too: above 1 by what the machine's
    // shared silicon costs, which no input pipeline on that silicon can avoid. Above 100 %:
    // the stall within the capacity gap, between its ends for the loader's lowest and
    // highest capacity measured around the run (core CPU idle and busy), give or take 2
    // points.
    double gap_low = std::min(expected_low, expected_fed);
    double gap_high = std::max(expected_low, expected_fed);
    if (demand > 1) {
      const auto [lowest, highest] =
          std::minmax_element(local_capacities.begin(), local_capacities.end());
      gap_low = fed_rate > *highest ? 100 * (1 - *highest / fed_rate) : 0;
      gap_high = fed_rate > *lowest ? 100 * (1 - *lowest / fed_rate) : 0;
    }
    const bool met =
        demand <= 1 ? stall <= 1 && ratio_beside <= 1.01
                    : fed.stall_percent() >= gap_low - 2 && fed.stall_percent() <= gap_high + 2;
    std::string verdict;
    char why[200];
    if (!valid) {
      std::snprintf(why, sizeof(why),
                    "INVALID (core at %.0f %% of the set demand in memory, %.0f %% when fed; "
                    "in-memory rate moved %+.1f %%, capacity %+.1f %%)",
                    100 * achieved / demand, 100 * achieved_fed / demand, 100 * drift,
                    100 * point_capacity_drift);
      verdict = why;
    } else {
      verdict = met ? "goal met" : "goal MISSED";
      if (achieved_fed < achieved * (1 - c.tolerance)) {
        std::snprintf(why, sizeof(why), " (the core computes %.0f %% slower when fed)",
                      100 * (1 - achieved_fed / achieved));
        verdict += why;
      }
    }
    if (demand > 1) {
      std::snprintf(why, sizeof(why), " (expected %.1f-%.1f %%)", gap_low, gap_high);
      verdict += why;
    }
    points.push_back({demand, achieved, stall, expected_fed, valid, met});
    std::printf(
        "%5.0f%% %7.0f%% %7.0f%% %10.2f %8.2f %12.2f %12.2f %9.2f %7.3f %7.3f %10.1f %10.1f "
        "%9.1f  %s\n",
        100 * demand, 100 * achieved, 100 * achieved_fed, us_per_sample, stall, fed.step_ms(),
        memory_step_ms, beside_step_ms, ratio, ratio_beside, expected_set, expected_fed,
        fed.images_per_second(), verdict.c_str());
    std::fflush(stdout);
    if (json) {
      *json << "{\"demand\":" << demand << ",\"achieved_demand\":" << achieved
            << ",\"achieved_demand_fed\":" << achieved_fed << ",\"us_per_sample\":" << us_per_sample
            << ",\"stall_percent\":" << stall << ",\"worst_stall_percent\":" << worst_stall
            << ",\"step_ms\":" << fed.step_ms() << ",\"rounds\":" << pair_ratios.size()
            << ",\"memory_step_ms\":" << memory_step_ms
            << ",\"memory_step_ms_before\":" << before.step_ms()
            << ",\"memory_step_ms_after\":" << after.step_ms()
            << ",\"memory_stall_percent\":" << after.stall_percent() << ",\"ratio\":" << ratio
            << ",\"memory_beside_loader_step_ms\":" << beside_step_ms
            << ",\"ratio_beside_loader\":" << ratio_beside
            << ",\"expected_stall_percent_set\":" << expected_set
            << ",\"expected_stall_percent_fed\":" << expected_fed
            << ",\"expected_stall_percent_low\":" << expected_low
            << ",\"images_per_second\":" << fed.images_per_second()
            << ",\"fill_seconds\":" << fed.fill_seconds
            << ",\"valid\":" << (valid ? "true" : "false")
            << ",\"goal_met\":" << (valid && met ? "true" : "false") << "}\n";
    }
  }
  // Each point measured the capacity before and after itself; the run's drift from start to
  // end is information (a point is judged against its own).
  const double capacity_after = LoaderCapacity(c, root, where, calibration).images_per_second;
  const double capacity_drift = capacity_after / capacity - 1;
  std::printf(
      "\nloader capacity again after the runs: %.1f images/s (%+.1f %% from the start; each "
      "point is set and judged against the capacity measured around it)\n",
      capacity_after, 100 * capacity_drift);
  std::printf("threads during the first loader-fed run: %s\n", census.c_str());
  std::printf(
      "goals: below 100 %% demand, stall <= 1 %% (median of the fed runs) and step time at most 1 "
      "%% "
      "above in-memory beside the loader's work (ratio+L, median of the pairs); "
      "above, stall within 2 points of the gap 1 - C'/r, C' between the capacity with the core "
      "CPU idle and busy, r the core's rate when fed\n");
  const bool valid = all_valid;
  int met = 0;
  for (const Point& p : points) met += p.valid && p.met ? 1 : 0;
  std::printf("run %s: %d of %zu goals met%s\n", valid ? "valid" : "INVALID", met, points.size(),
              valid ? "" : " (re-run on a quiet machine; invalid points are not judged)");
  if (json) {
    *json << "{\"capacity_after_images_per_second\":" << capacity_after
          << ",\"valid\":" << (valid ? "true" : "false") << ",\"goals_met\":" << met << "}\n";
  }
  // 0: a valid run (whatever the goals say); 3: the run is invalid.
  return valid ? 0 : 3;
}
