// stall_bench: is a training step's time set by compute alone? Runs the trainer with the
// synthetic core at a sweep of per-sample compute costs over the same loader, and prints
// images/s and stall % per point next to the loader's own rate, measured in the same run.
// Where compute per sample costs more than the loader's per-sample time, stall should be
// near 0 and images/s the compute rate; below it, the step waits for data and images/s
// is the loader's rate.
//
//   stall_bench --data DIR [--workers 1] [--costs 250,500,1000,2000,3000] [--json FILE]

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "loader/image_folder.h"
#include "loader/loader.h"
#include "trainer/collectives.h"
#include "trainer/synthetic_core.h"
#include "trainer/trainer.h"
#include "transport/batch_stream.h"

namespace {

namespace fs = std::filesystem;
using namespace tilefeed;

struct Config {
  std::string data;
  int workers = 1;
  std::size_t batch = 32;
  int image_size = 224;
  std::size_t batches = 24;
  std::vector<double> costs = {250, 500, 700, 1000, 1500, 2000, 3000};
  std::string json;
};

loader::LoaderOptions LoaderOptionsFor(const Config& c) {
  loader::LoaderOptions o;
  o.batch_size = c.batch;
  o.image_size = c.image_size;
  o.workers = c.workers;
  o.prefetch_depth = 4;
  o.drop_last_batch = true;
  return o;
}

// The loader alone, drained as fast as possible after its first batch: images/s.
double LoaderRate(const Config& c, const fs::path& root) {
  loader::Loader loader(loader::ImageFolder::Open(root.string()), LoaderOptionsFor(c));
  std::size_t images = 0;
  loader.Next();  // the fill, as the trainer's fill, is not part of the steady state
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t b = 0; b < c.batches; ++b) {
    std::optional<loader::Batch> batch = loader.Next();
    if (!batch) batch = loader.Next();  // an epoch boundary
    images += batch->size();
  }
  return static_cast<double>(images) /
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

trainer::EpochReport RunPoint(const Config& c, const fs::path& root, double us_per_sample,
                              const trainer::KernelCalibration& calibration) {
  trainer::LocalCollectives local;
  trainer::TrainerOptions options;
  options.local_batch = c.batch;
  options.sample_bytes = static_cast<std::size_t>(c.image_size) * c.image_size * 3;
  options.max_steps = c.batches;
  options.compute_threads = 1;
  std::vector<trainer::EpochReport> reports;
  trainer::Trainer trainer(
      [&] { return std::make_unique<trainer::SyntheticCore>(us_per_sample, calibration); }, local,
      options, {}, [&](const trainer::EpochReport& r) { reports.push_back(r); });
  loader::Loader loader(loader::ImageFolder::Open(root.string()), LoaderOptionsFor(c));
  transport::LoaderStream stream(loader);
  trainer.Train(stream, {});
  // Merge the epochs of the run (a run may cross an epoch boundary).
  trainer::EpochReport total;
  double wait = 0;
  for (const auto& r : reports) {
    total.images += r.images;
    total.seconds += r.seconds;
    wait += r.wait_seconds;
    total.fill_seconds += r.fill_seconds;
  }
  total.images_per_second = total.seconds > 0 ? total.images / total.seconds : 0;
  total.stall_percent = total.seconds > 0 ? 100 * wait / total.seconds : 0;
  total.wait_seconds = wait;
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Stall sweep: the synthetic core at several per-sample costs over one loader."};
  app.add_option("--data", c.data, "ImageFolder (DIR/train is used if it exists)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--workers", c.workers, "Loader decode threads")->capture_default_str();
  app.add_option("--batch", c.batch, "Batch size")->capture_default_str();
  app.add_option("--image-size", c.image_size, "Image side")->capture_default_str();
  app.add_option("--batches", c.batches, "Steps per point")->capture_default_str();
  app.add_option("--costs", c.costs, "Compute costs to sweep, us per sample")->delimiter(',');
  app.add_option("--json", c.json, "Write one JSON line per point");
  CLI11_PARSE(app, argc, argv);
  const fs::path root =
      fs::is_directory(fs::path(c.data) / "train") ? fs::path(c.data) / "train" : fs::path(c.data);
  const trainer::KernelCalibration calibration = trainer::CalibrateSyntheticKernel();
  const double loader_rate = LoaderRate(c, root);
  std::printf("stall_bench: %s, batch %zu, %dx%d, %d loader worker(s), %zu steps per point\n",
              root.c_str(), c.batch, c.image_size, c.image_size, c.workers, c.batches);
  std::printf("loader alone: %.1f images/s = %.3f ms per image per worker\n", loader_rate,
              1e3 * c.workers / loader_rate);
  std::printf("synthetic kernel: %.1f iterations/us\n\n", calibration.iterations_per_us);
  // "busy us/sample" is what a step's compute really took per sample in this run: on a
  // loaded machine it exceeds the calibrated cost, and the bound moves with it.
  std::printf("%10s %14s %14s %15s %14s %9s %8s\n", "us/sample", "compute img/s", "bound img/s",
              "busy us/sample", "measured img/s", "stall %", "fill s");
  std::unique_ptr<std::ofstream> json;
  if (!c.json.empty()) json = std::make_unique<std::ofstream>(c.json);
  for (double cost : c.costs) {
    const trainer::EpochReport r = RunPoint(c, root, cost, calibration);
    const double compute_rate = cost > 0 ? 1e6 / cost : 0;
    const double bound = cost > 0 ? std::min(compute_rate, loader_rate) : loader_rate;
    const double busy_us =
        r.images > 0 ? 1e6 * (r.seconds - r.wait_seconds) / static_cast<double>(r.images) : 0;
    std::printf("%10.0f %14.1f %14.1f %15.1f %14.1f %9.2f %8.3f\n", cost, compute_rate, bound,
                busy_us, r.images_per_second, r.stall_percent, r.fill_seconds);
    std::fflush(stdout);
    if (json) {
      *json << "{\"us_per_sample\":" << cost << ",\"compute_images_per_second\":" << compute_rate
            << ",\"loader_images_per_second\":" << loader_rate
            << ",\"images_per_second\":" << r.images_per_second
            << ",\"busy_us_per_sample\":" << busy_us << ",\"stall_percent\":" << r.stall_percent
            << "}\n";
    }
  }
  return 0;
}
