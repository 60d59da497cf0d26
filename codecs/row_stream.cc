#include "codecs/row_stream.h"

#include <algorithm>
#include <chrono>

namespace tilefeed::codecs::detail {

void StreamRows(RowStream* job, ReadRowFn read_row, void* context) {
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
      while (job->rows_read < until) {
        if (!read_row(context, job->ring[job->rows_read % job->ring_rows])) return;
        ++job->rows_read;
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
