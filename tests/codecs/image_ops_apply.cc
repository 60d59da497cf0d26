// Test-only driver of codecs/image_ops.h for test_image_ops.py, which compares its output
// with torchvision's on the same pixels.
//
//   image_ops_apply IMAGE WIDTH HEIGHT < JOBS > OUTPUTS
//
// IMAGE holds WIDTH x HEIGHT packed RGB bytes. Each line of JOBS is an op and its
// parameters (see Apply below); for each, the op runs on a fresh copy of the image laid
// out with padding after every row (a row stride beyond width * 3, whose bytes must stay
// untouched), and the packed result is written to stdout. `magnitude OP WIDE BINS` prints
// PolicyMagnitude of every bin instead, one per line, at the image's size.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "codecs/image_ops.h"

namespace {

using tilefeed::codecs::ImageOpScratch;
using tilefeed::codecs::PixelView;
using tilefeed::codecs::PolicyOp;
using tilefeed::codecs::Rgb;

constexpr int kPadding = 7;
constexpr std::uint8_t kPad = 0xa5;

Rgb ReadRgb(std::istream& in) {
  int r = 0;
  int g = 0;
  int b = 0;
  in >> r >> g >> b;
  return {static_cast<std::uint8_t>(r), static_cast<std::uint8_t>(g), static_cast<std::uint8_t>(b)};
}

bool Apply(const std::string& op, std::istream& args, const PixelView& image,
           ImageOpScratch& scratch) {
  namespace c = tilefeed::codecs;
  double value = 0;
  if (op == "brightness" && args >> value) return c::AdjustBrightness(image, value), true;
  if (op == "contrast" && args >> value) return c::AdjustContrast(image, value), true;
  if (op == "saturation" && args >> value) return c::AdjustSaturation(image, value), true;
  if (op == "hue" && args >> value) return c::AdjustHue(image, value), true;
  if (op == "sharpness" && args >> value) return c::AdjustSharpness(image, value, scratch), true;
  if (op == "solarize" && args >> value) return c::Solarize(image, value), true;
  if (op == "posterize" && args >> value) {
    return c::Posterize(image, static_cast<int>(value)), true;
  }
  if (op == "grayscale") return c::Grayscale(image), true;
  if (op == "autocontrast") return c::AutoContrast(image), true;
  if (op == "equalize") return c::Equalize(image), true;
  if (op == "erase") {
    tilefeed::codecs::Rect rect;
    args >> rect.y >> rect.x >> rect.height >> rect.width;
    const Rgb rgb = ReadRgb(args);
    return args ? (c::Erase(image, rect, rgb), true) : false;
  }
  int index = 0;
  if (op == "policy" && args >> index >> value) {
    const Rgb fill = ReadRgb(args);
    if (!args || index < 0 || index >= c::kPolicyOps) return false;
    return c::ApplyPolicyOp(image, static_cast<PolicyOp>(index), value, fill, scratch), true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: image_ops_apply IMAGE WIDTH HEIGHT < JOBS > OUTPUTS\n";
    return 2;
  }
  const int width = std::stoi(argv[2]);
  const int height = std::stoi(argv[3]);
  std::ifstream file(argv[1], std::ios::binary);
  const std::vector<std::uint8_t> packed((std::istreambuf_iterator<char>(file)),
                                         std::istreambuf_iterator<char>());
  const std::size_t row = std::size_t{3} * width;
  if (packed.size() != row * height) {
    std::cerr << "image_ops_apply: " << argv[1] << " is not " << width << "x" << height << "\n";
    return 2;
  }
  const std::size_t stride = row + kPadding;
  ImageOpScratch scratch;
  std::vector<std::uint8_t> padded(stride * height);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream args(line);
    std::string op;
    args >> op;
    if (op.empty()) continue;
    if (op == "magnitude") {
      int index = 0;
      int wide = 0;
      int bins = 0;
      args >> index >> wide >> bins;
      for (int bin = 0; bin < bins; ++bin) {
        std::printf("%.17g\n", tilefeed::codecs::PolicyMagnitude(static_cast<PolicyOp>(index), bin,
                                                                 bins, wide != 0, height, width));
      }
      continue;
    }
    std::fill(padded.begin(), padded.end(), kPad);
    for (int y = 0; y < height; ++y) {
      std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(row * y), row,
                  padded.begin() + static_cast<std::ptrdiff_t>(stride * y));
    }
    const PixelView view = PixelView::Interleaved(padded.data(), width, height, 3,
                                                  static_cast<std::ptrdiff_t>(stride));
    if (!Apply(op, args, view, scratch)) {
      std::cerr << "image_ops_apply: bad job: " << line << "\n";
      return 2;
    }
    for (int y = 0; y < height; ++y) {
      for (int k = 0; k < kPadding; ++k) {
        if (padded[stride * y + row + k] != kPad) {
          std::cerr << "image_ops_apply: " << op << " wrote past row " << y << "\n";
          return 3;
        }
      }
      std::fwrite(padded.data() + stride * y, 1, row, stdout);
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}
