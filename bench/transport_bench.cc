// transport_bench: the bandwidth of each way a trainer can receive batches, measured in one
// run against its reference, so a figure is a ratio and not a machine's speed:
//
//   memcpy       one thread copies each batch (its own buffer, as each shm batch has its own
//                slot) into one of `credits` receive buffers: the reference for shm
//   memcpy-hot   one batch copied again and again: cache-resident on a CPU with a large
//                last-level cache, so not a measure of moving batches (for comparison)
//   loader       LoaderStream in this process: what feeds every sender (not a transport)
//   shm          a forked reader process (loader decoding into SharedSlots, ReaderEndpoint) ->
//                ZmqBatchStream here, which reads the shared slots in place. The reader's
//                loader has one slot per measured batch and has decoded (filled) them all
//                before the trainer connects, so the row times the transport alone: slot
//                numbers and frame headers over ipc://, credits, the trainer's read in place
//   zmq-tcp      the same over tcp://127.0.0.1, payload in ZeroMQ messages (zero-copy send)
//   plain-zmq    a forked process PUSHes messages of the same part sizes over tcp://127.0.0.1
//                to a PULL socket here: the reference for zmq-tcp (it has nothing to decode,
//                hence the pre-decoded batches of the rows above)
//   shm+loader, zmq-tcp+loader
//                the production pipeline: the reader's loader decodes while the trainer
//                reads, so these are bound by the decode rate (see "loader") and by sharing
//                the cores with it
//
// Every row delivers the same bytes (images, labels, indices) and the consumer reads every
// one of them (a sum over 64-bit words), so a path cannot win by not touching its payload;
// the memcpy reference is the copy alone (it reads and writes each byte once).
//
// Goals: shm >= 0.8x memcpy, zmq-tcp >= 0.9x plain-zmq (checksums off in both, as plain
// ZeroMQ checks nothing; the rows with checksums on show what verification costs: with them
// off the reader does not compute them either).
//
//   transport_bench [--batch 256] [--size 224] [--batches 20] [--warmup 2] [--rounds 3] [--json]
//
// Every reader runs in a child forked before this process starts any thread of its own (each
// measurement's context and stream are gone before the next fork), so the child starts from
// a single-threaded process. The source is synthetic raw HWC, so the loader's "decode" is a
// copy into its slot.

#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/source.h"
#include "tilefeed/transport/batch_stream.h"
#include "tilefeed/transport/streams.h"
#include "tools/cli_checks.h"
#include "transport/reader_endpoint.h"

