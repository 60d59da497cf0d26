#include "tilefeed/transport/session.h"

#include <cstring>
#include <stdexcept>

#include "loader/option_specs.h"
#include "loader/shard_format.h"
#include "transport/wire.h"

namespace tilefeed::transport {
namespace {

constexpr std::uint32_t kTermsMagic = 0x32534654;  // "TFS2", little-endian
constexpr std::uint16_t kDropLastFlag = 1;
constexpr std::uint16_t kPinnedFlag = 2;
constexpr std::uint16_t kFastScalingFlag = 4;
constexpr std::uint16_t kFlags = kDropLastFlag | kPinnedFlag | kFastScalingFlag;

std::string RemainderName(std::uint8_t remainder) { return remainder == 0 ? "pad" : "drop"; }
std::string OnOff(bool on) { return on ? "on" : "off"; }
template <std::size_t N, typename Value>  // the option table's spelling of an enum's value
std::string Spelled(const std::string_view (&choices)[N], Value value) {
  return std::string(choices[static_cast<std::size_t>(value)]);
}
std::string Slice(const SessionTerms& t) {
  std::string text = std::to_string(t.slice_index) + "/" + std::to_string(t.slice_count);
  if (t.slice_count == 1) text += " (the whole dataset)";
  return text;
}
std::string Dataset(const loader::DatasetIdentity& d) {
  return std::to_string(d.samples) + " samples, digest " + loader::detail::Hex(d.digest);
}
std::string Position(const SessionTerms& t) {
  return "epoch " + std::to_string(t.first_epoch) + " position " + std::to_string(t.first_position);
}
std::string Line(const std::string& what, const std::string& trainer, const std::string& reader) {
  return what + ": trainer " + trainer + ", reader " + reader;
}

}  // namespace

EncodedSessionTerms EncodeSessionTerms(const SessionTerms& t) {
  const std::string& schedule = t.image_size.text();
  EncodedSessionTerms out(kSessionTermsSize + schedule.size() + t.augment.size());
  const std::uint16_t flags =
      (t.drop_last ? kDropLastFlag : 0) | (t.position_pinned ? kPinnedFlag : 0) |
      (t.decode_scaling == codecs::DecodeScaling::kFast ? kFastScalingFlag : 0);
  detail::PutField<std::uint32_t>(out, 0, kTermsMagic);
  detail::PutField<std::uint16_t>(out, 4, flags);
  detail::PutField<std::uint8_t>(out, 6, t.mode);
  detail::PutField<std::uint8_t>(out, 7, t.remainder);
  detail::PutField<std::uint64_t>(out, 8, t.dataset.samples);
  detail::PutField<std::uint64_t>(out, 16, t.dataset.digest);
  detail::PutField<std::uint32_t>(out, 24, t.slice_index);
  detail::PutField<std::uint32_t>(out, 28, t.slice_count);
  detail::PutField<std::uint64_t>(out, 32, t.seed);
  detail::PutField<std::uint32_t>(out, 40, static_cast<std::uint32_t>(schedule.size()));
  detail::PutField<std::uint32_t>(out, 44, t.batch_size);
  detail::PutField<std::uint64_t>(out, 48, t.epochs);
  detail::PutField<std::uint64_t>(out, 56, t.first_epoch);
  detail::PutField<std::uint64_t>(out, 64, t.first_position);
  detail::PutField<std::uint64_t>(out, 72, 0);
  std::memcpy(out.data() + kSessionTermsSize, schedule.data(), schedule.size());
  std::memcpy(out.data() + kSessionTermsSize + schedule.size(), t.augment.data(), t.augment.size());
  return out;
}

std::optional<SessionTerms> ParseSessionTerms(std::span<const std::byte> bytes) {
  const std::size_t schedule_size =
      bytes.size() < kSessionTermsSize ? 0 : detail::GetField<std::uint32_t>(bytes, 40);
  if (bytes.size() < kSessionTermsSize ||
      detail::GetField<std::uint32_t>(bytes, 0) != kTermsMagic ||
      schedule_size > std::min(bytes.size() - kSessionTermsSize, kMaxTermsTextSize) ||
      bytes.size() - kSessionTermsSize - schedule_size > kMaxTermsTextSize) {
    return std::nullopt;
  }
  const auto flags = detail::GetField<std::uint16_t>(bytes, 4);
  SessionTerms t;
  t.mode = detail::GetField<std::uint8_t>(bytes, 6);
  t.remainder = detail::GetField<std::uint8_t>(bytes, 7);
  t.dataset.samples = detail::GetField<std::uint64_t>(bytes, 8);
  t.dataset.digest = detail::GetField<std::uint64_t>(bytes, 16);
  t.slice_index = detail::GetField<std::uint32_t>(bytes, 24);
  t.slice_count = detail::GetField<std::uint32_t>(bytes, 28);
  t.seed = detail::GetField<std::uint64_t>(bytes, 32);
  const std::string schedule(reinterpret_cast<const char*>(bytes.data()) + kSessionTermsSize,
                             schedule_size);
  try {
    t.image_size = loader::SizeSchedule::Parse(schedule);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  if (t.image_size.text() != schedule) return std::nullopt;  // one spelling on the wire
  t.batch_size = detail::GetField<std::uint32_t>(bytes, 44);
  t.epochs = detail::GetField<std::uint64_t>(bytes, 48);
  t.first_epoch = detail::GetField<std::uint64_t>(bytes, 56);
  t.first_position = detail::GetField<std::uint64_t>(bytes, 64);
  const auto text = bytes.subspan(kSessionTermsSize + schedule_size);
  t.augment.assign(reinterpret_cast<const char*>(text.data()), text.size());
  try {
    (void)loader::ParseAugmentSpec(t.augment);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  t.drop_last = (flags & kDropLastFlag) != 0;
  t.position_pinned = (flags & kPinnedFlag) != 0;
  if ((flags & kFastScalingFlag) != 0) t.decode_scaling = codecs::DecodeScaling::kFast;
  if ((flags & ~kFlags) != 0 || t.mode > 1 || t.remainder > 1 || t.slice_count == 0 ||
      t.slice_index >= t.slice_count || t.batch_size == 0 ||
      detail::GetField<std::uint64_t>(bytes, 72) != 0) {
    return std::nullopt;
  }
  return t;
}

std::optional<std::string> Disagreement(const SessionTerms& trainer, const SessionTerms& reader) {
  const loader::DatasetIdentity& mine = trainer.dataset;
  const loader::DatasetIdentity& theirs = reader.dataset;
  if (mine.samples != 0 && theirs.samples != 0 &&
      (mine.samples != theirs.samples || mine.digest != theirs.digest)) {
    return Line("dataset", Dataset(trainer.dataset), Dataset(reader.dataset));
  }
  if (trainer.slice_index != reader.slice_index || trainer.slice_count != reader.slice_count) {
    return Line("slice (instance/instances)", Slice(trainer), Slice(reader));
  }
  auto number = [](std::uint64_t n) { return std::to_string(n); };
  if (trainer.seed != reader.seed) return Line("seed", number(trainer.seed), number(reader.seed));
  if (trainer.image_size != reader.image_size) {
    return Line("image size", trainer.image_size.text(), reader.image_size.text());
  }
  if (trainer.batch_size != reader.batch_size) {
    return Line("batch size", number(trainer.batch_size), number(reader.batch_size));
  }
  if (trainer.mode != reader.mode) {
    return Line("mode", Spelled(loader::kModeChoices, trainer.mode),
                Spelled(loader::kModeChoices, reader.mode));
  }
  if (trainer.remainder != reader.remainder) {
    return Line("remainder", RemainderName(trainer.remainder), RemainderName(reader.remainder));
  }
  if (trainer.drop_last != reader.drop_last) {
    return Line("drop-last", OnOff(trainer.drop_last), OnOff(reader.drop_last));
  }
  if (trainer.decode_scaling != reader.decode_scaling) {
    return Line("decode scaling", Spelled(loader::kDecodeScalingChoices, trainer.decode_scaling),
                Spelled(loader::kDecodeScalingChoices, reader.decode_scaling));
  }
  if (trainer.augment != reader.augment) {
    return Line("augment", "'" + trainer.augment + "'", "'" + reader.augment + "'");
  }
  if (trainer.epochs != reader.epochs) {
    return Line("epochs", number(trainer.epochs), number(reader.epochs));
  }
  if (reader.position_pinned && (trainer.first_epoch != reader.first_epoch ||
                                 trainer.first_position != reader.first_position)) {
    return Line("data position", Position(trainer), Position(reader));
  }
  return std::nullopt;
}

SessionTerms Agreed(const SessionTerms& trainer, const SessionTerms& reader) {
  SessionTerms agreed = reader;
  agreed.first_epoch = trainer.first_epoch;
  agreed.first_position = trainer.first_position;
  agreed.position_pinned = false;
  return agreed;
}

}  // namespace tilefeed::transport
