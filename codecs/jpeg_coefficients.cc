// The coefficient store: packing (jpeg_read_coefficients → bands of byte-aligned
// coefficients in column groups, stored or Huffman-coded) and the crop decode that feeds stored
// coefficients to libjpeg-turbo's own IDCT, upsampling and colour conversion.
//
// Why libjpeg's back end rather than our own IDCT: byte-identical pixels come for free
// (the same SIMD IDCT, the same fancy upsampling and colour code, the same DCT scaling
// choices), and its IDCT is the fastest there is. Its upsampling and colour conversion
// are not: for the common JPEGs (YCbCr 4:2:0, 4:2:2, 4:4:4, at every DCT scale) on CPUs
// with AVX-512 VBMI, libjpeg hands over the IDCT's planes (raw-data mode) and one fused pass
// (codecs/ycc_rows.h) does the same arithmetic, the loader's largest single gain after the
// entropy decode went (YccRows below). The decode builds a small JPEG header for
// the sub-image that covers the crop (origin on the iMCU grid, as IndexedJpegDecoder's
// sub-images: see codecs/jpeg_index.cc for why that repeats the whole-file decode's
// computation), lets libjpeg read it and set up its pipeline, then replaces the
// coefficient controller (cinfo->coef, libjpeg's internal jpegint.h interface) with one
// that serves each iMCU row from the stored bands. No entropy decoder ever runs.
//
// libjpeg errors follow jpeg.cc's rule (codecs/libjpeg_errors.h): error_exit
// longjmps to a setjmp in a small guarded function with trivially destructible frames.
// Our controller's callback runs inside libjpeg and cannot report errors, so every group
// it reads is decoded and checked before libjpeg starts (Decode), and the unpack
// masks positions so that even a lying record cannot write outside a block.
//
// This file holds the decode; the record's header is read in coef_format.cc and written
// with the bands in coef_pack.cc (format: codecs/coef_format.h).

#include "codecs/jpeg_coefficients.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <csetjmp>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>

// jpeglib.h needs size_t and FILE declared first; jpegint.h follows it.
// clang-format off
#include <jpeglib.h>
#include <jpegint.h>

// jpegint.h is libjpeg's internal interface (the coefficient controller's struct layout): it
// changes between minor versions, and this file was written against libjpeg-turbo 2.1. The
// top-level CMakeLists.txt checks the package's version; this checks the headers compiled.
#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 2001000 || \
    LIBJPEG_TURBO_VERSION_NUMBER >= 2002000
#error "codecs/jpeg_coefficients.cc uses jpegint.h as libjpeg-turbo 2.1 has it; these headers are another version"
#endif
// clang-format on

#include "codecs/coef_blocks.h"
#include "codecs/coef_format.h"
#include "codecs/coef_huffman.h"
#include "codecs/crop_check.h"
#include "codecs/libjpeg_errors.h"
#include "codecs/resize.h"
#include "codecs/row_stream.h"
#include "codecs/ycc_rows.h"

