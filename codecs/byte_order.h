// Fixed-width integers read from and written to bytes in a stated byte order, for the
// codecs' and the shards' formats (little-endian records, big-endian JPEG and PNG fields).
// Inline: the decoders call them in their hot loops. Not installed.

#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace tilefeed::codecs::detail {

// `v` with its bytes swapped unless the host's order is `order` (its own inverse).
template <std::endian order, typename T>
inline T InOrder(T v) {
  if constexpr (std::endian::native == order || sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return __builtin_bswap16(v);
  } else if constexpr (sizeof(T) == 4) {
    return __builtin_bswap32(v);
  } else {
    return __builtin_bswap64(v);
  }
}
// The sizeof(T) bytes at p, stored in byte order `order`.
template <typename T, std::endian order = std::endian::little>
inline T Load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return InOrder<order>(v);
}
// Stores `v` at p, little-endian.
template <typename T>
inline void StoreLe(void* p, T v) {
  v = InOrder<std::endian::little>(v);
  std::memcpy(p, &v, sizeof(T));
}

// The T at `offset` of `in` / written at `offset` of `out`, little-endian. REQUIRES: the
// bytes are there.
template <typename T>
inline T GetField(std::span<const std::byte> in, std::size_t offset) {
  return Load<T>(in.data() + offset);
}
template <typename T>
inline void PutField(std::span<std::byte> out, std::size_t offset, T value) {
  StoreLe(out.data() + offset, value);
}

inline unsigned ByteAt(std::span<const std::byte> bytes, std::size_t i) {
  return std::to_integer<unsigned>(bytes[i]);
}
inline std::uint32_t Le16(std::span<const std::byte> b, std::size_t i) {
  return Load<std::uint16_t>(b.data() + i);
}
inline std::uint32_t Le32(std::span<const std::byte> b, std::size_t i) {
  return Load<std::uint32_t>(b.data() + i);
}
inline std::uint32_t Le32(const void* p) { return Load<std::uint32_t>(p); }
// The eight bytes at p, little-endian (the masks and values of a column group).
inline std::uint64_t Le64(const void* p) { return Load<std::uint64_t>(p); }
inline unsigned Be16(std::span<const std::byte> b, std::size_t i) {
  return Load<std::uint16_t, std::endian::big>(b.data() + i);
}
inline std::uint32_t Be32(const void* p) { return Load<std::uint32_t, std::endian::big>(p); }
inline std::uint64_t Be64(const void* p) { return Load<std::uint64_t, std::endian::big>(p); }
inline void PutLe16(std::vector<std::byte>& out, std::uint32_t v) {
  out.push_back(std::byte(v & 0xFF));
  out.push_back(std::byte((v >> 8) & 0xFF));
}
inline void PutLe32(std::vector<std::byte>& out, std::uint32_t v) {
  PutLe16(out, v & 0xFFFF);
  PutLe16(out, v >> 16);
}

}  // namespace tilefeed::codecs::detail
