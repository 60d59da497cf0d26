#include "tests/support/png_maker.h"

#include <spng.h>

#include <cassert>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "tests/support/jpeg_maker.h"

namespace tilefeed::testing {
namespace {

struct ContextDeleter {
  void operator()(spng_ctx* ctx) const noexcept { spng_ctx_free(ctx); }
};

void Check(int error, const char* what) {
  if (error != 0)
    throw std::runtime_error(std::string("spng encode: ") + what + ": " + spng_strerror(error));
}

std::uint32_t ReadBigEndian32(const std::byte* p) {
  return (std::to_integer<std::uint32_t>(p[0]) << 24) |
         (std::to_integer<std::uint32_t>(p[1]) << 16) |
         (std::to_integer<std::uint32_t>(p[2]) << 8) | std::to_integer<std::uint32_t>(p[3]);
}

// Packs one sample of `bits` bits at sample index i of a row (big-endian bit order).
void PutSample(std::vector<std::uint8_t>& row, std::size_t i, int bits, std::uint32_t v) {
  if (bits == 16) {
    // SPNG_FMT_PNG takes 16-bit samples in host byte order.
    const auto sample = static_cast<std::uint16_t>(v);
    std::memcpy(&row[2 * i], &sample, 2);
  } else if (bits == 8) {
    row[i] = static_cast<std::uint8_t>(v);
  } else {
    const std::size_t bit = i * bits;
    row[bit / 8] |= static_cast<std::uint8_t>(v << (8 - bits - bit % 8));
  }
}

struct Layout {
  std::uint8_t color_type;
  int bits;
  int samples;  // per pixel
};

Layout LayoutOf(PngKind kind) {
  switch (kind) {
    case PngKind::kGray1:
      return {SPNG_COLOR_TYPE_GRAYSCALE, 1, 1};
    case PngKind::kGray8:
      return {SPNG_COLOR_TYPE_GRAYSCALE, 8, 1};
    case PngKind::kGray16:
      return {SPNG_COLOR_TYPE_GRAYSCALE, 16, 1};
    case PngKind::kGrayAlpha8:
      return {SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, 8, 2};
    case PngKind::kRgb8:
      return {SPNG_COLOR_TYPE_TRUECOLOR, 8, 3};
    case PngKind::kRgba8:
      return {SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 8, 4};
    case PngKind::kRgb16:
      return {SPNG_COLOR_TYPE_TRUECOLOR, 16, 3};
    case PngKind::kPalette8:
      return {SPNG_COLOR_TYPE_INDEXED, 8, 1};
  }
  return {};
}

// A 6x6x6 colour cube; indices are picked by rounding each channel.
spng_plte CubePalette() {
  spng_plte plte{};
  plte.n_entries = 216;
  for (std::uint32_t i = 0; i < 216; ++i) {
    plte.entries[i] = {static_cast<std::uint8_t>(i / 36 * 51),
                       static_cast<std::uint8_t>(i / 6 % 6 * 51),
                       static_cast<std::uint8_t>(i % 6 * 51), 255};
  }
  return plte;
}

// Puts the photo's pixel (x, y), `rgb`, into `row` as `kind` stores it, and sets `rgb` to
// the colour a decoder gives back for it.
void PutPixel(std::vector<std::uint8_t>& row, PngKind kind, const Layout& layout, int x, int y,
              std::uint8_t (&rgb)[3]) {
  const std::uint8_t r = rgb[0], g = rgb[1], b = rgb[2];
  const auto gray = static_cast<std::uint8_t>((r * 299 + g * 587 + b * 114) / 1000);
  const std::size_t s = static_cast<std::size_t>(x) * layout.samples;
  // 16-bit samples get a low byte that must not matter.
  const std::uint32_t low = (x * 37u + y * 11u) & 0xFF;
  switch (kind) {
    case PngKind::kGray1:
      PutSample(row, s, 1, gray >= 128);
      rgb[0] = rgb[1] = rgb[2] = gray >= 128 ? 255 : 0;
      break;
    case PngKind::kGray8:
    case PngKind::kGrayAlpha8:
      PutSample(row, s, 8, gray);
      if (layout.samples == 2) PutSample(row, s + 1, 8, (x * 5 + y) & 0xFF);
      rgb[0] = rgb[1] = rgb[2] = gray;
      break;
    case PngKind::kGray16:
      PutSample(row, s, 16, (std::uint32_t{gray} << 8) | low);
      rgb[0] = rgb[1] = rgb[2] = gray;
      break;
    case PngKind::kRgb8:
    case PngKind::kRgba8:
      for (int c = 0; c < 3; ++c) PutSample(row, s + c, 8, rgb[c]);
      if (layout.samples == 4) PutSample(row, s + 3, 8, (x + 3 * y) & 0xFF);
      break;
    case PngKind::kRgb16:
      for (int c = 0; c < 3; ++c) PutSample(row, s + c, 16, (std::uint32_t{rgb[c]} << 8) | low);
      break;
    case PngKind::kPalette8: {
      const int q[3] = {(r + 25) / 51, (g + 25) / 51, (b + 25) / 51};
      PutSample(row, s, 8, static_cast<std::uint32_t>(q[0] * 36 + q[1] * 6 + q[2]));
      for (int c = 0; c < 3; ++c) rgb[c] = static_cast<std::uint8_t>(q[c] * 51);
      break;
    }
  }
}

// Encodes `image` (rows of `kind`'s samples, unfiltered) as a PNG with libspng.
std::vector<std::byte> EncodePng(PngKind kind, int width, int height, bool interlaced,
                                 const std::vector<std::uint8_t>& image) {
  const Layout layout = LayoutOf(kind);
  std::unique_ptr<spng_ctx, ContextDeleter> ctx(spng_ctx_new(SPNG_CTX_ENCODER));
  if (!ctx) throw std::bad_alloc();
  Check(spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1), "to buffer");
  spng_ihdr ihdr{
      static_cast<std::uint32_t>(width),
      static_cast<std::uint32_t>(height),
      static_cast<std::uint8_t>(layout.bits),
      layout.color_type,
      0,
      0,
      static_cast<std::uint8_t>(interlaced ? SPNG_INTERLACE_ADAM7 : SPNG_INTERLACE_NONE)};
  Check(spng_set_ihdr(ctx.get(), &ihdr), "ihdr");
  spng_plte plte{};
  if (kind == PngKind::kPalette8) {
    plte = CubePalette();
    Check(spng_set_plte(ctx.get(), &plte), "plte");
  }
  Check(
      spng_encode_image(ctx.get(), image.data(), image.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE),
      "image");
  std::size_t size = 0;
  int error = 0;
  void* buffer = spng_get_png_buffer(ctx.get(), &size, &error);
  Check(error, "buffer");
  const auto* bytes = static_cast<const std::byte*>(buffer);
  std::vector<std::byte> png(bytes, bytes + size);
  std::free(buffer);
  return png;
}

}  // namespace

