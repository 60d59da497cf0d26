// codec_bench: what crop-before-decode buys, measured side by side on the same files in
// one run.
//
// All files are read into memory first, so the figures are decode-bound. The modes run
// round-robin, --reps times each, and the median is reported:
//   full      TurboJPEG tjDecompress2 of the whole image to RGB (the reference; the same
//             call as ../shared/baselines/decode_limit --mode full)
//   rrc       crop-before-decode of a torchvision RandomResizedCrop region, DCT-scaled,
//             resized to --size x --size with the antialiased bilinear filter (the work a
//             training loader does per sample)
//   entropy   Huffman decoding of the whole image to DCT coefficients only: the part of
//             a full decode that no crop or DCT scaling can skip
//   resize    the resize step of rrc alone, on the same region sizes
//   rrc_t     rrc on the files transcoded for random access (codecs/jpeg_index.h):
//             baseline, optimized Huffman tables, restart intervals on a grid
//   indexed   rrc on the transcoded files that entropy-decodes only the restart
//             intervals covering the crop (IndexedJpegDecoder); same pixels as rrc_t
//   coef      rrc from the coefficient store (codecs/jpeg_coefficients.h), Huffman
//             groups (tilefeed-pack --codec coefficients-small; stored groups, coefficients-fast,
//             run beside it in the rotating rounds): no entropy decoding at all, the crop's
//             column groups, libjpeg's IDCT, upsampling and colour; same pixels as
//             rrc. Its pack runs once, untimed for the modes but timed for its own images/s, and
//             its bytes are printed against the files and LZ4 raw pixels. On one thread full,
//             indexed, coef and the ceiling also run interleaved (rotating every 16 files), whose
//             per-round ratios give the goal's figures, and one more pass per path
//             splits its time (LZ4/entropy, unpack, IDCT + upsampling + colour, resize).
//   ceiling   (interleaved rounds only) coef fed from coefficients unpacked in memory
//             before each block of 16 files, untimed: IDCT, upsampling, colour and
//             resize alone, the most any coefficient layout can reach.
// and the ratios rrc/full and entropy/full explain each other. On one thread, each
// repetition also times full and rrc interleaved, alternating every 16 files, for the
// goal's ratio: on a machine whose load comes and goes within seconds, passes one after
// the other can differ by 10 % on the same binary, interleaved blocks by far less. The transcode
// runs once, untimed, before the passes; files it refuses are decoded as they came by rrc_t and
// indexed alike, and its size growth (markers + index) is printed first.
//
// --threads N runs every pass on N threads, each with its own decoder, resizer and
// buffers (as the loader's workers have), the files split round-robin (thread t takes
// files t, t+N, ...); a pass ends when the slowest thread does. --only MODE runs one mode
// alone, one timed pass by default: `--only full --threads W` is the bare full-decode
// reference that bench/compare.sh sets beside the loader on the same W cores.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
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
#include "codecs/jpeg_coefficients.h"
#include "codecs/jpeg_index.h"
#include "codecs/raw.h"
#include "codecs/resize.h"
#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/loader/augment.h"
#include "tilefeed/loader/sampler.h"
#include "tools/cli_checks.h"

namespace {

namespace codecs = tilefeed::codecs;
namespace loader = tilefeed::loader;
using Clock = std::chrono::steady_clock;

struct File {
  std::string path;
  std::vector<std::byte> bytes;
};

std::vector<File> LoadCorpus(const std::filesystem::path& root, std::size_t limit) {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    std::string ext = entry.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (ext == ".jpg" || ext == ".jpeg") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.size() > limit) paths.resize(limit);
  std::vector<File> files;
  files.reserve(paths.size());
  for (auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::vector<std::byte> bytes(std::filesystem::file_size(path));
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!in) throw std::runtime_error("cannot read " + path);
    files.push_back({std::move(path), std::move(bytes)});
  }
  return files;
}

using tilefeed::bench::Median;

// One file and what the probe found out about it.
struct Job {
  const File* file;
  codecs::ImageInfo info;
  codecs::CropPlan plan;
  codecs::Rect decoded;
  const codecs::TranscodeResult* transcoded = nullptr;         // null until transcoded
  const codecs::CoefficientPackResult* packed = nullptr;       // null until packed
  const codecs::CoefficientPackResult* packed_fast = nullptr;  // stored groups, likewise
};

// What one thread owns: one codec handle per thread, and its own output buffers so
// threads never write the same cache lines.
struct Worker {
  Worker(const codecs::JpegOptions& options, std::size_t max_pixels, int size)
      : decoder(options),
        indexed(options),
        coef(options),
        full_out(max_pixels * 3),
        crop_out(std::size_t(size) * size * 3),
        region(max_pixels * 3, 128) {}

  codecs::JpegDecoder decoder;
  codecs::IndexedJpegDecoder indexed;
  codecs::CoefficientDecoder coef;
  codecs::Resizer resizer;
  std::vector<std::uint8_t> full_out;  // zero-filled here, so no page faults while timed
  std::vector<std::uint8_t> crop_out;
  std::vector<std::uint8_t> region;  // a stand-in decoded region for the resize-only mode
  std::size_t errors = 0;            // DecodeErrors met while timed (none expected)
  // For the ceiling: the current block's records, unpacked (untimed) before it runs;
  // unpacked[i - unpacked_begin] belongs to job i.
  std::vector<codecs::UnpackedCoefficients> unpacked;
  std::size_t unpacked_begin = 0;
};

// Untimed work before a block of jobs [begin, end) runs (the ceiling's unpacking).
using PrepareFn = std::function<void(Worker&, std::size_t begin, std::size_t end)>;

using ModeFn = std::function<void(Worker&, const Job&)>;

// Runs `fn` over jobs[0, count) on workers.size() threads, thread t taking jobs t, t+N,
// ... (round-robin), and returns the wall time from the first thread's start to the
// last one's end. One thread runs in the caller. A DecodeError counts as an error of the
// worker; anything else is rethrown here.
// CPU time of the calling thread: unlike wall time it does not grow while other jobs
// on the machine take the core, so ratios of CPU-time rates hold under load.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct PassTime {
  double wall = 0;  // seconds, start to the slowest thread's end
  double cpu = 0;   // the threads' CPU seconds, summed
};

