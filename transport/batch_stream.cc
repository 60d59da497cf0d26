#include "tilefeed/transport/batch_stream.h"

#include <utility>

namespace tilefeed::transport {
namespace {

// Holds the loader's slot until the ReceivedBatch goes.
class LoaderBatchOwner final : public ReceivedBatch::Owner {
 public:
  explicit LoaderBatchOwner(loader::Batch batch) : batch_(std::move(batch)) {}

 private:
  loader::Batch batch_;
};

}  // namespace

BatchMeta MetaOf(const loader::Batch& batch) {
  return BatchMeta{batch.epoch(),  batch.index(),
                   batch.size(),   batch.height(),
                   batch.width(),  batch.channels(),
                   batch.layout(), static_cast<std::uint32_t>(batch.substituted())};
}

std::optional<ReceivedBatch> LoaderStream::Next() {
  std::optional<loader::Batch> batch = loader_.Next();
  if (!batch) return std::nullopt;
  const BatchMeta meta = MetaOf(*batch);
  const std::span<const std::uint8_t> images = batch->images();
  const std::span<const std::int32_t> labels = batch->labels();
  const std::span<const std::uint64_t> indices = batch->sample_indices();
  return ReceivedBatch(meta, images, labels, indices,
                       std::make_unique<LoaderBatchOwner>(std::move(*batch)));
}

bool LoaderStream::ended() const { return loader_.ended(); }

}  // namespace tilefeed::transport
