#pragma once

// Temporary folders for tests, and small file helpers.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace tilefeed::testing {

// A fresh, empty directory (mkdtemp under $TMPDIR, or /tmp), removed with everything in it
// when the TempDir is destroyed. Move-only; a moved-from TempDir owns nothing.
class TempDir {
 public:
  // Throws std::filesystem::filesystem_error when the directory cannot be made.
  explicit TempDir(std::string_view prefix = "tilefeed-test");
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The directory's absolute path; empty after a move.
  const std::filesystem::path& path() const { return path_; }

 private:
  void Remove() noexcept;

  std::filesystem::path path_;
};

// Writes `bytes` to `path` (replacing it), creating missing parent directories.
// Throws std::runtime_error or std::filesystem::filesystem_error.
void WriteFile(const std::filesystem::path& path, std::span<const std::byte> bytes);

// Reads a whole file. Throws std::runtime_error.
std::vector<std::byte> ReadFile(const std::filesystem::path& path);

// Flips the bits of `mask` in the byte at `offset` of an existing file, in place.
// Throws std::runtime_error.
void XorByte(const std::filesystem::path& path, std::uint64_t offset, std::uint8_t mask);

}  // namespace tilefeed::testing
