#include "tests/support/jpeg_maker.h"

// clang-format off
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE and size_t without including their headers.
#include <cstdlib>
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tilefeed::testing {
namespace {

// SplitMix64: tiny, fast and fully specified, so the same seed gives the same image with
// any standard library (std::uniform_*_distribution is implementation-defined).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(Next() >> 11) * 0x1.0p-53;
  }

 private:
  std::uint64_t state_;
};

struct Rgb {
  double r, g, b;
};

Rgb RandomColor(Rng& rng, double lo, double hi) {
  return {rng.Uniform(lo, hi), rng.Uniform(lo, hi), rng.Uniform(lo, hi)};
}

Rgb Mix(const Rgb& a, const Rgb& b, double t) {
  return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
}

double SmoothStep(double t) {
  t = std::clamp(t, 0.0, 1.0);
  return t * t * (3 - 2 * t);
}

// Smooth random texture: random values on a grid `cell` pixels apart, interpolated with
// a smoothstep so there are no visible grid lines (low-frequency, JPEG-friendly detail).
class ValueNoise {
 public:
  ValueNoise(int width, int height, double cell, Rng& rng)
      : cell_(cell),
        grid_w_(static_cast<int>(width / cell) + 2),
        grid_h_(static_cast<int>(height / cell) + 2),
        values_(static_cast<std::size_t>(grid_w_) * grid_h_) {
    for (double& v : values_) v = rng.Uniform(-1, 1);
  }
  double At(int x, int y) const {
    const double gx = x / cell_, gy = y / cell_;
    const int ix = static_cast<int>(gx), iy = static_cast<int>(gy);
    const double tx = SmoothStep(gx - ix), ty = SmoothStep(gy - iy);
    const double* row0 = &values_[static_cast<std::size_t>(iy) * grid_w_ + ix];
    const double* row1 = row0 + grid_w_;
    const double top = row0[0] + (row0[1] - row0[0]) * tx;
    const double bottom = row1[0] + (row1[1] - row1[0]) * tx;
    return top + (bottom - top) * ty;
  }

 private:
  double cell_;
  int grid_w_;
  int grid_h_;
  std::vector<double> values_;
};

// A soft elliptical blob of colour (a fruit, a face, a cloud).
struct Blob {
  double cx, cy, inv_rx2, inv_ry2, strength;
  Rgb color;
};

// A rotated rectangle with a slightly soft edge (a window, a book, a shadow): the hard
// edges that give JPEG its ringing, at realistic contrast.
struct Panel {
  double cx, cy, cos_a, sin_a, half_w, half_h, strength;
  Rgb color;
};

std::uint8_t ToByte(double v) {
  return static_cast<std::uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
}

void Append(std::vector<std::byte>& out, std::string_view bytes) {
  for (char c : bytes) out.push_back(static_cast<std::byte>(c));
}

void AppendBigEndian32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(std::byte((v >> shift) & 0xFF));
}

void AppendLittleEndian(std::vector<std::byte>& out, std::uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(std::byte((v >> (8 * i)) & 0xFF));
}

constexpr std::array<std::uint32_t, 256> MakeCrcTable() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}
constexpr std::array<std::uint32_t, 256> kCrcTable = MakeCrcTable();

// CRC-32 as PNG (and zlib) define it.
std::uint32_t Crc32(const std::byte* data, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c = kCrcTable[(c ^ std::to_integer<std::uint32_t>(data[i])) & 0xFF] ^ (c >> 8);
  }
  return c ^ 0xFFFFFFFFu;
}

void AppendPngChunk(std::vector<std::byte>& out, std::string_view type,
                    const std::vector<std::byte>& data) {
  AppendBigEndian32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t crc_start = out.size();
  Append(out, type);
  out.insert(out.end(), data.begin(), data.end());
  AppendBigEndian32(out, Crc32(out.data() + crc_start, out.size() - crc_start));
}

constexpr int kPanels = 16;

