// PNG decoding over libspng (see codecs/png.h for why libspng).
//
// libspng reports every failure as a return code, so unlike jpeg.cc nothing here needs
// setjmp: each failing call throws a DecodeError on its own line. A libspng context
// reads one image and is then freed (contexts are single-use); the pixel memory, the
// row ring and the resizer's buffers belong to the decoder and are reused, so a warm
// decoder's only allocations per image are libspng's context and zlib state.

#include "codecs/png.h"

#include <spng.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "codecs/byte_order.h"
#include "codecs/crop_check.h"
#include "codecs/resize.h"
#include "codecs/row_stream.h"

namespace tilefeed::codecs {
namespace {

// Rows the decode may run ahead of the resize, as in jpeg.cc.
constexpr std::size_t kRingAhead = 16;
// An interlaced image's scratch larger than this is released after the decode, so that
// one big interlaced file does not pin its memory in every worker for the whole run.
constexpr std::size_t kKeptWholeImageBytes = std::size_t{16} << 20;

struct ContextDeleter {
  void operator()(spng_ctx* ctx) const noexcept { spng_ctx_free(ctx); }
};
using Context = std::unique_ptr<spng_ctx, ContextDeleter>;

DecodeErrorKind KindOf(int error) {
  switch (error) {
    case SPNG_IO_EOF:
    case SPNG_IO_ERROR:
      return DecodeErrorKind::kTruncated;
    case SPNG_ESIGNATURE:
      return DecodeErrorKind::kNotJpeg;
    case SPNG_EUSER_WIDTH:
    case SPNG_EUSER_HEIGHT:
    case SPNG_ECHUNK_LIMITS:
    case SPNG_EOVERFLOW:
      return DecodeErrorKind::kTooLarge;
    default:
      return DecodeErrorKind::kCorrupt;
  }
}

[[noreturn]] void Throw(int error, const char* stage) {
  const DecodeErrorKind kind = KindOf(error);
  std::string reason = kind == DecodeErrorKind::kNotJpeg ? "not a" : ToString(kind);
  reason += " PNG (";
  reason += stage;
  reason += "): ";
  reason += spng_strerror(error);
  throw DecodeError(kind, reason);
}

void Check(int error, const char* stage) {
  if (error != 0) Throw(error, stage);
}

// Feeds detail::StreamRows from a progressive libspng decode.
struct SpngRows {
  spng_ctx* ctx;
  std::size_t row_bytes;
  int error = 0;  // out: the libspng error that ended the rows early
};

// One row per call: libspng decodes (and de-interlaces) row by row.
std::size_t ReadPngRow(void* context, std::uint8_t* const* row, std::size_t /*max_rows*/) {
  auto* rows = static_cast<SpngRows*>(context);
  const int error = spng_decode_row(rows->ctx, row[0], rows->row_bytes);
  if (error == 0 || error == SPNG_EOI) return 1;
  rows->error = error;
  return 0;
}

std::string SizeText(int width, int height) {
  return std::to_string(width) + "x" + std::to_string(height);
}

constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

// CRC-32 as PNG defines it (ISO 3309), by zlib: about ten times a byte-wise table's speed,
// so that checking every chunk costs little beside inflating them.
std::uint32_t Crc32(std::span<const std::byte> bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!bytes.empty()) {
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes.size(), 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), n);
    bytes = bytes.subspan(n);
  }
  return static_cast<std::uint32_t>(crc);
}

// Checks the CRC of every whole chunk from the signature through IEND. A crop decode stops
// after the crop's last row, so libspng never reads the CRCs of the chunks after it (the
// rest of the IDAT it stopped in, IEND); a damaged file must fail wherever the damage is.
// A chunk that runs past the end of the bytes ends the walk: the decode reports
// truncation if it needs that chunk's data (a crop above it decodes, as a JPEG's does).
void CheckChunkCrcs(std::span<const std::byte> png) {
  std::size_t at = sizeof(kSignature);
  while (png.size() - at >= 12) {
    const std::uint64_t length = detail::Be32(png.data() + at);
    if (length > png.size() - at - 12) return;
    const auto chunk = png.subspan(at + 4, 4 + static_cast<std::size_t>(length));
    const std::uint32_t stored = detail::Be32(chunk.data() + chunk.size());
    const std::uint32_t computed = Crc32(chunk);
    if (stored != computed) {
      char text[96];
      std::snprintf(text, sizeof(text), " at byte %zu fails its CRC (stored %08x, computed %08x)",
                    at, stored, computed);
      throw DecodeError(DecodeErrorKind::kCorrupt,
                        "corrupt PNG: chunk " +
                            std::string(reinterpret_cast<const char*>(chunk.data()), 4) + text);
    }
    if (std::memcmp(chunk.data(), "IEND", 4) == 0) return;
    at += 12 + static_cast<std::size_t>(length);
  }
}

}  // namespace

