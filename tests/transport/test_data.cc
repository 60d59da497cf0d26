#include "tests/transport/test_data.h"

#include <filesystem>

#include "tests/support/jpeg_maker.h"
#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::transport::testing {

loader::SampleInfo RawSource::Read(std::size_t index, std::vector<std::byte>& buffer) const {
  buffer.resize(static_cast<std::size_t>(side_) * side_ * 3);
  for (std::size_t k = 0; k < buffer.size(); ++k) {
    buffer[k] = static_cast<std::byte>(index * 7 + k);
  }
  loader::SampleInfo info;
  info.label = Label(index);
  info.codec = loader::SampleCodec::kRawHwc;
  info.height = info.width = side_;
  info.channels = 3;
  return info;
}

tilefeed::testing::TempDir MakeJpegFolder(int per_class) {
  tilefeed::testing::TempDir dir("tilefeed-transport");
  int n = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < per_class; ++i, ++n) {
      const auto path =
          dir.path() / ("class" + std::to_string(c)) / ("img" + std::to_string(i) + ".jpg");
      tilefeed::testing::WriteFile(
          path, tilefeed::testing::MakeJpeg(40 + (n * 13) % 50, 36 + (n * 29) % 40,
                                            codecs::EncodeOptions{}, n));
    }
  }
  return dir;
}

loader::LoaderOptions SmallOptions(std::size_t batch_size, int image_size, std::uint64_t epochs) {
  loader::LoaderOptions options;
  options.batch_size = batch_size;
  options.image_size = image_size;
  options.eval_resize = image_size;
  options.mode = loader::Mode::kTrain;  // random crops and flips, but seeded: deterministic
  options.workers = 2;
  options.prefetch_depth = 3;
  options.seed = 42;
  options.epochs = epochs;
  return options;
}

Collected Drain(BatchStream& stream, std::size_t max_epochs) {
  Collected out;
  while (!stream.ended() && out.epoch_ends < max_epochs) {
    std::optional<ReceivedBatch> batch = stream.Next();
    if (!batch) {
      if (!stream.ended()) ++out.epoch_ends;
      continue;
    }
    out.batches.push_back({batch->epoch(),
                           batch->index(),
                           {batch->images().begin(), batch->images().end()},
                           {batch->labels().begin(), batch->labels().end()},
                           {batch->sample_indices().begin(), batch->sample_indices().end()}});
  }
  return out;
}

}  // namespace tilefeed::transport::testing