namespace {

using namespace tilefeed;
using Clock = std::chrono::steady_clock;

// Raw HWC samples of the output size. The worker's buffer keeps the pixels between calls,
// so a read only stamps the sample's first byte: the source costs (almost) nothing and the
// loader's one copy into its slot is what remains of "decoding".
class SyntheticSource final : public loader::Source {
 public:
  SyntheticSource(std::size_t count, int side) : count_(count), side_(side) {
    pixels_.resize(static_cast<std::size_t>(side) * side * 3);
    for (std::size_t i = 0; i < pixels_.size(); ++i) pixels_[i] = static_cast<std::byte>(i * 31);
  }
  std::size_t size() const override { return count_; }
  loader::SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override {
    if (buffer.size() != pixels_.size()) buffer.assign(pixels_.begin(), pixels_.end());
    buffer[0] = static_cast<std::byte>(index);
    loader::SampleInfo info;
    info.label = Label(index);
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

struct Settings {
  loader::LoaderOptions loader;
  int side = 224;  // loader.image_size
  std::size_t batches = 20;
  std::size_t warmup = 2;
  std::size_t credits = 4;
  std::string ipc_dir;
  std::size_t image_bytes() const {
    return loader.batch_size * static_cast<std::size_t>(side) * side * 3;
  }
  // images + labels (int32) + sample indices (uint64): what one batch moves.
  std::size_t batch_bytes() const { return image_bytes() + loader.batch_size * 12; }
};

struct Result {
  std::string path;
  std::string checksum;  // "verified", "off" or "-"
  double seconds = 0;
  std::size_t batches = 0;
  double bytes = 0;
  double gb_per_s() const { return bytes / seconds / 1e9; }
};

std::unique_ptr<loader::Loader> MakeLoader(const Settings& settings, std::size_t batches = 16) {
  return std::make_unique<loader::Loader>(
      std::make_unique<SyntheticSource>(settings.loader.batch_size * batches,
                                        settings.side),
      settings.loader);
}

// The reference: what moving each batch with one copy costs. Like the shm row, every batch
// is its own buffer (written before the clock starts), copied into one of `credits` receive
// buffers in turn. With `hot`, one batch is copied again and again instead: on a CPU whose
// last-level cache holds source and destination, that measures the cache, not moving
// batches (shown for comparison only).
Result MeasureMemcpy(const Settings& settings, bool hot) {
  const std::size_t total = settings.warmup + settings.batches;
  std::vector<std::vector<std::byte>> from(hot ? 1 : total);
  std::vector<std::vector<std::byte>> to(hot ? 1 : settings.credits);
  for (std::size_t i = 0; i < from.size(); ++i) {
    from[i].assign(settings.batch_bytes(), static_cast<std::byte>(i + 1));
  }
  for (auto& buffer : to) buffer.assign(settings.batch_bytes(), std::byte{0});
  auto copy = [&](std::size_t i) {
    std::vector<std::byte>& out = to[i % to.size()];
    std::memcpy(out.data(), from[i % from.size()].data(), out.size());
    // The copy's result is observed, so the compiler cannot drop it.
    asm volatile("" : : "r"(out.data()) : "memory");
  };
  for (std::size_t i = 0; i < settings.warmup; ++i) copy(i);
  Result r{hot ? "memcpy-hot" : "memcpy", "-"};
  const auto start = Clock::now();
  for (; r.batches < settings.batches; ++r.batches) {
    copy(settings.warmup + r.batches);
    r.bytes += static_cast<double>(settings.batch_bytes());
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// What a consumer does with a batch: reads every byte (and keeps the sum observable).
std::uint64_t Touch(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t sum = 0;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, p + i, 8);
    sum += word;
  }
  for (; i < bytes; ++i) sum += p[i];
  return sum;
}
std::uint64_t g_touched = 0;

// Reads `warmup` untimed batches, then `count` timed ones.
Result MeasureStream(std::string path, std::string checksum, transport::BatchStream& stream,
                     const Settings& settings) {
  for (std::size_t i = 0; i < settings.warmup;) {
    if (stream.Next()) ++i;  // an epoch end is not a batch
  }
  Result r{std::move(path), std::move(checksum)};
  const auto start = Clock::now();
  while (r.batches < settings.batches) {
    std::optional<transport::ReceivedBatch> batch = stream.Next();
    if (!batch) continue;
    g_touched += Touch(batch->images().data(), batch->images().size_bytes()) +
                 Touch(batch->labels().data(), batch->labels().size_bytes()) +
                 Touch(batch->sample_indices().data(), batch->sample_indices().size_bytes());
    r.bytes += static_cast<double>(batch->images().size_bytes() + batch->labels().size_bytes() +
                                   batch->sample_indices().size_bytes());
    ++r.batches;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// A forked child that runs `serve`, which writes its endpoint through the given callback.
// The parent reads the endpoint, measures, then Wait()s for the child to exit.
class Child {
 public:
  using Serve = std::function<int(const std::function<void(const std::string&)>& publish)>;
  explicit Child(const Serve& serve) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      close(fds[0]);
      int rc = 1;
      try {
        rc = serve([fd = fds[1]](const std::string& endpoint) {
          const std::string line = endpoint + "\n";
          [[maybe_unused]] const ssize_t n = write(fd, line.data(), line.size());
          close(fd);
        });
      } catch (const std::exception& e) {
        std::fprintf(stderr, "transport_bench: reader process: %s\n", e.what());
      }
      std::fflush(stderr);
      _exit(rc);
    }
    close(fds[1]);
    char text[512];
    std::size_t length = 0;
    ssize_t n = 0;
    while (length < sizeof(text) - 1 && (n = read(fds[0], text + length, 1)) == 1) {
      if (text[length] == '\n') break;
      ++length;
    }
    close(fds[0]);
    if (n != 1) throw std::runtime_error("reader process exited before serving");
    endpoint_.assign(text, length);
  }
  ~Child() {
    if (pid_ > 0) Wait();
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  std::string endpoint_;
};

// How the reader's loader fills the batches a row measures.
enum class Fill {
  kLive,       // decodes while the trainer reads: the production pipeline
  kPrefilled,  // every measured batch is decoded into its own slot before the reader starts
               // serving, so the row times the transport (and the trainer's read)
};

// The reader half in a child process: a ReaderEndpoint until the trainer leaves.
Result MeasureSender(const char* path, bool shm, bool verify, const Settings& settings,
                     Fill fill = Fill::kLive) {
  const std::string bind = shm ? "ipc://" + settings.ipc_dir + "/shm" : "tcp://127.0.0.1:*";
  const std::size_t total = settings.warmup + settings.batches;
  const bool prefilled = fill == Fill::kPrefilled;
  Child child([&](const auto& publish) {
    Settings reader = settings;
    std::size_t batches = 16;
    // Shared memory: the loader's slots are the shared ring; the trainer may hold at most
    // that many, so there are at least as many as its credits.
    reader.loader.prefetch_depth = std::max(settings.loader.prefetch_depth, settings.credits);
    if (prefilled) {
      // One epoch of exactly the measured batches, one slot each: nothing is decoded once
      // the reader serves.
      batches = total;
      reader.loader.epochs = 1;
      reader.loader.prefetch_depth = total;
    }
    if (shm) reader.loader.slot_memory = transport::SharedSlots::Create(reader.loader, "bench");
    auto loader = MakeLoader(reader, batches);
    while (prefilled && loader->metrics().images < total * reader.loader.batch_size) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    transport::Context context;
    transport::ReaderEndpoint sender(context, *loader, {.endpoint = bind, .shared_memory = shm});
    publish(sender.endpoint());
    const transport::SendResult result = sender.Run();
    return result == transport::SendResult::kStopped ? 1 : 0;
  });
  Result r;
  {
    transport::Context context;
    transport::ZmqBatchStream stream(context, {.endpoint = child.endpoint(),
                                               .credits = settings.credits,
                                               .verify_checksums = verify,
                                               .peer_timeout = std::chrono::seconds(30)});
    r = MeasureStream(path, verify ? "verified" : "off", stream, settings);
  }
  if (child.Wait() != 0) std::fprintf(stderr, "transport_bench: %s reader failed\n", path);
  return r;
}

// Plain ZeroMQ: a child PUSHes (zero-copy, from one buffer) multipart messages with the
// parts of a tilefeed batch message (control, header, images, labels, indices); this
// process PULLs them. The high-water marks match the stream's credits.
Result MeasurePlainZmq(const Settings& settings) {
  const std::size_t parts[] = {40, 72, settings.image_bytes(), settings.loader.batch_size * 4,
                               settings.loader.batch_size * 8};
  const int hwm = static_cast<int>(settings.credits);
  const std::size_t total = settings.warmup + settings.batches;
  Child child([&](const auto& publish) {
    std::vector<std::byte> payload(settings.batch_bytes() + 112, std::byte{7});
    zmq::context_t context(1);
    zmq::socket_t push(context, zmq::socket_type::push);
    push.set(zmq::sockopt::sndhwm, hwm);
    push.bind("tcp://127.0.0.1:*");
    publish(push.get(zmq::sockopt::last_endpoint));
    for (std::size_t i = 0; i < total; ++i) {
      std::byte* at = payload.data();
      for (std::size_t p = 0; p < std::size(parts); ++p) {
        zmq::message_t message(
            at, parts[p], [](void*, void*) {}, nullptr);
        push.send(message,
                  p + 1 < std::size(parts) ? zmq::send_flags::sndmore : zmq::send_flags::none);
        at += parts[p];
      }
    }
    push.close();  // lingers until every message is delivered
    return 0;
  });
  Result r{"plain-zmq", "-"};
  {
    zmq::context_t context(1);
    zmq::socket_t pull(context, zmq::socket_type::pull);
    pull.set(zmq::sockopt::rcvhwm, hwm);
    pull.connect(child.endpoint());
    Clock::time_point start;
    for (std::size_t i = 0; i < total; ++i) {
      if (i == settings.warmup) start = Clock::now();
      double bytes = 0;
      zmq::message_t message;
      std::size_t part = 0;
      do {
        (void)pull.recv(message, zmq::recv_flags::none);
        bytes += static_cast<double>(message.size());
        // The consumer reads the payload parts, as MeasureStream does.
        if (part++ >= 2) g_touched += Touch(message.data(), message.size());
      } while (message.more());
      if (i >= settings.warmup) {
        r.bytes += bytes - 112;  // count the payload, as the stream rows do
        ++r.batches;
      }
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  if (child.Wait() != 0) std::fprintf(stderr, "transport_bench: plain PUSH process failed\n");
  return r;
}

// The bench's flags: the measurement's settings, how many rounds, and the JSON switch.
struct Flags {
  Settings settings;
  int rounds = 3;
  bool json = false;
};

void AddFlags(CLI::App& app, Flags& f) {
  Settings& settings = f.settings;
  settings.loader.batch_size = 256;
  settings.loader.mode = loader::Mode::kEval;
  settings.loader.workers = 1;
  settings.loader.prefetch_depth = 4;
  app.add_option("--batch", settings.loader.batch_size, "samples per batch")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--size", settings.side, "image side")
      ->check(tilefeed::tools::Between(16, 4096))
      ->capture_default_str();
  app.add_option("--workers", settings.loader.workers, "loader threads in each reader (0: all)")
      ->check(tilefeed::tools::Between(0, 1024))
      ->capture_default_str();
  app.add_option("--batches", settings.batches, "timed batches per path")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--warmup", settings.warmup, "untimed batches per path")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  app.add_option("--credits", settings.credits,
                 "receiver credits (plain-zmq: its send and receive HWM)")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--rounds", f.rounds, "measure every path this many times, keep the best")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_flag("--json", f.json, "also print one JSON line per path");
}

// Every forked path once, in the table's order.
std::vector<Result> MeasureForkedPaths(const Settings& settings) {
  std::vector<Result> now;
  now.push_back(MeasureMemcpy(settings, false));
  now.push_back(MeasureMemcpy(settings, true));
  now.push_back(MeasureSender("shm", true, false, settings, Fill::kPrefilled));
  now.push_back(MeasureSender("shm", true, true, settings, Fill::kPrefilled));
  now.push_back(MeasureSender("zmq-tcp", false, false, settings, Fill::kPrefilled));
  now.push_back(MeasureSender("zmq-tcp", false, true, settings, Fill::kPrefilled));
  now.push_back(MeasurePlainZmq(settings));
  now.push_back(MeasureSender("shm+loader", true, false, settings));
  now.push_back(MeasureSender("zmq-tcp+loader", false, false, settings));
  return now;
}

// Every path, the forked ones first: the loader row last starts this process's first
// threads. Rounds, keeping each row's best: a machine shared with other work slows rows at
// random, and the ratios compare what each path can do.
std::vector<Result> MeasureAll(const Settings& settings, int rounds) {
  std::vector<Result> results;
  for (int round = 0; round < rounds; ++round) {
    const std::vector<Result> now = MeasureForkedPaths(settings);
    for (std::size_t i = 0; i < now.size(); ++i) {
      if (round == 0) {
        results.push_back(now[i]);
      } else if (now[i].gb_per_s() > results[i].gb_per_s()) {
        results[i] = now[i];
      }
    }
  }
  auto loader = MakeLoader(settings);
  transport::LoaderStream stream(*loader);
  results.push_back(MeasureStream("loader", "-", stream, settings));
  return results;
}

// The rate of the row with this path and checksum; 0 for none.
double RateOf(const std::vector<Result>& results, const char* path, const char* checksum) {
  for (const Result& r : results) {
    if (r.path == path && r.checksum == checksum) return r.gb_per_s();
  }
  return 0.0;
}

void PrintTable(const std::vector<Result>& results, const Settings& settings, double shm_ratio,
                double tcp_ratio) {
  std::printf(
      "batch %zu x %dx%dx3 uint8 = %.1f MB, %zu timed batches per path (+%zu warmup), "
      "credits %zu, %u cores\n",
      settings.loader.batch_size, settings.side, settings.side,
      static_cast<double>(settings.batch_bytes()) / 1e6, settings.batches, settings.warmup,
      settings.credits, std::thread::hardware_concurrency());
  std::printf("%-14s %-9s %9s %8s\n", "path", "checksum", "batches/s", "GB/s");
  for (const Result& r : results) {
    std::printf("%-14s %-9s %9.2f %8.2f\n", r.path.c_str(), r.checksum.c_str(),
                static_cast<double>(r.batches) / r.seconds, r.gb_per_s());
  }
  std::printf("shm / memcpy        %.2f  (goal >= 0.80: %s)\n", shm_ratio,
              shm_ratio >= 0.8 ? "met" : "NOT met");
  std::printf("zmq-tcp / plain-zmq %.2f  (goal >= 0.90: %s)\n", tcp_ratio,
              tcp_ratio >= 0.9 ? "met" : "NOT met");
}

void PrintJson(const std::vector<Result>& results, const Settings& settings, double shm_ratio,
               double tcp_ratio) {
  for (const Result& r : results) {
    std::printf(
        "{\"bench\":\"transport\",\"path\":\"%s\",\"checksum\":\"%s\",\"batch\":%zu,"
        "\"size\":%d,\"batches\":%zu,\"batches_per_s\":%.3f,\"gb_per_s\":%.3f}\n",
        r.path.c_str(), r.checksum.c_str(), settings.loader.batch_size, settings.side,
        r.batches, static_cast<double>(r.batches) / r.seconds, r.gb_per_s());
  }
  std::printf(
      "{\"bench\":\"transport\",\"ratio\":\"shm/memcpy\",\"value\":%.3f,\"goal\":0.8}\n"
      "{\"bench\":\"transport\",\"ratio\":\"zmq-tcp/plain-zmq\",\"value\":%.3f,\"goal\":0.9}\n",
      shm_ratio, tcp_ratio);
}

// The bench itself; main() turns an exception that escapes it into one line.
int Run(int argc, char** argv) {
  CLI::App app{"transport_bench: shm vs memcpy, ZeroMQ transport vs plain ZeroMQ, in one run"};
  Flags f;
  AddFlags(app, f);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "transport_bench")) return *rc;
  Settings& settings = f.settings;
  settings.loader.image_size = settings.side;
  settings.loader.eval_resize = settings.side;
  settings.ipc_dir =
      (std::filesystem::temp_directory_path() / ("tilefeed-bench-" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(settings.ipc_dir);
  std::vector<Result> results;
  try {
    results = MeasureAll(settings, f.rounds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transport_bench: %s\n", e.what());
    std::filesystem::remove_all(settings.ipc_dir);
    return 1;
  }
  std::filesystem::remove_all(settings.ipc_dir);
  if (g_touched == 1) std::printf(" \n");  // keeps the consumers' reads observable
  const double shm_ratio = RateOf(results, "shm", "off") / RateOf(results, "memcpy", "-");
  const double tcp_ratio = RateOf(results, "zmq-tcp", "off") / RateOf(results, "plain-zmq", "-");
  PrintTable(results, settings, shm_ratio, tcp_ratio);
  if (f.json) PrintJson(results, settings, shm_ratio, tcp_ratio);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transport_bench: %s\n", e.what());
    return 1;
  }
}
