#include "tests/support/temp_dir.h"

#include <fcntl.h>
#include <stdlib.h>  // mkdtemp (POSIX)
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace tilefeed::testing {

TempDir::TempDir(std::string_view prefix) {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::filesystem::path base = (tmpdir != nullptr && *tmpdir != '\0') ? tmpdir : "/tmp";
  std::string pattern = (base / std::string(prefix)).string() + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::filesystem::filesystem_error("mkdtemp", pattern,
                                            std::error_code(errno, std::generic_category()));
  }
  path_ = std::filesystem::absolute(pattern);
}

TempDir::~TempDir() { Remove(); }

TempDir::TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

void TempDir::Remove() noexcept {
  if (path_.empty()) return;
  // A destructor cannot report failure; a leftover temp folder is not worth a crash.
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
  path_.clear();
}

void WriteFile(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) throw std::runtime_error("WriteFile: cannot write " + path.string());
}

std::vector<std::byte> ReadFile(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw std::runtime_error("ReadFile: cannot open " + path.string());
  const std::streamsize size = file.tellg();
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  file.seekg(0);
  file.read(reinterpret_cast<char*>(bytes.data()), size);
  if (!file) throw std::runtime_error("ReadFile: cannot read " + path.string());
  return bytes;
}

void XorByte(const std::filesystem::path& path, std::uint64_t offset, std::uint8_t mask) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string() + " to damage it");
  unsigned char byte = 0;
  const bool ok = ::pread(fd, &byte, 1, static_cast<off_t>(offset)) == 1 &&
                  ((byte ^= mask), ::pwrite(fd, &byte, 1, static_cast<off_t>(offset)) == 1);
  ::close(fd);
  if (!ok) {
    throw std::runtime_error("cannot flip byte " + std::to_string(offset) + " of " + path.string());
  }
}

}  // namespace tilefeed::testing
