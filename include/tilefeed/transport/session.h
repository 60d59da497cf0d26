#pragma once

// The terms of a session between a trainer (ZmqBatchStream) and a reader (ReaderEndpoint):
// everything that decides which samples the trainer gets, compared when the session opens.
// The trainer states its terms in its hello; a reader that serves other data refuses the
// session with one line naming both values, and the reader's welcome echoes the terms it
// will serve, which the trainer checks again. A trainer that knows no dataset (no --data)
// leaves the dataset identity unknown (samples 0), and that field alone is not compared.
//
// The position (first_epoch, first_position) is where the trainer stands: a reader adopts
// it, unless it was started at a fixed position (`position_pinned`), which must then match.
// `epochs` is the job's end epoch, exclusive and absolute (train --epochs): a stream's
// orderly end is the reader's bye after epoch `epochs - 1`.
//
// On the wire (docs/wire-protocol.md) the terms are one part: 80 little-endian bytes, then
// the image-size schedule's text (loader::SizeSchedule), whose length the 80 bytes give.
// Pure values and functions; thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tilefeed/loader/augment.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::transport {

inline constexpr std::size_t kSessionTermsSize = 80;  // the fixed part
// After it: the image-size schedule's text (its length at byte 40), then the augment text (the
// rest of the part); each at most kMaxTermsTextSize bytes.
inline constexpr std::size_t kMaxTermsTextSize = 4096;

struct SessionTerms {
  // On the wire samples and digest: the class count is not sent (the digest covers the class
  // names), so it is 0 here and Disagreement compares samples and digest only. `samples` 0
  // means unknown: not compared.
  loader::DatasetIdentity dataset;
  std::uint32_t slice_index = 0;  // the trainer instance this stream feeds
  std::uint32_t slice_count = 1;  // trainer instances in the job
  std::uint64_t seed = 0;
  loader::SizeSchedule image_size;
  std::uint32_t batch_size = 0;
  std::uint8_t mode = 0;         // 0 train (random crops and flips), 1 eval
  std::uint8_t remainder = 0;    // 0 pad, 1 drop (loader::Remainder)
  bool drop_last = false;        // each instance's final partial batch is dropped
  bool position_pinned = false;  // reader: started at a fixed position (never sent by trainers)
  // codecs::JpegOptions::decode_scaling: fast decodes other pixels, so it is a term.
  codecs::DecodeScaling decode_scaling = codecs::DecodeScaling::kExact;
  std::uint64_t epochs = 0;  // end epoch, exclusive
  std::uint64_t first_epoch = 0;
  std::uint64_t first_position = 0;  // samples of first_epoch delivered to all instances
  // loader::AugmentSpecText of the loader's augment (LoaderOptions::augment).
  std::string augment = loader::AugmentSpecText(loader::DefaultAugment());
  friend bool operator==(const SessionTerms&, const SessionTerms&) = default;
};

using EncodedSessionTerms = std::vector<std::byte>;

EncodedSessionTerms EncodeSessionTerms(const SessionTerms& terms);
// nullopt for bytes that are not exactly one well-formed terms part (a schedule text that
// SizeSchedule::Parse refuses, or an augment text loader::ParseAugmentSpec refuses, included).
std::optional<SessionTerms> ParseSessionTerms(std::span<const std::byte> bytes);

// The first difference between a trainer's terms and a reader's, as one line naming both
// values ("seed: trainer 1, reader 0"); nullopt when the reader may serve the trainer. The
// position differs only when the reader's is pinned.
std::optional<std::string> Disagreement(const SessionTerms& trainer, const SessionTerms& reader);

// The terms a reader serves `trainer` on: its own, at the trainer's position unless pinned.
// REQUIRES: !Disagreement(trainer, reader).
SessionTerms Agreed(const SessionTerms& trainer, const SessionTerms& reader);

}  // namespace tilefeed::transport
