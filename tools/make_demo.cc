// tilefeed-make-demo: writes a small, learnable ImageFolder dataset of JPEGs
//   OUT/train/<class>/<NNNNN>.JPEG, OUT/val/<class>/<NNNNN>.JPEG
// for the README's first steps, the examples and end-to-end tests. Output is a pure
// function of the arguments: the same seed gives byte-identical files on any machine
// with the same libjpeg-turbo.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tools/cli_checks.h"
#include "tools/demo_images.h"

namespace {

namespace fs = std::filesystem;
using tilefeed::tools::DemoClass;

struct Job {
  int split;  // 0 train, 1 val
  int class_index;
  int index;
};

constexpr const char* kSplits[] = {"train", "val"};

void WriteBytes(const fs::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) throw std::runtime_error("cannot write " + path.string());
}

int Run(const fs::path& out, int class_count, int train_per_class, int val_per_class,
        std::uint64_t seed, bool force, int threads) {
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    if (!force) {
      std::fprintf(stderr,
                   "tilefeed-make-demo: %s is not empty; pass --force to replace its "
                   "train/ and val/\n",
                   out.c_str());
      return 1;
    }
    // Only the folders this tool writes go; stale classes from an earlier run with more
    // classes would otherwise silently join the dataset.
    for (const char* split : kSplits) fs::remove_all(out / split);
  }

  const std::vector<DemoClass> classes = tilefeed::tools::DemoClasses(class_count);
  std::vector<Job> jobs;
  const int per_split[] = {train_per_class, val_per_class};
  for (int split = 0; split < 2; ++split) {
    // No images, no folder: val/ of empty class folders is no usable split, while a root
    // without val/ trains without validation.
    if (per_split[split] == 0) continue;
    for (int c = 0; c < class_count; ++c) {
      fs::create_directories(out / kSplits[split] / classes[c].name);
      for (int i = 0; i < per_split[split]; ++i) jobs.push_back({split, c, i});
    }
  }

  const auto start = std::chrono::steady_clock::now();
  // Each image depends only on its own seed, so workers may take jobs in any order and
  // the files still come out byte-identical.
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> total_bytes{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string first_error;
  {
    std::vector<std::jthread> workers;
    const int worker_count = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
    workers.reserve(static_cast<std::size_t>(worker_count));
    for (int w = 0; w < worker_count; ++w) {
      workers.emplace_back([&] {
        try {
          for (std::size_t j = next++; j < jobs.size() && !failed; j = next++) {
            const Job& job = jobs[j];
            const DemoClass& demo_class = classes[job.class_index];
            const std::vector<std::byte> jpeg = tilefeed::tools::MakeDemoJpeg(
                demo_class,
                tilefeed::tools::DemoImageSeed(seed, job.split, job.class_index, job.index));
            char name[32];
            std::snprintf(name, sizeof(name), "%05d.JPEG", job.index);
            WriteBytes(out / kSplits[job.split] / demo_class.name / name, jpeg);
            total_bytes += jpeg.size();
          }
        } catch (const std::exception& e) {
          std::lock_guard lock(error_mutex);
          if (!failed.exchange(true)) first_error = e.what();
        }
      });
    }
  }
  if (failed) {
    std::fprintf(stderr, "tilefeed-make-demo: %s\n", first_error.c_str());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "tilefeed-make-demo: wrote %zu images (%d classes; %d train + %d val per class), "
      "%.1f MB, to %s in %.2f s\n",
      jobs.size(), class_count, train_per_class, val_per_class,
      static_cast<double>(total_bytes.load()) / 1e6, out.c_str(), seconds);
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"Writes a small, learnable ImageFolder dataset of synthetic JPEGs."};
  std::string out;
  int classes = 10;
  int train_per_class = 100;
  int val_per_class = 20;
  std::uint64_t seed = 0;
  bool force = false;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("OUT", out, "Output folder (gets train/ and val/)")->required();
  app.add_option("--classes", classes, "Number of classes")
      ->check(tilefeed::tools::Between(1, tilefeed::tools::MaxDemoClasses()));
  app.add_option("--train-per-class", train_per_class, "Training images per class")
      ->check(tilefeed::tools::Between(1, 1000000));
  app.add_option("--val-per-class", val_per_class,
                 "Validation images per class (0: no val/ split is written)")
      ->check(tilefeed::tools::Between(0, 1000000));
  app.add_option("--seed", seed, "Dataset seed; the same seed gives the same files")
      ->check(tilefeed::tools::AtLeast(0));
  app.add_flag("--force", force, "Replace OUT/train and OUT/val if OUT is not empty");
  app.add_option("--threads", threads, "Worker threads (default: all cores)")
      ->check(tilefeed::tools::Between(1, 1024));
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "tilefeed-make-demo")) return *rc;
  return Run(out, classes, train_per_class, val_per_class, seed, force, threads);
}

}  // namespace

int main(int argc, char** argv) {
  return tilefeed::tools::RunMain("tilefeed-make-demo", Main, argc, argv);
}
