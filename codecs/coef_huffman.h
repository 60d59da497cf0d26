#pragma once

// Version 2's Huffman coding of a coefficient record's column groups (coding 3; the
// bytes are specified in docs/shard-format.md, "Version 2 Huffman groups").
//
// A group's raw bytes are split into six segments by component class (component 0, or
// the others) and role (DC bytes, mask bytes, values), each coded with one of the record's
// canonical Huffman tables and cut into four parts, one per bit stream, so that a decoder
// follows four independent streams at once and the table lookups overlap.
//
// Decoding is a table lookup of the next 11 bits per byte (per up to three value bytes).
// HuffDecoder reads only the bytes it is given (it never reads past coded + coded_size), and every
// malformed table or stream is refused with a one-line reason; a stream that decodes to the right
// number of bytes but does not end where its codes end is refused too.
//
// Thread safety: a HuffDecoder is read-only after ReadTables; an encoder is used by one
// thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tilefeed::codecs::detail {

inline constexpr int kHuffMaxLength = 11;            // longest code, in bits
inline constexpr int kHuffTablesPerClass = 3;        // DC bytes, mask bytes, value bytes
inline constexpr std::size_t kHuffGroupHeader = 12;  // three u32 stream sizes

// The blocks of one column group: all of them, and component 0's (which come first).
struct HuffGroupShape {
  std::size_t blocks = 0;
  std::size_t first_blocks = 0;
};

// The set bits of `blocks` little-endian 64-bit masks at masks[0, 8 * blocks): how many
// value bytes those blocks of a version-2 group hold. Counts with the POPCNT instruction
// where the CPU has it (asked at run time: the build targets any x86-64, whose baseline
// lacks it, so std::popcount alone is a libgcc call per mask), else portably; `portable`
// forces the portable count (tests compare the two).
std::size_t CountMaskBits(const std::uint8_t* masks, std::size_t blocks, bool portable = false);

// Builds a record's tables from all its groups, then codes each group with them.
class HuffEncoder {
 public:
  // `classes`: 1 for a one-component image, else 2.
  explicit HuffEncoder(int classes);
  // Pass 1: counts the bytes of one group (raw = its version-2 raw bytes).
  void Count(const std::uint8_t* raw, std::size_t size, HuffGroupShape shape);
  // Builds the tables from the counts; then the functions below may be called.
  void Finish();
  // The tables as stored (classes * 3 of them, in order).
  void AppendTables(std::vector<std::byte>& out) const;
  // One group's coded bytes: the stream header and the four streams.
  // REQUIRES: the group was counted before Finish.
  void AppendGroup(const std::uint8_t* raw, std::size_t size, HuffGroupShape shape,
                   std::vector<std::byte>& out) const;

 private:
  int classes_;
  std::vector<std::array<std::uint64_t, 256>> counts_;
  std::vector<std::array<std::uint8_t, 256>> lengths_;  // all zero: a constant table
  std::vector<std::array<std::uint16_t, 256>> codes_;
  std::vector<int> constant_;  // the symbol of a constant table, else -1
};

class HuffDecoder {
 public:
  // Reads `classes` * 3 tables from bytes[0, size). Returns the bytes they take, or 0
  // with *why set to a one-line reason when they are malformed or cut short. The value
  // tables' multi-byte lookups are built with AVX-512 gathers where the CPU has them;
  // `portable` forces the scalar build (tests compare the two).
  std::size_t ReadTables(const std::uint8_t* bytes, std::size_t size, int classes, const char** why,
                         bool portable = false);
  // Decodes one group's coded bytes into out[0, raw_size). Returns nullptr, or a
  // one-line reason the bytes are malformed (out's contents are then unspecified).
  // REQUIRES: ReadTables succeeded; raw_size >= 10 * shape.blocks.
  const char* DecodeGroup(const std::uint8_t* coded, std::size_t coded_size, std::uint8_t* out,
                          std::size_t raw_size, HuffGroupShape shape) const;

 private:
  int classes_ = 0;
  // classes_ * 3 tables of 2^11 entries: code length << 8 | byte.
  std::vector<std::uint16_t> entries_;
  // Per class, its value table as up to three bytes per lookup (BuildMulti in the .cc).
  std::vector<std::uint32_t> multi_;
};

}  // namespace tilefeed::codecs::detail
