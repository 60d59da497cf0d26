#pragma once

// File-descriptor and host helpers shared by the built-in sources, the other libraries and
// the tools. Internal: not installed, and never included from a public header. Defined in
// loader/source.cc.

#include <sys/types.h>

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tilefeed::loader::detail {

// Owns one file descriptor and closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  // Gives up ownership and returns the descriptor (-1 if none).
  int release() noexcept;

 private:
  int fd_ = -1;
};

// Reads up to `size` bytes at `offset`, retrying short reads and EINTR, and stops early
// only at end of file. Returns the number of bytes read, or -1 with errno set.
ssize_t PreadFull(int fd, void* data, std::size_t size, off_t offset);

// Reads the regular file `path` (relative to `dir_fd`, or absolute; AT_FDCWD for the
// working directory) into `buffer`, resized to the file's length. Returns nothing on
// success and a one-line reason on failure: an errno message, "not a regular file
// (a directory)", "file is N bytes, over the limit of M", "file shrank while being
// read". Never blocks on a FIFO.
std::optional<std::string> ReadRegularFile(int dir_fd, const char* path, std::size_t max_bytes,
                                           std::vector<std::byte>& buffer);

// The size of the file `path` (relative to `dir_fd`, or absolute), from one stat. Throws
// SourceError(path, why).
std::uint64_t FileSize(int dir_fd, const std::string& path);

// Throws SourceError(where, context + the message for `error`). Takes errno by value and
// `where` by reference so that nothing allocates, and so clobbers errno, before it is read.
[[noreturn]] void ThrowWithErrno(const std::string& where, const char* context, int error);

// strerror_r that works with both the GNU and the XSI signature; thread-safe.
std::string ErrnoMessage(int error);

// Writes all `size` bytes to `fd`, retrying short writes and EINTR. Returns nothing on
// success, else "write: <errno message>".
std::optional<std::string> WriteFull(int fd, const void* data, std::size_t size);

// Replaces the file `path` by `parts`, written one after the other to a new file `temp` (in
// path's directory) that is then renamed over `path`, so that a reader sees the old file or
// the whole new one. `durable`: also fsyncs the file before the rename and the directory
// after, so that a crash leaves one or the other too. Removes `temp` on failure. Returns
// nothing on success, else "<step>: <errno message>".
std::optional<std::string> ReplaceFile(const std::string& path, const std::string& temp,
                                       std::initializer_list<std::span<const std::byte>> parts,
                                       bool durable);

// fsyncs the directory `dir`, so that a file created or renamed in it survives a crash.
// Returns nothing on success, else "<step> directory: <errno message>".
std::optional<std::string> SyncDirectory(const std::string& dir);

// Makes the directory `dir` (0700) if it is missing, then checks that it is a directory (not
// a symbolic link to one) that this user owns and no one else may write, so nothing another
// user planted there is trusted. nullopt if so; else "(WHAT): WHY", e.g. "(cannot create or
// read it): Permission denied", "(a symbolic link): it must be the directory itself",
// "(owner uid 65534, mode 0755): another user owns it".
std::optional<std::string> PrivateDirectoryProblem(const std::string& dir);

// This host's name, usable in a file name ('/', ' ' and newlines become '_'); "localhost"
// if it has none.
std::string HostName();

// The cores this process may run on: its CPU affinity (mpirun --bind-to core, poprun,
// taskset and cgroup cpusets narrow it; std::thread::hardware_concurrency() does not see
// that), which is also what oneTBB sizes its pool by; at least 1.
int UsableCores();

}  // namespace tilefeed::loader::detail
