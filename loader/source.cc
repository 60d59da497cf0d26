#include "tilefeed/loader/source.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "loader/file_io.h"
#include "loader/range_file.h"

namespace tilefeed::loader {

SourceError::SourceError(std::string where, std::string reason)
    : std::runtime_error(detail::RedactUrl(where + ": " + reason)),
      where_(std::move(where)),
      reason_(std::move(reason)) {
  where_ = detail::RedactUrl(where_);
}

const std::vector<std::string>& Source::class_names() const {
  // Immutable and initialised once (thread-safe), so it is not global state.
  static const std::vector<std::string> kNone;
  return kNone;
}

void Source::ReadMany(std::span<const std::uint64_t> indices,
                      std::span<std::vector<std::byte>> buffers,
                      std::span<ReadResult> results) const {
  for (std::size_t i = 0; i < indices.size(); ++i) {
    ReadOne(*this, static_cast<std::size_t>(indices[i]), buffers[i], results[i]);
  }
}

void ReadOne(const Source& source, std::size_t index, std::vector<std::byte>& buffer,
             ReadResult& result) {
  result.error.clear();
  try {
    result.info = source.Read(index, buffer);
    result.ok = true;
    return;
  } catch (const SourceError& e) {
    result.error = e.reason();
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  result.ok = false;
}

namespace detail {

std::uint64_t FileSize(int dir_fd, const std::string& path) {
  struct stat st {};
  if (fstatat(dir_fd, path.c_str(), &st, 0) != 0) throw SourceError(path, ErrnoMessage(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  // close() errors on a read-only descriptor carry no information worth reporting.
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::release() noexcept { return std::exchange(fd_, -1); }

ssize_t PreadFull(int fd, void* data, std::size_t size, off_t offset) {
  auto* out = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;  // end of file
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

namespace {

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

}  // namespace

std::optional<std::string> ReadRegularFile(int dir_fd, const char* path, std::size_t max_bytes,
                                           std::vector<std::byte>& buffer) {
  // O_NONBLOCK keeps open() from waiting for a writer if the name is a FIFO; it changes
  // nothing for regular files, whose reads never return EAGAIN.
  UniqueFd fd(::openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) return ErrnoMessage(errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoMessage(errno);
  if (!S_ISREG(st.st_mode)) {
    return std::string("not a regular file (") + FileTypeName(st.st_mode) + ")";
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > max_bytes) {
    return "file is " + std::to_string(size) + " bytes, over the limit of " +
           std::to_string(max_bytes);
  }
  buffer.resize(size);
  const ssize_t n = PreadFull(fd.get(), buffer.data(), size, 0);
  if (n < 0) return ErrnoMessage(errno);
  // A file that grows while we read is taken at its fstat size, as any reader would; one
  // that shrinks would hand the decoder a torn image, so it is reported here.
  if (static_cast<std::size_t>(n) != size) {
    return "file shrank while being read (from " + std::to_string(size) + " to " +
           std::to_string(n) + " bytes)";
  }
  return std::nullopt;
}

std::optional<std::string> PrivateDirectoryProblem(const std::string& dir) {
  struct stat st {};
  if ((::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) || ::lstat(dir.c_str(), &st) != 0) {
    return "(cannot create or read it): " + ErrnoMessage(errno);
  }
  if (S_ISLNK(st.st_mode)) return "(a symbolic link): it must be the directory itself";
  if (!S_ISDIR(st.st_mode))
    return std::string("(") + FileTypeName(st.st_mode) + "): not a directory";
  if (st.st_uid == ::geteuid() && (st.st_mode & 022) == 0) return std::nullopt;
  char why[96];
  std::snprintf(why, sizeof(why), "(owner uid %u, mode %04o): %s", st.st_uid, st.st_mode & 07777,
                st.st_uid != ::geteuid() ? "another user owns it" : "group or others can write it");
  return why;
}

void ThrowWithErrno(const std::string& where, const char* context, int error) {
  throw SourceError(where, context + ErrnoMessage(error));
}

std::string ErrnoMessage(int error) {
  char text[256] = {};
  // The GNU strerror_r may return a static string instead of filling `text`; the XSI one
  // returns an int. Overloads on the result type pick the right reading of either.
  struct Pick {
    const char* text;
    const char* operator()(int /*xsi_result*/) const { return text; }
    const char* operator()(const char* gnu_result) const { return gnu_result; }
  };
  return Pick{text}(::strerror_r(error, text, sizeof(text)));
}

std::optional<std::string> WriteFull(int fd, const void* data, std::size_t size) {
  const auto* in = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, in, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "write: " + ErrnoMessage(n < 0 ? errno : ENOSPC);  // 0: disk full
    in += n;
    size -= static_cast<std::size_t>(n);
  }
  return std::nullopt;
}

std::optional<std::string> ReplaceFile(const std::string& path, const std::string& temp,
                                       std::initializer_list<std::span<const std::byte>> parts,
                                       bool durable) {
  UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return "create: " + ErrnoMessage(errno);
  std::optional<std::string> error;
  for (const std::span<const std::byte> part : parts) {
    if (!error) error = WriteFull(fd.get(), part.data(), part.size());
  }
  if (!error && durable && ::fsync(fd.get()) != 0) error = "fsync: " + ErrnoMessage(errno);
  if (!error && ::close(fd.release()) != 0) error = "close: " + ErrnoMessage(errno);
  if (!error && ::rename(temp.c_str(), path.c_str()) != 0) error = "rename: " + ErrnoMessage(errno);
  if (error) {
    ::unlink(temp.c_str());
    return error;
  }
  const std::string dir = std::filesystem::path(path).parent_path();
  return durable ? SyncDirectory(dir.empty() ? "." : dir) : std::nullopt;
}

std::optional<std::string> SyncDirectory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return "open directory: " + ErrnoMessage(errno);
  if (::fsync(fd.get()) != 0) return "fsync directory: " + ErrnoMessage(errno);
  return std::nullopt;
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  std::string host(name);
  for (char& c : host) {
    if (c == '/' || c == ' ' || c == '\n') c = '_';
  }
  return host;
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace detail
}  // namespace tilefeed::loader
