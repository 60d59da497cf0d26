#include "metrics/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "loader/file_io.h"
#include "metrics/json_line.h"

#ifndef TILEFEED_VERSION
#define TILEFEED_VERSION "unknown"
#endif

// Design: one mutex guards the figures and the file. The sampler thread wakes every
// interval, takes Totals (which calls the loader probe: a few relaxed atomic loads) and
// writes the difference to the previous Totals as an interval record. Tools feed the
// consumer's figures with AddStep, which only adds under the lock, so a step costs a mutex
// acquisition and nothing else.

namespace tilefeed::metrics {
namespace {

using Clock = std::chrono::steady_clock;
using detail::JsonLine;

double UnixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double RssMiB() {
  // statm's second field: resident pages.
  std::ifstream statm("/proc/self/statm");
  unsigned long long size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

double PeakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

std::uint64_t OpenFds() {
  std::error_code ec;
  std::uint64_t count = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++count;
  }
  return count > 0 ? count - 1 : 0;  // the iterator's own descriptor
}

loader::LoaderMetrics Sum(const loader::LoaderMetrics& a, const loader::LoaderMetrics& b) {
  loader::LoaderMetrics s = b;
  s.images += a.images;
  s.batches += a.batches;
  s.bad_samples += a.bad_samples;
  s.bytes_read += a.bytes_read;
  s.read_seconds += a.read_seconds;
  s.decode_seconds += a.decode_seconds;
  s.resize_seconds += a.resize_seconds;
  s.wait_seconds += a.wait_seconds;
  // Kept as a sum over batches (the loader averages over its Next() calls, about one per
  // batch) so that loaders and intervals can be differenced.
  s.mean_ready_batches = a.mean_ready_batches + b.mean_ready_batches * double(b.batches);
  s.slots = std::max(a.slots, b.slots);
  return s;
}

// b - a for counters, 0 if b < a (never a wrapped huge number).
double Delta(std::uint64_t a, std::uint64_t b) { return b > a ? double(b - a) : 0.0; }

double Percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

double Rate(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

// The consumer's stall over a span: wait / (wait + busy) when busy time is known, else the
// wait over the wall time.
double StallPercent(const Totals& from, const Totals& to) {
  const double wait = to.wait_seconds - from.wait_seconds;
  const double busy = to.busy_seconds - from.busy_seconds;
  if (busy > 0) return std::clamp(Percent(wait, wait + busy), 0.0, 100.0);
  return std::clamp(Percent(wait, to.elapsed_seconds - from.elapsed_seconds), 0.0, 100.0);
}

}  // namespace

std::string ResolvePath(const std::string& path, int instance, int instances) {
  const std::string placeholder = "{instance}";
  std::string out = path;
  if (path == "/dev/null") return out;
  if (const std::size_t at = out.find(placeholder); at != std::string::npos) {
    for (std::size_t p = at; p != std::string::npos; p = out.find(placeholder, p)) {
      out.replace(p, placeholder.size(), std::to_string(instance));
    }
    return out;
  }
  if (instances <= 1) return out;
  const std::filesystem::path p(path);
  const std::string name =
      p.stem().string() + "." + std::to_string(instance) + p.extension().string();
  return (p.parent_path() / name).string();
}

struct Writer::Impl {
  WriterOptions options;
  RunInfo info;
  std::string path;
  bool progress_line = false;
  Clock::time_point start = Clock::now();

  mutable std::mutex mutex;  // guards what follows
  std::ofstream file;
  std::function<loader::LoaderMetrics()> probe;
  loader::LoaderMetrics detached;  // figures of probes replaced, summed
  bool progress_fed = false;       // SetProgress was called
  Totals consumer;                 // epoch, step, images, wait, busy, bytes_read from the tool
  Totals last_interval;
  Totals last_epoch;
  std::vector<double> epoch_waits;  // the consumer's wait of each step of this epoch
  double last_ring = 0;
  std::uint64_t epochs_written = 0;
  bool finished = false;
  std::condition_variable_any wake;
  std::mutex finishing;  // one Finish at a time (train's signal thread and its main thread)
  std::jthread sampler;  // last: started after everything above exists

