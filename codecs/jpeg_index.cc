// Restart-interval transcoding and the interval-skipping crop decode. Every libjpeg call
// of the random-access path lives in this file.
//
// The transcoder follows jpeg.cc's rule for libjpeg errors: error_exit longjmps back to
// a setjmp taken in a small guarded function whose frames hold only trivially
// destructible locals; the C++ callers turn a failed guarded call into a refusal.
//
// The crop decode needs no libjpeg call of its own. Restart markers reset the DC
// predictors and byte-align the entropy coder, so a run of intervals is a valid scan on
// its own: copying the header (with the SOF's size patched) and the covering intervals,
// renumbered RST0..7, gives a smaller JPEG with the same tables whose MCUs are exactly
// those intervals' MCUs. Decoding it with JpegDecoder::DecodeInto and the crop moved by
// the sub-image's origin repeats the very computation a whole-file DecodeInto does,
// because the origin lies on the MCU grid (so DCT scaling, iMCU alignment and the
// chroma margin all land on the same pixels) and the sub-image holds the whole region
// that decode would touch.

#include "codecs/jpeg_index.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include "codecs/byte_order.h"
#include "codecs/libjpeg_errors.h"

namespace tilefeed::codecs {
namespace {

constexpr std::uint8_t kIndexMagic[4] = {'T', 'F', 'J', 'I'};
constexpr std::uint8_t kIndexVersion = 1;

// --- libjpeg error handling: codecs/libjpeg_errors.h. A transcoded file must carry
// exactly the input's coefficients, so unlike decoding there is no "accept" policy: every
// corrupt-data warning stops the transcode (stop_on_damage is always set).

using ErrorManager = detail::LibjpegErrors;

bool GuardedCreate(jpeg_decompress_struct* src, jpeg_compress_struct* dst, ErrorManager* errors) {
  if (setjmp(errors->jump)) return false;
  jpeg_create_decompress(src);
  jpeg_create_compress(dst);
  return true;
}

// The output side of one transcode, plain data so it may cross a longjmp.
struct WriteJob {
  jvirt_barray_ptr* coefficients;
  unsigned restart_interval;
  bool copy_metadata;
  unsigned char** buffer;  // jpeg_mem_dest's malloc'd buffer; the caller frees it
  unsigned long* size;
};

bool StartsWith(const jpeg_saved_marker_ptr marker, const char* tag, unsigned length) {
  return marker->data_length >= length && std::memcmp(marker->data, tag, length) == 0;
}

bool GuardedWrite(jpeg_decompress_struct* src, jpeg_compress_struct* dst, ErrorManager* errors,
                  WriteJob* job) {
  if (setjmp(errors->jump)) return false;
  jpeg_mem_dest(dst, job->buffer, job->size);
  // Copies the size, colour space, sampling factors, component ids and quantization
  // tables, and resets everything else to libjpeg's defaults: a single sequential scan
  // with Huffman coding, whatever the input was.
  jpeg_copy_critical_parameters(src, dst);
  dst->optimize_coding = TRUE;
  dst->restart_interval = job->restart_interval;
  dst->restart_in_rows = 0;
  jpeg_write_coefficients(dst, job->coefficients);
  if (job->copy_metadata) {
    // As jpegtran's -copy all: every saved marker but those libjpeg has just written.
    for (jpeg_saved_marker_ptr m = src->marker_list; m != nullptr; m = m->next) {
      if (dst->write_JFIF_header && m->marker == JPEG_APP0 && StartsWith(m, "JFIF", 5)) continue;
      if (dst->write_Adobe_marker && m->marker == JPEG_APP0 + 14 && StartsWith(m, "Adobe", 5)) {
        continue;
      }
      jpeg_write_marker(dst, m->marker, m->data, m->data_length);
    }
  }
  jpeg_finish_compress(dst);
  return true;
}

// Both libjpeg objects of one transcode and the output buffer, released in every case.
struct Transcoder {
  jpeg_decompress_struct src{};
  jpeg_compress_struct dst{};
  ErrorManager errors{};
  detail::LibjpegProgress progress{};
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  bool created = false;