PassTime RunPass(const ModeFn& fn, const std::vector<Job>& jobs, std::size_t count,
                 std::vector<std::unique_ptr<Worker>>& workers) {
  const std::size_t n = workers.size();
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<double> cpu(n, 0.0);
  auto slice = [&](std::size_t t) {
    const double cpu_start = ThreadCpuSeconds();
    try {
      Worker& worker = *workers[t];
      for (std::size_t i = t; i < count; i += n) {
        try {
          fn(worker, jobs[i]);
        } catch (const codecs::DecodeError&) {
          ++worker.errors;
        }
      }
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
    cpu[t] = ThreadCpuSeconds() - cpu_start;
  };
  const auto start = Clock::now();
  if (n == 1) {
    slice(0);
  } else {
    std::vector<std::jthread> threads;
    threads.reserve(n);
    for (std::size_t t = 0; t < n; ++t) threads.emplace_back(slice, t);
  }  // the jthreads join here
  PassTime time;
  time.wall = std::chrono::duration<double>(Clock::now() - start).count();
  for (double c : cpu) time.cpu += c;
  if (failure) std::rethrow_exception(failure);
  return time;
}

// Times mode a against mode b on one thread, interleaved: for each block of `block`
// consecutive files, a then b over the block (b then a every other block, so that neither
// always finds the files in cache), each block's time charged to its mode. Load from
// other processes that comes and goes within seconds then falls on both alike, which
// whole passes one after the other do not give. Returns the seconds of (a, b).
std::pair<double, double> RunInterleaved(const ModeFn& a, const ModeFn& b,
                                         const std::vector<Job>& jobs, std::size_t block,
                                         Worker& worker) {
  double seconds[2] = {0, 0};
  const ModeFn* fns[2] = {&a, &b};
  for (std::size_t begin = 0, k = 0; begin < jobs.size(); begin += block, ++k) {
    const std::size_t end = std::min(jobs.size(), begin + block);
    for (int turn = 0; turn < 2; ++turn) {
      const int m = (k % 2 == 0) ? turn : 1 - turn;
      const auto start = Clock::now();
      for (std::size_t i = begin; i < end; ++i) {
        try {
          (*fns[m])(worker, jobs[i]);
        } catch (const codecs::DecodeError&) {
          ++worker.errors;
        }
      }
      seconds[m] += std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  return {seconds[0], seconds[1]};
}

// RunInterleaved for any number of modes: per block, the modes run in an order that
// rotates from block to block; `prepare`, if given, runs untimed before each block.
// Returns each mode's seconds.
std::vector<double> RunRotating(const std::vector<const ModeFn*>& fns, const std::vector<Job>& jobs,
                                std::size_t block, Worker& worker,
                                const PrepareFn& prepare = nullptr) {
  std::vector<double> seconds(fns.size(), 0.0);
  for (std::size_t begin = 0, k = 0; begin < jobs.size(); begin += block, ++k) {
    const std::size_t end = std::min(jobs.size(), begin + block);
    if (prepare) prepare(worker, begin, end);
    for (std::size_t turn = 0; turn < fns.size(); ++turn) {
      const std::size_t m = (k + turn) % fns.size();
      const auto start = Clock::now();
      for (std::size_t i = begin; i < end; ++i) {
        try {
          (*fns[m])(worker, jobs[i]);
        } catch (const codecs::DecodeError&) {
          ++worker.errors;
        }
      }
      seconds[m] += std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  return seconds;
}

// Packs every job's file into the coefficient store (timed for the pack rate), checks
// on each that the stored decode gives rrc's bytes, and prints the bytes against the
// files and against LZ4 raw pixels of the whole images.
using PackSlot = const codecs::CoefficientPackResult* Job::*;

void PackCoefficientsFor(std::vector<Job>& jobs, std::vector<codecs::CoefficientPackResult>& packed,
                         const codecs::JpegOptions& options, int size,
                         const codecs::CoefficientPackOptions& pack_options, const char* label,
                         PackSlot slot) {
  codecs::JpegDecoder decoder(options);
  codecs::CoefficientDecoder coef(options);
  std::vector<std::uint8_t> a(std::size_t(size) * size * 3), b(a.size()), pixels;
  std::size_t original = 0, stored = 0, raw_lz4 = 0, refused = 0, mismatches = 0, checked = 0;
  std::map<std::string, int> refusals;
  double pack_seconds = 0, pack_cpu = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    const auto start = Clock::now();
    const double cpu_start = ThreadCpuSeconds();
    packed[i] = codecs::PackCoefficients(job.file->bytes, pack_options);
    pack_cpu += ThreadCpuSeconds() - cpu_start;
    pack_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    job.*slot = &packed[i];
    original += job.file->bytes.size();
    stored += packed[i].packed ? packed[i].record.size() : job.file->bytes.size();
    if (!packed[i].packed) {
      ++refused;
      refusals[packed[i].reason]++;
    }
    try {
      pixels.resize(std::size_t(job.info.width) * job.info.height * 3);
      decoder.DecodeFull(job.file->bytes, codecs::PixelView::Interleaved(
                                              pixels.data(), job.info.width, job.info.height));
      raw_lz4 += codecs::EncodeRaw(pixels, {job.info.height, job.info.width, 3}).size();
      if (!packed[i].packed) continue;
      decoder.DecodeInto(job.file->bytes, job.plan,
                         codecs::PixelView::Interleaved(a.data(), size, size));
      coef.DecodeInto(packed[i].record, job.plan,
                      codecs::PixelView::Interleaved(b.data(), size, size));
      ++checked;
      if (a != b) ++mismatches;
    } catch (const codecs::DecodeError&) {
    }
  }
  std::printf(
      "coefficient store %s (pack %.1f s = %.0f images/s on one core, %.0f per CPU-second): "
      "%zu packed, %zu stored as they came\n",
      label, pack_seconds, double(jobs.size()) / pack_seconds, double(jobs.size()) / pack_cpu,
      jobs.size() - refused, refused);
  for (const auto& [reason, count] : refusals)
    std::printf("  as they came %d: %s\n", count, reason.c_str());
  std::printf(
      "  bytes: files %.1f MB -> store %.1f MB (%.3fx the files); LZ4 raw pixels %.1f MB "
      "(store = %.3fx of it)\n",
      double(original) / 1e6, double(stored) / 1e6,
      double(stored) / double(std::max<std::size_t>(1, original)), double(raw_lz4) / 1e6,
      double(stored) / double(std::max<std::size_t>(1, raw_lz4)));
  std::printf("  coef decode == rrc decode of the original: %zu of %zu %s\n", checked - mismatches,
              checked, mismatches == 0 ? "(all identical)" : "MISMATCH");
}

// Per-image stage times of one path, summed over a pass (seconds).
struct StageSums {
  double first = 0, unpack = 0, pixels = 0, resize = 0, total = 0;
  std::size_t count = 0;
  void Print(const char* path, const char* first_stage, const char* pixels_stage) const {
    const double us = 1e6 / double(std::max<std::size_t>(1, count));
    const double other = total - first - unpack - pixels - resize;
    std::printf(
        "    %-9s %s %7.1f  unpack %7.1f  %s %7.1f  resize %6.1f  other %6.1f  = %7.1f "
        "us/image\n",
        path, first_stage, first * us, unpack * us, pixels_stage, pixels * us, resize * us,
        other * us, total * us);
  }
};

// One more pass of each path on one thread with its time split (steady_clock around each
// stage, so the stages carry their timing overhead and any preemption):
//   full     entropy = EntropyDecode of the same file; the rest of DecodeFull is
//            IDCT + upsampling + colour (no resize)
//   indexed  resize from its report; the rest is libjpeg's entropy decode of the
//            covering intervals + IDCT + upsampling + colour, not separable from outside
//   coef     groups (header, Huffman decoding and checks), unpacking, IDCT + upsampling +
//            colour, resize; fast likewise (stored groups: header and checks)
//   ceiling  as coef from coefficients unpacked (untimed) before each block of 16 files
void PrintStageSplits(const std::vector<Job>& jobs, Worker& w, int size, const PrepareFn& prepare,
                      std::size_t block) {
  StageSums full, indexed, coef, fast, ceiling;
  const auto out = codecs::PixelView::Interleaved(w.crop_out.data(), size, size);
  const auto seconds = [](Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  };
  for (std::size_t begin = 0; begin < jobs.size(); begin += block) {
    const std::size_t end = std::min(jobs.size(), begin + block);
    prepare(w, begin, end);
    for (std::size_t i = begin; i < end; ++i) {
      const Job& job = jobs[i];
      if (!job.packed->packed || !job.packed_fast->packed || !job.transcoded->transcoded) continue;
      try {
        auto start = Clock::now();
        w.decoder.EntropyDecode(job.file->bytes);
        const double entropy = seconds(start);
        start = Clock::now();
        w.decoder.DecodeFull(
            job.file->bytes,
            codecs::PixelView::Interleaved(w.full_out.data(), job.info.width, job.info.height));
        const double whole = seconds(start);
        full.first += entropy;
        full.pixels += std::max(0.0, whole - entropy);
        full.total += std::max(whole, entropy);
        ++full.count;
        start = Clock::now();
        const codecs::TranscodeResult& t = *job.transcoded;
        const double resize = w.indexed.DecodeInto(t.jpeg, t.index, job.plan, out).resize_seconds;
        const double total = seconds(start);
        indexed.resize += resize;
        indexed.pixels += std::max(0.0, total - resize);
        indexed.total += std::max(total, resize);
        ++indexed.count;
        for (StageSums* sums : {&coef, &fast, &ceiling}) {
          codecs::CoefficientTimes times;
          start = Clock::now();
          const auto& record = (sums == &coef ? job.packed : job.packed_fast)->record;
          const codecs::DecodeReport report =
              sums != &ceiling ? w.coef.DecodeInto(record, job.plan, out, &times)
                               : w.coef.DecodeUnpackedInto(w.unpacked[i - w.unpacked_begin],
                                                           job.plan, out, &times);
          sums->total += seconds(start);
          sums->first += times.groups_seconds;
          sums->unpack += times.unpack_seconds;
          sums->pixels += times.idct_seconds + times.rows_seconds;
          sums->resize += report.resize_seconds;
          ++sums->count;
        }
      } catch (const codecs::DecodeError&) {
        ++w.errors;
      }
    }
  }
  std::printf("  stage split (one timed pass per path, files both stores hold, us/image):\n");
  full.Print("full", "entropy", "IDCT+upsample+colour");
  indexed.Print("indexed", " groups", "entropy+IDCT+ups+col");
  coef.Print("coef", " groups", "IDCT+upsample+colour");
  fast.Print("fast", " groups", "IDCT+upsample+colour");
  ceiling.Print("ceiling", " groups", "IDCT+upsample+colour");
  std::printf(
      "    (ceiling: 'groups' is the header parse, 'unpack' the per-row timing itself; indexed's "
      "entropy decode is inside libjpeg)\n");
}

// The bench's flags.
struct Flags {
  std::string data;
  std::size_t max_files = 2000;
  int size = 224;
  int reps = 3;
  int threads = 1;
  std::size_t warmup = 100;
  std::string only;
  std::string decode_scaling = "exact";
  bool fast_dct = false;
  bool json = false;
  int interval_width = codecs::TranscodeOptions{}.interval_width;
  int group_pixels = codecs::CoefficientPackOptions{}.group_pixels;
};

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--data", f.data, "corpus root (its train/ split is used if present) or folder")
      ->required();
  app.add_option("--files", f.max_files, "use at most this many files (sorted by path)")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--size", f.size, "RandomResizedCrop output side")
      ->check(tilefeed::tools::Between(16, 4096))
      ->capture_default_str();
  app.add_option("--reps", f.reps,
                 "round-robin repetitions; the median is reported (default 3; 1 with --only)")
      ->check(tilefeed::tools::AtLeast(1));
  app.add_option("--threads", f.threads,
                 "decode threads, each with its own decoder; files split round-robin")
      ->check(tilefeed::tools::Between(1, 1024))
      ->capture_default_str();
  app.add_option("--only", f.only,
                 "run this mode alone: full, rrc, entropy, resize, rrc_t, indexed or coef")
      ->check(CLI::IsMember({"full", "rrc", "entropy", "resize", "rrc_t", "indexed", "coef"}));
  app.add_option("--interval-width", f.interval_width,
                 "restart-interval target width in pixels for the transcoded files (0: one "
                 "interval per MCU row)")
      ->check(tilefeed::tools::Between(0, 65535))
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "untimed decodes per mode before timing, over all threads")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  app.add_option("--decode-scaling", f.decode_scaling,
                 "DCT scales: exact (1/2,1/4,1/8) or fast (n/8), as codecs::DecodeScaling")
      ->check(CLI::IsMember({"exact", "fast"}));
  app.add_flag("--fast-dct", f.fast_dct, "libjpeg's fast integer IDCT");
  app.add_option("--group-pixels", f.group_pixels, "coefficient column group width in pixels")
      ->check(tilefeed::tools::Between(1, 65535))
      ->capture_default_str();
  app.add_flag("--json", f.json, "also print one JSON line");
}

// The files the bench decodes, read into memory from the folder (or its train/ split).
struct Corpus {
  std::filesystem::path root;
  std::vector<File> files;
};

// Reads the corpus; on failure says why on stderr and returns nothing.
std::optional<Corpus> OpenCorpus(const Flags& f) {
  Corpus corpus{f.data, {}};
  if (!std::filesystem::is_directory(corpus.root)) {
    std::fprintf(stderr, "codec_bench: %s is not a directory\n", f.data.c_str());
    return std::nullopt;
  }
  if (std::filesystem::is_directory(corpus.root / "train")) corpus.root /= "train";
  try {
    corpus.files = LoadCorpus(corpus.root, f.max_files);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "codec_bench: %s\n", e.what());
    return std::nullopt;
  }
  if (corpus.files.empty()) {
    std::fprintf(stderr, "codec_bench: no .jpg/.jpeg files under %s\n", corpus.root.c_str());
    return std::nullopt;
  }
  return corpus;
}

codecs::JpegOptions JpegOptionsFor(const Flags& f) {
  codecs::JpegOptions options;
  options.decode_scaling =
      f.decode_scaling == "exact" ? codecs::DecodeScaling::kExact : codecs::DecodeScaling::kFast;
  options.fast_dct = f.fast_dct;
  options.corrupt_data = codecs::CorruptDataPolicy::kAccept;
  return options;
}

// The files that decode, with their crops.
struct Probed {
  std::vector<Job> jobs;
  std::size_t max_pixels = 0;  // the largest image's
  std::size_t skipped = 0;     // files that are not decodable JPEGs
};

// Probe once: sizes, the crops, and which files decode at all (PNGs named .JPEG are
// skipped by every mode alike).
Probed ProbeFiles(const std::vector<File>& files, codecs::JpegDecoder& probe) {
  Probed probed;
  for (std::size_t i = 0; i < files.size(); ++i) {
    try {
      const codecs::ImageInfo info = probe.ReadInfo(files[i].bytes);
      loader::SampleRng rng(0, 0, i);
      codecs::CropPlan plan{loader::RandomResizedCrop(info.width, info.height, {}, rng),
                            loader::DrawFlip(rng)};
      probed.jobs.push_back({&files[i], info, plan, {}});
      probed.max_pixels = std::max(probed.max_pixels, std::size_t(info.width) * info.height);
    } catch (const codecs::DecodeError& e) {
      ++probed.skipped;
    }
  }
  return probed;
}

// The regions rrc decodes: their DCT scales and mean size.
struct Regions {
  std::map<int, int> scale_histogram;
  double decoded_pixels = 0;
};

// The resize mode needs the region sizes rrc decodes, and the side-by-side report
// shows their scales: one untimed rrc pass finds them.
Regions FindRegions(std::vector<Job>& jobs, codecs::JpegDecoder& probe, int size) {
  Regions regions;
  std::vector<std::uint8_t> crop_out(std::size_t(size) * size * 3);
  const codecs::PixelView probe_view = codecs::PixelView::Interleaved(crop_out.data(), size, size);
  for (Job& job : jobs) {
    const codecs::DecodeReport report = probe.DecodeInto(job.file->bytes, job.plan, probe_view);
    job.decoded = report.decoded;
    regions.scale_histogram[report.scale_eighths]++;
    regions.decoded_pixels += double(report.decoded.width) * report.decoded.height;
  }
  return regions;
}

// What transcoding the files for random access did to them.
struct TranscodeStats {
  double seconds = 0;
  std::size_t original_bytes = 0, transcoded_bytes = 0, marker_bytes = 0, index_bytes = 0,
              index_bytes_u32 = 0, intervals = 0, refused = 0, mismatches = 0, checked = 0;
  std::map<std::string, int> refusals;
  // Shares of each image's area entropy-decoded by indexed (the covering intervals) and
  // by rrc (every MCU row down to the crop's last), summed over the transcoded files.
  double indexed_share = 0, rrc_share = 0;
};

// Checks that the interval-skipping decode of a transcoded file gives the ordinary
// decode's bytes, and adds the areas each entropy-decodes to `stats`.
struct IndexedCheck {
  IndexedCheck(const codecs::JpegOptions& options, int size)
      : options(options),
        size(size),
        check(options),
        a(std::size_t(size) * size * 3),
        b(a.size()) {}
  const codecs::JpegOptions& options;
  int size;
  codecs::IndexedJpegDecoder check;
  std::vector<std::uint8_t> a, b;  // the two decodes' pixels
};

void CheckIndexed(const Job& job, const codecs::TranscodeResult& t, IndexedCheck& c,
                  TranscodeStats& stats) {
  const int size = c.size;
  codecs::IndexedJpegDecoder& check = c.check;
  std::vector<std::uint8_t>& a = c.a;
  std::vector<std::uint8_t>& b = c.b;
  try {
    check.decoder().DecodeInto(t.jpeg, job.plan,
                               codecs::PixelView::Interleaved(a.data(), size, size));
    check.DecodeInto(t.jpeg, t.index, job.plan,
                     codecs::PixelView::Interleaved(b.data(), size, size));
    ++stats.checked;
    if (a != b) ++stats.mismatches;
    const codecs::Rect covered =
        codecs::CoveredRegion(t.jpeg, t.index, job.plan, size, size, c.options);
    const double area = double(job.info.width) * job.info.height;
    stats.indexed_share += double(covered.width) * covered.height / area;
    stats.rrc_share += double(covered.y + covered.height) * job.info.width / area;
  } catch (const codecs::DecodeError&) {
  }
}

// Transcode every decodable file once, untimed, for rrc_t and indexed, and check on
// each that the interval-skipping decode gives the ordinary decode's bytes.
TranscodeStats TranscodeAll(std::vector<Job>& jobs,
                            std::vector<codecs::TranscodeResult>& transcoded,
                            const codecs::JpegOptions& options, const Flags& f) {
  TranscodeStats stats;
  codecs::TranscodeOptions transcode_options;
  transcode_options.interval_width = f.interval_width;
  IndexedCheck check(options, f.size);
  const auto transcode_start = Clock::now();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    transcoded[i] = codecs::TranscodeForRandomAccess(job.file->bytes, transcode_options);
    job.transcoded = &transcoded[i];
    const codecs::TranscodeResult& t = transcoded[i];
    stats.original_bytes += job.file->bytes.size();
    if (!t.transcoded) {
      ++stats.refused;
      stats.refusals[t.reason.substr(0, t.reason.find(':', t.reason.find("): ") + 3))]++;
      stats.transcoded_bytes += job.file->bytes.size();
      continue;
    }
    stats.transcoded_bytes += t.jpeg.size();
    stats.marker_bytes += 2 * (t.index.offsets.size() - 1);
    stats.index_bytes += codecs::SerializeIndex(t.index).size();
    stats.index_bytes_u32 += 4 * (t.index.offsets.size() + 1) + 16;
    stats.intervals += t.index.offsets.size();
    CheckIndexed(job, t, check, stats);
  }
  stats.seconds = std::chrono::duration<double>(Clock::now() - transcode_start).count();
  return stats;
}