bool IsPng(std::span<const std::byte> bytes) {
  return bytes.size() >= sizeof(kSignature) &&
         std::memcmp(bytes.data(), kSignature, sizeof(kSignature)) == 0;
}

bool HasDamagedPngSignature(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(kSignature) || IsPng(bytes)) return false;
  int same = 0;
  for (std::size_t i = 0; i < sizeof(kSignature); ++i) {
    same += static_cast<unsigned char>(bytes[i]) == kSignature[i] ? 1 : 0;
  }
  static constexpr unsigned char kTextMode[7] = {0x89, 'P', 'N', 'G', '\n', 0x1A, '\n'};
  return same >= 5 || std::memcmp(bytes.data(), kTextMode, sizeof(kTextMode)) == 0;
}

struct PngDecoder::Impl {
  PngOptions options;
  detail::RowRing ring;  // rows of a row-by-row decode; an interlaced image, whole
  Resizer resizer;

  // Makes a context over `png` and reads its header; enforces the limits.
  Context Open(std::span<const std::byte> png, ImageInfo& info) const {
    if (HasDamagedPngSignature(png)) {
      // SniffNonJpeg says nothing (nullptr) for bytes that open like a JPEG, as a signature
      // whose first two bytes are damaged into FF D8 does.
      const char* what = SniffNonJpeg(png);
      throw DecodeError(
          DecodeErrorKind::kCorrupt,
          std::string("corrupt PNG: ") + (what != nullptr ? what : "PNG with a damaged signature"));
    }
    if (!IsPng(png)) {
      const char* what = SniffNonJpeg(png);
      throw DecodeError(DecodeErrorKind::kNotJpeg,
                        std::string("not a PNG: ") + (what != nullptr ? what : "JPEG image"));
    }
    Context ctx(spng_ctx_new(0));
    if (!ctx) throw std::bad_alloc();
    // libspng's own limits stop a hostile width or height before it allocates anything;
    // the product is checked below, from the header, as for a JPEG.
    const auto side = static_cast<std::uint32_t>(
        std::clamp<std::int64_t>(options.max_pixels, 1, std::int64_t{0x7FFFFFFF}));
    Check(spng_set_image_limits(ctx.get(), side, side), "limits");
    Check(spng_set_chunk_limits(ctx.get(), options.max_chunk_bytes, options.max_chunk_bytes),
          "limits");
    Check(spng_set_crc_action(ctx.get(), SPNG_CRC_ERROR, SPNG_CRC_ERROR), "limits");
    Check(spng_set_png_buffer(ctx.get(), png.data(), png.size()), "header");
    spng_ihdr ihdr{};
    Check(spng_get_ihdr(ctx.get(), &ihdr), "header");
    info = ImageInfo{};
    info.width = static_cast<int>(ihdr.width);
    info.height = static_cast<int>(ihdr.height);
    const bool color = ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR ||
                       ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA ||
                       ihdr.color_type == SPNG_COLOR_TYPE_INDEXED;
    info.color_space = color ? ColorSpace::kRgb : ColorSpace::kGrayscale;
    info.components = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA   ? 2
                      : ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR       ? 3
                      : ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA ? 4
                                                                           : 1;
    info.progressive = ihdr.interlace_method != SPNG_INTERLACE_NONE;
    if (std::int64_t{info.width} * info.height > options.max_pixels) {
      throw DecodeError(DecodeErrorKind::kTooLarge,
                        "PNG too large: " + SizeText(info.width, info.height) +
                            " is over the limit of " + std::to_string(options.max_pixels) +
                            " pixels");
    }
    return ctx;
  }

  DecodeReport Decode(spng_ctx* ctx, const ImageInfo& info, const CropPlan& plan,
                      const PixelView& out) {
    if (!detail::PlanFits(plan, info.width, info.height, out)) {
      throw detail::CropDoesNotFit(plan.crop, info.width, info.height, "PNG image");
    }
    return info.progressive ? DecodeWhole(ctx, info, plan, out) : DecodeRows(ctx, info, plan, out);
  }