  explicit Transcoder(int max_scans) {
    jpeg_error_mgr* handlers = detail::InstallErrorHandlers(errors);  // stops on damage
    for (auto* err : {&src.err, &dst.err}) *err = handlers;
    created = GuardedCreate(&src, &dst, &errors);
    src.progress = detail::InstallScanLimit(progress, errors, max_scans);
  }
  ~Transcoder() {
    // jpeg_destroy on a zero-initialized object (creation failed half-way) is a no-op.
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    std::free(buffer);
  }
  Transcoder(const Transcoder&) = delete;
  Transcoder& operator=(const Transcoder&) = delete;
};

// --- Our own reading of the few markers the index depends on. It trusts nothing: every
// length is checked against the buffer, and anything a transcoded file cannot contain
// is an error.

[[noreturn]] void Corrupt(const std::string& what) {
  throw DecodeError(DecodeErrorKind::kCorrupt, "corrupt JPEG interval index: " + what);
}

using detail::Be16;
using detail::ByteAt;

// What the header of a baseline single-scan file says about its MCU grid.
struct HeaderFacts {
  std::size_t sof_offset = 0;  // of the SOF marker's 0xFF
  int width = 0;
  int height = 0;
  int max_h = 1;
  int max_v = 1;
  int mcu_width = 0;
  int mcu_height = 0;
  int mcus_per_row = 0;
  int mcu_rows = 0;
  int restart_interval = 0;
  std::size_t scan_start = 0;  // first byte after the SOS segment
};

HeaderFacts ReadHeaderFacts(std::span<const std::byte> jpeg) {
  const std::size_t size = jpeg.size();
  if (size < 4 || ByteAt(jpeg, 0) != 0xFF || ByteAt(jpeg, 1) != 0xD8) Corrupt("no SOI");
  HeaderFacts facts;
  int components = 0;
  bool have_sof = false;
  std::size_t pos = 2;
  for (;;) {
    if (pos >= size || ByteAt(jpeg, pos) != 0xFF) Corrupt("no marker where the header has one");
    while (pos < size && ByteAt(jpeg, pos) == 0xFF) ++pos;  // fill bytes
    if (pos + 3 > size) Corrupt("header ends early");
    const unsigned marker = ByteAt(jpeg, pos);
    const std::size_t length = Be16(jpeg, pos + 1);
    const std::size_t body = pos + 3;
    const std::size_t end = pos + 1 + length;
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD9) || length < 2 ||
        end > size) {
      Corrupt("bad marker or segment length in the header");
    }
    if (marker == 0xC0 || marker == 0xC1) {
      if (have_sof) Corrupt("two SOF markers");
      have_sof = true;
      facts.sof_offset = pos - 1;
      if (length < 8) Corrupt("SOF too short");
      components = static_cast<int>(ByteAt(jpeg, body + 5));
      if (length != 8 + 3 * std::size_t(components) || ByteAt(jpeg, body) != 8 || components < 1 ||
          components > 4) {
        Corrupt("SOF is not an 8-bit frame of 1 to 4 components");
      }
      facts.height = static_cast<int>(Be16(jpeg, body + 1));
      facts.width = static_cast<int>(Be16(jpeg, body + 3));
      if (facts.width == 0 || facts.height == 0) Corrupt("SOF has a zero dimension");
      for (int c = 0; c < components; ++c) {
        const unsigned factors = ByteAt(jpeg, body + 7 + 3 * std::size_t(c));
        const int h = static_cast<int>(factors >> 4), v = static_cast<int>(factors & 15);
        if (h < 1 || h > 4 || v < 1 || v > 4) Corrupt("bad sampling factors");
        facts.max_h = std::max(facts.max_h, h);
        facts.max_v = std::max(facts.max_v, v);
      }
      // A single-component scan is not interleaved: its MCU is one 8x8 block.
      facts.mcu_width = components == 1 ? 8 : 8 * facts.max_h;
      facts.mcu_height = components == 1 ? 8 : 8 * facts.max_v;
      facts.mcus_per_row = (facts.width + facts.mcu_width - 1) / facts.mcu_width;
      facts.mcu_rows = (facts.height + facts.mcu_height - 1) / facts.mcu_height;
    } else if (marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
               marker != 0xCC) {
      Corrupt("not a baseline Huffman-coded file");
    } else if (marker == 0xDD) {
      if (length != 4) Corrupt("bad DRI length");
      facts.restart_interval = static_cast<int>(Be16(jpeg, body));
    } else if (marker == 0xDC) {
      Corrupt("DNL marker");
    } else if (marker == 0xDA) {
      if (!have_sof || length < 3) Corrupt("SOS before SOF, or too short");
      const std::size_t in_scan = ByteAt(jpeg, body);
      // One scan holding every component, the whole spectrum, no successive approximation.
      if (in_scan != std::size_t(components) || length != 6 + 2 * in_scan ||
          ByteAt(jpeg, body + 1 + 2 * in_scan) != 0 || ByteAt(jpeg, body + 2 + 2 * in_scan) != 63 ||
          ByteAt(jpeg, body + 3 + 2 * in_scan) != 0) {
        Corrupt("the scan is not one sequential scan of every component");
      }
      facts.scan_start = end;
      return facts;
    }
    pos = end;
  }
}