namespace tilefeed::codecs {
namespace {

using ErrorManager = detail::LibjpegErrors;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kRingAhead = 16;  // as jpeg.cc: decoded rows ahead of the resize

using detail::Corrupt;
using detail::Geometry;
using detail::Le32;
using detail::ParseGeometry;

using detail::kNatural;  // zigzag index -> natural index

std::int64_t Nanos(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// A JPEG header (SOI, DQT, SOF9, SOS) for the sub_width x sub_height sub-image: the
// record's tables and sampling factors, one interleaved sequential scan, no entropy data:
// arithmetic-coded, as its decoder's set-up is two memsets (a Huffman one derives 6 tables).
void BuildJpegHeader(const Geometry& g, int sub_width, int sub_height,
                     std::vector<std::byte>& out) {
  auto put = [&](unsigned v) { out.push_back(std::byte(v & 0xFF)); };
  auto put16 = [&](unsigned v) {
    put(v >> 8);
    put(v);
  };
  out.clear();
  put16(0xFFD8);
  for (int t = 0; t < g.tables; ++t) {
    const bool wide = *std::max_element(g.quant[t].begin(), g.quant[t].end()) > 255;
    put16(0xFFDB);
    put16(2 + 1 + 64 * (wide ? 2 : 1));
    put((wide ? 0x10 : 0) | t);
    for (int k = 0; k < 64; ++k) {
      const unsigned q = g.quant[t][kNatural[k]];
      if (wide) put(q >> 8);
      put(q);
    }
  }
  put16(0xFFC9);
  put16(8 + 3 * g.components);
  put(8);
  put16(sub_height);
  put16(sub_width);
  put(g.components);
  for (int c = 0; c < g.components; ++c) {
    put(c + 1);
    put(g.h[c] << 4 | g.v[c]);
    put(g.table[c]);
  }
  put16(0xFFDA);
  put16(6 + 2 * g.components);
  put(g.components);
  for (int c = 0; c < g.components; ++c) {
    put(c + 1);
    put(0);
  }
  put(0);
  put(63);
  put(0);
}

using Block = CoefficientBlock;
static_assert(sizeof(JCOEF) == sizeof(std::int16_t) && sizeof(Block) == sizeof(JBLOCK));

// Where the next block row of each stream of one column group starts.
using GroupCursor = detail::MaskedStreams;

// What decodes the groups: the record's Huffman tables.
struct GroupDecoders {
  detail::HuffDecoder huff;
  bool portable = false;  // CoefficientDecoder's portable_kernels
};

// Decodes one Huffman-coded group into `out` (exactly `raw_size` bytes) or throws.
void DecodeGroup(const Geometry& g, const std::byte* packed, std::size_t packed_size,
                 std::uint8_t* out, std::size_t raw_size, GroupDecoders& decoders, int band,
                 int k) {
  const detail::HuffGroupShape shape{g.group_blocks(band, k), g.group_blocks(band, k, 0)};
  if (const char* why = decoders.huff.DecodeGroup(reinterpret_cast<const std::uint8_t*>(packed),
                                                  packed_size, out, raw_size, shape)) {
    Corrupt("band " + std::to_string(band) + " group " + std::to_string(k) + ": " + why);
  }
}

// Checks one decoded group of `blocks` blocks and returns its cursor: masks without bit
// 0, and the values and wide streams exactly as long as the masks and escapes say.
GroupCursor CheckGroup(const std::uint8_t* raw, std::size_t size, std::size_t blocks, int band,
                       bool portable) {
  const std::uint8_t* masks = raw + 2 * blocks;
  const std::uint8_t* values = raw + 10 * blocks;
  std::uint64_t bit0 = 0;
  for (std::size_t i = 0; i < blocks; ++i) bit0 |= detail::Le64(masks + 8 * i);
  const std::size_t count = detail::CountMaskBits(masks, blocks, portable);
  if ((bit0 & 1) != 0 || 10 * blocks + count > size) {
    Corrupt("band " + std::to_string(band) + " masks do not fit");
  }
  const std::size_t escapes = detail::CountEscapes(values, count, portable);
  if (10 * blocks + count + 2 * escapes != size) {
    Corrupt("band " + std::to_string(band) + " streams do not add up");
  }
  return {raw, masks, values, values + count};
}

// Decodes and checks groups [k0, k1] of bands [row0, row1] into `raw` (grown as needed),
// one cursor per group, row-major, so that the controller reads only checked bytes; stored
// groups are checked and read where they are, in `rec`.
// Throws DecodeError(kCorrupt).
void DecompressGroups(std::span<const std::byte> rec, const Geometry& g, int row0, int row1, int k0,
                      int k1, std::vector<std::uint8_t>& raw, std::vector<GroupCursor>& cursors,
                      GroupDecoders& decoders) {
  if (g.coding == 3) {
    const char* why = "";
    const auto* tables = reinterpret_cast<const std::uint8_t*>(rec.data() + g.huff_tables);
    if (decoders.huff.ReadTables(tables, g.huff_table_bytes, g.huff_classes(), &why,
                                 decoders.portable) != g.huff_table_bytes) {
      Corrupt(std::string("Huffman tables: ") + (*why != 0 ? why : "bytes left over"));
    }
  }
  const auto entry = [&](int b, int k) {
    return g.band_table + 8 * (std::size_t(b) * std::size_t(g.groups) + std::size_t(k));
  };
  std::size_t total = 0;
  for (int b = row0; b <= row1; ++b) {
    for (int k = k0; k <= k1; ++k) total += Le32(rec, entry(b, k) + 4);
  }
  if (g.coding != 0 && raw.size() < total) raw.resize(total);
  cursors.clear();
  std::size_t offset = g.data;  // of entry (0, 0), then walked forward
  std::size_t walked = 0;       // entries summed into `offset`
  std::size_t at = 0;
  for (int b = row0; b <= row1; ++b) {
    for (int k = k0; k <= k1; ++k) {
      const std::size_t e = std::size_t(b) * std::size_t(g.groups) + std::size_t(k);
      for (; walked < e; ++walked) offset += Le32(rec, g.band_table + 8 * walked);
      const std::size_t packed = Le32(rec, entry(b, k)), size = Le32(rec, entry(b, k) + 4);
      if (g.coding == 0) {  // stored (packed == size, checked with the band table): read in place
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(rec.data() + offset);
        cursors.push_back(CheckGroup(bytes, size, g.group_blocks(b, k), b, decoders.portable));
        continue;
      }
      DecodeGroup(g, rec.data() + offset, packed, raw.data() + at, size, decoders, b, k);
      cursors.push_back(
          CheckGroup(raw.data() + at, size, g.group_blocks(b, k), b, decoders.portable));
      at += size;
    }
  }
}

// Moves `cur` past `blocks` blocks beside the crop, adding their DC differences to `dc`.
void SkipBlocks(GroupCursor& cur, int blocks, std::uint16_t& dc, bool portable) {
  for (int x = 0; x < blocks; ++x, cur.dc += 2) {
    dc = static_cast<std::uint16_t>(dc + (cur.dc[0] | cur.dc[1] << 8));
  }
  const std::size_t n =
      detail::CountMaskBits(cur.masks, static_cast<std::size_t>(blocks), portable);
  cur.masks += 8 * static_cast<std::size_t>(blocks);
  const std::size_t escapes = detail::CountEscapes(cur.values, n, portable);
  cur.values += n;
  cur.wide += 2 * escapes;
}

// Unpacks blocks [first, first + count) of the next block row of component c from groups
// k0.. k0 + groups - 1 (their cursors) into `out`, moving each cursor past the row.
void UnpackGroupsRow(GroupCursor* cursors, const Geometry& g, int c, int k0, int groups, int first,
                     int count, Block* out, bool portable) {
  for (int i = 0; i < groups; ++i) {
    GroupCursor& cur = cursors[i];
    const int begin = g.group_begin(k0 + i, c), end = g.group_end(k0 + i, c);
    const int lo = std::clamp(first, begin, end), hi = std::clamp(first + count, lo, end);
    std::uint16_t dc = 0;
    SkipBlocks(cur, lo - begin, dc, portable);
    detail::UnpackMaskedBlocks(cur, hi - lo, dc, out + (lo - first), portable);
    SkipBlocks(cur, end - hi, dc, portable);
  }
}

// The coefficient controller libjpeg calls for each iMCU row of the sub-image. Plain
// data: it lives in the decoder and is read inside libjpeg.
struct BandFeed {
  jpeg_d_coef_controller pub;  // first: libjpeg holds a pointer to it
  JDIMENSION rows;             // iMCU rows of the sub-image
  int wib[4];                  // blocks per row of each component, whole image
  int first[4];                // first block column of the sub-image, per component
  Block* blocks;               // one component row of unpacked blocks
  // DecodeUnpackedInto: each component's whole-image blocks (the rows then come from
  // here, row0 being the sub-image's first iMCU row in the image); else all null.
  const Block* whole[4];
  int row0;
  // The geometry, and per sub-image iMCU row the cursors of groups [k0, k0 + groups).
  const Geometry* geometry;
  GroupCursor* group_cursors;
  int k0, groups;
  bool timed;
  bool portable;  // CoefficientDecoder's portable_kernels
  std::int64_t unpack_ns;
  std::int64_t idct_ns;
};

void NoPass(j_decompress_ptr) {}
int NoInput(j_decompress_ptr) { return JPEG_SUSPENDED; }

// decompress_data: one iMCU row of every component, as libjpeg's multi-scan controller
// produces it from its whole-image arrays (jdcoefct.c decompress_data).
int DecompressRow(j_decompress_ptr cinfo, JSAMPIMAGE output_buf) {
  auto* feed = reinterpret_cast<BandFeed*>(cinfo->coef);
  const JDIMENSION row = cinfo->output_iMCU_row;
  for (int ci = 0; ci < cinfo->num_components; ++ci) {
    jpeg_component_info* comp = cinfo->comp_info + ci;
    const int v = comp->v_samp_factor;  // block rows per iMCU row; the last has what is left
    const int block_rows =
        row + 1 == feed->rows ? (static_cast<int>(comp->height_in_blocks) - 1) % v + 1 : v;
    const int count = static_cast<int>(comp->width_in_blocks);
    const int size = comp->DCT_scaled_size;
    JSAMPARRAY output = output_buf[ci];
    for (int y = 0; y < block_rows; ++y, output += size) {
      const auto t0 = feed->timed ? Clock::now() : Clock::time_point();
      const Block* blocks = feed->blocks;
      if (feed->whole[ci] != nullptr) {
        const std::size_t block_row =
            (std::size_t(feed->row0) + row) * std::size_t(comp->v_samp_factor) + std::size_t(y);
        blocks = feed->whole[ci] + block_row * std::size_t(feed->wib[ci]) + feed->first[ci];
      } else {
        UnpackGroupsRow(feed->group_cursors + std::size_t(row) * std::size_t(feed->groups),
                        *feed->geometry, ci, feed->k0, feed->groups, feed->first[ci], count,
                        feed->blocks, feed->portable);
      }
      if (!comp->component_needed) continue;
      const auto t1 = feed->timed ? Clock::now() : Clock::time_point();
      inverse_DCT_method_ptr idct = cinfo->idct->inverse_DCT[ci];
      for (int x = 0; x < count; ++x) {
        // libjpeg's IDCT takes a mutable JCOEFPTR but only reads the block.
        idct(cinfo, comp, const_cast<JCOEF*>(blocks[x].c), output,
             static_cast<JDIMENSION>(x * size));
      }
      if (feed->timed) {
        const auto t2 = Clock::now();
        feed->unpack_ns += Nanos(t1 - t0);
        feed->idct_ns += Nanos(t2 - t1);
      }
    }
  }
  ++cinfo->input_iMCU_row;
  return ++cinfo->output_iMCU_row < cinfo->total_iMCU_rows ? JPEG_ROW_COMPLETED
                                                           : JPEG_SCAN_COMPLETED;
}

// Inputs of the libjpeg set-up, plain data so they may cross a longjmp.
struct StartJob {
  const unsigned char* header;
  std::size_t header_size;
  J_COLOR_SPACE color_space;
  bool cmyk;
  unsigned scale_num;
  bool fast_dct;
  bool fast_upsample;
  bool raw_data;  // planes for YccRows instead of libjpeg's upsampling and colour
};

bool GuardedStart(jpeg_decompress_struct* cinfo, ErrorManager* errors, const StartJob* job) {
  if (setjmp(errors->jump)) return false;
  jpeg_mem_src(cinfo, job->header, static_cast<unsigned long>(job->header_size));
  jpeg_read_header(cinfo, TRUE);
  cinfo->jpeg_color_space = job->color_space;
  cinfo->out_color_space = job->cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->scale_num = job->scale_num;
  cinfo->scale_denom = 8;
  cinfo->dct_method = job->fast_dct ? JDCT_IFAST : JDCT_ISLOW;
  cinfo->do_fancy_upsampling = job->fast_upsample ? FALSE : TRUE;
  cinfo->raw_data_out = job->raw_data ? TRUE : FALSE;
  jpeg_start_decompress(cinfo);
  return true;
}

// The sub-image's rows streamed through the resizer by detail::StreamRows (as in
// jpeg.cc); rows above the job's `skip` are decoded and dropped (they lie between the
// iMCU grid and the crop). libjpeg may longjmp out of detail::ReadScanlines, and
// StreamRows' frames hold only trivially destructible objects.
bool GuardedStreamRows(jpeg_decompress_struct* cinfo, ErrorManager* errors,
                       detail::ReadRowsFn read_rows, void* source, detail::RowStream* job) {
  if (setjmp(errors->jump)) return false;
  detail::StreamRows(job, read_rows, source);
  jpeg_abort_decompress(cinfo);
  return true;
}

// The started sub-image's RGB rows from libjpeg's raw-data mode: jpeg_read_raw_data runs
// the band feed and libjpeg's IDCT into planes of one iMCU row, and YccToRgbRow makes each
// output row from them. Three iMCU rows of planes rotate, because a 4:2:0 row at the top or
// bottom of an iMCU row reads a chroma row of the one above or below (libjpeg's context
// rows, jdmainct.c: above the first chroma row its copy, below the last likewise).
// Plain data: it lives across libjpeg's longjmp.
struct YccRows {
  jpeg_decompress_struct* cinfo;
  detail::ChromaSampling sampling;
  int width;                 // output pixels per row
  JDIMENSION height;         // output rows
  JDIMENSION imcu_rows;      // output rows per iMCU row (luma's v * its IDCT size)
  JDIMENSION chroma_rows;    // chroma rows per iMCU row (chroma's IDCT size)
  JDIMENSION chroma_height;  // chroma rows in all
  int chroma_width;          // chroma samples per row
  JDIMENSION total;          // iMCU rows
  JDIMENSION decoded;        // iMCU rows read so far, the last in planes[(decoded - 1) % 3]
  JDIMENSION next;           // the next output row
  JSAMPARRAY planes[3][3];   // [iMCU row % 3][component]: the rows jpeg_read_raw_data fills
};

std::size_t ReadYccRows(void* context, std::uint8_t* const* rows, std::size_t max_rows) {
  auto& s = *static_cast<YccRows*>(context);
  const bool upsampled = s.sampling != detail::ChromaSampling::k444;
  // A 4:2:0 iMCU row's last output rows read the next iMCU row's first chroma row.
  const JDIMENSION ahead = s.sampling == detail::ChromaSampling::k420 ? 2 : 1;
  std::size_t done = 0;
  for (; done < max_rows && s.next < s.height; ++done, ++s.next) {
    const JDIMENSION y = s.next;
    const JDIMENSION m = y / s.imcu_rows;
    while (s.decoded < std::min(m + ahead, s.total)) {
      JSAMPARRAY* planes = s.planes[s.decoded % 3];
      if (jpeg_read_raw_data(s.cinfo, planes, s.imcu_rows) == 0) return done;
      if (upsampled) {
        // YccToRgbRow's edges: each chroma row's first and last samples repeated outside it.
        const auto last = static_cast<std::size_t>(s.chroma_width) - 1;
        for (int c = 1; c < 3; ++c) {
          for (JDIMENSION r = 0; r < s.chroma_rows; ++r) {
            JSAMPROW row = planes[c][r];
            row[-1] = row[0];
            row[last + 1] = row[last];
          }
        }
      }
      ++s.decoded;
    }
    JDIMENSION near = y, far = y;
    if (s.sampling == detail::ChromaSampling::k420) {
      near = y / 2;
      far = y % 2 == 0 ? (near == 0 ? 0 : near - 1) : std::min(near + 1, s.chroma_height - 1);
    }
    const auto chroma = [&s](int c, JDIMENSION r) {
      return s.planes[(r / s.chroma_rows) % 3][c][r % s.chroma_rows];
    };
    detail::YccToRgbRow(s.sampling, s.planes[m % 3][0][y % s.imcu_rows], chroma(1, near),
                        chroma(1, far), chroma(2, near), chroma(2, far), s.width, rows[done]);
  }
  return done;
}

// The iMCU rows and columns of the whole image that a crop decode needs: the region
// JpegDecoder::DecodeInto decodes (its scale and margins, jpeg.cc), widened to whole
// iMCUs, and the sub-image they make.
struct Cover {
  int scale;                   // n, in eighths
  int col0, col1, row0, row1;  // iMCU columns and rows, inclusive
  int origin_x, origin_y;      // of the sub-image, in source pixels
  int sub_width, sub_height;   // in source pixels
};

Cover CoverFor(const Geometry& g, const CropPlan& plan, int out_width, int out_height,
               const JpegOptions& options) {
  Cover c{};
  const Rect& crop = plan.crop;
  int n = PlanScaleEighths(plan, out_width, out_height, options.decode_scaling);
  if (g.max_h >= 4 || g.max_v >= 4) n = n <= 4 ? 4 : 8;  // as jpeg.cc
  c.scale = n;
  const std::int64_t scaled_width = (std::int64_t{g.width} * n + 7) / 8;
  const std::int64_t scaled_height = (std::int64_t{g.height} * n + 7) / 8;
  const auto [x0, y0, x1, y1] = CropRegion(crop, n, g.max_h, g.max_v, scaled_width, scaled_height);
  const std::int64_t imcu_w = std::int64_t{g.max_h} * n, imcu_h = std::int64_t{g.max_v} * n;
  c.col0 = static_cast<int>(x0 / imcu_w);
  c.col1 = static_cast<int>((x1 - 1) / imcu_w);
  c.row0 = static_cast<int>(y0 / imcu_h);
  c.row1 = static_cast<int>((y1 - 1) / imcu_h);
  const int cols = (g.width + 8 * g.max_h - 1) / (8 * g.max_h);
  c.origin_x = c.col0 * 8 * g.max_h;
  c.origin_y = c.row0 * 8 * g.max_v;
  c.sub_width = c.col1 == cols - 1 ? g.width - c.origin_x : (c.col1 - c.col0 + 1) * 8 * g.max_h;
  c.sub_height =
      c.row1 == g.bands - 1 ? g.height - c.origin_y : (c.row1 - c.row0 + 1) * 8 * g.max_v;
  return c;
}

// libjpeg's IDCT size for 1x1 chroma at n/8 (jdmaster.c): n, doubled to 8 while ratios stay whole.
int ChromaIdctSize(const Geometry& g, int n) {
  int size = n;
  while (size < 8 && (g.max_h * n) % (size * 2) == 0 && (g.max_v * n) % (size * 2) == 0) size *= 2;
  return size;
}

// The sampling for which YccToRgbRow replaces libjpeg's upsampling and colour conversion
// in this decode, if any: YCbCr to RGB, 1x1 chroma, fancy upsampling, and chroma at luma's
// resolution (k444: 4:4:4, and 4:2:0 below full scale, its IDCT twice luma's), half its width
// (k422) or both halved (k420), those with chroma rows over two samples and above 1/8 (libjpeg
// replicates there). Elsewhere libjpeg's own passes, as on CPUs without the kernel.
std::optional<detail::ChromaSampling> FusedSampling(const Geometry& g, const Cover& cover,
                                                    const JpegOptions& options, bool portable) {
  if (portable || options.fast_upsample || !detail::YccKernelAvailable()) return std::nullopt;
  const int chroma_factors = g.h[1] * g.v[1] * g.h[2] * g.v[2];  // 1: both chroma 1x1
  if (g.components != 3 || g.color_space != JCS_YCbCr || chroma_factors != 1) return std::nullopt;
  const int n = cover.scale, chroma = ChromaIdctSize(g, n);
  const int across = g.max_h * n / chroma, down = g.max_v * n / chroma;  // luma per chroma
  if (across == 1 && down == 1) return detail::ChromaSampling::k444;
  const int chroma_width = (cover.sub_width * chroma + 8 * g.max_h - 1) / (8 * g.max_h);  // < 2^20
  if (n == 1 || chroma_width <= 2 || across != 2 || down > 2) return std::nullopt;
  return down == 1 ? detail::ChromaSampling::k422 : detail::ChromaSampling::k420;
}

}  // namespace

void CheckCoefficients(std::span<const std::byte> record, std::int64_t max_pixels) {
  const Geometry g = ParseGeometry(record, max_pixels);
  std::vector<std::uint8_t> raw;
  std::vector<GroupCursor> group_cursors;
  GroupDecoders decoders;
  for (int b = 0; b < g.bands; ++b) {
    DecompressGroups(record, g, b, b, 0, g.groups - 1, raw, group_cursors, decoders);
  }
}

UnpackedCoefficients UnpackCoefficients(std::span<const std::byte> record,
                                        std::int64_t max_pixels) {
  const Geometry g = ParseGeometry(record, max_pixels);
  std::vector<std::uint8_t> raw;
  std::vector<GroupCursor> group_cursors;
  GroupDecoders decoders;
  DecompressGroups(record, g, 0, g.bands - 1, 0, g.groups - 1, raw, group_cursors, decoders);
  UnpackedCoefficients u;
  u.record.assign(record.begin(), record.end());
  std::size_t total = 0;
  for (int c = 0; c < g.components; ++c) {
    u.first_block[c] = total;
    total += std::size_t(g.wib[c]) * std::size_t(g.hib[c]);
  }
  u.blocks.resize(total);
  for (int b = 0; b < g.bands; ++b) {
    for (int c = 0; c < g.components; ++c) {
      for (int y = 0; y < g.band_rows(b, c); ++y) {
        const std::size_t row = std::size_t(b) * std::size_t(g.v[c]) + std::size_t(y);
        Block* out = u.blocks.data() + u.first_block[c] + row * std::size_t(g.wib[c]);
        UnpackGroupsRow(group_cursors.data() + std::size_t(b) * std::size_t(g.groups), g, c, 0,
                        g.groups, 0, g.wib[c], out, false);
      }
    }
  }
  return u;
}

struct CoefficientDecoder::Impl {
  JpegOptions options;
  bool portable_kernels = false;  // CoefficientDecoder's portable_kernels
  jpeg_decompress_struct cinfo{};
  ErrorManager errors{};
  BandFeed feed{};
  std::vector<std::byte> header;
  std::vector<std::uint8_t> raw;  // the covering Huffman groups, decoded; only grows
  std::vector<GroupCursor> group_cursors;
  GroupDecoders group_decoders;
  std::vector<Block> blocks;
  detail::RowRing ring;
  Resizer resizer;
  std::optional<detail::ChromaSampling> fused;  // this decode's FusedSampling
  std::vector<std::uint8_t> planes;             // YccRows' planes; only grows
  std::vector<JSAMPROW> plane_rows;             // and their rows

