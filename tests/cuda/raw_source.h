#pragma once

// A source of raw HWC samples made on the fly, for the cuda tests: sample i is side x side x 3
// bytes of a hash of (i, byte), so every byte value occurs and no two samples are alike.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::cuda::testing {

class RawSource final : public loader::Source {
 public:
  RawSource(std::size_t count, int side) : count_(count), side_(side) {}
  std::size_t size() const override { return count_; }
  loader::SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override {
    buffer.resize(static_cast<std::size_t>(side_) * side_ * 3);
    for (std::size_t k = 0; k < buffer.size(); ++k) {
      std::uint64_t h = (index + 1) * 0x9E3779B97F4A7C15ull ^ (k * 0xBF58476D1CE4E5B9ull);
      h ^= h >> 29;
      buffer[k] = static_cast<std::byte>(h * 0x94D049BB133111EBull >> 56);
    }
    loader::SampleInfo info;
    info.label = Label(index);
    info.codec = loader::SampleCodec::kRawHwc;
    info.height = side_;
    info.width = side_;
    info.channels = 3;
    return info;
  }
  std::string Describe(std::size_t index) const override { return "raw#" + std::to_string(index); }
  std::int32_t Label(std::size_t index) const override {
    return static_cast<std::int32_t>(index % 10);
  }

 private:
  std::size_t count_;
  int side_;
};

// Eval-mode options (no random crop: the image is the sample) for `side`-pixel samples.
inline loader::LoaderOptions RawOptions(std::size_t batch_size, int side, std::uint64_t epochs) {
  loader::LoaderOptions o;
  o.batch_size = batch_size;
  o.image_size = side;
  o.eval_resize = side;
  o.mode = loader::Mode::kEval;
  o.workers = 2;
  o.prefetch_depth = 3;
  o.seed = 11;
  o.epochs = epochs;
  return o;
}

}  // namespace tilefeed::cuda::testing