// Finds every restart interval of a transcoded file by scanning its entropy data: the
// index the transcoder returns is read off the bytes it wrote.
JpegIntervalIndex BuildIndex(std::span<const std::byte> jpeg) {
  if (jpeg.size() > std::numeric_limits<std::uint32_t>::max()) Corrupt("file over 4 GiB");
  const HeaderFacts facts = ReadHeaderFacts(jpeg);
  const int k = facts.restart_interval;
  if (k <= 0 || facts.mcus_per_row % k != 0) Corrupt("restart interval does not tile the rows");
  JpegIntervalIndex index;
  index.width = facts.width;
  index.height = facts.height;
  index.mcu_width = facts.mcu_width;
  index.mcu_height = facts.mcu_height;
  index.mcus_per_row = facts.mcus_per_row;
  index.mcu_rows = facts.mcu_rows;
  index.mcus_per_interval = k;
  const std::size_t count = std::size_t(facts.mcu_rows) * (facts.mcus_per_row / k);
  index.offsets.reserve(count);
  index.offsets.push_back(static_cast<std::uint32_t>(facts.scan_start));
  const auto* data = reinterpret_cast<const unsigned char*>(jpeg.data());
  std::size_t pos = facts.scan_start;
  for (;;) {
    const void* hit =
        pos < jpeg.size() ? std::memchr(data + pos, 0xFF, jpeg.size() - pos) : nullptr;
    if (hit == nullptr) Corrupt("scan without EOI");
    pos = static_cast<std::size_t>(static_cast<const unsigned char*>(hit) - data);
    if (pos + 1 >= jpeg.size()) Corrupt("scan without EOI");
    const unsigned next = data[pos + 1];
    if (next == 0x00) {
      pos += 2;  // a stuffed 0xFF data byte
    } else if (next == 0xFF) {
      pos += 1;  // fill byte before a marker
    } else if (next >= 0xD0 && next <= 0xD7) {
      if (next - 0xD0 != (index.offsets.size() - 1) % 8) Corrupt("RST out of sequence");
      index.offsets.push_back(static_cast<std::uint32_t>(pos + 2));
      pos += 2;
    } else if (next == 0xD9) {
      index.scan_end = static_cast<std::uint32_t>(pos);
      break;
    } else {
      Corrupt("unexpected marker in the scan");
    }
  }
  if (index.offsets.size() != count) Corrupt("restart interval count does not match the SOF");
  return index;
}

// The restart interval, in MCUs, for `mcus_per_row` MCUs of `mcu_width` pixels: the
// divisor of mcus_per_row nearest (by ratio) to the target, among divisors at least half
// of it, so that intervals tile every row exactly; the whole row when none qualifies.
int ChooseMcusPerInterval(int mcus_per_row, int mcu_width, int interval_width) {
  if (interval_width <= 0) return mcus_per_row;
  const double target = std::max(1.0, double(interval_width) / mcu_width);
  int best = mcus_per_row;
  double best_error = std::abs(std::log(mcus_per_row / target));
  for (int d = 1; d < mcus_per_row; ++d) {
    if (mcus_per_row % d != 0 || d < target / 2) continue;
    const double error = std::abs(std::log(d / target));
    if (error < best_error) {
      best = d;
      best_error = error;
    }
  }
  return best;
}

