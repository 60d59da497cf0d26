#pragma once

// A tiny learnable ImageFolder for trainer tests: `classes` classes of small JPEGs whose
// mean colour depends on the class, written under `root`.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::testing {

inline void WriteTinyImageFolder(const std::filesystem::path& root, int classes, int per_class,
                                 int side = 40) {
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      std::vector<std::uint8_t> pixels(static_cast<std::size_t>(side) * side * 3);
      std::uint64_t state = static_cast<std::uint64_t>(c * 1000 + i + 1) * 0x9E3779B97F4A7C15ULL;
      for (std::size_t p = 0; p < pixels.size(); ++p) {
        state ^= state >> 13;
        state ^= state << 7;
        state ^= state >> 17;
        const int base = (p % 3 == static_cast<std::size_t>(c % 3)) ? 180 : 60;
        pixels[p] = static_cast<std::uint8_t>(base + static_cast<int>(state % 40));
      }
      codecs::EncodeOptions options;
      const std::vector<std::byte> jpeg =
          codecs::EncodeJpeg(codecs::ConstPixelView{pixels.data(), side, side, 3,
                                                    static_cast<std::ptrdiff_t>(side) * 3},
                             options);
      WriteFile(root / ("class" + std::to_string(c)) / (std::to_string(i) + ".jpg"), jpeg);
    }
  }
}

}  // namespace tilefeed::testing