  Impl(const JpegOptions& opts, bool portable)
      : options(opts), portable_kernels(portable), resizer(portable) {
    group_decoders.portable = portable;
    cinfo.err = detail::InstallErrorHandlers(errors);
    if (!GuardedCreate(&cinfo, &errors)) {
      throw std::runtime_error(std::string("libjpeg: cannot create a decompressor: ") +
                               errors.message);
    }
  }
  ~Impl() { jpeg_destroy_decompress(&cinfo); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  [[noreturn]] void Fail(const char* stage) {
    jpeg_abort_decompress(&cinfo);
    throw detail::FailureOf(errors, "coefficient record", stage);
  }

  DecodeReport Decode(std::span<const std::byte> rec, const UnpackedCoefficients* unpacked,
                      const CropPlan& plan, const PixelView& out, CoefficientTimes* times);
  void Start(const Geometry& g, const Cover& cover, const UnpackedCoefficients* unpacked);
  JDIMENSION Stream(const Geometry& g, const Cover& cover, const CropPlan& plan,
                    const PixelView& out, std::int64_t* resize_ns);
  YccRows StartYccRows();
};

// Sets libjpeg up for the cover's sub-image and installs the band feed.
void CoefficientDecoder::Impl::Start(const Geometry& g, const Cover& cover,
                                     const UnpackedCoefficients* unpacked) {
  BuildJpegHeader(g, cover.sub_width, cover.sub_height, header);
  const bool cmyk = g.color_space == JCS_CMYK || g.color_space == JCS_YCCK;
  fused = FusedSampling(g, cover, options, portable_kernels);
  const StartJob job{reinterpret_cast<const unsigned char*>(header.data()),
                     header.size(),
                     static_cast<J_COLOR_SPACE>(g.color_space),
                     cmyk,
                     static_cast<unsigned>(cover.scale),
                     options.fast_dct,
                     options.fast_upsample,
                     fused.has_value()};
  errors.Reset(true);
  if (!GuardedStart(&cinfo, &errors, &job)) Fail("set-up");
  // The controller trusts these to match the bands Decode checked.
  bool fits = cinfo.total_iMCU_rows == JDIMENSION(cover.row1 - cover.row0 + 1) &&
              cinfo.num_components == g.components;
  for (int c = 0; fits && c < g.components; ++c) {
    const jpeg_component_info& comp = cinfo.comp_info[c];
    const int first = cover.col0 * g.h[c];
    const int last_rows = std::min(g.v[c], g.hib[c] - cover.row1 * g.v[c]);
    const int sub_last_rows = static_cast<int>(comp.height_in_blocks) -
                              static_cast<int>(cinfo.total_iMCU_rows - 1) * comp.v_samp_factor;
    fits = comp.h_samp_factor == g.h[c] && comp.v_samp_factor == g.v[c] &&
           first + static_cast<int>(comp.width_in_blocks) <= g.wib[c] && sub_last_rows == last_rows;
    feed.wib[c] = g.wib[c];
    feed.first[c] = first;
    feed.whole[c] = unpacked ? unpacked->blocks.data() + unpacked->first_block[c] : nullptr;
  }
  feed.row0 = cover.row0;
  if (fused) {
    // What FusedSampling assumed of libjpeg's set-up.
    const JDIMENSION width = cinfo.output_width;
    const JDIMENSION chroma_width =
        *fused == detail::ChromaSampling::k444 ? width : (width + 1) / 2;
    fits = fits && cinfo.min_DCT_scaled_size == cover.scale;
    for (int c = 0; fits && c < 3; ++c) {
      const jpeg_component_info& comp = cinfo.comp_info[c];
      fits = comp.DCT_scaled_size == (c == 0 ? cover.scale : ChromaIdctSize(g, cover.scale)) &&
             comp.downsampled_width == (c == 0 ? width : chroma_width);
    }
  }
  if (!fits) {
    jpeg_abort_decompress(&cinfo);
    Corrupt("geometry does not match libjpeg's");
  }
  const std::size_t width = cinfo.comp_info[0].width_in_blocks;
  std::size_t widest = width;
  for (int c = 1; c < g.components; ++c) {
    widest = std::max<std::size_t>(widest, cinfo.comp_info[c].width_in_blocks);
  }
  if (blocks.size() < widest) blocks.resize(widest);
  feed.pub.start_input_pass = NoPass;
  feed.pub.consume_data = NoInput;
  feed.pub.start_output_pass = NoPass;
  feed.pub.decompress_data = DecompressRow;
  feed.pub.coef_arrays = nullptr;
  feed.geometry = &g;
  feed.group_cursors = unpacked == nullptr ? group_cursors.data() : nullptr;
  feed.k0 = cover.col0 / g.group_width;
  feed.groups = cover.col1 / g.group_width - feed.k0 + 1;
  feed.rows = cinfo.total_iMCU_rows;
  feed.blocks = blocks.data();
  feed.unpack_ns = 0;
  feed.idct_ns = 0;
  cinfo.coef = &feed.pub;
}

// Streams the started sub-image's rows through the resizer into `out`; returns the rows
// decoded.
JDIMENSION CoefficientDecoder::Impl::Stream(const Geometry& g, const Cover& cover,
                                            const CropPlan& plan, const PixelView& out,
                                            std::int64_t* resize_ns) {
  // The crop in sub-image pixels (the origin is on the 8-pixel grid, so it scales
  // exactly): the same fractions jpeg.cc gives the resizer.
  const double ox = cover.origin_x * cover.scale / 8.0;
  const double oy = cover.origin_y * cover.scale / 8.0;
  const double unlimited = std::numeric_limits<double>::infinity();
  const detail::PlanWindow w = detail::WindowFor(plan, cover.scale, ox, oy, unlimited, unlimited);
  const int ix0 = w.x0, iy0 = w.y0, iy1 = w.y1;
  resizer.Start(w.x1 - w.x0, w.y1 - w.y0, w.box, out, plan.flip);
  const bool cmyk = g.components == 4;
  const auto row_bytes = static_cast<std::size_t>(cinfo.output_width) * (cmyk ? 4 : 3);
  const auto ring_rows =
      std::min(static_cast<std::size_t>(resizer.MaxRows()) + kRingAhead, std::size_t(iy1));
  ring.Prepare(row_bytes, ring_rows, resizer.MaxRows());
  detail::ScanlineSource source{&cinfo, cmyk ? static_cast<int>(cinfo.output_width) : 0, g.adobe};
  YccRows ycc{};
  if (fused) ycc = StartYccRows();
  detail::RowStream stream{&resizer,
                           ring.rows.data(),
                           ring_rows,
                           static_cast<std::size_t>(iy0),
                           static_cast<std::size_t>(iy1),
                           out.height,
                           ring.row_pointers.data(),
                           static_cast<std::size_t>(ix0) * 3};
  const bool streamed =
      fused ? GuardedStreamRows(&cinfo, &errors, &ReadYccRows, &ycc, &stream)
            : GuardedStreamRows(&cinfo, &errors, &detail::ReadScanlines, &source, &stream);
  if (!streamed) Fail("data");
  if (stream.rows_written != out.height) {
    jpeg_abort_decompress(&cinfo);
    Corrupt("decoded " + std::to_string(stream.rows_read) + " of " + std::to_string(iy1) + " rows");
  }
  *resize_ns = stream.resize_ns;
  return stream.rows_read;
}

// Lays out three iMCU rows of planes for the started raw-data decode (Start checked that
// its geometry is what FusedSampling assumed).
YccRows CoefficientDecoder::Impl::StartYccRows() {
  YccRows s{};
  s.cinfo = &cinfo;
  s.sampling = *fused;
  s.width = static_cast<int>(cinfo.output_width);
  s.height = cinfo.output_height;
  s.imcu_rows = static_cast<JDIMENSION>(cinfo.max_v_samp_factor * cinfo.min_DCT_scaled_size);
  s.chroma_rows = static_cast<JDIMENSION>(cinfo.comp_info[1].DCT_scaled_size);
  s.chroma_height = cinfo.comp_info[1].downsampled_height;
  s.chroma_width = static_cast<int>(cinfo.comp_info[1].downsampled_width);
  s.total = cinfo.total_iMCU_rows;
  std::array<std::size_t, 3> stride{}, rows{};
  std::size_t bytes = 0, row_count = 0;
  for (int c = 0; c < 3; ++c) {
    const jpeg_component_info& comp = cinfo.comp_info[c];
    const auto size = static_cast<std::size_t>(comp.DCT_scaled_size);
    stride[c] = (comp.width_in_blocks * size + 2 * detail::kYccRowSlack + 63) / 64 * 64;
    rows[c] = static_cast<std::size_t>(comp.v_samp_factor) * size;
    bytes += 3 * rows[c] * stride[c];
    row_count += 3 * rows[c];
  }
  // Zeroed once, so that the kernel's reads beyond a row's samples read written bytes.
  if (planes.size() < bytes) planes.resize(bytes);
  if (plane_rows.size() < row_count) plane_rows.resize(row_count);
  std::size_t at = 0, row = 0;
  for (int slot = 0; slot < 3; ++slot) {
    for (int c = 0; c < 3; ++c) {
      s.planes[slot][c] = plane_rows.data() + row;
      for (std::size_t r = 0; r < rows[c]; ++r, at += stride[c]) {
        plane_rows[row++] = planes.data() + at + detail::kYccRowSlack;
      }
    }
  }
  return s;
}

DecodeReport CoefficientDecoder::Impl::Decode(std::span<const std::byte> rec,
                                              const UnpackedCoefficients* unpacked,
                                              const CropPlan& plan, const PixelView& out,
                                              CoefficientTimes* times) {
  const auto t0 = Clock::now();
  const Geometry g = ParseGeometry(rec, options.max_pixels);
  const Rect& crop = plan.crop;
  if (!detail::PlanFits(plan, g.width, g.height, out)) {
    throw detail::CropDoesNotFit(crop, g.width, g.height, "image");
  }
  const Cover cover = CoverFor(g, plan, out.width, out.height, options);
  if (unpacked == nullptr)  // every group the feed reads, checked before libjpeg starts
    DecompressGroups(rec, g, cover.row0, cover.row1, cover.col0 / g.group_width,
                     cover.col1 / g.group_width, raw, group_cursors, group_decoders);
  const auto t1 = Clock::now();
  feed.timed = times != nullptr;
  feed.portable = portable_kernels;
  Start(g, cover, unpacked);
  std::int64_t resize_ns = 0;
  const JDIMENSION rows_read = Stream(g, cover, plan, out, &resize_ns);
  DecodeReport report;
  report.scale_eighths = cover.scale;
  report.resize_seconds = static_cast<double>(resize_ns) * 1e-9;
  report.decoded = Rect{cover.origin_x * cover.scale / 8, cover.origin_y * cover.scale / 8,
                        static_cast<int>((std::int64_t{cover.sub_width} * cover.scale + 7) / 8),
                        static_cast<int>(rows_read)};
  if (times != nullptr) {
    const std::int64_t rows_ns =
        Nanos(Clock::now() - t1) - resize_ns - feed.unpack_ns - feed.idct_ns;
    times->groups_seconds = static_cast<double>(Nanos(t1 - t0)) * 1e-9;
    times->unpack_seconds = static_cast<double>(feed.unpack_ns) * 1e-9;
    times->idct_seconds = static_cast<double>(feed.idct_ns) * 1e-9;
    times->rows_seconds = static_cast<double>(std::max<std::int64_t>(rows_ns, 0)) * 1e-9;
  }
  return report;
}

CoefficientDecoder::CoefficientDecoder(const JpegOptions& options, bool portable_kernels)
    : impl_(std::make_unique<Impl>(options, portable_kernels)) {}
CoefficientDecoder::~CoefficientDecoder() = default;
CoefficientDecoder::CoefficientDecoder(CoefficientDecoder&&) noexcept = default;
CoefficientDecoder& CoefficientDecoder::operator=(CoefficientDecoder&&) noexcept = default;

const JpegOptions& CoefficientDecoder::options() const { return impl_->options; }

DecodeReport CoefficientDecoder::DecodeInto(std::span<const std::byte> record, const CropPlan& plan,
                                            const PixelView& out, CoefficientTimes* times) {
  return impl_->Decode(record, nullptr, plan, out, times);
}

DecodeReport CoefficientDecoder::DecodeUnpackedInto(const UnpackedCoefficients& unpacked,
                                                    const CropPlan& plan, const PixelView& out,
                                                    CoefficientTimes* times) {
  return impl_->Decode(unpacked.record, &unpacked, plan, out, times);
}

}  // namespace tilefeed::codecs