// Reads LEB128 varints from a stored index, never past its end.
class VarintReader {
 public:
  explicit VarintReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  std::uint32_t Next(const char* field) {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      if (pos_ >= bytes_.size()) Corrupt(std::string("index ends inside ") + field);
      const unsigned byte = ByteAt(bytes_, pos_++);
      value |= std::uint64_t(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) {
        if (value > std::numeric_limits<std::uint32_t>::max()) break;
        return static_cast<std::uint32_t>(value);
      }
    }
    Corrupt(std::string("varint too large in ") + field);
  }
  std::size_t left() const { return bytes_.size() - pos_; }

 private:
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
};

void PutVarint(std::vector<std::byte>& out, std::uint32_t value) {
  while (value >= 0x80) {
    out.push_back(std::byte((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(std::byte(value));
}

// The region JpegDecoder::DecodeInto decodes for a crop, in MCUs: it repeats
// DecodeInto's choice of scale and its margins (jpeg.cc), then widens to whole MCUs,
// because that region is what the sub-image must hold for the two decodes to agree.
struct McuCover {
  int col0, col1;  // MCU columns [col0, col1]
  int row0, row1;  // MCU rows [row0, row1]
};

McuCover CoverFor(const JpegIntervalIndex& index, int max_h, int max_v, const CropPlan& plan,
                  int out_width, int out_height, const JpegOptions& options) {
  const Rect& crop = plan.crop;
  int n = PlanScaleEighths(plan, out_width, out_height, options.decode_scaling);
  if (max_h >= 4 || max_v >= 4) n = n <= 4 ? 4 : 8;
  const std::int64_t scaled_width = (std::int64_t{index.width} * n + 7) / 8;
  const std::int64_t scaled_height = (std::int64_t{index.height} * n + 7) / 8;
  const auto [x0, y0, x1, y1] = CropRegion(crop, n, max_h, max_v, scaled_width, scaled_height);
  // One MCU scaled by n/8 (libjpeg's iMCU alignment for jpeg_crop_scanline).
  const std::int64_t mcu_w = std::int64_t{index.mcu_width} * n / 8;
  const std::int64_t mcu_h = std::int64_t{index.mcu_height} * n / 8;
  return {static_cast<int>(x0 / mcu_w), static_cast<int>((x1 - 1) / mcu_w),
          static_cast<int>(y0 / mcu_h), static_cast<int>((y1 - 1) / mcu_h)};
}

bool CropFits(const JpegIntervalIndex& index, const Rect& crop) {
  return crop.width > 0 && crop.height > 0 && crop.x >= 0 && crop.y >= 0 &&
         crop.x <= index.width - crop.width && crop.y <= index.height - crop.height;
}

}  // namespace

TranscodeResult TranscodeForRandomAccess(std::span<const std::byte> jpeg,
                                         const TranscodeOptions& options) {
  const auto refuse = &detail::Refused<TranscodeResult>;
  if (const char* what = SniffNonJpeg(jpeg)) {
    return refuse({DecodeErrorKind::kNotJpeg, std::string("not a JPEG: ") + what});
  }
  Transcoder t(options.max_scans);
  if (!t.created) return refuse({DecodeErrorKind::kCorrupt, t.errors.message});
  if (!detail::GuardedReadHeader(&t.src, &t.errors, jpeg, options.copy_metadata)) {
    return refuse(detail::FailureOf(t.errors, "JPEG", "header"));
  }
  if (t.src.arith_code) {
    return refuse(
        {DecodeErrorKind::kUnsupported, "unsupported JPEG: arithmetic coding (not transcoded)"});
  }
  if (t.src.data_precision != 8) {
    return refuse({DecodeErrorKind::kUnsupported,
                   "unsupported JPEG: " + std::to_string(t.src.data_precision) + "-bit samples"});
  }
  if (std::int64_t{t.src.image_width} * t.src.image_height > options.max_pixels) {
    return refuse(detail::TooLarge(t.src.image_width, t.src.image_height, options.max_pixels));
  }
  WriteJob job{};
  if (!detail::GuardedReadCoefficients(&t.src, &t.errors, &job.coefficients)) {
    return refuse(detail::FailureOf(t.errors, "JPEG", "data"));
  }
  // A file libjpeg would block-smooth cannot be transcoded without changing its pixels.
  if (const char* why = detail::NotPlain(t.src)) {
    return refuse({DecodeErrorKind::kUnsupported, std::string("unsupported JPEG: ") + why +
                                                      " (libjpeg smooths it; not transcoded)"});
  }
  const bool single = t.src.num_components == 1;
  const int mcu_width = single ? 8 : 8 * t.src.max_h_samp_factor;
  const int mcus_per_row = static_cast<int>((t.src.image_width + mcu_width - 1) / mcu_width);
  job.restart_interval =
      static_cast<unsigned>(ChooseMcusPerInterval(mcus_per_row, mcu_width, options.interval_width));
  job.copy_metadata = options.copy_metadata;
  job.buffer = &t.buffer;
  job.size = &t.size;
  if (!GuardedWrite(&t.src, &t.dst, &t.errors, &job)) {
    return refuse(detail::FailureOf(t.errors, "JPEG", "write"));
  }
  jpeg_abort_decompress(&t.src);
  TranscodeResult result;
  result.jpeg.resize(t.size);
  std::memcpy(result.jpeg.data(), t.buffer, t.size);
  try {
    result.index = BuildIndex(result.jpeg);
  } catch (const DecodeError& e) {
    return refuse(
        {DecodeErrorKind::kCorrupt, std::string("transcoded file unusable: ") + e.what()});
  }
  result.transcoded = true;
  return result;
}

std::vector<std::byte> SerializeIndex(const JpegIntervalIndex& index) {
  assert(!index.offsets.empty() && index.scan_end > index.offsets.back());
  std::vector<std::byte> out;
  for (std::uint8_t b : kIndexMagic) out.push_back(std::byte{b});
  out.push_back(std::byte{kIndexVersion});
  for (int v :
       {index.width, index.height, index.mcu_width, index.mcu_height, index.mcus_per_interval}) {
    PutVarint(out, static_cast<std::uint32_t>(v));
  }
  PutVarint(out, index.offsets[0]);
  for (std::size_t i = 1; i < index.offsets.size(); ++i) {
    PutVarint(out, index.offsets[i] - index.offsets[i - 1]);
  }
  PutVarint(out, index.scan_end - index.offsets.back());
  return out;
}

JpegIntervalIndex ParseIndex(std::span<const std::byte> bytes, std::span<const std::byte> jpeg) {
  if (bytes.size() < 5 || std::memcmp(bytes.data(), kIndexMagic, 4) != 0) Corrupt("bad magic");
  if (ByteAt(bytes, 4) != kIndexVersion) Corrupt("unknown version");
  if (jpeg.size() > std::numeric_limits<std::uint32_t>::max()) Corrupt("file over 4 GiB");
  VarintReader in(bytes.subspan(5));
  JpegIntervalIndex index;
  index.width = static_cast<int>(std::min<std::uint32_t>(in.Next("width"), 1 << 30));
  index.height = static_cast<int>(std::min<std::uint32_t>(in.Next("height"), 1 << 30));
  index.mcu_width = static_cast<int>(std::min<std::uint32_t>(in.Next("MCU width"), 1 << 30));
  index.mcu_height = static_cast<int>(std::min<std::uint32_t>(in.Next("MCU height"), 1 << 30));
  index.mcus_per_interval =
      static_cast<int>(std::min<std::uint32_t>(in.Next("restart interval"), 1 << 30));

  const HeaderFacts facts = ReadHeaderFacts(jpeg);
  if (index.width != facts.width || index.height != facts.height) {
    Corrupt("size differs from the SOF's");
  }
  if (index.mcu_width != facts.mcu_width || index.mcu_height != facts.mcu_height) {
    Corrupt("MCU size differs from the SOF's");
  }
  if (index.mcus_per_interval != facts.restart_interval || facts.restart_interval == 0 ||
      facts.mcus_per_row % facts.restart_interval != 0) {
    Corrupt("restart interval differs from the DRI's or does not tile the rows");
  }
  index.mcus_per_row = facts.mcus_per_row;
  index.mcu_rows = facts.mcu_rows;
  const std::size_t count =
      std::size_t(facts.mcu_rows) * std::size_t(facts.mcus_per_row / facts.restart_interval);
  // Every offset takes at least one byte, so a count beyond the bytes left is a lie, and
  // checking it first bounds the allocation below.
  if (count + 1 > in.left()) Corrupt("too few offsets");
  index.offsets.resize(count);
  std::uint64_t offset = in.Next("offset");
  if (offset != facts.scan_start) Corrupt("first interval is not at the scan start");
  index.offsets[0] = static_cast<std::uint32_t>(offset);
  for (std::size_t i = 1; i < count; ++i) {
    offset += in.Next("offset");
    // Each interval holds at least one byte, then its 2-byte RST marker.
    if (offset < std::uint64_t{index.offsets[i - 1]} + 3 || offset > jpeg.size()) {
      Corrupt("offsets out of order or outside the file");
    }
    if (ByteAt(jpeg, offset - 2) != 0xFF || ByteAt(jpeg, offset - 1) != 0xD0 + (i - 1) % 8) {
      Corrupt("offset " + std::to_string(i) + " does not follow RST" + std::to_string((i - 1) % 8));
    }
    index.offsets[i] = static_cast<std::uint32_t>(offset);
  }
  offset += in.Next("scan end");
  if (offset <= index.offsets.back() || offset + 2 > jpeg.size() || ByteAt(jpeg, offset) != 0xFF ||
      ByteAt(jpeg, offset + 1) != 0xD9) {
    Corrupt("no EOI at the scan end");
  }
  index.scan_end = static_cast<std::uint32_t>(offset);
  if (in.left() != 0) Corrupt("bytes after the last offset");
  return index;
}

IndexedJpegDecoder::IndexedJpegDecoder(const JpegOptions& options) : decoder_(options) {}

Rect CoveredRegion(std::span<const std::byte> jpeg, const JpegIntervalIndex& index,
                   const CropPlan& plan, int out_width, int out_height,
                   const JpegOptions& options) {
  assert(CropFits(index, plan.crop) && index.mcus_per_interval > 0);
  // The sampling factors (the decoder's margin) come from the header, not the index.
  const HeaderFacts facts = ReadHeaderFacts(jpeg);
  const McuCover cover =
      CoverFor(index, facts.max_h, facts.max_v, plan, out_width, out_height, options);
  const int k = index.mcus_per_interval;
  const int x0 = cover.col0 / k * k * index.mcu_width;
  const int x1 = std::min(index.width, (cover.col1 / k + 1) * k * index.mcu_width);
  const int y0 = cover.row0 * index.mcu_height;
  const int y1 = std::min(index.height, (cover.row1 + 1) * index.mcu_height);
  return Rect{x0, y0, x1 - x0, y1 - y0};
}

namespace {

// Throws unless `index` describes the JPEG whose header facts are `facts`.
void CheckIndexBelongs(const JpegIntervalIndex& index, const HeaderFacts& facts,
                       std::size_t jpeg_size) {
  const int k = index.mcus_per_interval;
  if (index.width != facts.width || index.height != facts.height ||
      index.mcu_width != facts.mcu_width || index.mcu_height != facts.mcu_height ||
      index.mcus_per_row != facts.mcus_per_row || index.mcu_rows != facts.mcu_rows ||
      k != facts.restart_interval || k <= 0 || facts.mcus_per_row % k != 0 ||
      index.offsets.size() != std::size_t(facts.mcu_rows) * (facts.mcus_per_row / k) ||
      index.offsets[0] != facts.scan_start || index.scan_end <= index.offsets.back() ||
      std::size_t{index.scan_end} + 2 > jpeg_size) {
    Corrupt("the index does not belong to this JPEG");
  }
}

// Intervals [first, last] of MCU rows [row0, row1], inclusive.
struct IntervalSpan {
  int first, last, row0, row1;
};

// The sub-image's size in pixels.
struct SubSize {
  int width, height;
};

// The sub-image: the header with the SOF's size patched, the covering intervals with
// their RST markers renumbered from 0, then EOI. Each interval's range is checked
// before it is copied, so an index that passed the header check but lies about its
// offsets still cannot make us read outside `jpeg`.
void BuildSubImage(std::span<const std::byte> jpeg, const JpegIntervalIndex& index,
                   const HeaderFacts& facts, IntervalSpan span, SubSize size,
                   std::vector<std::byte>& sub) {
  const int per_row = index.intervals_per_row();
  sub.assign(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(facts.scan_start));
  const std::size_t sof = facts.sof_offset;
  sub[sof + 5] = std::byte(size.height >> 8);
  sub[sof + 6] = std::byte(size.height & 0xFF);
  sub[sof + 7] = std::byte(size.width >> 8);
  sub[sof + 8] = std::byte(size.width & 0xFF);
  unsigned sequence = 0;
  for (int row = span.row0; row <= span.row1; ++row) {
    for (int column = span.first; column <= span.last; ++column) {
      const std::size_t i = std::size_t(row) * per_row + column;
      // The last interval runs up to EOI; the others up to their RST marker. Only the
      // bounds matter for safety: everything up to scan_end lies inside `jpeg`.
      const bool last_interval = i + 1 == index.offsets.size();
      const std::size_t begin = index.offsets[i];
      const std::size_t end = last_interval ? index.scan_end : index.offsets[i + 1];
      if (end > index.scan_end || end < begin + (last_interval ? 1 : 3)) {
        Corrupt("offsets out of order");
      }
      const std::size_t data_end = last_interval ? end : end - 2;
      if (sequence > 0) {
        sub.push_back(std::byte{0xFF});
        sub.push_back(std::byte(0xD0 + (sequence - 1) % 8));
      }
      ++sequence;
      sub.insert(sub.end(), jpeg.begin() + static_cast<std::ptrdiff_t>(begin),
                 jpeg.begin() + static_cast<std::ptrdiff_t>(data_end));
    }
  }
  sub.push_back(std::byte{0xFF});
  sub.push_back(std::byte{0xD9});
}

}  // namespace

DecodeReport IndexedJpegDecoder::DecodeInto(std::span<const std::byte> jpeg,
                                            const JpegIntervalIndex& index, const CropPlan& plan,
                                            const PixelView& out) {
  // The header is read again here (a few hundred bytes) rather than trusted from the
  // index: it locates the SOF to patch and ties the index to these bytes.
  const HeaderFacts facts = ReadHeaderFacts(jpeg);
  CheckIndexBelongs(index, facts, jpeg.size());
  const int k = index.mcus_per_interval;
  if (!CropFits(index, plan.crop) || !BoxInsideCrop(plan)) {
    // JpegDecoder::DecodeInto words the error.
    return decoder_.DecodeInto(jpeg, plan, out);
  }
  const McuCover cover =
      CoverFor(index, facts.max_h, facts.max_v, plan, out.width, out.height, decoder_.options());
  const int per_row = index.intervals_per_row();
  const int first = cover.col0 / k;
  const int last = cover.col1 / k;
  if (first == 0 && last == per_row - 1 && cover.row0 == 0 && cover.row1 == index.mcu_rows - 1) {
    return decoder_.DecodeInto(jpeg, plan, out);  // the crop needs every interval
  }
  const int origin_x = first * k * index.mcu_width;
  const int origin_y = cover.row0 * index.mcu_height;
  const int sub_width =
      last == per_row - 1 ? index.width - origin_x : (last - first + 1) * k * index.mcu_width;
  const int sub_height = cover.row1 == index.mcu_rows - 1
                             ? index.height - origin_y
                             : (cover.row1 - cover.row0 + 1) * index.mcu_height;

  BuildSubImage(jpeg, index, facts, {first, last, cover.row0, cover.row1}, {sub_width, sub_height},
                sub_image_);

  CropPlan moved = plan;
  moved.crop.x -= origin_x;
  moved.crop.y -= origin_y;
  if (plan.box.x1 > plan.box.x0 && plan.box.y1 > plan.box.y0) {
    moved.box = {plan.box.x0 - origin_x, plan.box.y0 - origin_y, plan.box.x1 - origin_x,
                 plan.box.y1 - origin_y};
  }
  DecodeReport report = decoder_.DecodeInto(sub_image_, moved, out);
  report.decoded.x += origin_x * report.scale_eighths / 8;
  report.decoded.y += origin_y * report.scale_eighths / 8;
  return report;
}

}  // namespace tilefeed::codecs