void PrintTranscode(const TranscodeStats& s, std::size_t jobs, int interval_width) {
  const double orig = double(std::max<std::size_t>(1, s.original_bytes));
  std::printf(
      "transcode (untimed, %.1f s): %zu transcoded, %zu refused, interval target %d px, "
      "mean %.0f intervals/image\n",
      s.seconds, jobs - s.refused, s.refused, interval_width,
      double(s.intervals) / double(std::max<std::size_t>(1, jobs - s.refused)));
  for (const auto& [reason, count] : s.refusals) {
    std::printf("  refused %d: %s\n", count, reason.c_str());
  }
  std::printf(
      "  bytes: %.1f MB -> %.1f MB (%+.2f%%; RST markers %.2f%%); index %.1f KB = %.2f%% of "
      "the files (%.2f B/interval; uint32 offsets would be %.2f%%)\n",
      orig / 1e6, double(s.transcoded_bytes) / 1e6, 100.0 * (double(s.transcoded_bytes) / orig - 1),
      100.0 * double(s.marker_bytes) / orig, double(s.index_bytes) / 1e3,
      100.0 * double(s.index_bytes) / orig,
      double(s.index_bytes) / double(std::max<std::size_t>(1, s.intervals)),
      100.0 * double(s.index_bytes_u32) / orig);
  std::printf("  indexed decode == ordinary decode of the transcoded file: %zu of %zu %s\n",
              s.checked - s.mismatches, s.checked,
              s.mismatches == 0 ? "(all identical)" : "MISMATCH");
  std::printf(
      "  entropy-decoded share of each image (mean): indexed %.0f%%, rrc %.0f%% (all rows "
      "down to the crop), full 100%%\n",
      100.0 * s.indexed_share / double(std::max<std::size_t>(1, s.checked)),
      100.0 * s.rrc_share / double(std::max<std::size_t>(1, s.checked)));
}

