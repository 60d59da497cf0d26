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
//   rounds: the machine's other load moves C by 10-30 % within a minute here, so each point
//     is --rounds rounds, each between two measurements of C (the one after a round is the
//     one before the next). A round sets the core's cost against the C right before it
//     (the tuned cost, scaled by how C moved since the tuning) and is judged only if C
//     moved by at most --tolerance (10 %) until right after it; the point reports medians
//     over the rounds judged.
//   fed run: the trainer fed by a loader, started in the loader's steady state for the
//     demand: below 100 % with the loader's ring full (as in a job whose loader filled its
//     ring while the model was built; a 30-step run from an empty ring at 90 % gains a
//     batch of reserve every ten steps, so it would measure the start-up), above 100 % with
//     it empty (the run's first wait is the pipeline's fill, not a stall).
//   fed demand ("ach fed"): the core's own rate during the fed run (images per second of
//     its compute time, waits excluded) over C. Lower than the achieved demand when the
//     loader's work slows the core's compute on the other CPU (a shared physical core on a
//     VM, caches, memory bandwidth); the header prints that interference measured alone.
//   validity: a point is INVALID, and its goal not judged, when its achieved demand is more
//     than the tolerance off the set point, when its in-memory rate moved by more than that
//     from before its rounds to after them, or when fewer than half its rounds were judged
//     (above 100 % a round is also not judged when its fed demand is that far off: it was
//     then not over capacity as set). The run is valid when every point is.
//   stall: input wait / (wait + busy) of the steady-state steps (trainer::StallMeter).
//   expected stall: when the core's rate r exceeds C, the loader-bound step takes 1/C per
//     sample of which the core computes 1/r, so stall = 1 - C/r: 1 - 1/d = 16.7 % at the
//     set d = 1.2 ("exp % set"). Above 100 % the core waits part of each step, so its CPU
//     is busy less than while C was measured; where the CPUs share a physical core the
//     loader then runs faster than C. C' = the capacity with the core CPU idle bounds that
//     from above, so a round's expected stall lies between 1 - C'/r and 1 - C/r, r its fed
//     rate, for the highest and lowest of the C and C' measured before and after it
//     ("exp % range", the medians of the rounds' ends).
//   in-memory beside the loader ("mem+L") and "ratio+L": below 100 %, each round also runs
//     an interleaved run (InterleavedStream) of about --mixed-seconds whose batches
//     alternate every 4 between the loader's and batches held in memory; while it hands
//     out a held batch, a thread on the loader's CPU takes the loader's batch and drops it,
//     so the loader works alike throughout and the core computes next to the same
//     neighbour. The two kinds of step are a fraction of a second apart, so the machine's
//     other load (which moves the core's speed by several percent from one run to the
//     next here) falls on both alike. ratio+L is the median loader-fed step over the median
//     in-memory step, the steps of all judged rounds pooled (each over its round's median
//     step); the ratio of the means is printed too. It is what delivering the batches
//     costs the core, apart from what sharing the silicon with the decoders does, which no
//     input pipeline on the same silicon can avoid (the header's interference line).
// Goals (training speed set by compute alone): at 50 % and 90 %, stall <= 1 % and the step
// time at most 1 % above the in-memory one beside the loader (ratio+L <= 1.01); at 120 % the
// stall within the expected range, give or take 2 points (the median of the judged rounds'
// distances outside their ranges).
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
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/median.h"
#include "metrics/cli.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/trainer/mpi_session.h"
#include "tilefeed/trainer/trainer.h"
#include "tilefeed/transport/batch_stream.h"
#include "tools/cli_checks.h"
#include "tools/option_flags.h"
#include "trainer/memory_stream.h"
#include "trainer/stall.h"
#include "trainer/synthetic_core.h"

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
  int tune_rounds = 2;                  // corrections of the core's cost from in-memory runs
  int rounds = 7;                       // per point, each between two capacity measurements
  double mixed_seconds = 6;             // length of a round's interleaved run (below 100 %)
  metrics::Session* metrics = nullptr;  // --metrics: every run's steps go to it
  double tolerance = 0.10;              // allowed deviation of achieved demand / capacity
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
  auto loader = std::make_unique<loader::Loader>(loader::OpenDataset(root.string()).source,
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
  double stall_percent() const { return seconds > 0 ? 100 * wait_seconds / seconds : 0; }
  double step_ms() const { return steps > 0 ? 1e3 * seconds / static_cast<double>(steps) : 0; }
  double images_per_second() const {
    return seconds > 0 ? static_cast<double>(images) / seconds : 0;
  }
  // The core's own rate in this run: images per second of compute (wait excluded).
  double busy_images_per_second() const {
    return seconds > wait_seconds ? static_cast<double>(images) / (seconds - wait_seconds) : 0;
  }
};

