#include "transport/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>

#include "loader/shard_format.h"
#include "tilefeed/transport/batch_stream.h"
#include "transport/frame.h"

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

// The SIGBUS guard (see ShmSegment in detail/shm.h). A signal handler reaches its state only
// through globals: this table of guarded mappings, the handler it replaced, and the page
// size, all written before the handler can see them. A slot is free when begin is 0,
// reserved while begin is 1.
struct GuardedMapping {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<bool> lost{false};
};
constexpr int kGuardSlots = 256;
GuardedMapping g_guarded[kGuardSlots];  // NOLINT: reached from the signal handler
struct sigaction g_previous_sigbus {};  // NOLINT: the handler ours replaced
std::uintptr_t g_page_size = 4096;      // NOLINT: set before the handler is installed
std::once_flag g_guard_installed;       // NOLINT

void OnSigbus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (GuardedMapping& guarded : g_guarded) {
    const std::uintptr_t begin = guarded.begin.load(std::memory_order_acquire);
    const std::uintptr_t end = guarded.end.load(std::memory_order_acquire);
    if (begin <= 1 || address < begin || address >= end) continue;
    // The peer cut the file short: from the faulting page on, the mapping becomes private
    // zero pages, so this read and the later ones complete. mmap is a plain system call.
    // The page's address from the fault's pointer itself, not from an integer.
    const std::uintptr_t offset_in_page = address & (g_page_size - 1);
    void* page = static_cast<char*>(info->si_addr) - offset_in_page;
    void* zeros = mmap(page, end - (address - offset_in_page), PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (zeros != MAP_FAILED) {
      guarded.lost.store(true, std::memory_order_release);
      return;
    }
  }
  // Not a guarded mapping: as if this handler were not there.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
  } else {
    // A fault repeats at return and kills, as without us; a sent signal is sent again.
    ::signal(SIGBUS, SIG_DFL);
    if (info->si_code <= 0) raise(SIGBUS);
  }
}

// Adds [data, data + bytes) to the guard; returns its slot, or -1 when the table is full
// (the mapping is then unguarded, as before).
int Guard(const std::byte* data, std::size_t bytes) {
  std::call_once(g_guard_installed, [] {
    g_page_size = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
  for (int i = 0; i < kGuardSlots; ++i) {
    std::uintptr_t expected = 0;
    if (!g_guarded[i].begin.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      continue;
    }
    g_guarded[i].lost.store(false, std::memory_order_relaxed);
    g_guarded[i].end.store(reinterpret_cast<std::uintptr_t>(data) + bytes,
                           std::memory_order_release);
    g_guarded[i].begin.store(reinterpret_cast<std::uintptr_t>(data), std::memory_order_release);
    return i;
  }
  return -1;
}

void Unguard(int slot) {
  if (slot < 0) return;
  g_guarded[slot].begin.store(1, std::memory_order_release);
  g_guarded[slot].end.store(0, std::memory_order_release);
  g_guarded[slot].begin.store(0, std::memory_order_release);
}

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
  // Every page now: ftruncate alone leaves a sparse file, and a write to a page /dev/shm
  // has no room for is a SIGBUS in a decode worker, with no word.
  if (const int error = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0) {
    close(fd);
    segment.Unlink();
    struct statvfs fs {};
    std::string room;
    if (statvfs("/dev/shm", &fs) == 0) {
      room = "; /dev/shm has " + std::to_string(std::uint64_t{fs.f_bavail} * fs.f_frsize) +
             " bytes free of " + std::to_string(std::uint64_t{fs.f_blocks} * fs.f_frsize);
    }
    if (error == ENOSPC) {
      throw TransportError("shared memory " + name + ": the ring needs " + std::to_string(bytes) +
                           " bytes, which do not fit in /dev/shm" + room +
                           " (lower --prefetch-depth, --batch-size or --image-size, or give "
                           "/dev/shm more room, e.g. docker run --shm-size)");
    }
    ThrowErrno("posix_fallocate(" + name + ", " + std::to_string(bytes) + " bytes)", error);
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
  if (data == MAP_FAILED) {
    close(fd);
    ThrowErrno("mmap(" + name + ")", error);
  }
  ShmSegment segment;
  segment.data_ = static_cast<std::byte*>(data);
  segment.size_ = bytes;
  segment.name_ = name;
  segment.linked_ = true;
  segment.fd_ = fd;
  segment.guard_ = Guard(segment.data_, bytes);
  return segment;
}

bool ShmSegment::Shrunk() const {
  if (guard_ >= 0 && g_guarded[guard_].lost.load(std::memory_order_acquire)) return true;
  return fd_ >= 0 && FileBytes() < size_;
}

std::size_t ShmSegment::FileBytes() const {
  struct stat st {};
  if (fd_ < 0 || fstat(fd_, &st) != 0) return size_;
  return static_cast<std::size_t>(st.st_size);
}

void ShmSegment::Release() noexcept {
  Unguard(std::exchange(guard_, -1));
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  if (fd_ >= 0) close(std::exchange(fd_, -1));
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      name_(std::move(other.name_)),
      linked_(std::exchange(other.linked_, false)),
      fd_(std::exchange(other.fd_, -1)),
      guard_(std::exchange(other.guard_, -1)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    name_ = std::move(other.name_);
    linked_ = std::exchange(other.linked_, false);
    fd_ = std::exchange(other.fd_, -1);
    guard_ = std::exchange(other.guard_, -1);
  }
  return *this;
}

ShmSegment::~ShmSegment() { Release(); }

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
  // Appended piece by piece: GCC 12 -O3 warns falsely (-Wrestrict) on "/" + std::string.
  std::string name(1, '/');
  name.append(UserPrefix()).append(job).append(1, '-');
  name.append(std::to_string(getpid())).append(1, '-').append(loader::detail::Hex(tag));
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
