// tilefeed-make-demo: writes a small, learnable ImageFolder dataset of JPEGs
//   OUT/train/<class>/<NNNNN>.JPEG, OUT/val/<class>/<NNNNN>.JPEG
// for the README's first steps, the examples and end-to-end tests. Output is a pure
// function of the arguments: the same seed gives byte-identical files on any machine
// with the same libjpeg-turbo.
//
// Each class is one visual concept (a shape in a dominant hue) drawn at a random position,
// size and rotation over a random gradient background with clutter and noise, then
// JPEG-encoded with a randomly chosen but realistic set of options: a small classifier
// learns the classes in a few epochs, and a loader meets varied sizes, aspect ratios,
// subsamplings and progressive files.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "tilefeed/codecs/jpeg_encoder.h"
#include "tools/cli_checks.h"

namespace {

namespace codecs = tilefeed::codecs;
namespace fs = std::filesystem;

constexpr double kPi = std::numbers::pi;

// SplitMix64: fully specified, so a seed means the same images with any standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(Next() >> 11) * 0x1.0p-53;
  }
  int UniformInt(int lo, int hi) {  // inclusive
    return lo + static_cast<int>(Next() % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  std::uint64_t state_;
};

struct Hue {
  const char* name;
  double degrees;
};
// Eight hues far enough apart that a ±10 degree jitter keeps them distinct.
constexpr std::array<Hue, 8> kHues = {{{"red", 0},
                                       {"orange", 30},
                                       {"yellow", 58},
                                       {"green", 120},
                                       {"cyan", 185},
                                       {"blue", 225},
                                       {"purple", 275},
                                       {"magenta", 310}}};
constexpr std::array<const char*, 8> kShapes = {"circle", "square", "triangle", "cross",
                                                "ring",   "star",   "crescent", "bar"};

struct Vec2 {
  double x, y;
};

// Plain sqrt: std::hypot guards against overflow we cannot have and is several times slower.
double Length(Vec2 p) { return std::sqrt(p.x * p.x + p.y * p.y); }

// Signed distance to a box of half-size (bx, by): negative inside.
double BoxDistance(Vec2 p, double bx, double by) {
  const double dx = std::abs(p.x) - bx, dy = std::abs(p.y) - by;
  return Length({std::max(dx, 0.0), std::max(dy, 0.0)}) + std::min(std::max(dx, dy), 0.0);
}

// Signed distance to an equilateral triangle with half-side r (Inigo Quilez's formula).
double TriangleDistance(Vec2 p, double r) {
  const double k = std::sqrt(3.0);
  p.x = std::abs(p.x) - r;
  p.y = p.y + r / k;
  if (p.x + k * p.y > 0) p = {(p.x - k * p.y) / 2, (-k * p.x - p.y) / 2};
  p.x -= std::clamp(p.x, -2 * r, 0.0);
  return -Length(p) * (p.y < 0 ? -1 : 1);
}

// Signed distance (in units of the shape's radius) from p, in the shape's own rotated,
// normalized frame, to shape `shape`'s outline.
double ShapeDistance(int shape, Vec2 p) {
  switch (shape) {
    case 0:  // circle
      return Length(p) - 0.9;
    case 1:  // square
      return BoxDistance(p, 0.72, 0.72);
    case 2:  // triangle
      return TriangleDistance({p.x, p.y + 0.15}, 0.95);
    case 3:  // cross
      return std::min(BoxDistance(p, 0.92, 0.28), BoxDistance(p, 0.28, 0.92));
    case 4:  // ring
      return std::abs(Length(p) - 0.7) - 0.2;
    case 5: {  // five-pointed star; a radial distance, close enough for a soft edge
      const double t = std::atan2(p.y, p.x) * 5 / (2 * kPi) + 10.25;
      const double f = std::abs(2 * (t - std::floor(t)) - 1);  // 1 at the points
      return (Length(p) - (0.42 + 0.53 * f)) * 0.7;
    }
    case 6:  // crescent
      return std::max(Length(p) - 0.9, -(Length({p.x - 0.45, p.y}) - 0.72));
    default:  // bar
      return BoxDistance(p, 0.95, 0.3);
  }
}

struct Rgb {
  double r, g, b;
};

Rgb FromHsv(double hue_degrees, double s, double v) {
  const double h = std::fmod(std::fmod(hue_degrees, 360.0) + 360.0, 360.0) / 60.0;
  const double c = v * s;
  const double x = c * (1 - std::abs(std::fmod(h, 2.0) - 1));
  const double m = v - c;
  // The six 60-degree sectors of the hue circle.
  const Rgb sectors[] = {{c, x, 0}, {x, c, 0}, {0, c, x}, {0, x, c}, {x, 0, c}, {c, 0, x}};
  const Rgb rgb = sectors[std::min(static_cast<int>(h), 5)];
  return {(rgb.r + m) * 255, (rgb.g + m) * 255, (rgb.b + m) * 255};
}

Rgb Mix(const Rgb& a, const Rgb& b, double t) {
  return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
}

std::uint8_t ToByte(double v) {
  return static_cast<std::uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
}

// Hash-based per-pixel noise in [-1, 1]; no state, so rows can be drawn in any order.
double PixelNoise(std::uint64_t seed, int x, int y) {
  std::uint64_t h = seed ^ (static_cast<std::uint64_t>(y) << 32 | static_cast<std::uint32_t>(x));
  h = (h ^ (h >> 33)) * 0xFF51AFD7ED558CCDull;
  h = (h ^ (h >> 33)) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return static_cast<double>(h >> 11) * 0x1.0p-52 - 1;
}

// A soft, low-saturation blob: clutter that carries neither the class hue nor its shape.
struct Distractor {
  Vec2 center;
  double inv_r2;
  double strength;
  Rgb color;
};

codecs::EncodeOptions ChooseEncoding(Rng& rng) {
  codecs::EncodeOptions options;
  options.quality = rng.UniformInt(85, 95);
  options.optimize_huffman = rng.Uniform(0, 1) < 0.5;
  const double pick = rng.Uniform(0, 1);
  if (pick < 0.03) {
    // Rare, because gray removes the hue cue (the shape cue survives).
    options.jpeg_color_space = codecs::ColorSpace::kGrayscale;
  } else if (pick < 0.13) {
    options.progressive = true;
  } else if (pick < 0.28) {
    options.subsampling = codecs::Subsampling::k444;
  } else if (pick < 0.33) {
    options.subsampling = codecs::Subsampling::k422;
  }
  return options;
}

struct DemoClass {
  std::string name;  // folder name, e.g. "c00_red_circle"; sorted names = label order
  int shape = 0;     // index into the shape table
  double hue = 0;    // dominant hue in degrees
};

// How many distinct classes (shape x hue pairs) exist.
int MaxDemoClasses() { return static_cast<int>(kShapes.size() * kHues.size()); }

// The first `count` classes. Consecutive classes differ in both shape and hue, so a
// model cannot get far on either cue alone.
std::vector<DemoClass> DemoClasses(int count) {
  assert(count >= 1 && count <= MaxDemoClasses());
  std::vector<DemoClass> classes;
  const int n = static_cast<int>(kShapes.size());
  for (int i = 0; i < count; ++i) {
    // The first eight classes pair shape i with hue i; each later round shifts the hue by
    // 3 (coprime to 8), so all 64 pairs appear exactly once.
    const int shape = i % n;
    const int hue = (shape + 3 * (i / n)) % static_cast<int>(kHues.size());
    char name[64];
    std::snprintf(name, sizeof(name), "c%02d_%s_%s", i, kHues[hue].name, kShapes[shape]);
    classes.push_back({name, shape, kHues[hue].degrees});
  }
  return classes;
}

// Mixes the dataset seed with an image's coordinates into that image's seed.
std::uint64_t DemoImageSeed(std::uint64_t dataset_seed, int split, int class_index, int index) {
  Rng rng(dataset_seed);
  std::uint64_t h = rng.Next();
  for (const int v : {split, class_index, index}) {
    h = Rng(h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(v))).Next();
  }
  return h;
}