// The coefficient stores coef (Huffman groups) and the rotating rounds' fast (stored
// groups) decode from.
void PackStores(std::vector<Job>& jobs, std::vector<codecs::CoefficientPackResult>& packed,
                std::vector<codecs::CoefficientPackResult>& packed_fast,
                const codecs::JpegOptions& options, const Flags& f) {
  codecs::CoefficientPackOptions pack_options;
  pack_options.group_pixels = f.group_pixels;
  if (f.only.empty() || f.only == "coef") {
    pack_options.coding = codecs::CoefficientCoding::kHuffman;
    PackCoefficientsFor(jobs, packed, options, f.size, pack_options, "small", &Job::packed);
  }
  if (f.only.empty()) {
    pack_options.coding = codecs::CoefficientCoding::kNone;
    PackCoefficientsFor(jobs, packed_fast, options, f.size, pack_options, "fast",
                        &Job::packed_fast);
  }
}

// rrc from the coefficient store in `slot`; files the store holds as they
// came are decoded as they came.
ModeFn CoefMode(int size, PackSlot slot) {
  return [size, slot](Worker& w, const Job& job) {
    const auto out = codecs::PixelView::Interleaved(w.crop_out.data(), size, size);
    const codecs::CoefficientPackResult& p = *(job.*slot);
    if (p.packed) {
      w.coef.DecodeInto(p.record, job.plan, out);
    } else {
      w.decoder.DecodeInto(job.file->bytes, job.plan, out);
    }
  };
}

