#include "loader/shard_format.h"

// For XXH3_state_t on the stack: the streaming checksum then allocates nothing.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
// Every record is hashed before it is decoded: the library's XXH3 with its run-time choice
// of SSE2, AVX2 or AVX-512 (Debian builds the plain names for SSE2 alone). Same hashes.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "codecs/byte_order.h"

namespace tilefeed::loader::detail {
namespace {

constexpr char kShardMagic[8] = {'T', 'F', 'S', 'H', 'A', 'R', 'D', '\0'};
constexpr char kFooterMagic[8] = {'T', 'F', 'S', 'F', 'O', 'O', 'T', '\0'};

using codecs::detail::GetField;
using codecs::detail::StoreLe;

template <typename T>
void Append(std::vector<std::byte>& out, T value) {
  const std::size_t at = out.size();
  out.resize(at + sizeof(T));
  StoreLe(out.data() + at, value);
}

bool AllZero(std::span<const std::byte> bytes) {
  for (std::byte b : bytes) {
    if (b != std::byte{0}) return false;
  }
  return true;
}

constexpr RecordCodec kCodecs[] = {RecordCodec::kJpeg, RecordCodec::kLz4Raw,
                                   RecordCodec::kIndexedJpeg, RecordCodec::kCoefficients};

bool ValidCodec(std::uint8_t value) {
  return std::ranges::find(kCodecs, static_cast<RecordCodec>(value)) != std::end(kCodecs);
}

// A u24 in the reserved bytes 5..7 of a record header.
std::uint32_t LoadU24(std::span<const std::byte> bytes, std::size_t at) {
  return std::uint32_t{GetField<std::uint8_t>(bytes, at)} |
         std::uint32_t{GetField<std::uint8_t>(bytes, at + 1)} << 8 |
         std::uint32_t{GetField<std::uint8_t>(bytes, at + 2)} << 16;
}

[[noreturn]] void Fail(const std::string& reason) { throw ShardFormatError(reason); }

}  // namespace

std::uint16_t FormatVersionFor(RecordCodec codec) {
  return codec == RecordCodec::kIndexedJpeg ? 2 : codec == RecordCodec::kCoefficients ? 3 : 1;
}

std::uint64_t Checksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string Hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::array<std::byte, kShardHeaderSize> EncodeShardHeader(const ShardHeader& header) {
  std::array<std::byte, kShardHeaderSize> out{};
  std::memcpy(out.data(), kShardMagic, sizeof(kShardMagic));
  StoreLe(out.data() + 8, FormatVersionFor(header.codec));
  out[10] = static_cast<std::byte>(header.codec);
  StoreLe(out.data() + 12, header.shard_number);
  StoreLe(out.data() + 16, header.record_count);
  StoreLe(out.data() + 24, Checksum(std::span(out).first(24)));
  return out;
}

ShardHeader ParseShardHeader(std::span<const std::byte> head) {
  if (head.size() < kShardHeaderSize) {
    Fail("truncated: " + std::to_string(head.size()) + " bytes, shorter than a shard header");
  }
  if (std::memcmp(head.data(), kShardMagic, sizeof(kShardMagic)) != 0) {
    Fail("not a tilefeed shard (bad magic)");
  }
  const auto version = GetField<std::uint16_t>(head, 8);
  if (version < 1 || version > kShardFormatVersion) {
    Fail("shard format version " + std::to_string(version) +
         " is not supported (this reader: 1 to " + std::to_string(kShardFormatVersion) + ")");
  }
  if (GetField<std::uint64_t>(head, 24) != Checksum(head.first(24))) {
    Fail("shard header checksum mismatch");
  }
  const auto codec = GetField<std::uint8_t>(head, 10);
  if (!ValidCodec(codec)) Fail("unknown codec " + std::to_string(codec) + " in shard header");
  if (version != FormatVersionFor(static_cast<RecordCodec>(codec))) {
    Fail("codec " + std::to_string(codec) + " in a version " + std::to_string(version) +
         " shard header");
  }
  if (head[11] != std::byte{0}) Fail("reserved shard header byte is not zero");
  ShardHeader header;
  header.codec = static_cast<RecordCodec>(codec);
  header.shard_number = GetField<std::uint32_t>(head, 12);
  header.record_count = GetField<std::uint64_t>(head, 16);
  return header;
}

std::array<std::byte, kRecordHeaderSize> EncodeRecordHeader(std::int32_t label, RecordCodec codec,
                                                            std::uint32_t index_size) {
  assert(codec == RecordCodec::kIndexedJpeg ? index_size > 0 && index_size <= kMaxRecordIndexSize
                                            : index_size == 0);
  std::array<std::byte, kRecordHeaderSize> out{};
  StoreLe(out.data(), label);
  out[4] = static_cast<std::byte>(codec);
  for (int i = 0; i < 3; ++i) out[5 + i] = static_cast<std::byte>((index_size >> (8 * i)) & 0xFF);
  return out;
}

void AppendIndexEntry(const IndexEntry& entry, std::vector<std::byte>& index) {
  Append(index, entry.offset);
  Append(index, entry.size);
  Append(index, entry.label);
  Append(index, entry.checksum);
}

void AppendTrailer(std::uint64_t index_offset, std::uint64_t record_count,
                   std::vector<std::byte>& footer) {
  Append(footer, index_offset);
  Append(footer, record_count);
  // Covers the index and the two fields above: everything from index_offset on.
  Append(footer, Checksum(footer));
  const std::size_t at = footer.size();
  footer.resize(at + sizeof(kFooterMagic));
  std::memcpy(footer.data() + at, kFooterMagic, sizeof(kFooterMagic));
}

std::uint64_t FooterSize(std::uint64_t record_count) {
  return record_count * kIndexEntrySize + kShardTrailerSize;
}

ShardIndex ParseShardFooter(std::span<const std::byte> tail, std::uint64_t file_size) {
  if (file_size < kShardHeaderSize + kShardTrailerSize) {
    Fail("truncated: " + std::to_string(file_size) + " bytes, shorter than header + footer");
  }
  if (tail.size() < kShardTrailerSize || tail.size() > file_size) {
    Fail("footer buffer of " + std::to_string(tail.size()) + " bytes does not fit the file");
  }
  const std::size_t t = tail.size() - kShardTrailerSize;  // trailer position in `tail`
  if (std::memcmp(tail.data() + t + 24, kFooterMagic, sizeof(kFooterMagic)) != 0) {
    Fail("no shard footer at the end of the file (truncated or not a shard)");
  }
  const auto index_offset = GetField<std::uint64_t>(tail, t);
  const auto record_count = GetField<std::uint64_t>(tail, t + 8);
  const std::uint64_t trailer_offset = file_size - kShardTrailerSize;
  // Each bound is checked before it is used in arithmetic, so nothing below overflows.
  if (index_offset < kShardHeaderSize || index_offset > trailer_offset) {
    Fail("index offset " + std::to_string(index_offset) + " outside the file");
  }
  if (record_count > (trailer_offset - index_offset) / kIndexEntrySize ||
      record_count * kIndexEntrySize != trailer_offset - index_offset) {
    Fail("index of " + std::to_string(record_count) + " records does not fill the " +
         std::to_string(trailer_offset - index_offset) + " bytes before the trailer");
  }
  const std::uint64_t tail_begin = file_size - tail.size();
  if (index_offset < tail_begin) Fail("index starts before the bytes read for it");
  const auto footer = tail.subspan(static_cast<std::size_t>(index_offset - tail_begin));
  ShardIndex index;
  index.index_offset = index_offset;
  index.footer_checksum = GetField<std::uint64_t>(tail, t + 16);
  if (index.footer_checksum != Checksum(footer.first(footer.size() - 16))) {
    Fail("footer checksum mismatch");
  }
  index.entries.resize(static_cast<std::size_t>(record_count));
  std::uint64_t expected_offset = kShardHeaderSize;
  for (std::size_t i = 0; i < index.entries.size(); ++i) {
    const std::size_t at = i * kIndexEntrySize;
    IndexEntry& e = index.entries[i];
    e.offset = GetField<std::uint64_t>(footer, at);
    e.size = GetField<std::uint32_t>(footer, at + 8);
    e.label = GetField<std::int32_t>(footer, at + 12);
    e.checksum = GetField<std::uint64_t>(footer, at + 16);
    if (e.offset != expected_offset) {
      Fail("record " + std::to_string(i) + " at offset " + std::to_string(e.offset) +
           ", expected " + std::to_string(expected_offset));
    }
    if (e.size < kRecordHeaderSize || e.size > index_offset - e.offset) {
      Fail("record " + std::to_string(i) + " size " + std::to_string(e.size) + " out of bounds");
    }
    if (e.label < 0) Fail("record " + std::to_string(i) + " has negative label");
    expected_offset = e.offset + e.size;
  }
  if (expected_offset != index_offset) {
    Fail("records end at " + std::to_string(expected_offset) + " but the index starts at " +
         std::to_string(index_offset));
  }
  return index;
}

std::uint64_t RecordChecksum(std::span<const std::byte> header,
                             std::span<const std::byte> payload) {
  // The streaming state lets the reader keep the payload at the start of the caller's
  // buffer instead of copying it behind the header.
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, header.data(), header.size());
  XXH3_64bits_update(&state, payload.data(), payload.size());
  return XXH3_64bits_digest(&state);
}