  Totals TotalsLocked() const;
  void WriteLocked(const JsonLine& line);
  void WriteConfigLocked();
  void WriteIntervalLocked();
  void Sample(std::stop_token token);
};

Totals Writer::Impl::TotalsLocked() const {
  Totals t;
  t.elapsed_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const bool has_loader = probe || detached.slots > 0;
  const loader::LoaderMetrics lm = probe ? Sum(detached, probe()) : detached;
  t.epoch = consumer.epoch;
  const bool consumer_fed = info.feeds_steps;
  t.step = consumer_fed ? consumer.step : lm.batches;
  t.images = consumer_fed || progress_fed ? consumer.images : lm.images;
  t.batches = has_loader ? lm.batches : consumer.step;
  t.bytes_read = progress_fed ? consumer.bytes_read : lm.bytes_read;
  t.wait_seconds = consumer_fed ? consumer.wait_seconds : lm.wait_seconds;
  t.busy_seconds = consumer.busy_seconds;
  t.read_seconds = lm.read_seconds;
  t.decode_seconds = lm.decode_seconds;
  t.resize_seconds = lm.resize_seconds;
  t.ring_ready_sum = lm.mean_ready_batches;
  t.ring_samples = lm.batches;
  t.ring_slots = lm.slots;
  t.threads = lm.threads;
  t.cores = lm.cores;
  t.tuned = lm.tuned;
  t.bad_samples = lm.bad_samples;
  t.rss_mib = RssMiB();
  t.peak_rss_mib = PeakRssMiB();
  t.open_fds = OpenFds();
  return t;
}

void Writer::Impl::WriteLocked(const JsonLine& line) {
  file << line.str() << '\n';
  file.flush();
}

void Writer::Impl::WriteConfigLocked() {
  JsonLine line;
  line.Add("record", "config")
      .Add("schema", kSchemaVersion)
      .Add("time", UnixTime())
      .Add("tool", info.tool)
      .Add("version", TILEFEED_VERSION)
      .Add("instance", info.instance)
      .Add("instances", info.instances)
      .Add("host", loader::detail::HostName())
      .Add("pid", static_cast<std::uint64_t>(getpid()))
      .Add("cores", loader::detail::UsableCores())
      .Add("interval_s", options.interval_seconds)
      .Add("dataset", info.dataset)
      .Add("dataset_samples", info.dataset_samples)
      .Add("dataset_classes", info.dataset_classes)
      .Add("prefetch_bytes", info.prefetch_bytes)
      .Add("options", info.options);
  WriteLocked(line);
}

void Writer::Impl::WriteIntervalLocked() {
  const Totals now = TotalsLocked();
  const Totals& was = last_interval;
  const double span = now.elapsed_seconds - was.elapsed_seconds;
  const double ring_samples = Delta(was.ring_samples, now.ring_samples);
  if (ring_samples > 0) {
    last_ring = std::clamp((now.ring_ready_sum - was.ring_ready_sum) / ring_samples, 0.0,
                           double(now.ring_slots));
  }
  const double stall = StallPercent(was, now);
  const double images_per_s = Rate(Delta(was.images, now.images), span);
  const double worker_s = now.read_seconds + now.decode_seconds + now.resize_seconds -
                          (was.read_seconds + was.decode_seconds + was.resize_seconds);
  const double cpu_share = now.cores > 0 ? Rate(worker_s, span * now.cores) : 0.0;
  JsonLine line;
  line.Add("record", "interval")
      .Add("time", UnixTime())
      .Add("instance", info.instance)
      .Add("elapsed_s", now.elapsed_seconds)
      .Add("interval_s", span)
      .Add("epoch", now.epoch)
      .Add("step", now.step)
      .Add("images", now.images)
      .Add("images_per_s", images_per_s)
      .Add("batches_per_s", Rate(Delta(was.batches, now.batches), span))
      .Add("mb_per_s_read", Rate(Delta(was.bytes_read, now.bytes_read) / 1e6, span))
      .Add("stall_percent", stall)
      .Add("read_s", now.read_seconds - was.read_seconds)
      .Add("decode_s", now.decode_seconds - was.decode_seconds)
      .Add("resize_s", now.resize_seconds - was.resize_seconds)
      .Add("wait_s", now.wait_seconds - was.wait_seconds)
      .Add("ring_occupancy", last_ring)
      .Add("ring_slots", now.ring_slots)
      .Add("threads", now.threads)
      .Add("cpu_share_used", cpu_share)
      .Add("tuned", now.tuned)
      .Add("bad_samples", now.bad_samples)
      .Add("rss_mib", now.rss_mib)
      .Add("open_fds", now.open_fds);
  WriteLocked(line);
  last_interval = now;
  if (progress_line) {
    std::fprintf(stderr,
                 "[%s] instance %d: %.0f s, epoch %llu, step %llu, %.1f images/s, stall %.1f %%, "
                 "ring %.1f/%llu, %d threads (%.0f %% of %d cores%s%s), %llu bad, RSS %.0f MiB\n",
                 info.tool.c_str(), info.instance, now.elapsed_seconds,
                 static_cast<unsigned long long>(now.epoch),
                 static_cast<unsigned long long>(now.step), images_per_s, stall, last_ring,
                 static_cast<unsigned long long>(now.ring_slots), now.threads, 100 * cpu_share,
                 now.cores, now.tuned.empty() ? "" : "; tuned: ", now.tuned.c_str(),
                 static_cast<unsigned long long>(now.bad_samples), now.rss_mib);
  }
}

void Writer::Impl::Sample(std::stop_token token) {
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options.interval_seconds));
  std::unique_lock lock(mutex);
  auto next = start + period;
  while (!token.stop_requested()) {
    if (wake.wait_until(lock, token, next, [] { return false; })) break;
    if (token.stop_requested()) break;
    WriteIntervalLocked();
    next += period;
    // A sampler that fell behind (a stopped process) skips the intervals it missed.
    if (next < Clock::now()) next = Clock::now() + period;
  }
}

