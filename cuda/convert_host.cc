#include "loader/output_convert.h"
#include "tilefeed/cuda/convert.h"

namespace tilefeed::cuda {

std::size_t ConvertedBytes(const BatchShape& shape, const loader::OutputFormat& format) {
  return shape.elements() * loader::ElementSize(format.dtype);
}

void CheckFormat(const loader::OutputFormat& format) {
  (void)loader::OutputConverter(format);  // its constructor checks the format and throws
}

void ConvertOnHost(std::span<const std::uint8_t> src, const BatchShape& shape,
                   const loader::OutputFormat& format, std::span<std::byte> dst) {
  loader::OutputConverter(format).Convert(src, shape.samples, shape.height, shape.width, dst);
}

}  // namespace tilefeed::cuda
