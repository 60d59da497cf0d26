#pragma once

// Parsers for the tar headers that WebDataset shards use: POSIX ustar, pax extended
// headers ('x') and GNU long names ('L'), as pure functions over bytes. Internal: not
// installed, never included from a public header. They never trust a field before
// checking it, so they may be called on arbitrary input; failures throw TarFormatError
// with a one-line reason (callers add the file and offset). Stateless.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

namespace tilefeed::loader::detail {

inline constexpr std::size_t kTarBlockSize = 512;

class TarFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class TarEntryKind {
  kEnd,        // an all-zero block: the end-of-archive marker
  kFile,       // a regular file ('0', '\0' or '7'): its data is a member
  kPax,        // 'x': pax records for the next header
  kGlobalPax,  // 'g': pax records for the rest of the archive (ignored)
  kLongName,   // 'L': GNU long name of the next header
  kOther,      // directories, links, devices, GNU sparse files, ...: skipped
};

struct TarHeader {
  TarEntryKind kind = TarEntryKind::kEnd;
  char type = 0;
  std::string name;        // prefix + "/" + name for ustar; the name field otherwise
  std::uint64_t size = 0;  // data bytes that follow the header (0 for links, directories)
};

// Parses one 512-byte header block: checksum, size (octal or GNU base-256), type, name.
// Throws TarFormatError on a bad checksum, a malformed size or a non-tar block.
// REQUIRES: block.size() == kTarBlockSize.
TarHeader ParseTarHeader(std::span<const std::byte> block);

// What a pax extended header overrides in the next header.
struct PaxOverrides {
  std::optional<std::string> path;
  std::optional<std::uint64_t> size;
};
// Parses pax records ("<len> <key>=<value>\n" ...). Throws TarFormatError.
PaxOverrides ParsePaxRecords(std::span<const std::byte> data);

// The data size rounded up to whole blocks.
std::uint64_t TarPaddedSize(std::uint64_t size);

}  // namespace tilefeed::loader::detail
