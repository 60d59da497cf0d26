// transport_bench: batches/s and MB/s through each way a trainer can receive batches, in one
// run, from the same fast synthetic source (raw HWC samples, so decoding is not the limit):
//
//   in-process  LoaderStream (no copy; the baseline the others are compared with)
//   zmq-tcp     BatchSender -> ZmqBatchStream over tcp://127.0.0.1 (zero-copy send)
//   zmq-ipc     the same over ipc://
//   shm         BatchSender copies into a shared-memory ring, ZmqBatchStream reads in place
//
// Each transport path runs with and without payload checksum verification on the receiver.
//
//   transport_bench --batch 32 --size 224 --batches 200 [--json]

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loader/loader.h"
#include "loader/source.h"
#include "transport/batch_stream.h"
#include "transport/sender.h"
#include "transport/zmq_stream.h"

namespace {

using namespace tilefeed;
using Clock = std::chrono::steady_clock;

// Raw HWC samples of the output size, copied from one prepared buffer: reading costs one
// memcpy and the loader's "decode" is a copy into the slot.
class SyntheticSource final : public loader::Source {
 public:
  SyntheticSource(std::size_t count, int side) : count_(count), side_(side) {
    pixels_.resize(static_cast<std::size_t>(side) * side * 3);
    for (std::size_t i = 0; i < pixels_.size(); ++i) pixels_[i] = static_cast<std::byte>(i * 31);
  }
  std::size_t size() const override { return count_; }
  loader::SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override {
    buffer.assign(pixels_.begin(), pixels_.end());
    buffer[0] = static_cast<std::byte>(index);
    loader::SampleInfo info;
    info.label = static_cast<std::int32_t>(index % 1000);
    info.codec = loader::SampleCodec::kRawHwc;
    info.height = info.width = side_;
    info.channels = 3;
    return info;
  }
  std::string Describe(std::size_t index) const override {
    return "synthetic#" + std::to_string(index);
  }
  std::int32_t Label(std::size_t index) const override {
    return static_cast<std::int32_t>(index % 1000);
  }

 private:
  std::size_t count_;
  int side_;
  std::vector<std::byte> pixels_;
};

struct Result {
  std::string path;
  bool verify = false;
  double seconds = 0;
  std::size_t batches = 0;
  double bytes = 0;
};

// Reads `warmup` untimed batches, then `count` timed ones.
Result Measure(const std::string& path, bool verify, transport::BatchStream& stream,
               std::size_t warmup, std::size_t count) {
  for (std::size_t i = 0; i < warmup; ++i) {
    if (!stream.Next()) --i;  // an epoch end is not a batch
  }
  Result r{path, verify};
  const auto start = Clock::now();
  while (r.batches < count) {
    std::optional<transport::ReceivedBatch> batch = stream.Next();
    if (!batch) continue;
    r.bytes += static_cast<double>(batch->images().size_bytes() + batch->labels().size_bytes() +
                                   batch->sample_indices().size_bytes());
    ++r.batches;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"transport_bench: batches through ZeroMQ and shared memory vs in-process"};
  loader::LoaderOptions options;
  options.batch_size = 32;
  options.image_size = 224;
  options.mode = loader::Mode::kEval;
  options.workers = 1;
  options.prefetch_depth = 6;
  std::size_t batches = 200;
  std::size_t warmup = 10;
  std::size_t credits = 4;
  bool json = false;
  app.add_option("--batch", options.batch_size, "samples per batch")->capture_default_str();
  app.add_option("--size", options.image_size, "image side")->capture_default_str();
  app.add_option("--workers", options.workers, "loader threads")->capture_default_str();
  app.add_option("--depth", options.prefetch_depth, "loader slots")->capture_default_str();
  app.add_option("--batches", batches, "timed batches per path")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed batches per path")->capture_default_str();
  app.add_option("--credits", credits, "receiver credits (shm: ring slots)")->capture_default_str();
  app.add_flag("--json", json, "also print one JSON line per path");
  CLI11_PARSE(app, argc, argv);
  options.eval_resize = options.image_size;
  const std::size_t samples = options.batch_size * 64;
  auto make_loader = [&] {
    return std::make_unique<loader::Loader>(
        std::make_unique<SyntheticSource>(samples, options.image_size), options);
  };

  std::vector<Result> results;
  {
    auto loader = make_loader();
    transport::LoaderStream stream(*loader);
    results.push_back(Measure("in-process", false, stream, warmup, batches));
  }
  transport::Context context;
  const std::string ipc_dir =
      (std::filesystem::temp_directory_path() / ("tilefeed-bench-" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(ipc_dir);
  struct Path {
    const char* name;
    std::string endpoint;
    bool shm;
  };
  const Path paths[] = {{"zmq-tcp", "tcp://127.0.0.1:*", false},
                        {"zmq-ipc", "ipc://" + ipc_dir + "/zmq", false},
                        {"shm", "ipc://" + ipc_dir + "/shm", true}};
  for (const Path& path : paths) {
    for (const bool verify : {true, false}) {
      auto loader = make_loader();
      transport::BatchSender sender(
          context, *loader,
          {.endpoint = path.endpoint, .shared_memory = path.shm, .job_id = "bench"});
      std::jthread serving([&sender](std::stop_token stop) {
        try {
          (void)sender.Run(stop);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "transport_bench: sender: %s\n", e.what());
        }
      });
      transport::ZmqBatchStream stream(
          context, {.endpoint = sender.endpoint(), .credits = credits, .verify_checksums = verify});
      results.push_back(Measure(path.name, verify, stream, warmup, batches));
    }
  }
  std::filesystem::remove_all(ipc_dir);

  const double base = results.front().batches / results.front().seconds;
  std::printf("batch %zu x %dx%dx3 uint8 = %.2f MB, %zu timed batches per path, credits %zu\n",
              options.batch_size, options.image_size, options.image_size,
              results.front().bytes / results.front().batches / 1e6, batches, credits);
  std::printf("%-11s %-9s %10s %10s %8s\n", "path", "checksum", "batches/s", "MB/s", "vs in-proc");
  for (const Result& r : results) {
    const double rate = r.batches / r.seconds;
    std::printf("%-11s %-9s %10.1f %10.1f %8.2f\n", r.path.c_str(),
                r.path == "in-process" ? "-" : (r.verify ? "verified" : "off"), rate,
                r.bytes / r.seconds / 1e6, rate / base);
  }
  if (json) {
    for (const Result& r : results) {
      std::printf(
          "{\"bench\":\"transport\",\"path\":\"%s\",\"verify\":%s,\"batch\":%zu,\"size\":%d,"
          "\"batches_per_s\":%.2f,\"mb_per_s\":%.1f}\n",
          r.path.c_str(), r.verify ? "true" : "false", options.batch_size, options.image_size,
          r.batches / r.seconds, r.bytes / r.seconds / 1e6);
    }
  }
  return 0;
}