struct Mode {
  const char* name;
  ModeFn run;
  std::vector<double> rates;      // images/s, wall clock
  std::vector<double> cpu_rates;  // images per CPU-second, per thread
};

// The timed modes, in the order the report uses: full, rrc, entropy, resize, rrc_t,
// indexed, coef.
std::vector<Mode> MakeModes(int size) {
  auto run_full = [](Worker& w, const Job& job) {
    w.decoder.DecodeFull(job.file->bytes, codecs::PixelView::Interleaved(
                                              w.full_out.data(), job.info.width, job.info.height));
  };
  auto run_rrc = [size](Worker& w, const Job& job) {
    w.decoder.DecodeInto(job.file->bytes, job.plan,
                         codecs::PixelView::Interleaved(w.crop_out.data(), size, size));
  };
  auto run_entropy = [](Worker& w, const Job& job) { w.decoder.EntropyDecode(job.file->bytes); };
  auto run_resize = [size](Worker& w, const Job& job) {
    const codecs::Rect& d = job.decoded;
    const double s = double(d.width) / std::max(1, job.plan.crop.width);
    codecs::ConstPixelView src{w.region.data(), d.width, d.height, 3, std::ptrdiff_t{d.width} * 3};
    codecs::SourceBox box{0.25, 0.25, std::max(1.0, d.width - 0.25 * s),
                          std::max(1.0, d.height - 0.25 * s)};
    w.resizer.Resize(src, box, codecs::PixelView::Interleaved(w.crop_out.data(), size, size),
                     job.plan.flip);
  };
  // Files the transcoder refused are decoded as they came, as the loader will.
  auto run_rrc_t = [size](Worker& w, const Job& job) {
    const codecs::TranscodeResult& t = *job.transcoded;
    w.decoder.DecodeInto(t.transcoded ? std::span<const std::byte>(t.jpeg) : job.file->bytes,
                         job.plan, codecs::PixelView::Interleaved(w.crop_out.data(), size, size));
  };
  auto run_indexed = [size](Worker& w, const Job& job) {
    const codecs::TranscodeResult& t = *job.transcoded;
    const auto out = codecs::PixelView::Interleaved(w.crop_out.data(), size, size);
    if (t.transcoded) {
      w.indexed.DecodeInto(t.jpeg, t.index, job.plan, out);
    } else {
      w.decoder.DecodeInto(job.file->bytes, job.plan, out);
    }
  };
  return {{"full", run_full, {}, {}},
          {"rrc", run_rrc, {}, {}},
          {"entropy", run_entropy, {}, {}},
          {"resize", run_resize, {}, {}},
          {"rrc_t", run_rrc_t, {}, {}},
          {"indexed", run_indexed, {}, {}},
          {"coef", CoefMode(size, &Job::packed), {}, {}}};
}

