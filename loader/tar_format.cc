#include "loader/tar_format.h"

#include <algorithm>
#include <string_view>

namespace tilefeed::loader::detail {
namespace {

constexpr std::size_t kNameOffset = 0, kNameSize = 100;
constexpr std::size_t kSizeOffset = 124, kSizeSize = 12;
constexpr std::size_t kChecksumOffset = 148, kChecksumSize = 8;
constexpr std::size_t kTypeOffset = 156;
constexpr std::size_t kMagicOffset = 257;
constexpr std::size_t kPrefixOffset = 345, kPrefixSize = 155;

std::string_view Field(std::span<const std::byte> block, std::size_t offset, std::size_t size) {
  const auto* at = reinterpret_cast<const char*>(block.data()) + offset;
  return {at, static_cast<std::size_t>(std::find(at, at + size, '\0') - at)};
}

// An octal field: optional leading spaces, digits, then NUL/space padding.
std::optional<std::uint64_t> ParseOctal(std::string_view field) {
  std::size_t i = 0;
  while (i < field.size() && field[i] == ' ') ++i;
  std::uint64_t value = 0;
  std::size_t digits = 0;
  for (; i < field.size() && field[i] >= '0' && field[i] <= '7'; ++i, ++digits) {
    if (value > (~std::uint64_t{0} >> 3)) return std::nullopt;
    value = value * 8 + static_cast<std::uint64_t>(field[i] - '0');
  }
  for (; i < field.size(); ++i) {
    if (field[i] != ' ' && field[i] != '\0') return std::nullopt;
  }
  if (digits == 0) return std::nullopt;
  return value;
}

std::uint64_t ParseSize(std::span<const std::byte> block) {
  const auto first = std::to_integer<unsigned>(block[kSizeOffset]);
  if (first & 0x80) {
    // GNU base-256: big-endian two's complement in the remaining bits; negative is bad.
    if (first & 0x40) throw TarFormatError("negative member size");
    std::uint64_t value = first & 0x3F;
    for (std::size_t i = 1; i < kSizeSize; ++i) {
      if (value > (~std::uint64_t{0} >> 8)) throw TarFormatError("member size overflows 64 bits");
      value = (value << 8) | std::to_integer<unsigned>(block[kSizeOffset + i]);
    }
    return value;
  }
  const auto* at = reinterpret_cast<const char*>(block.data()) + kSizeOffset;
  const auto size = ParseOctal(std::string_view(at, kSizeSize));
  if (!size) throw TarFormatError("malformed size field");
  return *size;
}

void CheckChecksum(std::span<const std::byte> block) {
  const auto* at = reinterpret_cast<const char*>(block.data()) + kChecksumOffset;
  const auto stored = ParseOctal(std::string_view(at, kChecksumSize));
  if (!stored) throw TarFormatError("malformed header checksum field (not a tar header?)");
  std::uint64_t unsigned_sum = 0;
  std::int64_t signed_sum = 0;
  for (std::size_t i = 0; i < kTarBlockSize; ++i) {
    const bool in_field = i >= kChecksumOffset && i < kChecksumOffset + kChecksumSize;
    const auto b = in_field ? 0x20u : std::to_integer<unsigned>(block[i]);
    unsigned_sum += b;
    signed_sum += static_cast<signed char>(static_cast<unsigned char>(b));
  }
  // Some old writers summed signed chars; both are accepted, as GNU tar does.
  if (*stored != unsigned_sum && static_cast<std::int64_t>(*stored) != signed_sum) {
    throw TarFormatError("header checksum mismatch: stored " + std::to_string(*stored) +
                         ", computed " + std::to_string(unsigned_sum));
  }
}

TarEntryKind KindOf(char type) {
  switch (type) {
    case '0':
    case '\0':
    case '7':
      return TarEntryKind::kFile;
    case 'x':
      return TarEntryKind::kPax;
    case 'g':
      return TarEntryKind::kGlobalPax;
    case 'L':
      return TarEntryKind::kLongName;
    default:
      return TarEntryKind::kOther;
  }
}

}  // namespace

std::uint64_t TarPaddedSize(std::uint64_t size) {
  return (size + kTarBlockSize - 1) / kTarBlockSize * kTarBlockSize;
}

TarHeader ParseTarHeader(std::span<const std::byte> block) {
  TarHeader h;
  if (std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0}; })) {
    return h;  // kEnd
  }
  CheckChecksum(block);
  h.type = static_cast<char>(block[kTypeOffset]);
  h.kind = KindOf(h.type);
  h.size = ParseSize(block);
  // Links, directories, FIFOs and devices carry no data whatever their size field says.
  if (h.type >= '1' && h.type <= '6') h.size = 0;
  h.name = std::string(Field(block, kNameOffset, kNameSize));
  // POSIX ustar ("ustar\0" "00") splits long names into prefix + name; GNU's "ustar  "
  // uses those bytes for other fields.
  const std::string_view magic = Field(block, kMagicOffset, 6);
  const auto version = reinterpret_cast<const char*>(block.data()) + kMagicOffset + 6;
  if (magic == "ustar" && version[0] == '0' && version[1] == '0') {
    const std::string_view prefix = Field(block, kPrefixOffset, kPrefixSize);
    if (!prefix.empty()) h.name = std::string(prefix) + "/" + h.name;
  }
  return h;
}

PaxOverrides ParsePaxRecords(std::span<const std::byte> data) {
  PaxOverrides out;
  const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  std::size_t at = 0;
  while (at < text.size() && text[at] != '\0') {  // some writers pad with NULs
    // "<len> <key>=<value>\n", where len counts the whole record in decimal.
    std::size_t length = 0;
    std::size_t i = at;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9' && i - at < 19; ++i) {
      length = length * 10 + static_cast<std::size_t>(text[i] - '0');
    }
    if (i == at || i >= text.size() || text[i] != ' ' || length <= i - at + 1 ||
        length > text.size() - at || text[at + length - 1] != '\n') {
      throw TarFormatError("malformed pax record at byte " + std::to_string(at));
    }
    const std::string_view record = text.substr(i + 1, at + length - 1 - (i + 1));
    const std::size_t eq = record.find('=');
    if (eq == std::string_view::npos) throw TarFormatError("pax record without '='");
    const std::string_view key = record.substr(0, eq);
    const std::string_view value = record.substr(eq + 1);
    if (key == "path") out.path = std::string(value);
    if (key == "size") {
      std::uint64_t decimal = 0;
      if (value.empty() || value.size() > 19) {
        throw TarFormatError("malformed pax size");
      }
      for (char c : value) {
        if (c < '0' || c > '9') throw TarFormatError("malformed pax size");
        decimal = decimal * 10 + static_cast<std::uint64_t>(c - '0');
      }
      out.size = decimal;
    }
    at += length;
  }
  return out;
}

}  // namespace tilefeed::loader::detail
