#pragma once

// POSIX shared memory for the same-host batch ring. Internal.
//
// Segment names are /tilefeed-<uid>-<job>-<pid>-<tag>: the uid and job keep two users and
// two jobs apart, the pid lets a later sender tell a name whose creator died
// (RemoveStaleSegments), and a random tag keeps two senders of one process apart.

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
class ShmSegment {
 public:
  // Creates (O_EXCL, mode 0600) and maps read-write. Throws TransportError.
  static ShmSegment Create(const std::string& name, std::size_t bytes);
  // Opens an existing segment and maps it read-only. Throws TransportError if it is
  // missing or smaller than `bytes`.
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

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
  bool linked_ = false;
};

// A fresh segment name for this process and `job_id` (other characters become '_').
std::string MakeSegmentName(std::string_view job_id);

// Unlinks this user's /tilefeed-* segments whose creating process no longer exists.
// Returns how many were removed.
int RemoveStaleSegments();

}  // namespace tilefeed::transport::detail