// The ceiling: coef's decode from coefficients unpacked (untimed) before each block.
ModeFn CeilingMode(int size, const std::vector<Job>& jobs) {
  return [size, &jobs](Worker& w, const Job& job) {
    const auto out = codecs::PixelView::Interleaved(w.crop_out.data(), size, size);
    if (job.packed->packed) {
      const auto i = static_cast<std::size_t>(&job - jobs.data());
      w.coef.DecodeUnpackedInto(w.unpacked[i - w.unpacked_begin], job.plan, out);
    } else {
      w.decoder.DecodeInto(job.file->bytes, job.plan, out);
    }
  };
}

// The ceiling's untimed work before each block: unpacking the block's records.
PrepareFn UnpackBlock(const std::vector<Job>& jobs) {
  return [&jobs](Worker& w, std::size_t begin, std::size_t end) {
    w.unpacked.clear();
    w.unpacked_begin = begin;
    for (std::size_t i = begin; i < end; ++i) {
      const codecs::CoefficientPackResult& p = *jobs[i].packed;
      w.unpacked.push_back(p.packed ? codecs::UnpackCoefficients(p.record)
                                    : codecs::UnpackedCoefficients{});
    }
  };
}

constexpr std::size_t kInterleaveBlock = 16;

// The per-repetition ratios of the interleaved runs (one thread, all modes).
struct Interleaved {
  std::vector<double> rrc_over_full;
  // coef against full and against indexed per repetition, the three rotating.
  std::vector<double> coef_over_full, coef_over_indexed;
  // ... and against its ceiling (as a fraction of the ceiling's speed), the ceiling vs full.
  std::vector<double> coef_of_ceiling, ceiling_over_full;
  // fast (stored groups), in the same rotation: against the ceiling, coef and full.
  std::vector<double> fast_of_ceiling, coef_over_fast, fast_over_full;
};

// One repetition's interleaved runs: the goal's ratio, rrc against full, and full,
// indexed, coef, the ceiling and fast rotating.
void RunInterleavedRound(const std::vector<Mode>& modes, const std::vector<Job>& jobs, int size,
                         Worker& worker, Interleaved& out) {
  const ModeFn fast_fn = CoefMode(size, &Job::packed_fast);
  const ModeFn ceiling_fn = CeilingMode(size, jobs);
  const auto [full_s, rrc_s] =
      RunInterleaved(modes[0].run, modes[1].run, jobs, kInterleaveBlock, worker);
  out.rrc_over_full.push_back(full_s / rrc_s);
  const std::vector<const ModeFn*> rotation = {&modes[0].run, &modes[5].run, &modes[6].run,
                                               &ceiling_fn, &fast_fn};
  const std::vector<double> s5 =
      RunRotating(rotation, jobs, kInterleaveBlock, worker, UnpackBlock(jobs));
  out.coef_over_full.push_back(s5[0] / s5[2]);
  out.coef_over_indexed.push_back(s5[1] / s5[2]);
  out.coef_of_ceiling.push_back(s5[3] / s5[2]);
  out.ceiling_over_full.push_back(s5[0] / s5[3]);
  out.fast_of_ceiling.push_back(s5[3] / s5[4]);
  out.coef_over_fast.push_back(s5[4] / s5[2]);
  out.fast_over_full.push_back(s5[0] / s5[4]);
}

// The timed passes: an untimed warm-up, then --reps repetitions of every mode in turn
// (and on one thread with every mode, the interleaved runs). Fills each mode's rates.
Interleaved TimeModes(std::vector<Mode>& modes, const std::vector<Job>& jobs,
                      std::vector<std::unique_ptr<Worker>>& workers, const Flags& f) {
  Interleaved interleaved;
  // Untimed warm-up: code and tables hot, every thread's buffers touched.
  for (Mode& mode : modes) RunPass(mode.run, jobs, std::min(f.warmup, jobs.size()), workers);
  for (auto& worker : workers) worker->errors = 0;
  for (int r = 0; r < f.reps; ++r) {
    for (Mode& mode : modes) {
      const PassTime time = RunPass(mode.run, jobs, jobs.size(), workers);
      mode.rates.push_back(double(jobs.size()) / time.wall);
      mode.cpu_rates.push_back(double(jobs.size()) / time.cpu);
    }
    // The goal's ratio, rrc against full on one thread, measured interleaved as well.
    if (f.only.empty() && f.threads == 1) {
      RunInterleavedRound(modes, jobs, f.size, *workers[0], interleaved);
    }
  }
  return interleaved;
}

