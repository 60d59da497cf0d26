// The batches a ZmqBatchStream receives: each one's messages (or shared-memory slot) owned
// until the trainer drops it, its frame checked (sizes, checksums, labels, sample indices)
// and its order held to the agreed session terms, up to the bye that ends the stream. See
// the design note in zmq_stream.cc.

#include <cstring>
#include <span>
#include <utility>

#include "transport/zmq_stream_impl.h"

namespace tilefeed::transport {
namespace {

using detail::Control;
using detail::Shared;

// Keeps a batch's ZeroMQ messages, and aligned copies of labels and indices if a message's
// data was not aligned for them.
class MessageOwner final : public ReceivedBatch::Owner {
 public:
  explicit MessageOwner(std::vector<zmq::message_t> parts) : parts_(std::move(parts)) {}

  const zmq::message_t& part(std::size_t i) const { return parts_[i]; }

  template <typename T>
  std::span<const T> View(std::size_t i, std::vector<T>& copy) const {
    const zmq::message_t& message = parts_[i];
    const std::size_t count = message.size() / sizeof(T);
    if (reinterpret_cast<std::uintptr_t>(message.data()) % alignof(T) == 0) {
      return {static_cast<const T*>(message.data()), count};
    }
    copy.resize(count);
    std::memcpy(copy.data(), message.data(), count * sizeof(T));
    return copy;
  }

  std::vector<std::int32_t> labels_copy;
  std::vector<std::uint64_t> indices_copy;