// The shapes of a synthetic photograph, drawn from `rng` in a fixed order so that a seed
// gives the same picture.
struct Scene {
  // A smooth four-corner gradient is the "sky and ground" of the picture.
  Rgb corner[4];
  // A gentle wave adds low-frequency variation that is not a plain ramp. It is separable,
  // so it costs two table lookups per pixel.
  std::vector<double> wave_x, wave_y;
  Blob blobs[4];
  // Two large panels and a clutter of small ones: real photographs are full of edges.
  Panel panels[kPanels];
};

Scene DrawScene(int width, int height, Rng& rng) {
  const double scale = std::max(width, height);
  Scene scene{{RandomColor(rng, 40, 215), RandomColor(rng, 40, 215), RandomColor(rng, 40, 215),
               RandomColor(rng, 40, 215)},
              {},
              {},
              {},
              {}};
  const double fx = rng.Uniform(0.5, 2.0) * 2 * std::numbers::pi / scale;
  const double fy = rng.Uniform(0.5, 2.0) * 2 * std::numbers::pi / scale;
  const double px = rng.Uniform(0, 2 * std::numbers::pi), py = rng.Uniform(0, 2 * std::numbers::pi);
  scene.wave_x.resize(static_cast<std::size_t>(width));
  scene.wave_y.resize(static_cast<std::size_t>(height));
  for (int x = 0; x < width; ++x) scene.wave_x[x] = 12 * std::sin(fx * x + px);
  for (int y = 0; y < height; ++y) scene.wave_y[y] = 12 * std::sin(fy * y + py);
  for (Blob& b : scene.blobs) {
    const double rx = rng.Uniform(0.08, 0.3) * scale, ry = rng.Uniform(0.08, 0.3) * scale;
    b = {rng.Uniform(0, width), rng.Uniform(0, height), 1 / (rx * rx),
         1 / (ry * ry),         rng.Uniform(0.5, 0.9),  RandomColor(rng, 20, 235)};
  }
  for (int i = 0; i < kPanels; ++i) {
    const double angle = rng.Uniform(0, std::numbers::pi);
    const double size = i < 2 ? rng.Uniform(0.05, 0.25) : rng.Uniform(0.01, 0.06);
    scene.panels[i] = {rng.Uniform(0, width),
                       rng.Uniform(0, height),
                       std::cos(angle),
                       std::sin(angle),
                       size * scale * rng.Uniform(0.5, 1.5),
                       size * scale * rng.Uniform(0.5, 1.5),
                       rng.Uniform(0.4, 0.8),
                       RandomColor(rng, 20, 235)};
  }
  return scene;
}

// The scene's blobs and panels laid over `c`, the gradient's colour at (x, y).
Rgb Shade(const Scene& scene, Rgb c, int x, int y) {
  for (const Blob& b : scene.blobs) {
    const double dx = x - b.cx, dy = y - b.cy;
    const double t = dx * dx * b.inv_rx2 + dy * dy * b.inv_ry2;
    if (t < 1) c = Mix(c, b.color, b.strength * (1 - t) * (1 - t));
  }
  for (const Panel& p : scene.panels) {
    const double dx = x - p.cx, dy = y - p.cy;
    const double along = std::abs(dx * p.cos_a + dy * p.sin_a) - p.half_w;
    const double across = std::abs(-dx * p.sin_a + dy * p.cos_a) - p.half_h;
    // Signed distance to the rectangle's outline (inside < 0); a 1.5 px soft edge.
    const double d = std::max(along, across);
    const double inside = SmoothStep(0.5 - d / 1.5);
    if (inside > 0) c = Mix(c, p.color, p.strength * inside);
  }
  return c;
}

