#pragma once

// POSIX shared memory for the same-host batch ring. Internal.
//
// Segment names are /tilefeed-<uid>-<job>-<pid>-<tag>: the uid and job keep two users and
// two jobs apart, the pid lets a later reader tell a name whose creator died
// (RemoveStaleSegments), and a random tag keeps two readers of one process apart.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tilefeed::transport::detail {

// Where a slot's parts lie. Every offset is 64-byte aligned.
struct SlotLayout {
  std::size_t slot_count = 0;
  std::size_t image_bytes = 0;  // per slot
  std::size_t max_samples = 0;  // per slot
  std::size_t label_offset() const;
  std::size_t index_offset() const;
  std::size_t stride() const;
  std::size_t total_bytes() const;
  // nullopt when the layout is out of bounds (hostile or corrupt peer values).
  static std::optional<SlotLayout> Checked(std::uint64_t slot_count, std::uint64_t image_bytes,
                                           std::uint64_t max_samples);
};

// A mapped segment. Move-only; unmaps on destruction. Does not unlink unless asked.
//
// A segment a peer made (Open) is guarded against the peer shrinking it: reading a page
// past a shared-memory file's end raises SIGBUS, which would kill this process with no
// word. The first Open installs a process-wide SIGBUS handler that, for an address inside
// a guarded mapping, maps zero pages over the rest of that mapping (so the faulting read
// and every later one complete, reading zeros) and marks it lost(); any other SIGBUS goes
// to the handler installed before, or kills as before. Chosen over an fstat check before
// each read, which a peer can race, and over a sigsetjmp guard around one copy, since the
// consumer reads the slot in place long after the stream handed it out: every read of the
// mapping is covered. The stream then fails on lost() (transport/zmq_stream.cc).
class ShmSegment {
 public:
  // Creates (O_EXCL, mode 0600), allocates every byte (posix_fallocate: a /dev/shm too
  // small for it is an error here, not a SIGBUS at the first write) and maps read-write.
  // Throws TransportError; for a full /dev/shm saying how much the segment needs and how
  // much is free.
  static ShmSegment Create(const std::string& name, std::size_t bytes);
  // Opens an existing segment and maps it read-only, guarded (above). Throws
  // TransportError if it is missing or smaller than `bytes`.
  static ShmSegment Open(const std::string& name, std::size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mapping stays). Idempotent; a name already gone is fine.
  void Unlink() noexcept;
  // An opened segment: whether its file is now shorter than the mapping (the peer shrank
  // it), or a read already met a vanished page. Then the mapping's data from the first
  // vanished page on reads as zeros. Costs one fstat. Thread-safe.
  bool Shrunk() const;
  // Bytes the segment's file has now (fstat); size() for a created one.
  std::size_t FileBytes() const;

 private:
  void Release() noexcept;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
  bool linked_ = false;
  int fd_ = -1;     // an opened segment's, for Shrunk()
  int guard_ = -1;  // an opened segment's slot in the SIGBUS guard's table
};

// A fresh segment name for this process and `job_id` (other characters become '_').
std::string MakeSegmentName(std::string_view job_id);

// Unlinks this user's /tilefeed-* segments whose creating process no longer exists.
// Returns how many were removed.
int RemoveStaleSegments();

}  // namespace tilefeed::transport::detail
