#include "tilefeed/transport/detail/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "tilefeed/transport/batch_stream.h"
#include "tilefeed/transport/frame.h"

namespace tilefeed::transport::detail {
namespace {

constexpr std::size_t kAlign = 64;
constexpr std::uint64_t kMaxSlots = 1024;
constexpr std::uint64_t kMaxSegmentBytes = std::uint64_t{1} << 38;  // 256 GiB

std::size_t AlignUp(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

[[noreturn]] void ThrowErrno(const std::string& what, int error) {
  throw TransportError(what + ": " + std::strerror(error));
}

std::string UserPrefix() { return "tilefeed-" + std::to_string(getuid()) + "-"; }

}  // namespace

std::size_t SlotLayout::label_offset() const { return AlignUp(image_bytes); }
std::size_t SlotLayout::index_offset() const {
  return label_offset() + AlignUp(max_samples * sizeof(std::int32_t));
}
std::size_t SlotLayout::stride() const {
  return index_offset() + AlignUp(max_samples * sizeof(std::uint64_t));
}
std::size_t SlotLayout::total_bytes() const { return slot_count * stride(); }

std::optional<SlotLayout> SlotLayout::Checked(std::uint64_t slot_count, std::uint64_t image_bytes,
                                              std::uint64_t max_samples) {
  // Bounding each factor first keeps every product below 2^64.
  if (slot_count == 0 || slot_count > kMaxSlots || image_bytes == 0 ||
      image_bytes > kMaxFramePayload || max_samples == 0 || max_samples > kMaxFrameBatch) {
    return std::nullopt;
  }
  SlotLayout layout{slot_count, image_bytes, max_samples};
  if (layout.total_bytes() > kMaxSegmentBytes) return std::nullopt;
  return layout;
}

ShmSegment ShmSegment::Create(const std::string& name, std::size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) ThrowErrno("shm_open(" + name + ")", errno);
  ShmSegment segment;
  segment.name_ = name;
  segment.linked_ = true;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    close(fd);
    segment.Unlink();
    ThrowErrno("ftruncate(" + name + ")", error);
  }
  // MAP_POPULATE: the pages exist and are mapped before the workers decode into them.
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int error = errno;
  close(fd);
  if (data == MAP_FAILED) {
    segment.Unlink();
    ThrowErrno("mmap(" + name + ")", error);
  }
  segment.data_ = static_cast<std::byte*>(data);
  segment.size_ = bytes;
  return segment;
}

ShmSegment ShmSegment::Open(const std::string& name, std::size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) ThrowErrno("shm_open(" + name + ")", errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < bytes) {
    close(fd);
    throw TransportError("shared memory " + name + " is smaller than the announced " +
                         std::to_string(bytes) + " bytes");
  }
  // MAP_POPULATE: the trainer does not take a page fault per 4 KiB on its first read of a slot.
  void* data = mmap(nullptr, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int error = errno;
  close(fd);
  if (data == MAP_FAILED) ThrowErrno("mmap(" + name + ")", error);
  ShmSegment segment;
  segment.data_ = static_cast<std::byte*>(data);
  segment.size_ = bytes;
  segment.name_ = name;
  segment.linked_ = true;
  return segment;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      name_(std::move(other.name_)),
      linked_(std::exchange(other.linked_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    name_ = std::move(other.name_);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
}

void ShmSegment::Unlink() noexcept {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());  // ENOENT: the other side unlinked it first
}

std::string MakeSegmentName(std::string_view job_id) {
  std::string job(job_id.empty() ? "0" : job_id);
  for (char& c : job) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.';
    if (!ok) c = '_';
  }
  std::random_device random;
  const std::uint64_t tag = (std::uint64_t{random()} << 32) | random();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(tag));
  // Appended piece by piece: GCC 12 -O3 warns falsely (-Wrestrict) on "/" + std::string.
  std::string name(1, '/');
  name.append(UserPrefix()).append(job).append(1, '-');
  name.append(std::to_string(getpid())).append(1, '-').append(hex);
  return name;
}

int RemoveStaleSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  const std::string prefix = UserPrefix();
  int removed = 0;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    // ...-<pid>-<tag>: the pid is the field before the last dash.
    const std::size_t last = name.rfind('-');
    const std::size_t before =
        last == std::string::npos || last == 0 ? std::string::npos : name.rfind('-', last - 1);
    if (before == std::string::npos || before < prefix.size() - 1) continue;
    const std::string pid_text = name.substr(before + 1, last - before - 1);
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
    if (pid <= 0 || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace tilefeed::transport::detail
