#pragma once

// Streams a decoder's rows through Resizer's row-at-a-time resize, shared by the JPEG
// (codecs/jpeg.cc) and PNG (codecs/png.cc) decoders. Internal: not installed.
//
// A decoder hands out source rows one after another. They go into a ring of a few rows;
// as soon as the rows an output row needs are in the ring, that output row is resized,
// so the decoded region is never whole in memory and no row below the last one the
// resize reads is ever decoded.
//
// StreamRows keeps only trivially destructible locals, and so may be left by a longjmp
// from read_rows (libjpeg's error_exit) without undefined behaviour.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codecs/resize.h"

struct jpeg_decompress_struct;  // jpeglib.h

namespace tilefeed::codecs::detail {

// Decodes the next source rows into rows[0], rows[1], ..., at most max_rows (>= 1) of them;
// returns how many it decoded, 0 when the data ends early. A decoder that produces rows
// in groups (libjpeg's chroma row groups) fills several per call.
using ReadRowsFn = std::size_t (*)(void* context, std::uint8_t* const* rows, std::size_t max_rows);

// One streaming job. Source row r (counted from the first row read_rows gives) goes to
// ring[r % ring_rows]; output row y reads source rows [skip + FirstRow(y),
// skip + EndRow(y)), from byte column_bytes of each ring row.
struct RowStream {
  Resizer* resizer;
  std::uint8_t* const* ring;          // ring_rows rows
  std::size_t ring_rows;              // REQUIRES: >= resizer->MaxRows()
  std::size_t skip;                   // source rows above the first row the resize reads
  std::size_t source_rows;            // rows read_rows may give (rows below are never decoded)
  int out_rows;                       // output rows to write
  const std::uint8_t** row_pointers;  // resizer->MaxRows() entries
  std::size_t column_bytes;           // from a ring row's start to the resize's column 0
  std::size_t rows_read = 0;          // out: source rows decoded
  int rows_written = 0;               // out: output rows written (out_rows unless data ended)
  std::int64_t resize_ns = 0;         // out: time spent resizing
};

// Converts `width` CMYK pixels to RGB in place (the RGB row is shorter, so writing
// forward never overtakes reading). Adobe files store CMYK inverted, as Photoshop does.
// Both JPEG decoders (jpeg.cc, jpeg_coefficients.cc) use it for the same files.
void CmykRowToRgb(std::uint8_t* row, int width, bool inverted);

// The rows of a started libjpeg decompressor, for StreamRows: ReadScanlines is the
// ReadRowsFn of both JPEG decoders (jpeg.cc, jpeg_coefficients.cc). libjpeg's error_exit
// may longjmp out of it, so its callers run StreamRows inside their guarded functions.
struct ScanlineSource {
  jpeg_decompress_struct* cinfo;
  int cmyk_width;  // > 0: convert each CMYK row of this many pixels to RGB
  bool adobe;      // the CMYK is Adobe's inverted kind
};
std::size_t ReadScanlines(void* context, std::uint8_t* const* rows, std::size_t max_rows);

// Runs `job` to its end or until read_rows returns 0 (then rows_written < out_rows).
// Rows are decoded as far ahead as the ring allows, and resize time is summed per run
// of output rows, not per row.
void StreamRows(RowStream* job, ReadRowsFn read_rows, void* context);

// The ring's memory, owned by one decoder and reused from image to image: the vectors
// only grow, so a warmed-up decoder does not allocate.
struct RowRing {
  std::vector<std::uint8_t> scratch;
  std::vector<std::uint8_t*> rows;
  std::vector<const std::uint8_t*> row_pointers;

  // Makes ring_rows rows of row_bytes each, and max_rows row pointers.
  void Prepare(std::size_t row_bytes, std::size_t ring_rows, int max_rows);
};

}  // namespace tilefeed::codecs::detail
