#include <stdexcept>

#include "loader/output_convert.h"
#include "tilefeed/cuda/convert.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::cuda {

std::size_t ConvertedBytes(const BatchShape& shape, const loader::OutputFormat& format) {
  return shape.elements() * loader::ElementSize(format.dtype);
}

void CheckFormat(const loader::OutputFormat& format) {
  loader::LoaderOptions options;  // the one check of mean/std: the loader's
  options.output = format;
  if (auto problem = loader::OptionsProblem(options)) {
    throw std::invalid_argument("OutputFormat: " + *problem);
  }
}

void ConvertOnHost(std::span<const std::uint8_t> src, const BatchShape& shape,
                   const loader::OutputFormat& format, std::span<std::byte> dst) {
  loader::OutputConverter(format).Convert(src, shape.samples, shape.height, shape.width, dst);
}

}  // namespace tilefeed::cuda
