// libFuzzer target for the frame parser: any bytes either parse into a header whose sizes
// are consistent, or are rejected with a TransportError. Nothing else may happen.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tilefeed::transport;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const FrameHeader header = ParseFrameHeader(bytes, "fuzz");
    // Checked with __builtin_trap, not assert: fuzz builds define NDEBUG.
    if (header.payload_bytes !=
            header.image_bytes() + header.label_bytes() + header.index_bytes() ||
        header.payload_bytes > kMaxFramePayload || header.substituted > header.size) {
      __builtin_trap();
    }
    // A parsed header re-encodes to the same bytes.
    const EncodedFrameHeader again = EncodeFrameHeader(header);
    if (!std::equal(again.begin(), again.end(), bytes.begin())) __builtin_trap();
  } catch (const TransportError&) {
  }
  return 0;
}