// Texture at three scales (8, 3 and 1.5 px) and a trace of per-pixel grain: about 1.7
// bits per pixel at quality 90 (photographs: 2-4), yet a 1/2 DCT-scaled decode still
// matches a box-filtered full decode at ~49 dB, where white noise would give neither.
struct Texture {
  ValueNoise coarse, fine, finest;
  std::uint64_t seed;
  double Noise(int x, int y) const {
    return 5 * coarse.At(x, y) + 6 * fine.At(x, y) + 8 * finest.At(x, y);
  }
  // In [-1, 1].
  double Grain(int x, int y) const {
    const std::uint64_t h = (static_cast<std::uint64_t>(y) << 32 | static_cast<std::uint32_t>(x)) *
                                0x9E3779B97F4A7C15ull ^
                            seed;
    return static_cast<double>((h >> 40) & 0xFF) / 255.0 * 2 - 1;
  }
};

// Writes one pixel of `channels` (1: grey, 3: RGB, 4: Adobe CMYK) at `out`; returns the
// next pixel's place.
std::uint8_t* StorePixel(std::uint8_t* out, int channels, double r, double g, double b) {
  switch (channels) {
    case 1:
      *out++ = ToByte(0.299 * r + 0.587 * g + 0.114 * b);
      break;
    case 3:
      *out++ = ToByte(r);
      *out++ = ToByte(g);
      *out++ = ToByte(b);
      break;
    default: {
      // Adobe's inverted CMYK: K' = max(R, G, B) and C' = R * 255 / K' (etc.), so a
      // reader computing R = C' * K' / 255 recovers the colour.
      const std::uint8_t r8 = ToByte(r), g8 = ToByte(g), b8 = ToByte(b);
      const std::uint8_t k = std::max({r8, g8, b8});
      const auto ink = [k](std::uint8_t value) {
        return k == 0 ? std::uint8_t{255} : ToByte(value * 255.0 / k);
      };
      *out++ = ink(r8);
      *out++ = ink(g8);
      *out++ = ink(b8);
      *out++ = k;
    }
  }
  return out;
}

}  // namespace

std::vector<std::uint8_t> SyntheticPhoto(int width, int height, int channels, std::uint64_t seed) {
  assert(width > 0 && height > 0);
  assert(channels == 1 || channels == 3 || channels == 4);
  Rng rng(seed * 0x2545F4914F6CDD1Dull + 0x1234567ull);
  const Scene scene = DrawScene(width, height, rng);
  const Texture texture{ValueNoise(width, height, 8.0, rng), ValueNoise(width, height, 3.0, rng),
                        ValueNoise(width, height, 1.5, rng), seed};
  const double tint_r = rng.Uniform(0.6, 1.4), tint_b = rng.Uniform(0.6, 1.4);

  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width) * height * channels);
  std::uint8_t* out = pixels.data();
  for (int y = 0; y < height; ++y) {
    const double v = height > 1 ? static_cast<double>(y) / (height - 1) : 0.5;
    const Rgb left = Mix(scene.corner[0], scene.corner[2], v);
    const Rgb right = Mix(scene.corner[1], scene.corner[3], v);
    for (int x = 0; x < width; ++x) {
      const double u = width > 1 ? static_cast<double>(x) / (width - 1) : 0.5;
      const Rgb c = Shade(scene, Mix(left, right, u), x, y);
      const double common =
          scene.wave_x[x] + scene.wave_y[y] + texture.Noise(x, y) + texture.Grain(x, y);
      out = StorePixel(out, channels, c.r + common * tint_r, c.g + common, c.b + common * tint_b);
    }
  }
  return pixels;
}

std::vector<std::byte> MakeJpeg(int width, int height, const codecs::EncodeOptions& options,
                                std::uint64_t seed, int channels) {
  const std::vector<std::uint8_t> pixels = SyntheticPhoto(width, height, channels, seed);
  return codecs::EncodeJpeg(codecs::ConstPixelView{pixels.data(), width, height, channels,
                                                   std::ptrdiff_t{width} * channels},
                            options);
}

