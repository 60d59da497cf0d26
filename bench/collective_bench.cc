// collective_bench: what one gradient all-reduce costs through trainer::MpiSession (its
// non-blocking collectives and sleeping watchdog wait), and what an instance waiting for a
// late peer burns. Run under mpirun/poprun with two or more instances:
//
//   poprun --instances 4 -- collective_bench [--floats 199424] [--rounds 200] [--late-ms 50]
//                                            [--max-sleep-us 250] [--spin-us 2000]
//
// Phase 1 times --rounds all-reduces of --floats floats (the reference core's gradient by
// default, 779 KiB) and prints the median and 90th percentile over rounds of the slowest
// instance. Phase 2 makes instance 0 arrive --late-ms late at each of 20 all-reduces and
// prints the CPU time the other instances used while they waited, as a share of a core.

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "bench/median.h"
#include "tilefeed/trainer/mpi_session.h"
#include "tools/cli_checks.h"

namespace {

using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// The bench's flags.
struct Config {
  std::size_t floats = 199424;
  int rounds = 200;
  int late_ms = 50;
  int max_sleep_us = 250;
  int spin_us = 2000;
};

void AddFlags(CLI::App& app, Config& c) {
  app.add_option("--floats", c.floats, "Floats per all-reduce")->check(tilefeed::tools::AtLeast(1));
  app.add_option("--rounds", c.rounds, "Timed all-reduces")
      ->check(tilefeed::tools::Between(1, 100000));
  app.add_option("--late-ms", c.late_ms, "Phase 2: instance 0's lateness")
      ->check(tilefeed::tools::Between(1, 10000));
  app.add_option("--max-sleep-us", c.max_sleep_us,
                 "MpiSessionOptions::max_wait_sleep (0: test without sleeping)")
      ->check(tilefeed::tools::Between(0, 100000));
  app.add_option("--spin-us", c.spin_us, "MpiSessionOptions::spin_before_sleep")
      ->check(tilefeed::tools::Between(0, 1000000));
}

tilefeed::trainer::MpiSessionOptions SessionOptions(const Config& c) {
  tilefeed::trainer::MpiSessionOptions options;
  options.max_wait_sleep = std::chrono::microseconds(c.max_sleep_us);
  options.spin_before_sleep = std::chrono::microseconds(c.spin_us);
  return options;
}

// Phase 1 times the all-reduce; phase 2 makes instance 0 late and measures what the others
// burn waiting. Instance 0 prints the line.
void Measure(tilefeed::trainer::MpiSession& mpi, const Config& c) {
  std::vector<float> data(c.floats, 1.0f);
  for (int i = 0; i < 5; ++i) mpi.AllreduceSum(std::span<float>(data));  // warm-up
  std::vector<double> times;
  for (int i = 0; i < c.rounds; ++i) {
    const auto start = Clock::now();
    mpi.AllreduceSum(std::span<float>(data));
    double slowest[1] = {std::chrono::duration<double>(Clock::now() - start).count()};
    mpi.AllreduceMax(std::span<double>(slowest));
    times.push_back(slowest[0]);
  }
  std::sort(times.begin(), times.end());
  const double p90 = times[times.size() * 9 / 10];

  // Phase 2: instance 0 is late; the others wait in the all-reduce.
  constexpr int kLateRounds = 20;
  const double cpu_start = CpuSeconds();
  const auto wall_start = Clock::now();
  for (int i = 0; i < kLateRounds; ++i) {
    if (mpi.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(c.late_ms));
    mpi.AllreduceSum(std::span<float>(data));
  }
  const double wall = std::chrono::duration<double>(Clock::now() - wall_start).count();
  double waiting_cpu[2] = {mpi.rank() == 0 ? 0.0 : CpuSeconds() - cpu_start,
                           mpi.rank() == 0 ? 0.0 : wall};
  mpi.AllreduceSum(std::span<double>(waiting_cpu));
  if (mpi.rank() == 0) {
    const int waiters = mpi.size() - 1;
    std::printf(
        "collective_bench: %d instances, spin %d us, max sleep %d us, %zu floats (%.0f KiB): "
        "all-reduce "
        "median %.3f ms, p90 %.3f ms (slowest instance, %d rounds); waiting for a peer %d ms "
        "late: %.1f %% of a core per waiting instance\n",
        mpi.size(), c.spin_us, c.max_sleep_us, c.floats, static_cast<double>(c.floats) * 4 / 1024,
        1e3 * tilefeed::bench::Median(times), 1e3 * p90, c.rounds, c.late_ms,
        waiters > 0 && waiting_cpu[1] > 0 ? 100.0 * waiting_cpu[0] / waiting_cpu[1] : 0.0);
  }
}

// The bench itself; main() turns an exception that escapes it into one line.
int Run(int argc, char** argv) {
  Config c;
  CLI::App app{"collective_bench: MpiSession all-reduce latency and the cost of waiting"};
  AddFlags(app, c);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "collective_bench")) return *rc;
  tilefeed::trainer::MpiSession mpi(&argc, &argv, SessionOptions(c));
  try {
    Measure(mpi, c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: instance %d: %s\n", mpi.rank(), e.what());
    // The other instances would wait for this one in their next collective forever.
    if (mpi.size() > 1) mpi.Abort(1);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: %s\n", e.what());
    return 1;
  }
}
