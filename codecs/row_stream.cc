#include "codecs/row_stream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

namespace tilefeed::codecs::detail {

void StreamRows(RowStream* job, ReadRowsFn read_rows, void* context) {
  job->rows_read = 0;
  job->rows_written = 0;
  job->resize_ns = 0;
  Resizer& resizer = *job->resizer;
  while (job->rows_written < job->out_rows) {
    const int y = job->rows_written;
    const std::size_t first = job->skip + static_cast<std::size_t>(resizer.FirstRow(y));
    const std::size_t end = job->skip + static_cast<std::size_t>(resizer.EndRow(y));
    if (end > job->rows_read) {
      // Decode until the ring is full (row `first` is the oldest still needed) or the
      // source ends.
      const std::size_t until = std::min(first + job->ring_rows, job->source_rows);
      // Each call fills ring rows up to the ring's wrap.
      while (job->rows_read < until) {
        const std::size_t at = job->rows_read % job->ring_rows;
        const std::size_t got = read_rows(context, job->ring + at,
                                          std::min(until - job->rows_read, job->ring_rows - at));
        if (got == 0) return;
        job->rows_read += got;
      }
      if (end > job->rows_read) return;
    }
    const auto start = std::chrono::steady_clock::now();
    int y_end = y;
    // Every output row whose source rows are all decoded, before decoding more.
    while (y_end < job->out_rows &&
           job->skip + static_cast<std::size_t>(resizer.EndRow(y_end)) <= job->rows_read) {
      const int row_first = resizer.FirstRow(y_end);
      const int count = resizer.EndRow(y_end) - row_first;
      for (int k = 0; k < count; ++k) {
        job->row_pointers[k] =
            job->ring[(job->skip + static_cast<std::size_t>(row_first + k)) % job->ring_rows] +
            job->column_bytes;
      }
      resizer.ResizeRow(y_end, job->row_pointers);
      ++y_end;
    }
    job->resize_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    job->rows_written = y_end;
  }
}

std::size_t ReadScanlines(void* context, std::uint8_t* const* rows, std::size_t max_rows) {
  auto* source = static_cast<ScanlineSource*>(context);
  // libjpeg gives the rest of its current row group (two rows of a 4:2:0 file) per call,
  // so asking for several saves a pass through its call chain per row.
  const JDIMENSION got =
      jpeg_read_scanlines(source->cinfo, const_cast<JSAMPARRAY>(rows),
                          static_cast<JDIMENSION>(std::min<std::size_t>(max_rows, 1u << 16)));
  if (source->cmyk_width > 0) {
    for (JDIMENSION r = 0; r < got; ++r) CmykRowToRgb(rows[r], source->cmyk_width, source->adobe);
  }
  return got;  // 0: the data ended (truncated)
}

void RowRing::Prepare(std::size_t row_bytes, std::size_t ring_rows, int max_rows) {
  if (scratch.size() < row_bytes * ring_rows) scratch.resize(row_bytes * ring_rows);
  if (rows.size() < ring_rows) rows.resize(ring_rows);
  for (std::size_t r = 0; r < ring_rows; ++r) rows[r] = scratch.data() + r * row_bytes;
  if (row_pointers.size() < static_cast<std::size_t>(max_rows)) row_pointers.resize(max_rows);
}

void CmykRowToRgb(std::uint8_t* row, int width, bool inverted) {
  for (int x = 0; x < width; ++x) {
    const std::size_t at = 4 * std::size_t(x), out = 3 * std::size_t(x);
    int c = row[at], m = row[at + 1], y = row[at + 2], k = row[at + 3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    row[out] = static_cast<std::uint8_t>((c * k + 127) / 255);
    row[out + 1] = static_cast<std::uint8_t>((m * k + 127) / 255);
    row[out + 2] = static_cast<std::uint8_t>((y * k + 127) / 255);
  }
}

}  // namespace tilefeed::codecs::detail
