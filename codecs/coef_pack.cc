// Packing a JPEG into a coefficient record (PackCoefficients): libjpeg reads the file's
// coefficients (jpeg_read_coefficients, no IDCT), and each band's column groups are written
// as DC deltas, nonzero masks and values, stored or Huffman-coded (docs/shard-format.md).
// The record's format is codecs/coef_format.h; its decoder is jpeg_coefficients.cc.

#include <algorithm>
#include <array>
#include <csetjmp>
#include <cstdio>
#include <string>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
// clang-format off
#include <jpeglib.h>
// clang-format on

#include "codecs/coef_blocks.h"
#include "codecs/coef_format.h"
#include "codecs/coef_huffman.h"
#include "codecs/jpeg_coefficients.h"
#include "codecs/libjpeg_errors.h"

namespace tilefeed::codecs {
namespace {

using ErrorManager = detail::LibjpegErrors;

using detail::Geometry;
using detail::PutLe16;
using detail::PutLe32;
using detail::StoreLe;

bool GuardedAccess(jpeg_decompress_struct* cinfo, ErrorManager* errors, jvirt_barray_ptr array,
                   JDIMENSION row, JDIMENSION rows, JBLOCKARRAY* out) {
  if (setjmp(errors->jump)) return false;
  *out = (*cinfo->mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(cinfo), array, row, rows,
                                           FALSE);
  return true;
}

// One libjpeg decompressor for a pack, released in every case.
struct Reader {
  jpeg_decompress_struct cinfo{};
  ErrorManager errors{};
  detail::LibjpegProgress progress{};
  bool created = false;

