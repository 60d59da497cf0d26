// A custom Source: feeding the loader from your own storage.
//
// The loader asks a Source only for bytes: implement size(), Read(), Describe() and Label()
// (class_names() is optional) and the Loader does the rest (shuffle, slices of many
// instances, decode, crop, batches). Read() is called from several decode threads at once,
// so it must only read shared state; each caller brings its own buffer, and assign() reuses
// that buffer's capacity, so steady-state reads do not allocate.
//
// This program keeps a small dataset in memory (JPEGs it encodes itself), reads one epoch
// through a Loader and checks that every sample arrived exactly once with its label. It is
// built with tilefeed (target custom_source_example, run by ctest) and against an installed
// tilefeed (tests/install/consumer), as your program would be:
//   find_package(tilefeed REQUIRED COMPONENTS loader)
//   target_link_libraries(app PRIVATE tilefeed::loader)

#include <tilefeed/codecs/jpeg_encoder.h>
#include <tilefeed/loader/loader.h>
#include <tilefeed/loader/source.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace loader = tilefeed::loader;

// The custom Source. Copy this to read from a database, an object store, a packed format of
// your own: anything that can hand over one sample's bytes by index.
class InMemorySource final : public loader::Source {
 public:
  struct Sample {
    std::vector<std::byte> bytes;  // e.g. a JPEG file's contents
    std::int32_t label = 0;
  };

  explicit InMemorySource(std::vector<Sample> samples) : samples_(std::move(samples)) {}

  std::size_t size() const override { return samples_.size(); }

  loader::SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override {
    const Sample& sample = samples_.at(index);
    buffer.assign(sample.bytes.begin(), sample.bytes.end());
    return loader::SampleInfo{.label = sample.label, .codec = loader::SampleCodec::kEncoded};
  }

  std::string Describe(std::size_t index) const override {
    return "memory#" + std::to_string(index);
  }

  std::int32_t Label(std::size_t index) const override { return samples_.at(index).label; }

 private:
  std::vector<Sample> samples_;
};

namespace {

constexpr int kClasses = 3;

// `count` small JPEGs whose grey level and label follow their index.
std::vector<InMemorySource::Sample> MakeSamples(int count) {
  std::vector<InMemorySource::Sample> samples;
  for (int i = 0; i < count; ++i) {
    const int width = 48;
    const int height = 40;
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width * height * 3),
                                     static_cast<std::uint8_t>(20 * i));
    const tilefeed::codecs::ConstPixelView view{pixels.data(), width, height, 3,
                                                static_cast<std::ptrdiff_t>(width) * 3};
    samples.push_back({tilefeed::codecs::EncodeJpeg(view, {}), i % kClasses});
  }
  return samples;
}

// Reads one epoch and checks it; returns the number of failures.
int ReadOneEpoch(int sample_count) {
  loader::LoaderOptions options;
  options.batch_size = 4;
  options.image_size = 32;
  options.workers = 2;
  options.prefetch_depth = 2;
  options.seed = 7;
  options.epochs = 1;
  loader::Loader reader(std::make_unique<InMemorySource>(MakeSamples(sample_count)), options);

  std::vector<int> seen(static_cast<std::size_t>(sample_count), 0);
  int failures = 0;
  std::size_t batches = 0;
  for (loader::Batch& batch : reader) {
    ++batches;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::uint64_t sample = batch.sample_indices()[i];
      ++seen.at(sample);
      if (batch.labels()[i] != static_cast<std::int32_t>(sample % kClasses)) {
        std::fprintf(stderr, "custom_source: sample %llu has label %d\n",
                     static_cast<unsigned long long>(sample), batch.labels()[i]);
        ++failures;
      }
    }
  }
  for (int i = 0; i < sample_count; ++i) {
    if (seen[static_cast<std::size_t>(i)] != 1) {
      std::fprintf(stderr, "custom_source: sample %d arrived %d times\n", i,
                   seen[static_cast<std::size_t>(i)]);
      ++failures;
    }
  }
  const loader::ImageSize size = options.image_size.At(0);
  std::printf("custom_source: %zu batches of up to %zu images of %dx%d, %d samples\n", batches,
              options.batch_size, size.height, size.width, sample_count);
  return failures;
}

}  // namespace

int main() {
  try {
    if (ReadOneEpoch(10) != 0) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_source: %s\n", e.what());
    return 1;
  }
  std::printf("custom_source: OK\n");
  return 0;
}