  // Decodes rows from the top through the crop's last row, resizing as they come.
  DecodeReport DecodeRows(spng_ctx* ctx, const ImageInfo& info, const CropPlan& plan,
                          const PixelView& out) {
    const Rect& crop = plan.crop;
    Check(spng_decode_image(ctx, nullptr, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE), "data");
    resizer.Start(crop.width, crop.height,
                  detail::WindowFor(plan, 8, crop.x, crop.y, crop.width, crop.height).box, out,
                  plan.flip);
    const auto source_rows = static_cast<std::size_t>(crop.y) + crop.height;
    const auto ring_rows =
        std::min(static_cast<std::size_t>(resizer.MaxRows()) + kRingAhead, source_rows);
    const std::size_t row_bytes = static_cast<std::size_t>(info.width) * 3;
    ring.Prepare(row_bytes, ring_rows, resizer.MaxRows());
    SpngRows rows{ctx, row_bytes};
    detail::RowStream stream{&resizer,
                             ring.rows.data(),
                             ring_rows,
                             static_cast<std::size_t>(crop.y),
                             source_rows,
                             out.height,
                             ring.row_pointers.data(),
                             static_cast<std::size_t>(crop.x) * 3};
    detail::StreamRows(&stream, &ReadPngRow, &rows);
    if (stream.rows_written != out.height) {
      Throw(rows.error != 0 ? rows.error : SPNG_IO_EOF, "data");
    }
    DecodeReport report;
    report.resize_seconds = static_cast<double>(stream.resize_ns) * 1e-9;
    report.decoded = Rect{0, 0, info.width, static_cast<int>(stream.rows_read)};
    return report;
  }

  // Adam7 spreads every row over seven passes, so an interlaced image is decoded whole.
  DecodeReport DecodeWhole(spng_ctx* ctx, const ImageInfo& info, const CropPlan& plan,
                           const PixelView& out) {
    std::size_t bytes = 0;
    Check(spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &bytes), "data");
    std::vector<std::uint8_t>& image = ring.scratch;
    if (image.size() < bytes) image.resize(bytes);
    const int error = spng_decode_image(ctx, image.data(), bytes, SPNG_FMT_RGB8, 0);
    if (error != 0) {
      ReleaseLargeScratch();
      Throw(error, "data");
    }
    const auto start = std::chrono::steady_clock::now();
    const Rect& c = plan.crop;
    // The filter sees only the crop, as in the row-by-row path.
    const std::ptrdiff_t stride = std::ptrdiff_t{info.width} * 3;
    resizer.Resize(ConstPixelView{image.data() + c.y * stride + std::ptrdiff_t{c.x} * 3, c.width,
                                  c.height, 3, stride},
                   detail::WindowFor(plan, 8, c.x, c.y, c.width, c.height).box, out, plan.flip);
    DecodeReport report;
    report.resize_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.decoded = Rect{0, 0, info.width, info.height};
    ReleaseLargeScratch();
    return report;
  }

  void ReleaseLargeScratch() {
    if (ring.scratch.capacity() > kKeptWholeImageBytes)
      std::vector<std::uint8_t>().swap(ring.scratch);
  }
};

PngDecoder::PngDecoder(const PngOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
}
PngDecoder::~PngDecoder() = default;
PngDecoder::PngDecoder(PngDecoder&&) noexcept = default;
PngDecoder& PngDecoder::operator=(PngDecoder&&) noexcept = default;

const PngOptions& PngDecoder::options() const { return impl_->options; }

ImageInfo PngDecoder::ReadInfo(std::span<const std::byte> png) {
  ImageInfo info;
  impl_->Open(png, info);
  return info;
}

DecodeReport PngDecoder::DecodeInto(std::span<const std::byte> png, const CropPlan& plan,
                                    const PixelView& out) {
  return DecodeInto(
      png, [&plan](const ImageInfo&) { return plan; }, out);
}

DecodeReport PngDecoder::DecodeInto(std::span<const std::byte> png,
                                    const JpegDecoder::CropPlanner& planner, const PixelView& out) {
  ImageInfo info;
  const Context ctx = impl_->Open(png, info);
  CheckChunkCrcs(png);
  return impl_->Decode(ctx.get(), info, planner(info), out);
}

void PngDecoder::Verify(std::span<const std::byte> png) {
  ImageInfo info;
  const Context ctx = impl_->Open(png, info);
  // Progressive decoding writes each row, interlaced or not, into one row buffer, and
  // reads the chunks after the image data through IEND once the last row is out.
  Check(spng_decode_image(ctx.get(), nullptr, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE), "data");
  const std::size_t row_bytes = static_cast<std::size_t>(info.width) * 3;
  impl_->ring.Prepare(row_bytes, 1, 0);
  for (;;) {
    const int error = spng_decode_row(ctx.get(), impl_->ring.rows[0], row_bytes);
    if (error == SPNG_EOI) break;
    Check(error, "data");
  }
  // The chunks after the image data, through IEND.
  Check(spng_decode_chunks(ctx.get()), "trailer");
}

}  // namespace tilefeed::codecs
