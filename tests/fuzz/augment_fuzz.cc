// libFuzzer target: an augment spec's text, which comes in through every door and from a
// peer's session terms. std::invalid_argument from the parse is the only acceptable failure.
// A spec that parses prints a text that parses back to the same spec; one that can drive a
// loader (no AugmentProblem) draws a crop inside a large image, and pixel ops inside a small
// one that run on it. Input: bytes 0-1 the small image's width and height (1 to 64), bytes
// 2-3 the large one's (multiples of 64), byte 4 the sample, the rest the text.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "codecs/image_ops.h"
#include "tilefeed/loader/augment.h"
#include "tilefeed/loader/sampler.h"

namespace {

namespace loader = tilefeed::loader;
namespace codecs = tilefeed::codecs;

bool Inside(const codecs::Rect& r, int width, int height) {
  return r.x >= 0 && r.y >= 0 && r.width >= 0 && r.height >= 0 && r.x + r.width <= width &&
         r.y + r.height <= height;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  const int width = data[0] % 64 + 1, height = data[1] % 64 + 1;
  const int image_width = (data[2] + 1) * 64, image_height = (data[3] + 1) * 64;
  const std::string_view text(reinterpret_cast<const char*>(data + 5), size - 5);
  loader::AugmentSpec spec;
  try {
    spec = loader::ParseAugmentSpec(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (loader::ParseAugmentSpec(loader::AugmentSpecText(spec)) != spec) std::abort();
  if (loader::AugmentProblem(spec)) return 0;

  loader::SampleRng rng(7, 1, data[4]);
  const loader::AugmentOp& crop = spec.front();
  const codecs::Rect box = loader::RandomResizedCrop(image_width, image_height,
                                                     {.scale_min = crop.scale_min,
                                                      .scale_max = crop.scale_max,
                                                      .ratio_min = crop.ratio_min,
                                                      .ratio_max = crop.ratio_max},
                                                     rng);
  if (box.width < 1 || box.height < 1 || !Inside(box, image_width, image_height)) std::abort();
  const std::vector<loader::PixelOp> ops = loader::DrawPixelOps(spec, width, height, rng);
  for (const loader::PixelOp& op : ops) {
    if (op.kind == loader::PixelOpKind::kErase && !Inside(op.area, width, height)) std::abort();
  }
  std::vector<std::uint8_t> pixels(std::size_t(width) * std::size_t(height) * 3);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 37);
  codecs::ImageOpScratch scratch;
  loader::ApplyPixelOps(ops, codecs::PixelView::Interleaved(pixels.data(), width, height), scratch);
  return 0;
}