 private:
  std::vector<zmq::message_t> parts_;
};

// Returns a shared-memory slot to the reader when the trainer drops the batch. Labels and
// indices are copied out of the slot: the reader can still write the slot, so values
// checked in place could change after the check.
class SlotOwner final : public ReceivedBatch::Owner {
 public:
  SlotOwner(std::shared_ptr<Shared> shared, std::uint32_t slot)
      : shared_(std::move(shared)), slot_(slot) {}
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> indices;
  ~SlotOwner() override {
    {
      std::lock_guard lock(shared_->mutex);
      shared_->returned_slots.push_back(slot_);
    }
    shared_->wake.Signal();
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::uint32_t slot_;
};

}  // namespace

// The stream ends only as agreed: the bye (which stands for the last epoch's end) names
// the agreed end epoch and comes after a whole last epoch (a partial one only when the
// session began inside it).
void ZmqBatchStream::Impl::CheckEnd(const Control& bye) const {
  if (!options.terms) return;
  const SessionTerms& t = *options.terms;
  const std::uint64_t last = t.epochs - 1;
  const bool began_inside = last == t.first_epoch && t.first_position > 0;
  const std::optional<std::uint64_t> agreed = AgreedBatches(last);
  const bool complete =
      t.epochs > 0 && bye.a == t.epochs && last_batch_epoch && *last_batch_epoch == last &&
      (agreed ? epoch_batches == *agreed : began_inside || epoch_batches == batches_per_epoch);
  if (!complete) {
    throw TransportError(peer + " ended the stream early: " +
                         (last_batch_epoch ? std::to_string(epoch_batches) + " batches of epoch " +
                                                 std::to_string(*last_batch_epoch)
                                           : std::string("no batch")) +
                         ", end epoch " + std::to_string(bye.a) + "; agreed: all " +
                         std::to_string(batches_per_epoch) +
                         " batches of every epoch up to epoch " + std::to_string(last));
  }
}

ReceivedBatch ZmqBatchStream::Impl::MakeBatch(const Control& control,
                                              std::vector<zmq::message_t>& parts) {
  if (parts.size() < 2) throw TransportError(peer + ": batch without a frame header");
  const FrameHeader header = ParseFrameHeader(detail::Bytes(parts[1]), peer);
  if (layout) {
    if (parts.size() != 2) throw TransportError(peer + ": shared-memory batch with payload");
    if (control.a >= layout->slot_count || slot_busy[control.a]) {
      throw TransportError(peer + ": batch in shared slot " + std::to_string(control.a) +
                           " that is not free");
    }
    if (header.image_bytes() > layout->image_bytes || header.size > layout->max_samples) {
      throw TransportError("frame from " + peer + ": batch larger than its shared slot");
    }
    CheckSegment();
    const auto slot = static_cast<std::uint32_t>(control.a);
    const std::byte* base = shared->segment.data() + slot * layout->stride();
    const std::span<const std::uint8_t> images(reinterpret_cast<const std::uint8_t*>(base),
                                               header.image_bytes());
    const std::span<const std::int32_t> labels(
        reinterpret_cast<const std::int32_t*>(base + layout->label_offset()), header.size);
    const std::span<const std::uint64_t> indices(
        reinterpret_cast<const std::uint64_t*>(base + layout->index_offset()), header.size);
    slot_busy[slot] = true;
    // From here on the owner returns the slot, also if a check below throws.
    auto owner = std::make_unique<SlotOwner>(shared, slot);
    owner->labels.assign(labels.begin(), labels.end());
    owner->indices.assign(indices.begin(), indices.end());
    if (options.verify_checksums) VerifyPayload(header, images, labels, indices, peer);
    CheckSegment();  // a read above may have met a vanished page (it read zeros)
    const std::span<const std::int32_t> own_labels = owner->labels;
    const std::span<const std::uint64_t> own_indices = owner->indices;
    CheckBatch(header, own_labels, own_indices);
    CheckOrder(header, own_indices);
    return ReceivedBatch(header.meta(), images, own_labels, own_indices, std::move(owner));
  }
  if (outstanding == 0) {
    throw TransportError(peer + " sent batch " + std::to_string(header.index) + " of epoch " +
                         std::to_string(header.epoch) + " without a credit (" +
                         std::to_string(granted) + " granted, all spent)");
  }
  --outstanding;
  if (parts.size() != 5)
    throw TransportError(peer + ": batch with " + std::to_string(parts.size()) + " parts");
  if (parts[2].size() != header.image_bytes() || parts[3].size() != header.label_bytes() ||
      parts[4].size() != header.index_bytes()) {
    throw TransportError("frame from " + peer + ": payload parts do not match the header");
  }
  // The owner holds the messages: the views below point into them, not into `parts`.
  auto owner = std::make_unique<MessageOwner>(std::move(parts));
  parts.clear();
  const std::span<const std::uint8_t> images(
      static_cast<const std::uint8_t*>(owner->part(2).data()), owner->part(2).size());
  const std::span<const std::int32_t> labels = owner->View<std::int32_t>(3, owner->labels_copy);
  const std::span<const std::uint64_t> indices = owner->View<std::uint64_t>(4, owner->indices_copy);
  if (options.verify_checksums) VerifyPayload(header, images, labels, indices, peer);
  CheckBatch(header, labels, indices);
  CheckOrder(header, indices);
  return ReceivedBatch(header.meta(), images, labels, indices, std::move(owner));
}

loader::EpochOrder ZmqBatchStream::Impl::OrderOf(std::uint64_t epoch, bool shuffle) const {
  const SessionTerms& t = *options.terms;
  // Loader's: the slice's share of what is left of the epoch (all of it but in the epoch the
  // session entered), padded or dropped.
  return loader::EpochOrder(dataset_size, t.seed, epoch, shuffle,
                            {static_cast<int>(t.slice_index), static_cast<int>(t.slice_count)},
                            t.remainder == 0 ? loader::Remainder::kPad : loader::Remainder::kDrop,
                            epoch == t.first_epoch ? std::min(t.first_position, dataset_size) : 0);
}

std::optional<std::uint64_t> ZmqBatchStream::Impl::AgreedBatches(std::uint64_t epoch) const {
  if (!options.terms || dataset_size == 0) return std::nullopt;
  const std::uint64_t samples = OrderOf(epoch, false).size();  // unshuffled: no permutation
  const SessionTerms& t = *options.terms;
  return samples / t.batch_size + (!t.drop_last && samples % t.batch_size != 0);
}

void ZmqBatchStream::Impl::CheckOrder(const FrameHeader& header,
                                      std::span<const std::uint64_t> indices) {
  if (!options.terms) return;
  auto where = [&] {
    return peer + " sent batch " + std::to_string(header.index) + " of epoch " +
           std::to_string(header.epoch);
  };
  const std::uint64_t due = BatchesOf(header.epoch);
  if (header.index != due) {
    throw TransportError(where() + " where batch " + std::to_string(due) +
                         " was due (batches come in order, each once)");
  }
  if (const std::optional<std::uint64_t> agreed = AgreedBatches(header.epoch);
      agreed && header.index >= *agreed) {
    throw TransportError(where() + "; the epoch has " + std::to_string(*agreed) + " batches");
  }
  if (dataset_size == 0) return;
  if (!order || order_epoch != header.epoch) {
    order.emplace(OrderOf(header.epoch, true));
    order_epoch = header.epoch;
  }
  // A bad sample's substitute is one of the next 64 of the order (the reader's loader tries
  // LoaderOptions::max_substitute_attempts, 64, which no reader flag changes).
  const std::size_t size = order->size();
  std::uint64_t substitutes = 0;
  for (std::size_t row = 0; row < indices.size(); ++row) {
    const std::size_t position = header.index * options.terms->batch_size + row;
    if (position < size && indices[row] == (*order)[position]) continue;
    bool substitute = false;
    for (std::size_t k = 1; position < size && k <= std::min<std::size_t>(64, size); ++k) {
      substitute = substitute || indices[row] == (*order)[(position + k) % size];
    }
    if (!substitute || ++substitutes > header.substituted) {
      throw TransportError(
          where() + " with sample " + std::to_string(indices[row]) + " at position " +
          std::to_string(position) +
          (position < size
               ? " where the agreed order has sample " + std::to_string((*order)[position])
               : ", past the epoch's " + std::to_string(size) + " positions") +
          " (" + std::to_string(header.substituted) + " substituted)");
    }
  }
}

// What the frame checks cannot know: the agreed shape and the trainer's class count.
void ZmqBatchStream::Impl::CheckBatch(const FrameHeader& header,
                                      std::span<const std::int32_t> labels,
                                      std::span<const std::uint64_t> indices) const {
  auto where = [&] {
    return "batch " + std::to_string(header.index) + " of epoch " + std::to_string(header.epoch);
  };
  if (options.terms) {
    const SessionTerms& t = *options.terms;
    if (header.epoch != EpochUnderWay()) {
      throw TransportError(peer + " sent " + where() + " during epoch " +
                           std::to_string(EpochUnderWay()));
    }
    const loader::ImageSize size = t.image_size.At(header.epoch);  // the schedule's, this epoch
    if (header.size > t.batch_size || header.height != std::uint32_t(size.height) ||
        header.width != std::uint32_t(size.width) || header.channels != 3) {
      throw TransportError(peer + " sent " + where() + " with " + std::to_string(header.size) +
                           " samples of " + std::to_string(header.height) + "x" +
                           std::to_string(header.width) + "x" + std::to_string(header.channels) +
                           "; the agreed batch is at most " + std::to_string(t.batch_size) +
                           " samples of " + std::to_string(size.height) + "x" +
                           std::to_string(size.width) + "x3");
    }
  }
  if (options.classes == 0) return;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || static_cast<std::uint32_t>(labels[i]) >= options.classes) {
      throw TransportError(peer + " sent sample " + std::to_string(indices[i]) + " (" + where() +
                           ") with label " + std::to_string(labels[i]) + "; this trainer has " +
                           std::to_string(options.classes) + " classes");
    }
  }
}

}  // namespace tilefeed::transport
