#pragma once

// The byte layout of record shards and their manifest (docs/shard-format.md), as pure
// functions over bytes: encoders for the writer and parsers for the reader. Internal:
// not installed, never included from a public header.
//
// The parsers never trust a size, count or offset before checking it against the bytes
// they were given and the file size, so they may be called on arbitrary input (the fuzz
// target in tests/fuzz does). Every failure throws ShardFormatError with a one-line
// reason; callers add the file name. Thread safety: all functions are stateless.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tilefeed::loader::detail {

inline constexpr std::size_t kShardHeaderSize = 32;
inline constexpr std::size_t kShardTrailerSize = 32;
inline constexpr std::size_t kIndexEntrySize = 24;
inline constexpr std::size_t kRecordHeaderSize = 8;
// Version 1: JPEG and LZ4-raw shards. Version 2 adds the indexed-JPEG codec and version
// 3 the coefficient codec; each is written only for its codec, so a pack that needs no
// newer feature stays readable by older readers (docs/shard-format.md, "Versioning").
inline constexpr std::uint16_t kShardFormatVersion = 3;  // the newest this code reads
// An indexed record's index length is a u24 in the record header.
inline constexpr std::uint32_t kMaxRecordIndexSize = (std::uint32_t{1} << 24) - 1;
inline constexpr std::string_view kManifestFileName = "tilefeed-manifest.txt";
inline constexpr std::string_view kManifestMagic = "tilefeed-shards";

// Codec byte of a shard header and of each record (docs/shard-format.md). A kIndexedJpeg
// or kCoefficients shard also holds kJpeg records: files stored as they came.
enum class RecordCodec : std::uint8_t {
  kJpeg = 1,          // the original image file's bytes
  kLz4Raw = 2,        // a codecs/raw.h tensor: uint8 HWC pixels in one LZ4 block
  kIndexedJpeg = 3,   // a codecs/jpeg_index.h interval index, then the transcoded JPEG
  kCoefficients = 4,  // a codecs/jpeg_coefficients.h coefficient record
};

// The format version that a shard or manifest of `codec` is written with (and must
// carry when read): 2 for kIndexedJpeg, 3 for kCoefficients, else 1.
std::uint16_t FormatVersionFor(RecordCodec codec);

class ShardFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ShardHeader {
  RecordCodec codec = RecordCodec::kJpeg;
  std::uint32_t shard_number = 0;  // position of the shard in its dataset
  std::uint64_t record_count = 0;
};

// One record's place in its shard, as the footer index stores it.
struct IndexEntry {
  std::uint64_t offset = 0;  // of the record header, from the start of the file
  std::uint64_t checksum = 0;
  std::uint32_t size = 0;  // record header + payload
  std::int32_t label = 0;
};

struct ShardIndex {
  std::uint64_t index_offset = 0;     // where the index starts (= end of the last record)
  std::uint64_t footer_checksum = 0;  // XXH3 of [index_offset, file_size - 16)
  std::vector<IndexEntry> entries;
};

// XXH3_64bits of `bytes`.
std::uint64_t Checksum(std::span<const std::byte> bytes);
// `value` as 16 lowercase hex digits, as checksums and digests are written.
std::string Hex(std::uint64_t value);

std::array<std::byte, kShardHeaderSize> EncodeShardHeader(const ShardHeader& header);
// Parses the first kShardHeaderSize bytes of a shard: magic, version, codec, reserved
// bytes, header checksum. Throws ShardFormatError.
ShardHeader ParseShardHeader(std::span<const std::byte> head);

// A record header. `index_size` is the interval index length of a kIndexedJpeg record.
// REQUIRES: index_size == 0 unless codec == kIndexedJpeg, then 0 < index_size <=
// kMaxRecordIndexSize.
std::array<std::byte, kRecordHeaderSize> EncodeRecordHeader(std::int32_t label, RecordCodec codec,
                                                            std::uint32_t index_size = 0);
// Appends the entry's 24 bytes to `index`.
void AppendIndexEntry(const IndexEntry& entry, std::vector<std::byte>& index);
// Appends the 32-byte trailer to `footer`, which holds the index bytes, so that the
// footer checksum covers them.
void AppendTrailer(std::uint64_t index_offset, std::uint64_t record_count,
                   std::vector<std::byte>& footer);

// The size of the footer (index + trailer) of a shard with `record_count` records.
std::uint64_t FooterSize(std::uint64_t record_count);

// Parses a shard's footer from `tail`, the last tail.size() bytes of a file of
// `file_size` bytes, which must hold the whole footer. Checks the end magic, that the
// index lies inside `tail` after the header, the footer checksum, and that records are
// contiguous from the end of the header to the index, each at least a record header
// long, with non-negative labels. Throws ShardFormatError.
ShardIndex ParseShardFooter(std::span<const std::byte> tail, std::uint64_t file_size);

// XXH3_64bits of a record: its 8-byte header followed by its payload.
std::uint64_t RecordChecksum(std::span<const std::byte> header, std::span<const std::byte> payload);

// Checks the checksum of the whole record (`header` then `payload`), then its 8-byte
// header against its index entry and the shard's codec: the record codec must be the
// shard's (or kJpeg in a kIndexedJpeg or kCoefficients shard), and a kIndexedJpeg record's index
// length must leave a non-empty JPEG in the payload. Returns an empty string if the record is good,
// else the reason. `shard_codec` is the shard header's.
std::string CheckRecord(std::span<const std::byte> header, std::span<const std::byte> payload,
                        const IndexEntry& entry, RecordCodec shard_codec);

// What a record header says about its payload.
struct RecordLayout {
  RecordCodec codec = RecordCodec::kJpeg;
  std::uint32_t index_size = 0;  // kIndexedJpeg: the payload's first index_size bytes
};
// Reads codec and index length from a record header.
// REQUIRES: CheckRecord accepted the record.
RecordLayout ReadRecordLayout(std::span<const std::byte> header);

struct ManifestShard {
  std::string file_name;  // relative to the manifest's directory; no '/'
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;            // the shard file's size
  std::uint64_t footer_checksum = 0;  // must equal the shard's
};

struct Manifest {
  RecordCodec codec = RecordCodec::kJpeg;
  std::uint64_t records = 0;
  std::vector<std::string> class_names;
  std::vector<ManifestShard> shards;
};

const char* CodecName(RecordCodec codec);
std::string FormatManifest(const Manifest& manifest);
// Parses manifest text, checking its own checksum and that the shard record counts add
// up. Throws ShardFormatError.
Manifest ParseManifest(std::string_view text);

// The name of shard `number`: "shard-00000.tfs".
std::string ShardFileName(std::uint32_t number);

}  // namespace tilefeed::loader::detail
