// allreduce_bench: does overlapping the gradient all-reduce with the backward pass pay?
// Run under mpirun/poprun with two or more instances. Every instance trains the reference
// core on the same batches held in memory (no loader, so input never stalls and the only
// difference between the runs is the all-reduce), alternating blocking and overlap runs of
// --steps steps for --rounds rounds (ABAB..., so drift in the machine's load hits both).
// Per mode it reports the median over rounds of the step time (slowest instance), images/s
// and the all-reduce time left exposed after the backward pass (mean per instance and
// step), and checks that both modes end with identical parameters.
//
//   poprun --instances 2 -- allreduce_bench [--rounds 6] [--steps 20] [--batch 32]
//          [--image-size 224] [--hidden 256] [--pool 16] [--each-round] [--json FILE]

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/median.h"
#include "tilefeed/trainer/mpi_session.h"
#include "tilefeed/trainer/trainer.h"
#include "tools/cli_checks.h"
#include "trainer/memory_stream.h"
#include "trainer/reference_core.h"
#include "trainer/stall.h"

namespace {

using namespace tilefeed;

struct Config {
  int rounds = 6;
  std::uint64_t steps = 20;
  std::size_t batch = 32;
  int image_size = 224;
  int hidden = 256;
  int pool = 16;
  int classes = 10;
  bool each_round = false;
  std::string json;
};

std::vector<trainer::HeldBatch> MakeBatches(const Config& c, int rank) {
  const std::size_t sample = static_cast<std::size_t>(c.image_size) * c.image_size * 3;
  std::mt19937 rng(static_cast<unsigned>(17 + rank));
  std::vector<trainer::HeldBatch> out(4);
  for (std::size_t b = 0; b < out.size(); ++b) {
    trainer::HeldBatch& held = out[b];
    held.meta.size = c.batch;
    held.meta.height = c.image_size;
    held.meta.width = c.image_size;
    held.images.resize(c.batch * sample);
    for (auto& p : held.images) p = static_cast<std::uint8_t>(rng() >> 24);
    for (std::size_t i = 0; i < c.batch; ++i) {
      held.labels.push_back(static_cast<std::int32_t>((b * c.batch + i) % c.classes));
      held.sample_indices.push_back(b * c.batch + i);
    }
  }
  return out;
}

struct Round {
  double step_ms = 0;       // slowest instance, steady state
  double images_per_s = 0;  // all instances
  double exposed_ms = 0;    // all-reduce exposed, per instance and step
  std::vector<float> parameters;
};

Round RunOnce(const Config& c, trainer::MpiSession& mpi,
              const std::vector<trainer::HeldBatch>& batches, trainer::AllreduceMode mode) {
  trainer::ReferenceCoreOptions core_options;
  core_options.classes = c.classes;
  core_options.hidden = c.hidden;
  core_options.pool = c.pool;
  trainer::TrainerOptions options;
  options.local_batch = c.batch;
  options.sample_bytes = static_cast<std::size_t>(c.image_size) * c.image_size * 3;
  options.max_steps = c.steps;
  options.check_every = 0;
  options.allreduce = mode;
  Round round;
  trainer::Trainer trainer(
      [&] { return std::make_unique<trainer::ReferenceCore>(core_options); }, mpi, options, {},
      [&](const trainer::EpochReport& r) {
        round.step_ms = 1e3 * r.seconds / static_cast<double>(r.steps);
        round.images_per_s = r.images_per_second;
        round.exposed_ms = 1e3 * r.allreduce_exposed_seconds / static_cast<double>(r.steps) /
                           static_cast<double>(mpi.size());
      });
  trainer::InMemoryStream stream(batches, 0);
  trainer.Train(stream);
  round.parameters.assign(trainer.parameters().begin(), trainer.parameters().end());
  return round;
}

using bench::Median;

void AddFlags(CLI::App& app, Config& c) {
  app.add_option("--rounds", c.rounds, "Blocking/overlap pairs")
      ->check(tilefeed::tools::Between(1, 1000));
  app.add_option("--steps", c.steps, "Steps per run")->check(tilefeed::tools::Between(2, 100000));
  app.add_option("--batch", c.batch, "Local batch")->check(tilefeed::tools::Between(1, 4096));
  app.add_option("--image-size", c.image_size, "Image side")
      ->check(tilefeed::tools::Between(16, 1024));
  app.add_option("--hidden", c.hidden, "Hidden units")->check(tilefeed::tools::Between(1, 65536));
  app.add_option("--pool", c.pool, "Pooled side")->check(tilefeed::tools::Between(1, 64));
  app.add_flag("--each-round", c.each_round, "Print every run, not only the medians");
  app.add_option("--json", c.json, "Write one JSON line per mode (instance 0)");
}

constexpr trainer::AllreduceMode kModes[2] = {trainer::AllreduceMode::kBlocking,
                                              trainer::AllreduceMode::kOverlap};

// Each mode's step times and exposed all-reduce times (ms), one per round.
struct Timings {
  std::vector<double> step_ms[2], exposed[2];
  bool identical = true;  // both modes trained the same parameters in every round
};

Timings RunRounds(const Config& c, trainer::MpiSession& mpi,
                  const std::vector<trainer::HeldBatch>& batches) {
  Timings t;
  for (int r = 0; r < c.rounds; ++r) {
    std::vector<float> first;
    for (int m = 0; m < 2; ++m) {
      // Alternate which mode goes first, so neither always follows the other.
      const int k = (r % 2 == 0) ? m : 1 - m;
      Round round = RunOnce(c, mpi, batches, kModes[k]);
      if (c.each_round && mpi.rank() == 0) {
        std::printf("round %d %9s: step %.3f ms, %.1f images/s, all-reduce exposed %.3f ms\n", r,
                    trainer::AllreduceModeName(kModes[k]), round.step_ms, round.images_per_s,
                    round.exposed_ms);
      }
      t.step_ms[k].push_back(round.step_ms);
      t.exposed[k].push_back(round.exposed_ms);
      if (m == 0) {
        first = std::move(round.parameters);
      } else if (round.parameters != first) {
        t.identical = false;
      }
    }
  }
  return t;
}

// Instance 0's report: the medians per mode, and the JSON lines.
void PrintReport(const Config& c, const trainer::MpiSession& mpi, const Timings& t) {
  const std::size_t parameters = static_cast<std::size_t>(c.hidden) * c.pool * c.pool * 3 +
                                 static_cast<std::size_t>(c.hidden) +
                                 static_cast<std::size_t>(c.classes) * c.hidden +
                                 static_cast<std::size_t>(c.classes);
  std::printf(
      "allreduce_bench: %d instances, reference core %d -> %d -> %d (%zu parameters, %.0f KiB "
      "of gradient), batch %zu of %dx%d from memory, %d rounds x %llu steps per mode\n",
      mpi.size(), c.pool * c.pool * 3, c.hidden, c.classes, parameters,
      static_cast<double>(parameters) * 4 / 1024, c.batch, c.image_size, c.image_size, c.rounds,
      static_cast<unsigned long long>(c.steps));
  std::printf("%9s %12s %10s %19s\n", "mode", "step ms", "images/s", "exposed all-reduce ms");
  std::unique_ptr<std::ofstream> json;
  if (!c.json.empty()) json = std::make_unique<std::ofstream>(c.json);
  for (int k = 0; k < 2; ++k) {
    // images/s of the median step: every instance trains one local batch per step.
    const double ips = 1e3 * static_cast<double>(c.batch) * mpi.size() / Median(t.step_ms[k]);
    std::printf("%9s %12.3f %10.1f %19.3f\n", trainer::AllreduceModeName(kModes[k]),
                Median(t.step_ms[k]), ips, Median(t.exposed[k]));
    if (json) {
      *json << "{\"mode\":\"" << trainer::AllreduceModeName(kModes[k])
            << "\",\"instances\":" << mpi.size() << ",\"step_ms\":" << Median(t.step_ms[k])
            << ",\"images_per_second\":" << ips
            << ",\"exposed_allreduce_ms\":" << Median(t.exposed[k])
            << ",\"parameters\":" << parameters << "}\n";
    }
  }
  std::printf("overlap / blocking step time: %.3f (median of %d rounds); parameters %s\n",
              Median(t.step_ms[1]) / Median(t.step_ms[0]), c.rounds,
              t.identical ? "identical in both modes" : "DIFFER between modes");
}

int Measure(trainer::MpiSession& mpi, Config c) {
  if (c.pool > c.image_size) c.pool = c.image_size;
  trainer::SetBlasThreads(1);
  const std::vector<trainer::HeldBatch> batches = MakeBatches(c, mpi.rank());
  const Timings t = RunRounds(c, mpi, batches);
  if (mpi.rank() == 0) PrintReport(c, mpi, t);
  return t.identical ? 0 : 1;
}

// The bench itself; main() turns an exception that escapes it into one line.
int Run(int argc, char** argv) {
  Config c;
  CLI::App app{"Blocking vs overlapped gradient all-reduce, reference core fed from memory."};
  AddFlags(app, c);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "allreduce_bench")) return *rc;
  trainer::MpiSession mpi(&argc, &argv);
  try {
    return Measure(mpi, c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: instance %d: %s\n", mpi.rank(), e.what());
    // The other instances would wait for this one in their next collective forever.
    if (mpi.size() > 1) mpi.Abort(1);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