namespace {

// libjpeg's fatal errors longjmp back to the guarded function that called setjmp; the
// guarded functions hold only trivially destructible locals.
struct TestJpegErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void TestJpegErrorExit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<TestJpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void TestJpegSilence(j_common_ptr) {}

struct SampledJob {
  const std::uint8_t* rgb;
  int width, height, h_samp, v_samp, quality;
  unsigned char* out;  // malloc'd by jpeg_mem_dest
  unsigned long size;
};

bool GuardedEncodeSampled(jpeg_compress_struct* cinfo, TestJpegErrors* errors, SampledJob* job) {
  if (setjmp(errors->jump)) return false;
  jpeg_mem_dest(cinfo, &job->out, &job->size);
  cinfo->image_width = static_cast<JDIMENSION>(job->width);
  cinfo->image_height = static_cast<JDIMENSION>(job->height);
  cinfo->input_components = 3;
  cinfo->in_color_space = JCS_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, job->quality, TRUE);
  cinfo->comp_info[0].h_samp_factor = job->h_samp;
  cinfo->comp_info[0].v_samp_factor = job->v_samp;
  for (int c = 1; c < 3; ++c) {
    cinfo->comp_info[c].h_samp_factor = 1;
    cinfo->comp_info[c].v_samp_factor = 1;
  }
  jpeg_start_compress(cinfo, TRUE);
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = const_cast<std::uint8_t*>(job->rgb) +
                   std::size_t{cinfo->next_scanline} * static_cast<std::size_t>(job->width) * 3;
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

struct ScaledJob {
  const unsigned char* data;
  unsigned long size;
  int n;
  std::uint8_t* pixels;  // null: start only (sets the output size)
};

bool GuardedStartScaled(jpeg_decompress_struct* cinfo, TestJpegErrors* errors, ScaledJob* job) {
  if (setjmp(errors->jump)) return false;
  jpeg_mem_src(cinfo, job->data, job->size);
  jpeg_read_header(cinfo, TRUE);
  cinfo->out_color_space = JCS_RGB;
  cinfo->scale_num = static_cast<unsigned>(job->n);
  cinfo->scale_denom = 8;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  jpeg_start_decompress(cinfo);
  return true;
}

bool GuardedReadScaled(jpeg_decompress_struct* cinfo, TestJpegErrors* errors, ScaledJob* job) {
  if (setjmp(errors->jump)) return false;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = job->pixels + std::size_t{cinfo->output_scanline} * cinfo->output_width * 3;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

TestJpegErrors* InstallTestErrors(TestJpegErrors& errors) {
  jpeg_std_error(&errors.pub);
  errors.pub.error_exit = TestJpegErrorExit;
  errors.pub.output_message = TestJpegSilence;
  errors.message[0] = '\0';
  return &errors;
}

}  // namespace

std::vector<std::byte> MakeJpegSampled(int width, int height, int h_samp, int v_samp,
                                       std::uint64_t seed, int quality) {
  const std::vector<std::uint8_t> rgb = SyntheticPhoto(width, height, 3, seed);
  jpeg_compress_struct cinfo{};
  TestJpegErrors errors{};
  cinfo.err = &InstallTestErrors(errors)->pub;
  jpeg_create_compress(&cinfo);
  SampledJob job{rgb.data(), width, height, h_samp, v_samp, quality, nullptr, 0};
  const bool ok = GuardedEncodeSampled(&cinfo, &errors, &job);
  jpeg_destroy_compress(&cinfo);
  std::vector<std::byte> jpeg;
  if (ok) {
    const auto* begin = reinterpret_cast<const std::byte*>(job.out);
    jpeg.assign(begin, begin + job.size);
  }
  std::free(job.out);
  if (!ok) throw std::runtime_error(std::string("MakeJpegSampled: ") + errors.message);
  return jpeg;
}

ScaledImage DecodeScaledWithLibjpeg(std::span<const std::byte> jpeg, int n) {
  jpeg_decompress_struct cinfo{};
  TestJpegErrors errors{};
  cinfo.err = &InstallTestErrors(errors)->pub;
  jpeg_create_decompress(&cinfo);
  ScaledJob job{reinterpret_cast<const unsigned char*>(jpeg.data()),
                static_cast<unsigned long>(jpeg.size()), n, nullptr};
  ScaledImage image;
  bool ok = GuardedStartScaled(&cinfo, &errors, &job);
  if (ok) {
    image.width = static_cast<int>(cinfo.output_width);
    image.height = static_cast<int>(cinfo.output_height);
    image.pixels.resize(std::size_t(image.width) * image.height * 3);
    job.pixels = image.pixels.data();
    ok = GuardedReadScaled(&cinfo, &errors, &job);
  }
  jpeg_destroy_decompress(&cinfo);
  if (!ok) throw std::runtime_error(std::string("DecodeScaledWithLibjpeg: ") + errors.message);
  return image;
}

std::uint32_t PngCrc32(const std::byte* data, std::size_t n) { return Crc32(data, n); }

std::vector<std::byte> MakePngBytes(int width, int height) {
  assert(width > 0 && height > 0);
  std::vector<std::byte> png;
  Append(png, "\x89PNG\r\n\x1a\n");

  std::vector<std::byte> ihdr;
  AppendBigEndian32(ihdr, static_cast<std::uint32_t>(width));
  AppendBigEndian32(ihdr, static_cast<std::uint32_t>(height));
  // Bit depth 8, colour type 2 (RGB), deflate, adaptive filtering, no interlace.
  for (int v : {8, 2, 0, 0, 0}) ihdr.push_back(std::byte(v));
  AppendPngChunk(png, "IHDR", ihdr);

  // Scanlines: filter byte 0 (None), then RGB.
  std::vector<std::byte> raw;
  for (int y = 0; y < height; ++y) {
    raw.push_back(std::byte{0});
    for (int x = 0; x < width; ++x) {
      raw.push_back(std::byte((x * 255 / std::max(1, width - 1)) & 0xFF));
      raw.push_back(std::byte((y * 255 / std::max(1, height - 1)) & 0xFF));
      raw.push_back(std::byte{128});
    }
  }
  // A zlib stream of deflate "stored" blocks: no compressor needed, still a valid PNG.
  std::vector<std::byte> idat = {std::byte{0x78}, std::byte{0x01}};
  std::size_t pos = 0;
  do {
    const std::size_t len = std::min<std::size_t>(65535, raw.size() - pos);
    const bool last = pos + len == raw.size();
    idat.push_back(std::byte{last ? std::uint8_t{1} : std::uint8_t{0}});
    AppendLittleEndian(idat, static_cast<std::uint32_t>(len), 2);
    AppendLittleEndian(idat, static_cast<std::uint32_t>(~len & 0xFFFF), 2);
    idat.insert(idat.end(), raw.begin() + static_cast<std::ptrdiff_t>(pos),
                raw.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos += len;
  } while (pos < raw.size());
  std::uint32_t s1 = 1, s2 = 0;  // Adler-32 of the uncompressed data
  for (std::byte b : raw) {
    s1 = (s1 + std::to_integer<std::uint32_t>(b)) % 65521;
    s2 = (s2 + s1) % 65521;
  }
  AppendBigEndian32(idat, (s2 << 16) | s1);
  AppendPngChunk(png, "IDAT", idat);
  AppendPngChunk(png, "IEND", {});
  return png;
}

std::vector<std::byte> MakeGifBytes() {
  // The classic smallest GIF89a: 1x1, a two-colour global palette, one LZW-coded pixel.
  static constexpr std::uint8_t kGif[] = {'G',  'I',  'F',  '8',  '9',  'a',  0x01, 0x00, 0x01,
                                          0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF,
                                          0xFF, 0x2C, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01,
                                          0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3B};
  std::vector<std::byte> gif(sizeof(kGif));
  std::memcpy(gif.data(), kGif, sizeof(kGif));
  return gif;
}

std::vector<std::byte> MakeBmpBytes() {
  constexpr int kWidth = 2, kHeight = 2;
  constexpr int kRowBytes = (kWidth * 3 + 3) / 4 * 4;  // rows pad to 4 bytes
  constexpr int kPixelOffset = 14 + 40;
  constexpr int kFileSize = kPixelOffset + kRowBytes * kHeight;
  std::vector<std::byte> bmp;
  Append(bmp, "BM");
  AppendLittleEndian(bmp, kFileSize, 4);
  AppendLittleEndian(bmp, 0, 4);  // reserved
  AppendLittleEndian(bmp, kPixelOffset, 4);
  AppendLittleEndian(bmp, 40, 4);  // BITMAPINFOHEADER
  AppendLittleEndian(bmp, kWidth, 4);
  AppendLittleEndian(bmp, kHeight, 4);  // positive: bottom-up rows
  AppendLittleEndian(bmp, 1, 2);        // planes
  AppendLittleEndian(bmp, 24, 2);       // bits per pixel
  AppendLittleEndian(bmp, 0, 4);        // BI_RGB
  AppendLittleEndian(bmp, kRowBytes * kHeight, 4);
  AppendLittleEndian(bmp, 2835, 4);  // 72 dpi
  AppendLittleEndian(bmp, 2835, 4);
  AppendLittleEndian(bmp, 0, 4);
  AppendLittleEndian(bmp, 0, 4);
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kWidth; ++x) {
      // BGR: blue, green, red, white.
      const std::uint32_t bgr[4] = {0x0000FF, 0x00FF00, 0xFF0000, 0xFFFFFF};
      AppendLittleEndian(bmp, bgr[y * kWidth + x], 3);
    }
    for (int pad = kWidth * 3; pad < kRowBytes; ++pad) bmp.push_back(std::byte{0});
  }
  return bmp;
}

