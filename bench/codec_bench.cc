// codec_bench: what crop-before-decode buys, measured side by side on the same files in
// one run, on one thread.
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
// and the ratios rrc/full and entropy/full explain each other.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "codecs/jpeg.h"
#include "codecs/resize.h"
#include "loader/augment.h"
#include "loader/sampler.h"

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
    std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    File file{std::move(path), std::vector<std::byte>(data.size())};
    std::memcpy(file.bytes.data(), data.data(), data.size());
    files.push_back(std::move(file));
  }
  return files;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"codec_bench: full decode vs crop-before-decode + resize, one thread, one run"};
  std::string data;
  std::size_t max_files = 2000;
  int size = 224;
  int reps = 3;
  std::string scales = "pow2";
  bool fast_dct = false;
  bool json = false;
  app.add_option("--data", data, "corpus root (its train/ split is used if present) or folder")
      ->required();
  app.add_option("--files", max_files, "use at most this many files (sorted by path)");
  app.add_option("--size", size, "RandomResizedCrop output side");
  app.add_option("--reps", reps, "round-robin repetitions; the median is reported");
  app.add_option("--scales", scales, "DCT scales: pow2 (1/2,1/4,1/8) or eighths (n/8)")
      ->check(CLI::IsMember({"pow2", "eighths"}));
  app.add_flag("--fast-dct", fast_dct, "libjpeg's fast integer IDCT");
  app.add_flag("--json", json, "also print one JSON line");
  CLI11_PARSE(app, argc, argv);

  std::filesystem::path root(data);
  if (!std::filesystem::is_directory(root)) {
    std::fprintf(stderr, "codec_bench: %s is not a directory\n", data.c_str());
    return 2;
  }
  if (std::filesystem::is_directory(root / "train")) root /= "train";
  const std::vector<File> files = LoadCorpus(root, max_files);
  if (files.empty()) {
    std::fprintf(stderr, "codec_bench: no .jpg/.jpeg files under %s\n", root.c_str());
    return 2;
  }

  codecs::JpegOptions options;
  options.scales = scales == "pow2" ? codecs::DctScales::kPowersOfTwo : codecs::DctScales::kEighths;
  options.fast_dct = fast_dct;
  options.corrupt_data = codecs::CorruptDataPolicy::kAccept;
  codecs::JpegDecoder decoder(options);
  codecs::Resizer resizer;

  // Probe once: sizes, the crops, and which files decode at all (PNGs named .JPEG are
  // skipped by every mode alike).
  struct Job {
    const File* file;
    codecs::ImageInfo info;
    codecs::CropPlan plan;
    codecs::Rect decoded;
  };
  std::vector<Job> jobs;
  std::size_t max_pixels = 0;
  std::size_t skipped = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    try {
      const codecs::ImageInfo info = decoder.ReadInfo(files[i].bytes);
      loader::SampleRng rng(0, 0, i);
      codecs::CropPlan plan{loader::RandomResizedCrop(info.width, info.height, {}, rng),
                            loader::DrawFlip(rng)};
      jobs.push_back({&files[i], info, plan, {}});
      max_pixels = std::max(max_pixels, std::size_t(info.width) * info.height);
    } catch (const codecs::DecodeError& e) {
      ++skipped;
    }
  }
  std::vector<std::uint8_t> full_out(max_pixels * 3);
  std::vector<std::uint8_t> crop_out(std::size_t(size) * size * 3);
  const codecs::PixelView crop_view = codecs::PixelView::Interleaved(crop_out.data(), size, size);
  std::map<int, int> scale_histogram;
  double decoded_pixels = 0;
  for (Job& job : jobs) {
    const codecs::DecodeReport report = decoder.DecodeInto(job.file->bytes, job.plan, crop_view);
    job.decoded = report.decoded;
    scale_histogram[report.scale_eighths]++;
    decoded_pixels += double(report.decoded.width) * report.decoded.height;
  }
  std::vector<std::uint8_t> region(max_pixels * 3, 128);

  auto run_full = [&] {
    for (const Job& job : jobs) {
      decoder.DecodeFull(job.file->bytes, codecs::PixelView::Interleaved(
                                              full_out.data(), job.info.width, job.info.height));
    }
  };
  auto run_rrc = [&] {
    for (const Job& job : jobs) decoder.DecodeInto(job.file->bytes, job.plan, crop_view);
  };
  auto run_entropy = [&] {
    for (const Job& job : jobs) decoder.EntropyDecode(job.file->bytes);
  };
  auto run_resize = [&] {
    for (const Job& job : jobs) {
      const codecs::Rect& d = job.decoded;
      const double s = double(d.width) / std::max(1, job.plan.crop.width);
      codecs::ConstPixelView src{region.data(), d.width, d.height, 3, std::ptrdiff_t{d.width} * 3};
      codecs::SourceBox box{0.25, 0.25, std::max(1.0, d.width - 0.25 * s),
                            std::max(1.0, d.height - 0.25 * s)};
      resizer.Resize(src, box, crop_view, job.plan.flip);
    }
  };
  struct Mode {
    const char* name;
    std::function<void()> run;
    std::vector<double> rates;
  };
  std::vector<Mode> modes = {{"full", run_full, {}},
                             {"rrc", run_rrc, {}},
                             {"entropy", run_entropy, {}},
                             {"resize", run_resize, {}}};
  for (int r = 0; r < reps; ++r) {
    for (Mode& mode : modes) {
      const auto start = Clock::now();
      mode.run();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      mode.rates.push_back(double(jobs.size()) / seconds);
    }
  }
  const double full = Median(modes[0].rates);
  const double rrc = Median(modes[1].rates);
  const double entropy = Median(modes[2].rates);
  const double resize = Median(modes[3].rates);

  std::printf(
      "codec_bench: %zu files from %s (%zu not decodable, skipped), 1 thread, "
      "median of %d, output %dx%d, scales %s%s\n",
      jobs.size(), root.c_str(), skipped, reps, size, size, scales.c_str(),
      fast_dct ? ", fast IDCT" : "");
  std::printf("  %-34s %10.0f images/s  (reference)\n", "full decode (tjDecompress2 RGB)", full);
  std::printf("  %-34s %10.0f images/s  %.2fx full\n", "crop-before-decode + resize (rrc)", rrc,
              rrc / full);
  std::printf("  %-34s %10.0f images/s  = %.0f%% of full-decode time\n",
              "entropy decode only (Huffman)", entropy, 100.0 * full / entropy);
  std::printf("  %-34s %10.0f images/s  = %.1f us/image, %.0f%% of rrc time\n",
              "resize alone (rrc regions)", resize, 1e6 / resize, 100.0 * rrc / resize);
  std::printf("  decoded region: mean %.3f MP per image; DCT scale histogram:",
              decoded_pixels / std::max<std::size_t>(1, jobs.size()) / 1e6);
  for (const auto& [n, count] : scale_histogram) std::printf(" %d/8:%d", n, count);
  std::printf("\n");
  if (json) {
    std::printf(
        "{\"bench\":\"codec\",\"files\":%zu,\"size\":%d,\"scales\":\"%s\",\"full_ips\":%.1f,"
        "\"rrc_ips\":%.1f,\"entropy_ips\":%.1f,\"resize_ips\":%.1f,\"rrc_over_full\":%.3f,"
        "\"entropy_share\":%.3f}\n",
        jobs.size(), size, scales.c_str(), full, rrc, entropy, resize, rrc / full, full / entropy);
  }
  std::printf("images_per_s=%.1f\n", rrc);
  return 0;
}