  explicit Reader(int max_scans) {
    cinfo.err = detail::InstallErrorHandlers(errors);  // stops on damage
    created = detail::GuardedCreate(&cinfo, &errors);
    cinfo.progress = detail::InstallScanLimit(progress, errors, max_scans);
  }
  ~Reader() { jpeg_destroy_decompress(&cinfo); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
};

// Why a file that libjpeg read cannot be stored, or nullptr.
const char* Unstorable(const jpeg_decompress_struct& cinfo) {
  if (cinfo.data_precision != 8) return "not 8-bit samples";
  if (!detail::ColorSpaceFits(cinfo.jpeg_color_space, cinfo.num_components)) {
    return "colour space and component count the decoder does not convert";
  }
  int blocks_in_mcu = 0;
  for (int c = 0; c < cinfo.num_components; ++c) {
    blocks_in_mcu += cinfo.comp_info[c].h_samp_factor * cinfo.comp_info[c].v_samp_factor;
  }
  if (cinfo.num_components > 1 && blocks_in_mcu > 10) return "sampling factors too large";
  return nullptr;
}

// The header of a record for the image `cinfo` has read; tables deduplicated.
Geometry GeometryOf(const jpeg_decompress_struct& cinfo, const CoefficientPackOptions& options) {
  Geometry g;
  g.coding = static_cast<int>(options.coding);
  g.width = static_cast<int>(cinfo.image_width);
  g.height = static_cast<int>(cinfo.image_height);
  g.components = cinfo.num_components;
  g.color_space = cinfo.jpeg_color_space;
  g.adobe = cinfo.saw_Adobe_marker != 0;
  for (int c = 0; c < g.components; ++c) {
    const jpeg_component_info& comp = cinfo.comp_info[c];
    g.h[c] = comp.h_samp_factor;
    g.v[c] = comp.v_samp_factor;
    g.max_h = std::max(g.max_h, g.h[c]);
    g.max_v = std::max(g.max_v, g.v[c]);
    std::array<std::uint16_t, 64> table{};
    for (int k = 0; k < 64; ++k) table[k] = comp.quant_table->quantval[k];
    int t = 0;
    while (t < g.tables && g.quant[t] != table) ++t;
    if (t == g.tables) g.quant[g.tables++] = table;
    g.table[c] = t;
  }
  g.group_width = std::clamp(options.group_pixels / (8 * g.max_h), 1, detail::kMaxGroupWidth);
  detail::ComputeBlocks(g);
  return g;
}

void AppendHeader(const Geometry& g, std::vector<std::byte>& out) {
  for (std::uint8_t b : detail::kMagic) out.push_back(std::byte{b});
  out.push_back(std::byte{2});  // the version
  out.push_back(std::byte(g.components));
  out.push_back(std::byte(g.color_space));
  out.push_back(std::byte(g.adobe ? 1 : 0));
  PutLe16(out, static_cast<std::uint32_t>(g.width));
  PutLe16(out, static_cast<std::uint32_t>(g.height));
  out.push_back(std::byte(g.tables));
  for (int i = 0; i < 3; ++i) out.push_back(std::byte{0});
  for (int c = 0; c < g.components; ++c) {
    out.push_back(std::byte(g.h[c]));
    out.push_back(std::byte(g.v[c]));
    out.push_back(std::byte(g.table[c]));
  }
  for (int t = 0; t < g.tables; ++t) {
    for (std::uint16_t q : g.quant[t]) PutLe16(out, q);
  }
  PutLe32(out, static_cast<std::uint32_t>(g.bands));
  out.push_back(std::byte(g.coding));
  out.push_back(std::byte(g.group_width));
  PutLe16(out, 0);
  PutLe32(out, static_cast<std::uint32_t>(g.groups));
}

// --- Column groups of blocks as DC deltas, nonzero masks and values.

// The four streams of one column group (docs/shard-format.md): per block a DC delta
// (i16) and the 64-bit zigzag nonzero mask of its AC coefficients; the nonzero values as
// i8, where 0x80 says "the next i16 of the wide stream".
struct GroupStreams {
  std::vector<std::byte> dc, masks, values, wide;
  void Clear() {
    dc.clear();
    masks.clear();
    values.clear();
    wide.clear();
  }
  // Blocks [begin, end) of one block row.
  void AddRow(const JBLOCKROW row, int begin, int end) {
    std::uint16_t previous = 0;
    for (int x = begin; x < end; ++x) {
      const JCOEF* block = row[x];
      const auto dc_value = static_cast<std::uint16_t>(block[0]);
      PutLe16(dc, static_cast<std::uint16_t>(dc_value - previous));
      previous = dc_value;
      std::uint64_t mask = 0;
      for (int k = 1; k < 64; ++k) {
        const int value = block[detail::kNatural[k]];
        if (value == 0) continue;
        mask |= std::uint64_t{1} << k;
        if (value < -127 || value > 127) {
          values.push_back(std::byte{0x80});
          PutLe16(wide, static_cast<std::uint16_t>(value));
        } else {
          values.push_back(std::byte(static_cast<std::uint8_t>(value)));
        }
      }
      PutLe32(masks, static_cast<std::uint32_t>(mask));
      PutLe32(masks, static_cast<std::uint32_t>(mask >> 32));
    }
  }
};

// --- Decoding.

// The raw bytes of group k of `band` (DC deltas, masks, values, wide) into
// `raw`. False if libjpeg failed.
bool GroupRaw(Reader& r, jvirt_barray_ptr* arrays, const Geometry& g, int band, int k,
              GroupStreams& streams, std::vector<char>& raw) {
  std::array<JBLOCKARRAY, 4> rows{};
  streams.Clear();
  for (int c = 0; c < g.components; ++c) {
    // In-memory arrays (jpeg_read_coefficients realises them whole), so access is cheap;
    // asked again per group, as libjpeg promises a row pointer only until the next access.
    const auto start = static_cast<JDIMENSION>(band * g.v[c]);
    if (!GuardedAccess(&r.cinfo, &r.errors, arrays[c], start, static_cast<JDIMENSION>(g.v[c]),
                       &rows[c])) {
      return false;
    }
    for (int y = 0; y < g.band_rows(band, c); ++y) {
      streams.AddRow(rows[c][y], g.group_begin(k, c), g.group_end(k, c));
    }
  }
  raw.clear();
  for (const auto* s : {&streams.dc, &streams.masks, &streams.values, &streams.wide}) {
    raw.insert(raw.end(), reinterpret_cast<const char*>(s->data()),
               reinterpret_cast<const char*>(s->data() + s->size()));
  }
  return true;
}

// Huffman groups (coding 3): every group's raw bytes first, since the
// record's tables count them all; then the tables (after their u32 size) and the groups.
bool PackHuffGroups(Reader& r, jvirt_barray_ptr* arrays, const Geometry& g,
                    std::vector<std::byte>& out, std::size_t table_at) {
  GroupStreams streams;
  std::vector<char> raw, all;
  std::vector<std::size_t> ends;
  detail::HuffEncoder encoder(g.huff_classes());
  const auto shape = [&](int band, int k) {
    return detail::HuffGroupShape{g.group_blocks(band, k), g.group_blocks(band, k, 0)};
  };
  for (int band = 0; band < g.bands; ++band) {
    for (int k = 0; k < g.groups; ++k) {
      if (!GroupRaw(r, arrays, g, band, k, streams, raw)) return false;
      encoder.Count(reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size(), shape(band, k));
      all.insert(all.end(), raw.begin(), raw.end());
      ends.push_back(all.size());
    }
  }
  encoder.Finish();
  const std::size_t size_at = out.size();
  PutLe32(out, 0);
  encoder.AppendTables(out);
  const std::size_t table_bytes = out.size() - size_at - 4;
  StoreLe(out.data() + size_at, static_cast<std::uint32_t>(table_bytes));
  for (std::size_t e = 0, begin = 0; e < ends.size(); begin = ends[e++]) {
    const std::size_t at = out.size(), size = ends[e] - begin;
    const auto band = static_cast<int>(e / std::size_t(g.groups));
    const auto k = static_cast<int>(e % std::size_t(g.groups));
    encoder.AppendGroup(reinterpret_cast<const std::uint8_t*>(all.data() + begin), size,
                        shape(band, k), out);
    const std::size_t packed = out.size() - at;
    StoreLe(out.data() + table_at + 8 * e, static_cast<std::uint32_t>(packed));
    StoreLe(out.data() + table_at + 8 * e + 4, static_cast<std::uint32_t>(size));
  }
  return true;
}

// Each band's column groups, each coded on its own. False if libjpeg failed.
bool PackGroups(Reader& r, jvirt_barray_ptr* arrays, const Geometry& g,
                std::vector<std::byte>& out) {
  const std::size_t table_at = out.size();
  out.resize(out.size() + 8 * std::size_t(g.bands) * std::size_t(g.groups));
  if (g.coding == 3) return PackHuffGroups(r, arrays, g, out, table_at);
  GroupStreams streams;
  std::vector<char> raw;
  for (int band = 0; band < g.bands; ++band) {
    for (int k = 0; k < g.groups; ++k) {
      if (!GroupRaw(r, arrays, g, band, k, streams, raw)) return false;
      // Stored: the raw bytes themselves, packed size = raw size.
      const std::size_t entry_at =
          table_at + 8 * (std::size_t(band) * std::size_t(g.groups) + std::size_t(k));
      const auto* bytes = reinterpret_cast<const std::byte*>(raw.data());
      out.insert(out.end(), bytes, bytes + raw.size());
      StoreLe(out.data() + entry_at, static_cast<std::uint32_t>(raw.size()));
      StoreLe(out.data() + entry_at + 4, static_cast<std::uint32_t>(raw.size()));
    }
  }
  return true;
}
}  // namespace

CoefficientPackResult PackCoefficients(std::span<const std::byte> jpeg,
                                       const CoefficientPackOptions& options) {
  if (options.group_pixels < 1 || (options.coding != CoefficientCoding::kNone &&
                                   options.coding != CoefficientCoding::kHuffman)) {
    throw std::invalid_argument("CoefficientPackOptions out of range");
  }
  const auto refuse = &detail::Refused<CoefficientPackResult>;
  if (const char* what = SniffNonJpeg(jpeg)) {
    return refuse({DecodeErrorKind::kNotJpeg, std::string("not a JPEG: ") + what});
  }
  Reader r(options.max_scans);
  if (!r.created) return refuse({DecodeErrorKind::kCorrupt, r.errors.message});
  if (!detail::GuardedReadHeader(&r.cinfo, &r.errors, jpeg)) {
    return refuse(detail::FailureOf(r.errors, "JPEG", "header"));
  }
  if (const char* why = Unstorable(r.cinfo)) {
    return refuse({DecodeErrorKind::kUnsupported, std::string("unsupported JPEG: ") + why});
  }
  if (std::int64_t{r.cinfo.image_width} * r.cinfo.image_height > options.max_pixels) {
    return refuse(detail::TooLarge(r.cinfo.image_width, r.cinfo.image_height, options.max_pixels));
  }
  jvirt_barray_ptr* arrays = nullptr;
  if (!detail::GuardedReadCoefficients(&r.cinfo, &r.errors, &arrays)) {
    return refuse(detail::FailureOf(r.errors, "JPEG", "data"));
  }
  if (const char* why = detail::NotPlain(r.cinfo)) {
    return refuse({DecodeErrorKind::kUnsupported, std::string("unsupported JPEG: ") + why});
  }
  const Geometry g = GeometryOf(r.cinfo, options);
  CoefficientPackResult result;
  AppendHeader(g, result.record);
  if (!PackGroups(r, arrays, g, result.record)) {
    return refuse(detail::FailureOf(r.errors, "JPEG", "coefficients"));
  }
  jpeg_abort_decompress(&r.cinfo);
  result.packed = true;
  return result;
}

}  // namespace tilefeed::codecs
