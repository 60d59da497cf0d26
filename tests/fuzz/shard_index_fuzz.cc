// libFuzzer target: the record-shard parsers (loader/shard_format.h) on arbitrary
// bytes. ShardFormatError is the only acceptable failure, a footer that parses must
// describe records that lie inside the file, contiguous, before the index, and a record
// that CheckRecord accepts must have an interval index length that leaves a non-empty
// JPEG inside its payload. (The index bytes themselves are jpeg_index_fuzz's.)
//
// Checksums would stop almost every mutation at the first comparison, so when the first
// input byte is odd the target writes the correct checksums into the input before
// parsing; the fuzzer then reaches the offset and size checks behind them.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loader/shard_format.h"

namespace {

namespace detail = tilefeed::loader::detail;

void Store64(std::byte* out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

void CheckFooter(std::span<const std::byte> tail, std::uint64_t file_size) {
  try {
    const detail::ShardIndex index = detail::ParseShardFooter(tail, file_size);
    std::uint64_t end = detail::kShardHeaderSize;
    for (const detail::IndexEntry& e : index.entries) {
      if (e.offset != end || e.size < detail::kRecordHeaderSize) __builtin_trap();
      end += e.size;
    }
    if (end != index.index_offset || end > file_size) __builtin_trap();
  } catch (const detail::ShardFormatError&) {
  }
}

void CheckRecordHeader(std::span<const std::byte> record, bool fix_checksum) {
  if (record.size() < detail::kRecordHeaderSize) return;
  const auto header = record.first(detail::kRecordHeaderSize);
  const auto payload = record.subspan(detail::kRecordHeaderSize);
  detail::IndexEntry entry;
  entry.offset = detail::kShardHeaderSize;
  entry.size = static_cast<std::uint32_t>(record.size());
  entry.label = static_cast<std::int32_t>(std::to_integer<std::uint8_t>(header[0]) |
                                          std::to_integer<std::uint8_t>(header[1]) << 8 |
                                          std::to_integer<std::uint8_t>(header[2]) << 16 |
                                          std::to_integer<std::uint8_t>(header[3]) << 24);
  entry.checksum = fix_checksum ? detail::RecordChecksum(header, payload) : 0;
  for (const auto codec : {detail::RecordCodec::kJpeg, detail::RecordCodec::kLz4Raw,
                           detail::RecordCodec::kIndexedJpeg}) {
    if (!detail::CheckRecord(header, payload, entry, codec).empty()) continue;
    const detail::RecordLayout layout = detail::ReadRecordLayout(header);
    if (layout.codec == detail::RecordCodec::kIndexedJpeg) {
      if (codec != detail::RecordCodec::kIndexedJpeg || layout.index_size == 0 ||
          layout.index_size >= payload.size()) {
        __builtin_trap();
      }
    } else if (layout.index_size != 0 ||
               (layout.codec != codec && !(codec == detail::RecordCodec::kIndexedJpeg &&
                                           layout.codec == detail::RecordCodec::kJpeg))) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool fix_checksums = (data[0] & 1) != 0;
  // The tail is the input after the first byte; the file may be longer than the tail.
  std::vector<std::byte> bytes(size - 1);
  if (!bytes.empty()) std::memcpy(bytes.data(), data + 1, bytes.size());
  const std::uint64_t extra = static_cast<std::uint64_t>(data[0] >> 1) * 977;

  if (fix_checksums && bytes.size() >= detail::kShardHeaderSize) {
    std::vector<std::byte> head(bytes.begin(), bytes.begin() + detail::kShardHeaderSize);
    Store64(head.data() + 24, detail::Checksum(std::span(head).first(24)));
    try {
      detail::ParseShardHeader(head);
    } catch (const detail::ShardFormatError&) {
    }
  }
  try {
    detail::ParseShardHeader(bytes);
  } catch (const detail::ShardFormatError&) {
  }

  if (fix_checksums && bytes.size() >= detail::kShardTrailerSize) {
    // Recompute the footer checksum over [index_offset, end - 16) if that range is in
    // the buffer, as a writer would have.
    std::uint64_t index_offset = 0;
    for (int i = 0; i < 8; ++i) {
      index_offset |= std::uint64_t(std::to_integer<std::uint8_t>(
                          bytes[bytes.size() - detail::kShardTrailerSize + i]))
                      << (8 * i);
    }
    const std::uint64_t file_size = bytes.size() + extra;
    const std::uint64_t tail_begin = extra;
    if (index_offset >= tail_begin && index_offset <= file_size - 16) {
      const auto from = static_cast<std::size_t>(index_offset - tail_begin);
      Store64(bytes.data() + bytes.size() - 16,
              detail::Checksum(std::span(bytes).subspan(from, bytes.size() - 16 - from)));
    }
  }
  CheckFooter(bytes, bytes.size());
  CheckFooter(bytes, bytes.size() + extra);
  CheckRecordHeader(bytes, fix_checksums);

  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (fix_checksums) {
    // Replace whatever follows the last "checksum " line with the correct checksum.
    const std::size_t at = text.rfind("checksum ");
    if (at != std::string::npos && (at == 0 || text[at - 1] == '\n')) text.resize(at);
    char hex[17];
    std::uint64_t sum = detail::Checksum(std::as_bytes(std::span(text)));
    for (int i = 15; i >= 0; --i, sum >>= 4) hex[i] = "0123456789abcdef"[sum & 0xF];
    hex[16] = '\0';
    text += std::string("checksum ") + hex + "\n";
  }
  try {
    const detail::Manifest manifest = detail::ParseManifest(text);
    std::uint64_t total = 0;
    for (const auto& shard : manifest.shards) total += shard.records;
    if (total != manifest.records) __builtin_trap();
  } catch (const detail::ShardFormatError&) {
  }
  return 0;
}
