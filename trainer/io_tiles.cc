#include "trainer/io_tiles.h"

#include <cassert>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <utility>

namespace tilefeed::trainer {

// A plain mutex and two condition variables guard the slot states: the ring moves a few
// batches per step, each worth milliseconds of copying and compute, so a lock per hand-over
// costs nothing measurable, and it keeps the ordered multi-producer protocol obviously
// correct (and readable by TSan). The copies themselves run outside the lock: ticket t
// owns slot t % capacity from the moment ticket t - capacity is released until the
// consumer releases t.
struct IoTiles::State {
  transport::BatchStream& stream;
  IoTilesOptions options;

  std::mutex fetch_mutex;         // serializes stream.Next(), position() and ticket numbering
  std::uint64_t next_ticket = 0;  // guarded by fetch_mutex
  bool stream_done = false;       // guarded by fetch_mutex: end of stream or an error taken

  std::mutex mutex;                      // guards the fields below
  std::condition_variable_any landed;    // consumer waits: its ticket landed
  std::condition_variable_any released;  // tiles wait: their slot is free
  std::vector<StagedBatch> slots;
  std::vector<std::optional<std::uint64_t>> slot_ticket;  // ticket landed in each slot
  std::vector<std::exception_ptr> slot_error;
  std::uint64_t released_count = 0;  // tickets released by the consumer
  std::uint64_t acquired_count = 0;  // consumer-only

  std::vector<std::jthread> tiles;

  State(transport::BatchStream& s, const IoTilesOptions& o) : stream(s), options(o) {}

  void Tile(std::stop_token token);
  // Blocks until ticket's slot is free; false if stopped.
  bool WaitForSlot(std::uint64_t ticket, std::stop_token token);
  void Publish(std::uint64_t ticket, std::exception_ptr error);
};

bool IoTiles::State::WaitForSlot(std::uint64_t ticket, std::stop_token token) {
  std::unique_lock lock(mutex);
  return released.wait(lock, token, [&] { return ticket < released_count + options.capacity; });
}

void IoTiles::State::Publish(std::uint64_t ticket, std::exception_ptr error) {
  {
    std::lock_guard lock(mutex);
    const std::size_t slot = ticket % options.capacity;
    slot_ticket[slot] = ticket;
    slot_error[slot] = std::move(error);
  }
  landed.notify_all();
}

void IoTiles::State::Tile(std::stop_token token) {
  while (!token.stop_requested()) {
    std::optional<transport::ReceivedBatch> batch;
    std::uint64_t ticket = 0;
    std::exception_ptr error;
    bool end_of_stream = false;
    loader::LoaderState position;
    {
      std::lock_guard lock(fetch_mutex);
      if (stream_done) return;
      ticket = next_ticket++;
      try {
        batch = stream.Next();
        if (!batch) end_of_stream = stream.ended();
        position = stream.position();
      } catch (...) {
        error = std::current_exception();
      }
      if (error || end_of_stream) stream_done = true;
    }
    // Even a stopped tile publishes nothing past this point; the consumer is gone too.
    if (!WaitForSlot(ticket, token)) return;
    StagedBatch& staged = slots[ticket % options.capacity];
    staged.position = position;
    staged.end_of_epoch = !batch.has_value();
    staged.end_of_stream = end_of_stream;
    staged.meta = {};
    staged.images.clear();
    staged.labels.clear();
    staged.sample_indices.clear();
    if (batch && !error) {
      try {
        const std::size_t samples = batch->size();
        if (samples > options.max_batch_samples ||
            batch->images().size() > options.max_batch_samples * options.sample_bytes) {
          throw transport::TransportError(
              "IO tile: batch " + std::to_string(batch->index()) + " of epoch " +
              std::to_string(batch->epoch()) + " has " + std::to_string(samples) + " samples (" +
              std::to_string(batch->images().size()) + " bytes), more than the core buffer's " +
              std::to_string(options.max_batch_samples));
        }
        if (options.check) options.check(*batch);
        staged.meta = batch->meta();
        // The buffers were reserved at full size, so these never allocate.
        staged.images.assign(batch->images().begin(), batch->images().end());
        staged.labels.assign(batch->labels().begin(), batch->labels().end());
        staged.sample_indices.assign(batch->sample_indices().begin(),
                                     batch->sample_indices().end());
      } catch (...) {
        error = std::current_exception();
        std::lock_guard lock(fetch_mutex);
        stream_done = true;
      }
    }
    batch.reset();  // the loader slot goes back before the consumer even looks
    Publish(ticket, std::move(error));
  }
}

IoTiles::IoTiles(transport::BatchStream& stream, const IoTilesOptions& options)
    : state_(std::make_unique<State>(stream, options)) {
  assert(options.tiles >= 1 && options.capacity >= 1);
  State& s = *state_;
  s.slots.resize(options.capacity);
  for (StagedBatch& slot : s.slots) {
    slot.images.reserve(options.max_batch_samples * options.sample_bytes);
    slot.labels.reserve(options.max_batch_samples);
    slot.sample_indices.reserve(options.max_batch_samples);
  }
  s.slot_ticket.resize(options.capacity);
  s.slot_error.resize(options.capacity);
  s.tiles.reserve(static_cast<std::size_t>(options.tiles));
  for (int i = 0; i < options.tiles; ++i) {
    s.tiles.emplace_back([&s](std::stop_token token) { s.Tile(token); });
  }
}

IoTiles::~IoTiles() {
  for (std::jthread& tile : state_->tiles) tile.request_stop();
  // jthread's destructor joins; a tile inside stream.Next() returns when the stream does.
  state_->tiles.clear();
}

const StagedBatch& IoTiles::Acquire() {
  State& s = *state_;
  assert(s.acquired_count < s.released_count + s.options.capacity);
  const std::uint64_t ticket = s.acquired_count;
  const std::size_t slot = ticket % s.options.capacity;
  std::unique_lock lock(s.mutex);
  s.landed.wait(lock, [&] { return s.slot_ticket[slot] == ticket; });
  if (s.slot_error[slot]) std::rethrow_exception(s.slot_error[slot]);
  ++s.acquired_count;
  return s.slots[slot];
}

void IoTiles::Release() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    assert(s.released_count < s.acquired_count);
    s.slot_ticket[s.released_count % s.options.capacity].reset();
    ++s.released_count;
  }
  s.released.notify_all();
}

std::size_t IoTiles::capacity() const { return state_->options.capacity; }

}  // namespace tilefeed::trainer