Writer::Writer(const WriterOptions& options, RunInfo info) : impl_(std::make_unique<Impl>()) {
  if (!(options.interval_seconds > 0)) {
    throw MetricsError("--metrics interval must be above 0 seconds");
  }
  Impl& s = *impl_;
  s.options = options;
  s.info = std::move(info);
  s.path = ResolvePath(options.path, s.info.instance, s.info.instances);
  s.progress_line = options.progress_line.value_or(isatty(STDERR_FILENO) == 0);
  s.file.open(s.path, std::ios::out | std::ios::trunc);
  if (!s.file) throw MetricsError("cannot open the metrics file " + s.path + " for writing");
  {
    std::lock_guard lock(s.mutex);
    s.WriteConfigLocked();
    s.last_interval = s.TotalsLocked();
    s.last_epoch = s.last_interval;
  }
  s.sampler = std::jthread([&s](std::stop_token token) { s.Sample(token); });
}

Writer::~Writer() {
  try {
    // Unwinding: an exception ends the run and the tool reports it; say so here too.
    if (std::uncaught_exceptions() > 0) {
      Finish("error", "an exception ended the run (the tool's stderr names it)");
    } else {
      Finish("abandoned");
    }
  } catch (...) {
    // A destructor must not throw; the file simply lacks its end record.
  }
}

void Writer::SetLoader(std::function<loader::LoaderMetrics()> probe) {
  std::lock_guard lock(impl_->mutex);
  if (impl_->probe) impl_->detached = Sum(impl_->detached, impl_->probe());
  impl_->probe = std::move(probe);
}

void Writer::AddStep(std::uint64_t epoch, std::uint64_t images, double wait_seconds,
                     double busy_seconds) {
  std::lock_guard lock(impl_->mutex);
  Totals& c = impl_->consumer;
  c.epoch = epoch;
  c.step += 1;
  c.images += images;
  c.wait_seconds += std::max(0.0, wait_seconds);
  impl_->epoch_waits.push_back(std::max(0.0, wait_seconds));
  c.busy_seconds += std::max(0.0, busy_seconds);
}

void Writer::SetProgress(std::uint64_t images, std::uint64_t bytes_read) {
  std::lock_guard lock(impl_->mutex);
  impl_->progress_fed = true;
  impl_->consumer.images = images;
  impl_->consumer.bytes_read = bytes_read;
}