// One trainer run of `steps` steps on `stream` with the synthetic core at `us_per_sample`.
// `census`, if given, gets where the threads are once the pipeline runs; `on_step`, if
// given, sees every step's progress (its own wait and busy time among it).
RunResult Train(const Config& c, transport::BatchStream& stream, std::size_t steps,
                double us_per_sample, const trainer::KernelCalibration& calibration,
                std::string* census,
                const std::function<void(const trainer::StepProgress&)>& on_step = {}) {
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
      });
  if (census != nullptr || on_step || c.metrics != nullptr) {
    trainer.SetProgressSink([census, &on_step, &c](const trainer::StepProgress& p) {
      if (c.metrics != nullptr) {
        c.metrics->AddStep(p.epoch, c.batch, p.step_wait_seconds, p.step_busy_seconds);
      }
      // Once the pipeline runs (the IO tiles exist only inside Train), see where threads are.
      if (census != nullptr && p.global_step == 2) *census = ThreadCensus();
      if (on_step) on_step(p);
    });
  }
  trainer.Train(stream);
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

// Returns once every slot of the loader's ring holds a decoded batch (or after 60 s, for a
// loader that cannot fill it: the run then shows the stall).
void WaitForFullRing(const loader::Loader& loader, const Config& c) {
  const std::uint64_t full = static_cast<std::uint64_t>(c.prefetch_depth) * c.batch;
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (loader.metrics().images < full && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// One run that alternates, every `phase` batches, between the loader's batches (fed) and
// batches held in memory. While it hands out a held batch, a thread on the loader CPUs takes
// the loader's next batch and drops it, at the moment the IO tile would have taken it, so
// the loader decodes the same images at the same pace either way and the core computes
// next to the same neighbour; what differs is only where its batch comes from and whether
// it waits for it. The two kinds of step are seconds apart in separate runs but a fraction
// of a second apart here, so the machine's other load, which moves the
// core's speed by several percent from one run to the next, falls on both alike.
class InterleavedStream final : public transport::BatchStream {
 public:
  // REQUIRES: `loader` and `held` (not empty) outlive the stream.
  InterleavedStream(loader::Loader& loader, const std::vector<trainer::HeldBatch>& held,
                    std::size_t phase, bool fed_first, const Placement& where)
      : loader_(loader), stream_(loader), held_(held), phase_(phase), fed_first_(fed_first) {
    dropper_ = std::jthread([this, cpus = where.loader_cpus](const std::stop_token& stop) {
      PinThisThread(cpus);
      while (true) {
        {
          std::unique_lock lock(mutex_);
          if (!credit_.wait(lock, stop, [&] { return credits_ > 0; })) return;
          --credits_;
        }
        std::lock_guard loader_lock(loader_mutex_);
        stream_.Next();  // dropped at once: the slot goes back to the loader
      }
    });
  }
  ~InterleavedStream() override {
    dropper_.request_stop();
    loader_.Stop();  // wakes a Next() that waits
  }
  InterleavedStream(const InterleavedStream&) = delete;
  InterleavedStream& operator=(const InterleavedStream&) = delete;

  // Whether the n-th batch handed out (from 0) comes from the loader.
  bool Fed(std::uint64_t n) const { return (n / phase_ % 2 == 0) == fed_first_; }

  std::optional<transport::ReceivedBatch> Next() override {
    const std::uint64_t n = handed_.fetch_add(1);
    if (Fed(n)) {
      std::lock_guard loader_lock(loader_mutex_);
      return stream_.Next();
    }
    {
      std::lock_guard lock(mutex_);
      ++credits_;
    }
    credit_.notify_one();
    const trainer::HeldBatch& b = held_[n % held_.size()];
    return transport::ReceivedBatch(b.meta, b.images, b.labels, b.sample_indices, nullptr);
  }
  bool ended() const override { return false; }
  std::size_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }
  // The loader's: a benchmark writes no checkpoint.
  loader::LoaderState position() const override { return loader_.state(); }

 private:
  loader::Loader& loader_;
  transport::LoaderStream stream_;
  const std::vector<trainer::HeldBatch>& held_;
  const std::size_t phase_;
  const bool fed_first_;
  std::atomic<std::uint64_t> handed_{0};
  std::mutex loader_mutex_;  // the IO tile and the dropper both take loader batches
  std::mutex mutex_;
  std::condition_variable_any credit_;
  std::uint64_t credits_ = 0;  // guarded by mutex_: loader batches the dropper owes
  std::jthread dropper_;
};

using bench::Median;

// The busy thread's compute rate on the core CPU with nothing of ours beside it.
double CoreRateAlone(const Placement& where, double seconds) {
  BusyCore busy(where);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return busy.Stop();
}

// Adds the bench's flags, each writing its field of `c`.
void AddFlags(CLI::App& app, Config& c) {
  app.add_option("--data", c.data,
                 "Dataset, as train --data takes it (the train split of a train/ + val/ root)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--workers", c.workers, "Loader decode threads")
      ->check(tilefeed::tools::Between(1, 1024))
      ->capture_default_str();
  app.add_option("--batch-size,--batch", c.batch, "Batch size")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--image-size", c.image_size, "Image side")
      ->check(tilefeed::tools::Between(16, 4096))
      ->capture_default_str();
  app.add_option("--prefetch-depth", c.prefetch_depth, "Loader batch slots")
      ->check(tilefeed::tools::Between(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--steps", c.steps, "Measured steps per run")
      ->check(tilefeed::tools::Between(2, 1000000))
      ->capture_default_str();
  app.add_option("--capacity-steps", c.capacity_steps, "Steps timed for the capacity")
      ->check(tilefeed::tools::Between(2, 1000000))
      ->capture_default_str();
  app.add_option("--memory-batches", c.memory_batches, "Batches held for the in-memory runs")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--demands", c.demands, "Core demand as fractions of the loader's capacity")
      ->delimiter(',')
      ->check(tilefeed::tools::Above(0.0))
      ->capture_default_str();
  app.add_option("--tune-rounds", c.tune_rounds,
                 "Corrections of the core's cost per sample from its in-memory rate")
      ->check(tilefeed::tools::Between(0, 10))
      ->capture_default_str();
  app.add_option("--tolerance", c.tolerance,
                 "A point is invalid when its achieved demand (or the capacity, or the core's "
                 "in-memory rate) is off by more than this fraction")
      ->check(tilefeed::tools::Between(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--rounds", c.rounds,
                 "Rounds per point, each set against the capacity measured right before it: "
                 "a loader-fed run, and below 100 % an interleaved run")
      ->check(tilefeed::tools::Between(1, 100))
      ->capture_default_str();
  app.add_option("--mixed-seconds", c.mixed_seconds,
                 "Length of each interleaved run (below 100 %): its batches alternate every 4 "
                 "between the loader's and ones held in memory, the loader's then taken and "
                 "dropped beside")
      ->check(tilefeed::tools::Between(0.5, 3600.0))
      ->capture_default_str();
  app.add_flag("!--no-pin", c.pin, "Do not give the loader and the core separate CPUs");
  app.add_option("--json", c.json, "Write the capacity and one line per demand as JSON lines");
}

// The metrics session that carries the trainer's steps of every run (capacity, in-memory
// and fed alike). Throws what metrics::Open throws.
metrics::Session OpenMetrics(const CLI::App& app, const metrics::Flags& flags, const Config& c) {
  return metrics::Open(flags, {"stall_bench", metrics::OptionsOf(app), c.data, 0, 0, 0, 1,
                               c.prefetch_depth * c.batch * static_cast<std::size_t>(c.image_size) *
                                   static_cast<std::size_t>(c.image_size) * 3,
                               true, loader::SizeSchedule(c.image_size)});
}

// One round of a point: the loader-fed run (and below 100 % the interleaved run) between
// two capacity measurements.
struct Round {
  double us_per_sample = 0;
  double capacity_before = 0, capacity_after = 0;            // core CPU busy
  double capacity_idle_before = 0, capacity_idle_after = 0;  // core CPU idle (above 100 %)
  RunResult fed;
  // Below 100 %: the interleaved run's step times (ms), by kind, its first step left out.
  std::vector<double> mixed_fed_ms, mixed_memory_ms;
  std::vector<double> mixed_fed_wait_ms, mixed_memory_wait_ms;  // the waits within them
  double ratio_beside = 0;                                      // their medians' ratio
  double achieved_fed = 0;
  double gap_low = 0, gap_high = 0;  // above 100 %: the expected stall's range
  double deviation = 0;              // above 100 %: how far the stall is outside that range
  bool valid = false;
};

// What every run of the bench shares once it is set up: where the threads run, the
// kernel calibrated where the core runs, and the batches the in-memory runs replay.
struct Bench {
  const Config& c;
  fs::path root;
  Placement where;
  trainer::KernelCalibration calibration;
  std::vector<trainer::HeldBatch> held;

  // The loader's capacity (images/s) now, with the core CPU busy or idle.
  double CapacityNow(bool busy_core = true) const {
    return LoaderCapacity(c, root, where, calibration, busy_core).images_per_second;
  }

  // Each in-memory run replays the held batches from a fresh stream.
  RunResult FromMemory(double us) const {
    trainer::InMemoryStream memory_stream(held, 0);
    return Train(c, memory_stream, c.steps, us, calibration, nullptr);
  }

  // Each loader-fed run starts from the loader's steady state for its demand, as a long
  // job is after its first seconds: below 100 % the loader outruns the core and its ring
  // is full (the run starts once every slot holds a batch, as in a job whose loader fills
  // its ring while the model is built); above 100 % the ring is empty (the run starts at
  // once, and its first wait is the pipeline's fill). A 30-step run started on an empty
  // ring at 90 % would measure the start-up instead: the ring gains a batch only every
  // ten steps there, so it would never hold one in reserve.
  RunResult Fed(bool over, double us, std::string* thread_census) const {
    std::unique_ptr<loader::Loader> loader = StartLoader(c, root, where);
    if (!over) WaitForFullRing(*loader, c);
    transport::LoaderStream stream(*loader);
    return Train(c, stream, c.steps, us, calibration, thread_census);
  }

  // Below 100 %: one run of about --mixed-seconds whose batches alternate every 4 between
  // the loader's and held ones (InterleavedStream); each step's time goes to its kind,
  // the run's first step (the fill) left out.
  void Interleaved(double demand, double us, bool fed_first, Round& round) const {
    std::unique_ptr<loader::Loader> loader = StartLoader(c, root, where);
    WaitForFullRing(*loader, c);
    InterleavedStream stream(*loader, held, 4, fed_first, where);
    // As many steps as the core, at the demand set, takes in that time.
    const auto steps = static_cast<std::size_t>(std::max(
        16.0, c.mixed_seconds * demand * round.capacity_before / static_cast<double>(c.batch)));
    Train(c, stream, steps, us, calibration, nullptr, [&](const trainer::StepProgress& p) {
      if (p.global_step < 2) return;
      // One replica, no accumulation: step k took the k-th batch handed out.
      const double ms = 1e3 * (p.step_wait_seconds + p.step_busy_seconds);
      const bool fed = stream.Fed(p.global_step - 1);
      (fed ? round.mixed_fed_ms : round.mixed_memory_ms).push_back(ms);
      (fed ? round.mixed_fed_wait_ms : round.mixed_memory_wait_ms)
          .push_back(1e3 * p.step_wait_seconds);
    });
    const double memory = Median(round.mixed_memory_ms);
    round.ratio_beside = memory > 0 ? Median(round.mixed_fed_ms) / memory : 0;
  }
};

// What the bench measures before the points: the core CPU's compute rate alone, and the
// loader's capacity with the core CPU busy and idle.
struct Baseline {
  double core_rate_alone = 0;
  Capacity measured;         // core CPU busy: C
  double capacity_idle = 0;  // core CPU idle: C'
  double capacity() const { return measured.images_per_second; }
  // The core CPU's compute rate beside the loader as a fraction of its rate alone.
  double interference() const {
    return core_rate_alone > 0 ? measured.core_rate_with_loader / core_rate_alone : 0;
  }
};

Baseline MeasureBaseline(const Bench& b) {
  Baseline baseline;
  baseline.core_rate_alone = CoreRateAlone(b.where, 1.0);
  baseline.measured = LoaderCapacity(b.c, b.root, b.where, b.calibration);
  // Above 100 % demand the core waits part of each step, so its CPU is neither always busy
  // (C) nor idle: on a machine whose CPUs share a physical core the loader then runs
  // somewhat faster than C. Its capacity with the core CPU idle bounds that from above.
  baseline.capacity_idle = b.CapacityNow(false);
  return baseline;
}

std::vector<trainer::HeldBatch> CaptureHeld(const Bench& b) {
  std::unique_ptr<loader::Loader> loader = StartLoader(b.c, b.root, b.where);
  transport::LoaderStream stream(*loader);
  return trainer::CaptureBatches(stream, b.c.memory_batches);
}

void PrintHeader(const Bench& b, const Baseline& baseline) {
  const Config& c = b.c;
  const double capacity = baseline.capacity();
  std::printf(
      "stall_bench: %s, batch %zu, %dx%d, %d loader worker(s), prefetch %zu, %zu steps "
      "per run\n",
      b.root.c_str(), c.batch, c.image_size, c.image_size, c.workers, c.prefetch_depth, c.steps);
  if (b.where.pinned()) {
    std::printf(
        "placement: loader threads on CPU %s; trainer thread, core and IO tiles on CPU %s\n",
        CpuList(b.where.loader_cpus).c_str(), CpuList(b.where.core_cpus).c_str());
  } else {
    std::printf("placement: unpinned (%s)\n", c.pin ? "fewer than 2 CPUs" : "--no-pin");
  }
  std::printf(
      "loader capacity C: %.1f images/s (%.1f ms per batch), into the trainer with a "
      "normalise-only core, core CPU kept busy\n",
      capacity, 1e3 * static_cast<double>(c.batch) / capacity);
  std::printf("loader capacity with the core CPU idle: %.1f images/s (%+.1f %%)\n",
              baseline.capacity_idle, 100 * (baseline.capacity_idle / capacity - 1));
  std::printf("synthetic kernel: %.1f iterations/us; in-memory runs replay %zu held batches\n",
              b.calibration.iterations_per_us, b.held.size());
  // If the loader's work slows compute on the other CPU (shared physical core, caches,
  // memory bandwidth), a loader-fed step computes slower than an in-memory one even with
  // no stall; this says how much, independently of the trainer.
  std::printf(
      "core CPU compute rate while the loader decodes beside it: %.1f %% of its rate alone "
      "(%.0f vs %.0f iterations/us)\n\n",
      100 * baseline.interference(), baseline.measured.core_rate_with_loader,
      baseline.core_rate_alone);
}

void WriteJsonHeader(std::ostream& json, const Bench& b, const Baseline& baseline) {
  json << "{\"capacity_images_per_second\":" << baseline.capacity()
       << ",\"workers\":" << b.c.workers << ",\"batch\":" << b.c.batch
       << ",\"image_size\":" << b.c.image_size << ",\"loader_cpus\":\""
       << CpuList(b.where.loader_cpus) << "\",\"core_cpus\":\"" << CpuList(b.where.core_cpus)
       << "\",\"core_rate_with_loader_percent\":" << 100 * baseline.interference() << "}\n";
}

// Columns. set: the demand asked for; achieved: the core's in-memory rate over C once its
// cost is tuned; rounds: the rounds whose capacity held, of those run. The rest are
// medians over those rounds: us/sample (each round re-sets it against the capacity
// measured right before it), stall %, the loader-fed step, the in-memory step beside the
// loader's work ("mem+L", below 100 %), "ratio+L" (the loader-fed steps over those, see
// below), "ach fed" (the core's own rate in the fed run, compute time only, over the
// round's C), and the expected stall: 1 - 1/set, and above 100 % the range the
// capacities measured around the round bracket.
void PrintColumns() {
  std::printf("%6s %8s %7s %10s %8s %12s %9s %8s %8s %10s %13s %9s  %s\n", "set", "achieved",
              "rounds", "us/sample", "stall %", "step ms load", "mem+L", "ratio+L", "ach fed",
              "exp % set", "exp % range", "img/s", "verdict");
}

// The capacity between two rounds (the one after a round is the one before the next):
// with the core CPU busy, and above 100 % also idle (0 below).
struct Capacities {
  double busy = 0;
  double idle = 0;
};

Capacities MeasureCapacities(const Bench& b, bool over) {
  Capacities now;
  now.busy = b.CapacityNow();
  if (over) now.idle = b.CapacityNow(false);
  return now;
}

// A point's cost per sample, tuned in memory against the capacity right before the point
// (not the one from the start of the bench, which the machine's other load may have moved
// since). Closed loop: the core gets what CPU the machine leaves it, so its cost per
// sample is corrected until its in-memory rate is the demand asked for.
struct Tuning {
  double capacity = 0;  // the capacity it was tuned against
  double us_per_sample = 0;
  RunResult before;  // the in-memory run at the tuned cost
};

Tuning TuneCore(const Bench& b, double demand, double capacity_now) {
  Tuning tuning{capacity_now, 1e6 / (demand * capacity_now), {}};
  tuning.before = b.FromMemory(tuning.us_per_sample);
  for (int t = 0; t < b.c.tune_rounds; ++t) {
    const double achieved = tuning.before.images_per_second() / tuning.capacity;
    if (std::abs(achieved / demand - 1) <= b.c.tolerance / 4) break;
    tuning.us_per_sample *= achieved / demand;
    tuning.before = b.FromMemory(tuning.us_per_sample);
  }
  return tuning;
}

// Judges a round once the capacity after it is known.
void JudgeRound(Round& round, double demand, double tolerance) {
  const bool over = demand > 1;
  round.achieved_fed = round.fed.busy_images_per_second() / round.capacity_before;
  // Above 100 % the point is about the capacity gap, so the core must also have run
  // over capacity while fed; below, a slower core when fed is the loader's cost and
  // shows in the step-time ratio (the goal), so it does not invalidate the round.
  round.valid = std::abs(round.capacity_after / round.capacity_before - 1) <= tolerance &&
                (!over || std::abs(round.achieved_fed / demand - 1) <= tolerance);
  if (!over) return;
  // The core waits part of each step, so its CPU is neither always busy (C) nor idle
  // (C'): the stall the round should show lies between 1 - C/r and 1 - C'/r, r the
  // core's own rate when fed, for the lowest and highest of the four capacities
  // measured around it.
  const double fed_rate = round.fed.busy_images_per_second();
  const double lowest = std::min({round.capacity_before, round.capacity_after,
                                  round.capacity_idle_before, round.capacity_idle_after});
  const double highest = std::max({round.capacity_before, round.capacity_after,
                                   round.capacity_idle_before, round.capacity_idle_after});
  round.gap_low = fed_rate > highest ? 100 * (1 - highest / fed_rate) : 0;
  round.gap_high = fed_rate > lowest ? 100 * (1 - lowest / fed_rate) : 0;
  const double stall = round.fed.stall_percent();
  round.deviation = stall < round.gap_low    ? stall - round.gap_low
                    : stall > round.gap_high ? stall - round.gap_high
                                             : 0;
}

// --rounds rounds, each between two capacity measurements (the one after a round is the
// one before the next). Each round re-sets the core's cost against the capacity right
// before it, so the demand follows the loader's capacity as the machine's other load
// moves it (10-30 % within a minute here), and a round whose capacity moved by more
// than the tolerance meanwhile is not judged. A round is a loader-fed run, and below
// 100 % an interleaved run (its first kind of batch swapped every round); the point
// reports the medians over the rounds that held, which one round in which the
// machine's other load took the loader's CPU does not move. `census` gets where the
// threads are during the bench's first loader-fed run.
std::vector<Round> RunRounds(const Bench& b, double demand, const Tuning& tuning, Capacities now,
                             std::string& census) {
  const bool over = demand > 1;
  std::vector<Round> rounds;
  for (int r = 0; r < b.c.rounds; ++r) {
    Round round;
    round.capacity_before = now.busy;
    round.capacity_idle_before = now.idle;
    round.us_per_sample = tuning.us_per_sample * tuning.capacity / now.busy;
    round.fed = b.Fed(over, round.us_per_sample, census.empty() ? &census : nullptr);
    if (!over) b.Interleaved(demand, round.us_per_sample, r % 2 == 0, round);
    now = MeasureCapacities(b, over);
    round.capacity_after = now.busy;
    round.capacity_idle_after = now.idle;
    JudgeRound(round, demand, b.c.tolerance);
    rounds.push_back(round);
  }
  return rounds;
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// The median of `field` over the rounds that held.
template <typename Field>
double MedianOfJudged(const std::vector<Round>& rounds, Field field) {
  std::vector<double> values;
  for (const Round& round : rounds) {
    if (round.valid) values.push_back(field(round));
  }
  return Median(values);
}

// The interleaved runs' steps of all the rounds that held, pooled by kind, each step's
// time over its round's median step (the rounds' costs differ, as their capacities did);
// ratio+L is the ratio of the two pools' medians, and the mean-based one is printed too
// (it counts every slow step, whatever slowed it), with and without the steps' input
// waits (a loader-fed step waits when the machine's other load took the loader's CPU
// for longer than its ring lasts; a step from memory never does).
struct Pooled {
  std::vector<double> fed, memory, fed_wait, memory_wait;
  double beside_step_ms = 0;  // the median of the rounds' median in-memory steps
  double ratio = 0;           // ratio+L: of the pools' medians
  double ratio_mean = 0;      // of their means
  double ratio_busy = 0;      // of their means without the waits
  double fed_stall = 0;       // the loader-fed steps' waits, % of their time
};

Pooled PoolInterleaved(const std::vector<Round>& rounds) {
  Pooled p;
  std::vector<double> memory_medians;
  for (const Round& round : rounds) {
    if (!round.valid || round.mixed_fed_ms.empty() || round.mixed_memory_ms.empty()) continue;
    std::vector<double> all = round.mixed_fed_ms;
    all.insert(all.end(), round.mixed_memory_ms.begin(), round.mixed_memory_ms.end());
    const double scale = Median(all);
    const auto pool = [scale](const std::vector<double>& from, std::vector<double>& to) {
      for (double ms : from) to.push_back(ms / scale);
    };
    pool(round.mixed_fed_ms, p.fed);
    pool(round.mixed_memory_ms, p.memory);
    pool(round.mixed_fed_wait_ms, p.fed_wait);
    pool(round.mixed_memory_wait_ms, p.memory_wait);
    memory_medians.push_back(Median(round.mixed_memory_ms));
  }
  p.beside_step_ms = Median(memory_medians);
  p.ratio = p.memory.empty() ? 0 : Median(p.fed) / Median(p.memory);
  p.ratio_mean = p.memory.empty() ? 0 : Mean(p.fed) / Mean(p.memory);
  p.ratio_busy = p.memory.empty()
                     ? 0
                     : (Mean(p.fed) - Mean(p.fed_wait)) / (Mean(p.memory) - Mean(p.memory_wait));
  p.fed_stall = p.fed.empty() ? 0 : 100 * Mean(p.fed_wait) / Mean(p.fed);
  return p;
}

// One demand point, measured and judged.
struct Point {
  double demand = 0;
  bool over = false;  // above 100 %
  std::vector<Round> rounds;
  RunResult before, after;  // in-memory runs at the tuned cost, around the rounds
  double achieved = 0;      // the core's in-memory rate over C, tuned
  double drift = 0;         // how far the in-memory step moved from before to after
  std::size_t valid_rounds = 0;
  double worst_stall = 0;
  // Medians over the rounds that held.
  double stall = 0, fed_step_ms = 0, achieved_fed = 0, us_per_sample = 0, fed_ips = 0;
  double gap_low = 0, gap_high = 0, deviation = 0;
  double expected_set = 0;  // 1 - 1/set above 100 %
  Pooled pooled;
  bool valid = false;
  bool met = false;  // the goal, judged only when valid
};

// The point's medians, validity and goal from its rounds.
void Summarise(Point& p, double tolerance) {
  const std::vector<Round>& rounds = p.rounds;
  for (const Round& round : rounds) {
    if (!round.valid) continue;
    ++p.valid_rounds;
    p.worst_stall = std::max(p.worst_stall, round.fed.stall_percent());
  }
  p.stall = MedianOfJudged(rounds, [](const Round& r) { return r.fed.stall_percent(); });
  p.fed_step_ms = MedianOfJudged(rounds, [](const Round& r) { return r.fed.step_ms(); });
  p.pooled = PoolInterleaved(rounds);
  p.achieved_fed = MedianOfJudged(rounds, [](const Round& r) { return r.achieved_fed; });
  p.us_per_sample = MedianOfJudged(rounds, [](const Round& r) { return r.us_per_sample; });
  p.fed_ips = MedianOfJudged(rounds, [](const Round& r) { return r.fed.images_per_second(); });
  p.gap_low = MedianOfJudged(rounds, [](const Round& r) { return r.gap_low; });
  p.gap_high = MedianOfJudged(rounds, [](const Round& r) { return r.gap_high; });
  p.deviation = MedianOfJudged(rounds, [](const Round& r) { return r.deviation; });
  p.expected_set = p.over ? 100 * (1 - 1 / p.demand) : 0;
  // A majority of the rounds must have held for the point to be judged.
  p.valid = std::abs(p.achieved / p.demand - 1) <= tolerance && std::abs(p.drift) <= tolerance &&
            2 * p.valid_rounds > rounds.size();
  // Below 100 %: no more than 1 % stall, and the step no more than 1 % longer than from
  // memory with the loader's work beside it (a stall only lengthens steps; a fed step
  // shorter than that is the core's own run-to-run spread). Above 100 %: the stall within
  // the expected range, give or take 2 points (the median of the rounds' distances
  // outside it).
  p.met = p.over ? std::abs(p.deviation) <= 2 : p.stall <= 1 && p.pooled.ratio <= 1.01;
}

// Tunes the core for `demand`, runs its rounds and judges the point.
Point MeasurePoint(const Bench& b, double demand, std::string& census) {
  Point p;
  p.demand = demand;
  p.over = demand > 1;
  const Capacities now = MeasureCapacities(b, p.over);
  const Tuning tuning = TuneCore(b, demand, now.busy);
  p.before = tuning.before;
  p.rounds = RunRounds(b, demand, tuning, now, census);
  // The core's in-memory rate at the tuned cost again: the point is INVALID if it moved by
  // more than the tolerance (the core CPU's speed changed under the point).
  p.after = b.FromMemory(tuning.us_per_sample);
  p.achieved = p.before.images_per_second() / tuning.capacity;
  p.drift = p.before.step_ms() > 0 ? p.after.step_ms() / p.before.step_ms() - 1 : 0;
  Summarise(p, b.c.tolerance);
  return p;
}

std::string Verdict(const Point& p, double tolerance) {
  char why[200];
  if (!p.valid) {
    std::snprintf(why, sizeof(why),
                  "INVALID (core at %.0f %% of the set demand in memory; its in-memory rate "
                  "moved %+.1f %%; the capacity held in %zu of %zu rounds)",
                  100 * p.achieved / p.demand, 100 * p.drift, p.valid_rounds, p.rounds.size());
    return why;
  }
  std::string verdict = p.met ? "goal met" : "goal MISSED";
  if (!p.over && p.achieved_fed < p.achieved * (1 - tolerance)) {
    std::snprintf(why, sizeof(why), " (the core computes %.0f %% slower when fed)",
                  100 * (1 - p.achieved_fed / p.achieved));
    verdict += why;
  }
  return verdict;
}

// Every round, for whoever wants to see the spread the medians hide.
void PrintRound(std::size_t r, const Round& round, bool over, double tolerance) {
  char idle[64] = "";
  char detail[64] = "";
  if (over) {
    std::snprintf(idle, sizeof(idle), " (idle %.0f -> %.0f)", round.capacity_idle_before,
                  round.capacity_idle_after);
    std::snprintf(detail, sizeof(detail), ", expected %.1f-%.1f %%", round.gap_low, round.gap_high);
  } else {
    std::snprintf(detail, sizeof(detail), ", ratio+L %.3f", round.ratio_beside);
  }
  char judged[96] = "";
  const double moved = round.capacity_after / round.capacity_before - 1;
  if (!round.valid && std::abs(moved) > tolerance) {
    std::snprintf(judged, sizeof(judged), "  (not judged: C moved %+.1f %%)", 100 * moved);
  } else if (!round.valid) {
    std::snprintf(judged, sizeof(judged), "  (not judged: the core ran at %.0f %% of C when fed)",
                  100 * round.achieved_fed);
  }
  std::printf("         round %zu: C %.0f -> %.0f images/s%s, stall %.2f %%, step %.2f ms%s%s\n",
              r + 1, round.capacity_before, round.capacity_after, idle, round.fed.stall_percent(),
              round.fed.step_ms(), detail, judged);
}

// The point's row, its rounds and (below 100 %) its interleaved steps.
void PrintPoint(const Point& p, double tolerance) {
  char range[32] = "-";
  if (p.over) std::snprintf(range, sizeof(range), "%.1f-%.1f", p.gap_low, p.gap_high);
  std::printf(
      "%5.0f%% %7.0f%% %3zu of %zu %10.2f %8.2f %12.2f %9.2f %8.3f %7.0f%% %10.1f %13s %9.1f  "
      "%s\n",
      100 * p.demand, 100 * p.achieved, p.valid_rounds, p.rounds.size(), p.us_per_sample, p.stall,
      p.fed_step_ms, p.pooled.beside_step_ms, p.pooled.ratio, 100 * p.achieved_fed, p.expected_set,
      range, p.fed_ips, Verdict(p, tolerance).c_str());
  for (std::size_t r = 0; r < p.rounds.size(); ++r) {
    PrintRound(r, p.rounds[r], p.over, tolerance);
  }
  if (!p.over) {
    std::printf(
        "         interleaved steps of the rounds judged: %zu loader-fed, %zu from memory; "
        "ratio+L of their medians %.3f, of their means %.3f (%.3f without the waits; the "
        "loader-fed ones waited %.2f %% of their time)\n",
        p.pooled.fed.size(), p.pooled.memory.size(), p.pooled.ratio, p.pooled.ratio_mean,
        p.pooled.ratio_busy, p.pooled.fed_stall);
  }
  std::fflush(stdout);
}

void WriteJsonPoint(std::ostream& json, const Point& p) {
  json << "{\"demand\":" << p.demand << ",\"achieved_demand\":" << p.achieved
       << ",\"achieved_demand_fed\":" << p.achieved_fed << ",\"us_per_sample\":" << p.us_per_sample
       << ",\"stall_percent\":" << p.stall << ",\"worst_stall_percent\":" << p.worst_stall
       << ",\"step_ms\":" << p.fed_step_ms << ",\"rounds\":" << p.rounds.size()
       << ",\"valid_rounds\":" << p.valid_rounds
       << ",\"memory_step_ms_before\":" << p.before.step_ms()
       << ",\"memory_step_ms_after\":" << p.after.step_ms()
       << ",\"memory_stall_percent\":" << p.after.stall_percent()
       << ",\"memory_beside_loader_step_ms\":" << p.pooled.beside_step_ms
       << ",\"ratio_beside_loader\":" << p.pooled.ratio
       << ",\"ratio_beside_loader_mean\":" << p.pooled.ratio_mean
       << ",\"ratio_beside_loader_mean_busy\":" << p.pooled.ratio_busy
       << ",\"interleaved_fed_stall_percent\":" << p.pooled.fed_stall
       << ",\"interleaved_steps\":" << p.pooled.fed.size() + p.pooled.memory.size()
       << ",\"expected_stall_percent_set\":" << p.expected_set
       << ",\"expected_stall_percent_low\":" << p.gap_low
       << ",\"expected_stall_percent_high\":" << p.gap_high
       << ",\"images_per_second\":" << p.fed_ips << ",\"valid\":" << (p.valid ? "true" : "false")
       << ",\"goal_met\":" << (p.valid && p.met ? "true" : "false") << "}\n";
}

// The closing lines: the capacity after the runs (each point measured the capacity before
// and after itself; the run's drift from start to end is information, as a point is judged
// against its own), the thread census and the verdict.
void PrintSummary(const Bench& b, double capacity, double capacity_after, const std::string& census,
                  bool valid, int goals_met) {
  const double capacity_drift = capacity_after / capacity - 1;
  std::printf(
      "\nloader capacity again after the runs: %.1f images/s (%+.1f %% from the start; each "
      "point is set and judged against the capacity measured around it)\n",
      capacity_after, 100 * capacity_drift);
  std::printf("threads during the first loader-fed run: %s\n", census.c_str());
  std::printf(
      "goals: below 100 %% demand, stall <= 1 %% (median of the judged rounds' fed runs) and the "
      "loader-fed step at most 1 %% above the in-memory one beside the loader's work (ratio+L, "
      "interleaved runs); above, the stall within 2 points of the range 1 - C/r .. 1 - C'/r "
      "(C, C' the capacities around the round with the core CPU busy and idle, r the core's "
      "rate when fed)\n");
  std::printf("run %s: %d of %zu goals met%s\n", valid ? "valid" : "INVALID", goals_met,
              b.c.demands.size(),
              valid ? "" : " (re-run on a quiet machine; invalid points are not judged)");
}

// The bench itself; main() turns an exception that escapes it into one line.
int Run(int argc, char** argv) {
  Config c;
  CLI::App app{
      "Stall at 50/90/120 % of the loader's measured capacity, against the same synthetic core "
      "fed from batches in memory."};
  AddFlags(app, c);
  metrics::Flags metrics_flags;
  tilefeed::tools::AddMetricsFlags(app, metrics_flags);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "stall_bench")) return *rc;
  metrics::Session metrics;
  try {
    metrics = OpenMetrics(app, metrics_flags, c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stall_bench: %s\n", e.what());
    return 2;
  }
  c.metrics = &metrics;
  // Opened by tilefeed/loader/dataset.h's rules, so a train/ + val/ root gives its train split.
  Bench b{c, fs::path(c.data), ChoosePlacement(c.pin), {}, {}};
  PinThisThread(b.where.core_cpus);
  // The kernel is calibrated where the core will run.
  b.calibration = trainer::CalibrateSyntheticKernel();
  const Baseline baseline = MeasureBaseline(b);
  if (!(baseline.capacity() > 0)) {
    std::fprintf(stderr, "stall_bench: the loader delivered no images from %s\n", b.root.c_str());
    return 1;
  }
  b.held = CaptureHeld(b);
  PrintHeader(b, baseline);
  std::unique_ptr<std::ofstream> json;
  if (!c.json.empty()) {
    json = std::make_unique<std::ofstream>(c.json);
    WriteJsonHeader(*json, b, baseline);
  }
  PrintColumns();
  std::string census;
  bool valid = true;
  int goals_met = 0;  // points valid and their goal met
  for (double demand : c.demands) {
    const Point point = MeasurePoint(b, demand, census);
    valid = valid && point.valid;
    goals_met += point.valid && point.met ? 1 : 0;
    PrintPoint(point, c.tolerance);
    if (json) WriteJsonPoint(*json, point);
  }
  const double capacity_after = b.CapacityNow();
  PrintSummary(b, baseline.capacity(), capacity_after, census, valid, goals_met);
  if (json) {
    *json << "{\"capacity_after_images_per_second\":" << capacity_after
          << ",\"valid\":" << (valid ? "true" : "false") << ",\"goals_met\":" << goals_met << "}\n";
  }
  metrics.Finish("completed");
  // 0: a valid run (whatever the goals say); 3: the run is invalid.
  return valid ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stall_bench: %s\n", e.what());
    return 1;
  }
}