const char* ToString(PngKind kind) {
  switch (kind) {
    case PngKind::kGray1:
      return "gray1";
    case PngKind::kGray8:
      return "gray8";
    case PngKind::kGray16:
      return "gray16";
    case PngKind::kGrayAlpha8:
      return "gray_alpha8";
    case PngKind::kRgb8:
      return "rgb8";
    case PngKind::kRgba8:
      return "rgba8";
    case PngKind::kRgb16:
      return "rgb16";
    case PngKind::kPalette8:
      return "palette8";
  }
  return "?";
}

TestPng MakeTestPng(PngKind kind, int width, int height, bool interlaced, std::uint64_t seed) {
  assert(width > 0 && height > 0);
  const Layout layout = LayoutOf(kind);
  const std::vector<std::uint8_t> photo = SyntheticPhoto(width, height, 3, seed);
  TestPng out;
  out.width = width;
  out.height = height;
  out.rgb.resize(photo.size());
  const std::size_t row_bytes =
      (static_cast<std::size_t>(width) * layout.samples * layout.bits + 7) / 8;
  std::vector<std::uint8_t> image;
  image.reserve(row_bytes * height);
  std::vector<std::uint8_t> row(row_bytes);
  for (int y = 0; y < height; ++y) {
    std::fill(row.begin(), row.end(), 0);
    for (int x = 0; x < width; ++x) {
      const std::size_t p = (static_cast<std::size_t>(y) * width + x) * 3;
      std::uint8_t rgb[3] = {photo[p], photo[p + 1], photo[p + 2]};
      PutPixel(row, kind, layout, x, y, rgb);
      std::memcpy(&out.rgb[p], rgb, 3);
    }
    image.insert(image.end(), row.begin(), row.end());
  }
  out.bytes = EncodePng(kind, width, height, interlaced, image);
  return out;
}

std::size_t FindPngChunk(const std::vector<std::byte>& png, std::string_view type) {
  std::size_t at = 8;
  while (at + 12 <= png.size()) {
    if (std::memcmp(&png[at + 4], type.data(), 4) == 0) return at;
    at += 12 + ReadBigEndian32(&png[at]);
  }
  return 0;
}

void FixPngChunkCrc(std::vector<std::byte>& png, std::size_t offset) {
  const std::uint32_t length = ReadBigEndian32(&png[offset]);
  const std::uint32_t crc = PngCrc32(&png[offset + 4], length + 4);
  for (int i = 0; i < 4; ++i) {
    png[offset + 8 + length + i] = std::byte((crc >> (24 - 8 * i)) & 0xFF);
  }
}

}  // namespace tilefeed::testing
