// SharedSlots: the loader's batch slots as one POSIX shared-memory segment
// (transport/shm.h), so that a reader's batches are already where a trainer on the same
// host reads them.

#include <stdexcept>
#include <string>

#include "tilefeed/transport/batch_stream.h"
#include "transport/reader_endpoint.h"
#include "transport/shm.h"

namespace tilefeed::transport {

struct SharedSlots::Impl {
  detail::SlotLayout layout;
  detail::ShmSegment segment;
};

SharedSlots::SharedSlots(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SharedSlots::~SharedSlots() { impl_->segment.Unlink(); }
const std::string& SharedSlots::name() const { return impl_->segment.name(); }
std::size_t SharedSlots::slot_count() const { return impl_->layout.slot_count; }
std::size_t SharedSlots::image_bytes() const { return impl_->layout.image_bytes; }
std::size_t SharedSlots::max_samples() const { return impl_->layout.max_samples; }
std::byte* SharedSlots::slot_data(std::size_t slot) const {
  return impl_->segment.data() + slot * impl_->layout.stride();
}
void SharedSlots::Unlink() noexcept { impl_->segment.Unlink(); }

std::shared_ptr<SharedSlots> SharedSlots::Create(const loader::LoaderOptions& options,
                                                 std::string_view job_id) {
  const std::uint64_t image_bytes =  // the largest size of the schedule: slots hold any epoch's
      std::uint64_t{options.batch_size} * options.image_size.Largest().bytes();
  const std::optional<detail::SlotLayout> layout =
      detail::SlotLayout::Checked(options.prefetch_depth, image_bytes, options.batch_size);
  if (!layout) {
    throw TransportError("shared memory: " + std::to_string(options.prefetch_depth) + " slots of " +
                         std::to_string(image_bytes) +
                         " image bytes are out of bounds for a shared-memory ring");
  }
  // Names left by killed processes of this user are removed here, before adding ours.
  detail::RemoveStaleSegments();
  detail::ShmSegment segment =
      detail::ShmSegment::Create(detail::MakeSegmentName(job_id), layout->total_bytes());
  return std::make_shared<SharedSlots>(std::make_unique<Impl>(Impl{*layout, std::move(segment)}));
}

loader::SlotMemory::Spans SharedSlots::Slot(std::size_t slot, std::size_t slots,
                                            std::size_t samples, std::size_t image_bytes) {
  const detail::SlotLayout& layout = impl_->layout;
  if (slots != layout.slot_count || slot >= slots || samples > layout.max_samples ||
      image_bytes * samples > layout.image_bytes) {
    throw std::invalid_argument(
        "SharedSlots: made for other loader options (prefetch_depth, batch_size, image_size)");
  }
  std::byte* base = slot_data(slot);
  return Spans{
      {reinterpret_cast<std::uint8_t*>(base), layout.image_bytes},
      {reinterpret_cast<std::int32_t*>(base + layout.label_offset()), layout.max_samples},
      {reinterpret_cast<std::uint64_t*>(base + layout.index_offset()), layout.max_samples}};
}

}  // namespace tilefeed::transport