// The JPEG for one image of `demo_class`; `seed` picks everything that varies.
std::vector<std::byte> MakeDemoJpeg(const DemoClass& demo_class, std::uint64_t seed) {
  Rng rng(seed);
  // Sizes and aspect ratios vary like a web-scraped dataset's, within 96..320 px.
  const int width = rng.UniformInt(96, 320);
  const double aspect = std::exp(rng.Uniform(std::log(0.6), std::log(1.67)));
  const int height = std::clamp(static_cast<int>(std::lround(width / aspect)), 96, 320);
  const double min_side = std::min(width, height);

  // Background: a gradient between two muted colours of any hue, in a random direction.
  const Rgb bg0 = FromHsv(rng.Uniform(0, 360), rng.Uniform(0, 0.35), rng.Uniform(0.3, 0.9));
  const Rgb bg1 = FromHsv(rng.Uniform(0, 360), rng.Uniform(0, 0.35), rng.Uniform(0.3, 0.9));
  const double grad_angle = rng.Uniform(0, 2 * kPi);
  const Vec2 grad_dir = {std::cos(grad_angle), std::sin(grad_angle)};
  const double grad_extent = std::abs(grad_dir.x) * width + std::abs(grad_dir.y) * height;

  Distractor distractors[3];
  const int distractor_count = rng.UniformInt(0, 3);
  for (int i = 0; i < distractor_count; ++i) {
    const double r = rng.Uniform(0.1, 0.3) * min_side;
    distractors[i] = {{rng.Uniform(0, width), rng.Uniform(0, height)},
                      1 / (r * r),
                      rng.Uniform(0.3, 0.7),
                      FromHsv(rng.Uniform(0, 360), rng.Uniform(0, 0.2), rng.Uniform(0.2, 1))};
  }

  // The object: the class's shape in the class's hue, jittered.
  const double radius = rng.Uniform(0.22, 0.42) * min_side;
  const Vec2 center = {rng.Uniform(radius, width - radius), rng.Uniform(radius, height - radius)};
  const double angle = rng.Uniform(0, 2 * kPi);
  const double cos_a = std::cos(angle), sin_a = std::sin(angle);
  const double light_angle = rng.Uniform(0, 2 * kPi);
  const Vec2 light = {std::cos(light_angle), std::sin(light_angle)};
  const Rgb object = FromHsv(demo_class.hue + rng.Uniform(-10, 10), rng.Uniform(0.65, 1.0),
                             rng.Uniform(0.65, 1.0));
  const double noise_amplitude = rng.Uniform(2, 10);
  const std::uint64_t noise_seed = rng.Next();

  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width) * height * 3);
  std::uint8_t* out = pixels.data();
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double t = std::clamp(
          ((x - width / 2.0) * grad_dir.x + (y - height / 2.0) * grad_dir.y) / grad_extent + 0.5,
          0.0, 1.0);
      Rgb c = Mix(bg0, bg1, t);
      for (int i = 0; i < distractor_count; ++i) {
        const Distractor& d = distractors[i];
        const double dx = x - d.center.x, dy = y - d.center.y;
        const double q = (dx * dx + dy * dy) * d.inv_r2;
        if (q < 1) c = Mix(c, d.color, d.strength * (1 - q) * (1 - q));
      }
      const double dx = (x + 0.5 - center.x) / radius, dy = (y + 0.5 - center.y) / radius;
      const Vec2 local = {dx * cos_a + dy * sin_a, -dx * sin_a + dy * cos_a};
      // Coverage from the distance in pixels gives a one-pixel antialiased edge.
      const double distance_px = ShapeDistance(demo_class.shape, local) * radius;
      const double coverage = std::clamp(0.5 - distance_px, 0.0, 1.0);
      if (coverage > 0) {
        const double shade = 1 + 0.18 * (dx * light.x + dy * light.y);
        c = Mix(c, {object.r * shade, object.g * shade, object.b * shade}, coverage);
      }
      const double noise = noise_amplitude * PixelNoise(noise_seed, x, y);
      *out++ = ToByte(c.r + noise);
      *out++ = ToByte(c.g + noise);
      *out++ = ToByte(c.b + noise);
    }
  }
  const codecs::EncodeOptions options = ChooseEncoding(rng);
  return codecs::EncodeJpeg(
      codecs::ConstPixelView{pixels.data(), width, height, 3, std::ptrdiff_t{width} * 3}, options);
}

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

  const std::vector<DemoClass> classes = DemoClasses(class_count);
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
            const std::vector<std::byte> jpeg = MakeDemoJpeg(
                demo_class, DemoImageSeed(seed, job.split, job.class_index, job.index));
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
      ->check(tilefeed::tools::Between(1, MaxDemoClasses()));
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
