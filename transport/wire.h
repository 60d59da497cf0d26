#pragma once

// The control messages of the reader <-> stream protocol. Internal (tests use it to play a
// misbehaving peer). Every message is a multipart ZeroMQ message whose first part is a
// fixed 40-byte Control; some types carry more parts:
//
//   stream -> reader   kHello{a = credits wanted, b = 1: send payload checksums}  (first)
//                      [+ session terms (tilefeed/transport/session.h)]
//   reader -> stream   kWelcome{a = batches per epoch, b = shm slots (0: payload inline),
//                               c = shm image bytes per slot, d = shm samples per slot}
//                      + the agreed session terms (empty when the reader states none)
//                      [+ shm segment name]
//   stream -> reader   kReady{a = credits}               (after mapping any shm)
//   stream -> reader   kCredit{a = count | shm slot returned}
//   reader -> stream   kBatch{a = shm slot} + frame header [+ images, labels, indices]
//   reader -> stream   kEpochEnd{a = epoch}
//   both               kHeartbeat
//   reader -> stream   kBye{a = end epoch: the one after the last epoch served}
//   stream -> reader   kBye
//   reader -> stream   kError + text (also the refusal of a hello, which says why)
//
// docs/wire-protocol.md is the full description, with the byte tables and the state
// machine. Version 2 added the session terms, the bye's end epoch and refusals.
//
// Credits: inline, one per batch, granted back when Next() hands a batch out; with shm,
// one per slot, granted back when the trainer drops the batch (the slot is free again).
// With shm the slots are the reader's loader slots (the loader decodes into them), so at
// most min(credits wanted, the loader's prefetch_depth) batches are in flight.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "codecs/byte_order.h"

namespace tilefeed::transport::detail {

inline constexpr std::uint32_t kControlMagic = 0x31434654;  // "TFC1"
inline constexpr std::uint16_t kControlVersion = 3;
inline constexpr std::size_t kControlSize = 40;

enum class MessageType : std::uint16_t {
  kHello = 1,
  kWelcome,
  kReady,
  kCredit,
  kBatch,
  kEpochEnd,
  kHeartbeat,
  kBye,
  kError,
};
inline constexpr std::uint16_t kLastMessageType = static_cast<std::uint16_t>(MessageType::kError);

struct Control {
  MessageType type = MessageType::kHeartbeat;
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  std::uint64_t c = 0;
  std::uint64_t d = 0;
};

using codecs::detail::GetField;  // little-endian, as docs/wire-protocol.md says
using codecs::detail::PutField;

inline std::array<std::byte, kControlSize> EncodeControl(const Control& control) {
  std::array<std::byte, kControlSize> out{};
  PutField(out, 0, kControlMagic);
  PutField(out, 4, kControlVersion);
  PutField(out, 6, static_cast<std::uint16_t>(control.type));
  PutField(out, 8, control.a);
  PutField(out, 16, control.b);
  PutField(out, 24, control.c);
  PutField(out, 32, control.d);
  return out;
}

// Why `bytes` is not a control part, for a refusal; "" when it is one.
inline std::string WhyNotControl(std::span<const std::byte> bytes) {
  if (bytes.size() != kControlSize) {
    return "first part is " + std::to_string(bytes.size()) + " bytes, a control part is " +
           std::to_string(kControlSize);
  }
  const auto magic = GetField<std::uint32_t>(bytes, 0);
  const auto version = GetField<std::uint16_t>(bytes, 4);
  const auto type = GetField<std::uint16_t>(bytes, 6);
  if (magic != kControlMagic) return "bad magic (not a tilefeed control part)";
  if (version != kControlVersion) {
    return "protocol version " + std::to_string(version) + ", this side speaks " +
           std::to_string(kControlVersion);
  }
  if (type == 0 || type > kLastMessageType) return "unknown message type " + std::to_string(type);
  return "";
}

// nullopt for anything that is not a well-formed control part.
inline std::optional<Control> ParseControl(std::span<const std::byte> bytes) {
  if (!WhyNotControl(bytes).empty()) return std::nullopt;
  Control control;
  control.type = static_cast<MessageType>(GetField<std::uint16_t>(bytes, 6));
  control.a = GetField<std::uint64_t>(bytes, 8);
  control.b = GetField<std::uint64_t>(bytes, 16);
  control.c = GetField<std::uint64_t>(bytes, 24);
  control.d = GetField<std::uint64_t>(bytes, 32);
  return control;
}

}  // namespace tilefeed::transport::detail