std::string CheckRecord(std::span<const std::byte> header, std::span<const std::byte> payload,
                        const IndexEntry& entry, RecordCodec shard_codec) {
  if (header.size() != kRecordHeaderSize || header.size() + payload.size() != entry.size) {
    return "short read of the record";
  }
  const std::uint64_t sum = RecordChecksum(header, payload);
  if (sum != entry.checksum) {
    return "record checksum mismatch (stored " + Hex(entry.checksum) + ", computed " + Hex(sum) +
           ")";
  }
  // With a matching checksum these only fail for a writer bug, but they are cheap.
  const auto label = GetField<std::int32_t>(header, 0);
  if (label != entry.label) {
    return "record label " + std::to_string(label) + " differs from the index's " +
           std::to_string(entry.label);
  }
  const auto codec = GetField<std::uint8_t>(header, 4);
  const bool stored_as_came =
      (shard_codec == RecordCodec::kIndexedJpeg || shard_codec == RecordCodec::kCoefficients) &&
      codec == static_cast<std::uint8_t>(RecordCodec::kJpeg);
  if (codec != static_cast<std::uint8_t>(shard_codec) && !stored_as_came) {
    return "record codec " + std::to_string(codec) + " differs from the shard's";
  }
  if (codec != static_cast<std::uint8_t>(RecordCodec::kIndexedJpeg)) {
    if (!AllZero(header.subspan(5))) return "reserved record header bytes are not zero";
    return {};
  }
  // Checked here, once, so that a reader never slices the payload by an unchecked length.
  const std::uint32_t index_size = LoadU24(header, 5);
  if (index_size == 0 || index_size >= payload.size()) {
    return "interval index length " + std::to_string(index_size) + " does not fit the " +
           std::to_string(payload.size()) + "-byte payload";
  }
  return {};
}