// The report of --only MODE.
void PrintOnly(const Mode& mode, const Corpus& corpus, const Probed& probed, const Flags& f,
               std::size_t errors) {
  const char* thread_word = f.threads == 1 ? "thread" : "threads";
  const std::size_t jobs = probed.jobs.size();
  const double ips = Median(mode.rates);
  std::printf(
      "codec_bench: %zu files from %s (%zu not decodable, skipped), %d %s, %s only, "
      "median of %d after %zu warm-up decodes\n",
      jobs, corpus.root.c_str(), probed.skipped, f.threads, thread_word, mode.name, f.reps,
      std::min(f.warmup, jobs));
  std::printf("  %-8s %10.1f images/s  (%.1f per thread, %.3f ms/image per thread)\n", mode.name,
              ips, ips / f.threads, 1e3 * f.threads / ips);
  std::printf("  %-8s %10.1f images per CPU-second of a thread\n", "", Median(mode.cpu_rates));
  if (f.json) {
    std::printf(
        "{\"bench\":\"codec\",\"mode\":\"%s\",\"files\":%zu,\"skipped\":%zu,\"threads\":%d,"
        "\"reps\":%d,\"errors\":%zu,\"images_per_s\":%.1f}\n",
        mode.name, jobs, probed.skipped, f.threads, f.reps, errors, ips);
  }
  std::printf("images_per_s=%.1f mode=%s threads=%d files=%zu\n", ips, mode.name, f.threads, jobs);
}

// The modes' median rates (images/s, wall clock), all modes run.
struct Rates {
  double full, rrc, entropy, resize, rrc_t, indexed, coef;
  std::array<double, 7> cpu;  // the same modes' median images per CPU-second
};

Rates RatesOf(const std::vector<Mode>& modes) {
  Rates r{};
  double* wall[] = {&r.full, &r.rrc, &r.entropy, &r.resize, &r.rrc_t, &r.indexed, &r.coef};
  for (std::size_t m = 0; m < modes.size(); ++m) {
    *wall[m] = Median(modes[m].rates);
    r.cpu[m] = Median(modes[m].cpu_rates);
  }
  return r;
}

// The side-by-side table: each mode's rate against full and against each other.
void PrintRates(const Rates& r, const Corpus& corpus, const Probed& probed, const Flags& f) {
  const char* thread_word = f.threads == 1 ? "thread" : "threads";
  std::printf(
      "codec_bench: %zu files from %s (%zu not decodable, skipped), %d %s, "
      "median of %d, output %dx%d, decode scaling %s%s\n",
      probed.jobs.size(), corpus.root.c_str(), probed.skipped, f.threads, thread_word, f.reps,
      f.size, f.size, f.decode_scaling.c_str(), f.fast_dct ? ", fast IDCT" : "");
  std::printf("  %-34s %10.0f images/s  (reference)\n", "full decode (tjDecompress2 RGB)", r.full);
  std::printf("  %-34s %10.0f images/s  %.2fx full\n", "crop-before-decode + resize (rrc)", r.rrc,
              r.rrc / r.full);
  std::printf("  %-34s %10.0f images/s  = %.0f%% of full-decode time\n",
              "entropy decode only (Huffman)", r.entropy, 100.0 * r.full / r.entropy);
  std::printf("  %-34s %10.0f images/s  = %.1f us/image, %.0f%% of rrc time\n",
              "resize alone (rrc regions)", r.resize, 1e6 * f.threads / r.resize,
              100.0 * r.rrc / r.resize);
  std::printf("  %-34s %10.0f images/s  %.2fx full\n", "rrc on transcoded files (rrc_t)", r.rrc_t,
              r.rrc_t / r.full);
  std::printf("  %-34s %10.0f images/s  %.2fx full, %.2fx rrc, %.2fx rrc_t\n",
              "interval-skipping rrc (indexed)", r.indexed, r.indexed / r.full, r.indexed / r.rrc,
              r.indexed / r.rrc_t);
  std::printf("  %-34s %10.0f images/s  %.2fx full, %.2fx rrc, %.2fx indexed\n",
              "coefficient store rrc (coef)", r.coef, r.coef / r.full, r.coef / r.rrc,
              r.coef / r.indexed);
  // The same ratios on the threads' CPU time: what each mode costs, whatever else ran.
  const auto& cpu = r.cpu;
  std::printf(
      "  on CPU time (robust to other load): rrc %.2fx full, entropy %.0f%% of full, "
      "resize %.0f%% of rrc, rrc_t %.2fx full, indexed %.2fx full\n",
      cpu[1] / cpu[0], 100.0 * cpu[0] / cpu[2], 100.0 * cpu[1] / cpu[3], cpu[4] / cpu[0],
      cpu[5] / cpu[0]);
}

// The interleaved runs' ratios, medians and each round's.
void PrintInterleaved(const Interleaved& in) {
  std::printf(
      "  interleaved (full and rrc alternating every %zu files): rrc %.3fx full "
      "(median of %zu; each:",
      kInterleaveBlock, Median(in.rrc_over_full), in.rrc_over_full.size());
  for (double r : in.rrc_over_full) std::printf(" %.3f", r);
  std::printf(")\n");
  std::printf(
      "  interleaved (full, indexed, coef, ceiling, fast rotating every %zu files): "
      "coef %.3fx full, %.3fx indexed, %.3fx fast (medians of per-round ratios; each vs full:",
      kInterleaveBlock, Median(in.coef_over_full), Median(in.coef_over_indexed),
      Median(in.coef_over_fast));
  for (double r : in.coef_over_full) std::printf(" %.3f", r);
  std::printf(")\n");
  std::printf(
      "  same rounds, the ceiling (coef from unpacked coefficients): coef = %.3f of the "
      "ceiling's speed (each:",
      Median(in.coef_of_ceiling));
  for (double r : in.coef_of_ceiling) std::printf(" %.3f", r);
  std::printf("); fast = %.3f of it, %.3fx full; ceiling %.3fx full\n", Median(in.fast_of_ceiling),
              Median(in.fast_over_full), Median(in.ceiling_over_full));
}

