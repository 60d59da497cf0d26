// libFuzzer target for the transport's control messages and session terms (as a reader or
// a trainer receives them from any peer): the first byte picks the parser. A control part
// or a terms part either parses into a value that re-encodes to the same bytes, or is
// refused (nullopt, and WhyNotControl says why); comparing any two terms never fails.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tilefeed/transport/session.h"
#include "transport/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tilefeed::transport;
  if (size == 0) return 0;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    const std::optional<detail::Control> control = detail::ParseControl(bytes);
    // Checked with __builtin_trap, not assert: fuzz builds define NDEBUG.
    if (control.has_value() != detail::WhyNotControl(bytes).empty()) __builtin_trap();
    if (control) {
      const auto again = detail::EncodeControl(*control);
      if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) __builtin_trap();
    }
    return 0;
  }
  const std::optional<SessionTerms> terms = ParseSessionTerms(bytes);
  if (!terms) return 0;
  const EncodedSessionTerms again = EncodeSessionTerms(*terms);
  if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) __builtin_trap();
  SessionTerms other = *terms;
  other.seed ^= 1;
  if (!Disagreement(other, *terms)) __builtin_trap();
  if (Disagreement(*terms, Agreed(*terms, *terms))) __builtin_trap();
  return 0;
}