std::vector<std::byte> MakeTextBytes() {
  std::vector<std::byte> text;
  Append(text, "This is not an image.\nIt is a README left in the dataset folder.\n");
  return text;
}

double Psnr(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  assert(n > 0);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sum += d * d;
  }
  if (sum == 0) return std::numeric_limits<double>::infinity();
  const double mse = sum / static_cast<double>(n);
  return 10 * std::log10(255.0 * 255.0 / mse);
}

std::vector<NamedEncoding> CommonEncodings(int quality, bool arithmetic) {
  using codecs::ColorSpace;
  using codecs::EncodeOptions;
  using codecs::Subsampling;
  std::vector<NamedEncoding> all;
  auto add = [&](const char* name, auto&& edit, int channels = 3) {
    EncodeOptions o;
    o.quality = quality;
    edit(o);
    all.push_back({name, o, channels});
  };
  add("420", [](EncodeOptions& o) { o.subsampling = Subsampling::k420; });
  add("422", [](EncodeOptions& o) { o.subsampling = Subsampling::k422; });
  add("444", [](EncodeOptions& o) { o.subsampling = Subsampling::k444; });
  add("440", [](EncodeOptions& o) { o.subsampling = Subsampling::k440; });
  add("411", [](EncodeOptions& o) { o.subsampling = Subsampling::k411; });
  add(
      "gray", [](EncodeOptions&) {}, 1);
  add(
      "cmyk", [](EncodeOptions& o) { o.jpeg_color_space = ColorSpace::kCmyk; }, 4);
  add(
      "ycck", [](EncodeOptions& o) { o.jpeg_color_space = ColorSpace::kYcck; }, 4);
  add("rgb", [](EncodeOptions& o) { o.jpeg_color_space = ColorSpace::kRgb; });
  add("progressive420", [](EncodeOptions& o) { o.progressive = true; });
  add("progressive444", [](EncodeOptions& o) {
    o.progressive = true;
    o.subsampling = Subsampling::k444;
  });
  add("restart_mcus", [](EncodeOptions& o) { o.restart_interval = 5; });
  add("restart_rows", [](EncodeOptions& o) { o.restart_rows = 1; });
  add("optimized", [](EncodeOptions& o) { o.optimize_huffman = true; });
  if (arithmetic) add("arithmetic", [](EncodeOptions& o) { o.arithmetic = true; });
  return all;
}

}  // namespace tilefeed::testing