void PrintRegions(const Regions& regions, std::size_t jobs) {
  std::printf("  decoded region: mean %.3f MP per image; DCT scale histogram:",
              regions.decoded_pixels / double(std::max<std::size_t>(1, jobs)) / 1e6);
  for (const auto& [n, count] : regions.scale_histogram) std::printf(" %d/8:%d", n, count);
  std::printf("\n");
}

// The median of `v`, 0 for none.
double MedianOr0(const std::vector<double>& v) { return v.empty() ? 0.0 : Median(v); }

// The side-by-side report's JSON line.
void PrintJson(const Rates& r, const Interleaved& in, const TranscodeStats& t, std::size_t jobs,
               const Flags& f) {
  std::printf(
      "{\"bench\":\"codec\",\"files\":%zu,\"size\":%d,\"decode_scaling\":\"%s\",\"threads\":%d,"
      "\"full_ips\":%.1f,\"rrc_ips\":%.1f,\"entropy_ips\":%.1f,\"resize_ips\":%.1f,"
      "\"rrc_over_full\":%.3f,\"entropy_share\":%.3f,\"rrc_t_ips\":%.1f,"
      "\"indexed_ips\":%.1f,\"indexed_over_full\":%.3f,\"interval_width\":%d,"
      "\"transcode_growth\":%.4f,\"index_share\":%.4f,\"cpu_rrc_over_full\":%.3f,"
      "\"interleaved_rrc_over_full\":%.3f,\"coef_ips\":%.1f,"
      "\"interleaved_coef_over_full\":%.3f,\"interleaved_coef_over_indexed\":%.3f,"
      "\"interleaved_coef_of_ceiling\":%.3f,\"interleaved_ceiling_over_full\":%.3f}\n",
      jobs, f.size, f.decode_scaling.c_str(), f.threads, r.full, r.rrc, r.entropy, r.resize,
      r.rrc / r.full, r.full / r.entropy, r.rrc_t, r.indexed, r.indexed / r.full, f.interval_width,
      double(t.transcoded_bytes) / double(std::max<std::size_t>(1, t.original_bytes)) - 1,
      double(t.index_bytes) / double(std::max<std::size_t>(1, t.original_bytes)),
      r.cpu[1] / r.cpu[0], MedianOr0(in.rrc_over_full), r.coef, MedianOr0(in.coef_over_full),
      MedianOr0(in.coef_over_indexed), MedianOr0(in.coef_of_ceiling),
      MedianOr0(in.ceiling_over_full));
}

// The bench itself; main() turns an exception that escapes it into one line.
int Run(int argc, char** argv) {
  CLI::App app{
      "codec_bench: full decode vs crop-before-decode + resize, side by side in one run\n"
      "(one thread unless --threads); --only full --threads N is the bare full-decode\n"
      "reference on N cores. Last line: images_per_s=... (rrc, or the --only mode)"};
  Flags f;
  AddFlags(app, f);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "codec_bench")) return *rc;
  if (!f.only.empty() && app.count("--reps") == 0) f.reps = 1;
  if (f.reps < 1) {
    std::fprintf(stderr, "codec_bench: --reps must be >= 1\n");
    return 2;
  }
  const std::optional<Corpus> corpus = OpenCorpus(f);
  if (!corpus) return 2;
  const codecs::JpegOptions options = JpegOptionsFor(f);
  codecs::JpegDecoder probe(options);
  Probed probed = ProbeFiles(corpus->files, probe);
  std::vector<Job>& jobs = probed.jobs;
  if (jobs.empty()) {
    std::fprintf(stderr, "codec_bench: none of the %zu files under %s is a decodable JPEG\n",
                 corpus->files.size(), corpus->root.c_str());
    return 2;
  }
  Regions regions;
  if (f.only.empty() || f.only == "resize") regions = FindRegions(jobs, probe, f.size);
  std::vector<codecs::TranscodeResult> transcoded(jobs.size());
  TranscodeStats transcode;
  if (f.only.empty() || f.only == "rrc_t" || f.only == "indexed") {
    transcode = TranscodeAll(jobs, transcoded, options, f);
    PrintTranscode(transcode, jobs.size(), f.interval_width);
  }
  std::vector<codecs::CoefficientPackResult> packed(jobs.size()), packed_fast(jobs.size());
  PackStores(jobs, packed, packed_fast, options, f);
  std::vector<std::unique_ptr<Worker>> workers;
  workers.reserve(f.threads);
  for (int t = 0; t < f.threads; ++t) {
    workers.push_back(std::make_unique<Worker>(options, probed.max_pixels, f.size));
  }
  std::vector<Mode> modes = MakeModes(f.size);
  if (!f.only.empty()) std::erase_if(modes, [&](const Mode& mode) { return mode.name != f.only; });
  Interleaved interleaved;
  try {
    interleaved = TimeModes(modes, jobs, workers, f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "codec_bench: %s\n", e.what());
    return 1;
  }
  std::size_t errors = 0;
  for (const auto& worker : workers) errors += worker->errors;
  if (errors > 0) {
    std::fprintf(stderr, "codec_bench: warning: %zu decode errors in the timed passes\n", errors);
  }
  if (!f.only.empty()) {
    PrintOnly(modes.front(), *corpus, probed, f, errors);
    return 0;
  }
  const Rates rates = RatesOf(modes);
  PrintRates(rates, *corpus, probed, f);
  if (!interleaved.rrc_over_full.empty()) {
    PrintInterleaved(interleaved);
    PrintStageSplits(jobs, *workers[0], f.size, UnpackBlock(jobs), kInterleaveBlock);
  }
  PrintRegions(regions, jobs.size());
  if (f.json) PrintJson(rates, interleaved, transcode, jobs.size(), f);
  std::printf("images_per_s=%.1f\n", rates.rrc);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "codec_bench: %s\n", e.what());
    return 1;
  }
}