RecordLayout ReadRecordLayout(std::span<const std::byte> header) {
  const auto codec = static_cast<RecordCodec>(GetField<std::uint8_t>(header, 4));
  return {codec, codec == RecordCodec::kIndexedJpeg ? LoadU24(header, 5) : 0};
}

const char* CodecName(RecordCodec codec) {
  static constexpr const char* kNames[] = {"jpeg", "lz4raw", "jpeg-indexed", "coefficients"};
  const auto i = static_cast<std::size_t>(codec) - 1;  // RecordCodec counts from 1
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::string ShardFileName(std::uint32_t number) {
  std::string digits = std::to_string(number);
  if (digits.size() < 5) digits.insert(0, 5 - digits.size(), '0');
  return "shard-" + digits + ".tfs";
}

std::string FormatManifest(const Manifest& manifest) {
  std::string text;
  text +=
      std::string(kManifestMagic) + " " + std::to_string(FormatVersionFor(manifest.codec)) + "\n";
  text += "codec " + std::string(CodecName(manifest.codec)) + "\n";
  text += "records " + std::to_string(manifest.records) + "\n";
  text += "classes " + std::to_string(manifest.class_names.size()) + "\n";
  for (const std::string& name : manifest.class_names) text += "class " + name + "\n";
  text += "shards " + std::to_string(manifest.shards.size()) + "\n";
  for (const ManifestShard& s : manifest.shards) {
    text += "shard " + s.file_name + " " + std::to_string(s.records) + " " +
            std::to_string(s.bytes) + " " + Hex(s.footer_checksum) + "\n";
  }
  const std::uint64_t sum = Checksum(std::as_bytes(std::span(text)));
  text += "checksum " + Hex(sum) + "\n";
  return text;
}

namespace {

// Reads manifest lines one by one; every accessor throws on anything unexpected.
class ManifestReader {
 public:
  explicit ManifestReader(std::string_view text) : text_(text) {}

  // The next line, which must start with `key` and a space; returns the rest.
  std::string_view Expect(std::string_view key) {
    ++line_;
    const std::size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) Fail("line " + std::to_string(line_) + ": missing");
    const std::string_view line = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ') {
      Fail("line " + std::to_string(line_) + ": expected '" + std::string(key) + " ...'");
    }
    return line.substr(key.size() + 1);
  }
  std::size_t pos() const { return pos_; }
  bool at_end() const { return pos_ == text_.size(); }

  std::uint64_t Number(std::string_view field, int base = 10) {
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value, base);
    if (ec != std::errc() || ptr != field.data() + field.size() || field.empty()) {
      Fail("line " + std::to_string(line_) + ": bad number '" + std::string(field) + "'");
    }
    return value;
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  int line_ = 0;
};

}  // namespace