void Writer::EndEpoch(std::uint64_t epoch, std::optional<double> loss,
                      std::optional<double> accuracy, std::optional<double> val_accuracy) {
  Impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  if (s.finished) return;
  const Totals now = s.TotalsLocked();
  const Totals& was = s.last_epoch;
  const double seconds = now.elapsed_seconds - was.elapsed_seconds;
  // The first step's wait against the median: an epoch start (a size change) that stalls.
  std::vector<double>& waits = s.epoch_waits;
  std::optional<double> first_wait, median_wait;
  if (!waits.empty()) {
    first_wait = waits.front();
    const auto middle = waits.begin() + static_cast<std::ptrdiff_t>(waits.size() / 2);
    std::nth_element(waits.begin(), middle, waits.end());
    median_wait = *middle;
  }
  waits.clear();
  JsonLine line;
  line.Add("record", "epoch")
      .Add("time", UnixTime())
      .Add("instance", s.info.instance)
      .Add("epoch", epoch)
      .Add("steps", now.step > was.step ? now.step - was.step : 0)
      .Add("images", now.images > was.images ? now.images - was.images : 0)
      .Add("seconds", seconds)
      .Add("images_per_s", Rate(Delta(was.images, now.images), seconds))
      .Add("stall_percent", StallPercent(was, now))
      .Add("wait_s", now.wait_seconds - was.wait_seconds)
      .Add("first_wait_s", first_wait)
      .Add("median_wait_s", median_wait)
      .Add("read_s", now.read_seconds - was.read_seconds)
      .Add("decode_s", now.decode_seconds - was.decode_seconds)
      .Add("resize_s", now.resize_seconds - was.resize_seconds)
      .Add("bad_samples", now.bad_samples)
      .Add("loss", loss)
      .Add("accuracy", accuracy)
      .Add("val_accuracy", val_accuracy);
  if (s.info.image_size) {  // the epoch's size, as the schedule's text writes one size
    line.Add("image_size", loader::SizeSchedule(s.info.image_size->At(epoch)).text());
  } else {
    line.AddNull("image_size");
  }
  s.WriteLocked(line);
  s.last_epoch = now;
  ++s.epochs_written;
  // A tool without steps says where it stands only here.
  if (!s.info.feeds_steps) s.consumer.epoch = epoch + 1;
}

void Writer::Finish(const std::string& exit, const std::string& error) {
  Impl& s = *impl_;
  const std::lock_guard one(s.finishing);  // two joins of the sampler at once are undefined
  s.sampler.request_stop();
  if (s.sampler.joinable()) s.sampler.join();
  std::lock_guard lock(s.mutex);
  if (s.finished) return;
  s.finished = true;
  s.WriteIntervalLocked();
  const Totals t = s.last_interval;
  JsonLine line;
  line.Add("record", "end")
      .Add("time", UnixTime())
      .Add("instance", s.info.instance)
      .Add("exit", exit);
  if (exit == "error") {
    line.Add("error", error);
  } else {
    line.AddNull("error");
  }
  line.Add("elapsed_s", t.elapsed_seconds)
      .Add("epochs", s.epochs_written)
      .Add("steps", t.step)
      .Add("images", t.images)
      .Add("batches", t.batches)
      .Add("bytes_read", t.bytes_read)
      .Add("images_per_s", Rate(double(t.images), t.elapsed_seconds))
      .Add("stall_percent", StallPercent(Totals{}, t))
      .Add("wait_s", t.wait_seconds)
      .Add("read_s", t.read_seconds)
      .Add("decode_s", t.decode_seconds)
      .Add("resize_s", t.resize_seconds)
      .Add("bad_samples", t.bad_samples)
      .Add("peak_rss_mib", t.peak_rss_mib);
  s.WriteLocked(line);
  s.file.close();
}

Totals Writer::totals() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->TotalsLocked();
}

int Writer::instance() const { return impl_->info.instance; }

const std::string& Writer::path() const { return impl_->path; }

}  // namespace tilefeed::metrics
