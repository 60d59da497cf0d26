#pragma once

// Shared helpers of the transport tests: a small JPEG ImageFolder, a fast synthetic raw
// source, and collecting a stream's batches for byte-for-byte comparison.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/source.h"
#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::transport::testing {

// Raw HWC samples made on the fly: sample i is `side` x `side` x 3 bytes of (i * 7 + k).
class RawSource final : public loader::Source {
 public:
  RawSource(std::size_t count, int side) : count_(count), side_(side) {}
  std::size_t size() const override { return count_; }
  loader::SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override;
  std::string Describe(std::size_t index) const override { return "raw#" + std::to_string(index); }
  std::int32_t Label(std::size_t index) const override {
    return static_cast<std::int32_t>(index % 10);
  }

 private:
  std::size_t count_;
  int side_;
};

// A 3-class ImageFolder of `per_class` small JPEGs in a fresh temp dir.
tilefeed::testing::TempDir MakeJpegFolder(int per_class);

// Eval-mode options that make every batch a pure function of the data.
loader::LoaderOptions SmallOptions(std::size_t batch_size, int image_size, std::uint64_t epochs);

struct Collected {
  struct One {
    std::uint64_t epoch, index;
    std::vector<std::uint8_t> images;
    std::vector<std::int32_t> labels;
    std::vector<std::uint64_t> indices;
    friend bool operator==(const One&, const One&) = default;
  };
  std::vector<One> batches;
  std::size_t epoch_ends = 0;
};

// Reads `stream` until it ends (or `max_epochs` epoch ends), copying every batch.
Collected Drain(BatchStream& stream, std::size_t max_epochs);

}  // namespace tilefeed::transport::testing