Manifest ParseManifest(std::string_view text) {
  ManifestReader reader(text);
  const std::uint64_t version = reader.Number(reader.Expect(kManifestMagic));
  if (version < 1 || version > kShardFormatVersion) {
    Fail("manifest format version " + std::to_string(version) + " is not supported");
  }
  Manifest manifest;
  const std::string_view codec = reader.Expect("codec");
  const auto known = std::ranges::find(kCodecs, codec, CodecName);
  if (known == std::end(kCodecs)) Fail("unknown codec '" + std::string(codec) + "'");
  manifest.codec = *known;
  if (version != FormatVersionFor(manifest.codec)) {
    Fail("codec '" + std::string(codec) + "' in a version " + std::to_string(version) +
         " manifest");
  }
  manifest.records = reader.Number(reader.Expect("records"));
  const std::uint64_t classes = reader.Number(reader.Expect("classes"));
  // Each class line takes at least 7 bytes, which bounds the reservation.
  if (classes > text.size() / 7) Fail("class count " + std::to_string(classes) + " too large");
  for (std::uint64_t c = 0; c < classes; ++c) {
    manifest.class_names.emplace_back(reader.Expect("class"));
  }
  const std::uint64_t shards = reader.Number(reader.Expect("shards"));
  if (shards > text.size() / 10) Fail("shard count " + std::to_string(shards) + " too large");
  std::uint64_t total = 0;
  for (std::uint64_t s = 0; s < shards; ++s) {
    const std::string_view line = reader.Expect("shard");
    std::string_view fields[4];
    std::size_t start = 0;
    for (int f = 0; f < 4; ++f) {
      const std::size_t space = f < 3 ? line.find(' ', start) : line.size();
      if (space == std::string_view::npos) Fail("shard line with fewer than 4 fields");
      fields[f] = line.substr(start, space - start);
      start = space + 1;
    }
    ManifestShard shard;
    shard.file_name = std::string(fields[0]);
    if (shard.file_name != ShardFileName(static_cast<std::uint32_t>(s))) {
      Fail("shard " + std::to_string(s) + " is named '" + shard.file_name + "', expected " +
           ShardFileName(static_cast<std::uint32_t>(s)));
    }
    shard.records = reader.Number(fields[1]);
    shard.bytes = reader.Number(fields[2]);
    if (fields[3].size() != 16) Fail("shard checksum is not 16 hex digits");
    shard.footer_checksum = reader.Number(fields[3], 16);
    if (shard.records > manifest.records - total) Fail("shard record counts exceed the total");
    total += shard.records;
    manifest.shards.push_back(std::move(shard));
  }
  if (total != manifest.records) {
    Fail("shards hold " + std::to_string(total) + " records, the manifest says " +
         std::to_string(manifest.records));
  }
  const std::size_t body = reader.pos();
  const std::string_view sum_field = reader.Expect("checksum");
  if (sum_field.size() != 16) Fail("manifest checksum is not 16 hex digits");
  const std::uint64_t sum = reader.Number(sum_field, 16);
  if (!reader.at_end()) Fail("text after the checksum line");
  if (sum != Checksum(std::as_bytes(std::span(text.data(), body)))) {
    Fail("manifest checksum mismatch");
  }
  return manifest;
}

}  // namespace tilefeed::loader::detail
