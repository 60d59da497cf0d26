// libFuzzer target for the checkpoint parser (trainer/checkpoint.h). The first byte picks
// the input: even, the bytes as a file; odd, the rest with a valid checksum trailer
// appended (FNV-1a 64, as the format states), so the fuzzer explores the header, the loader
// state line and the sizes behind the checksum. Any bytes either parse into a checkpoint
// whose floats fit the file, or are refused with a CheckpointError.

#include <cstddef>
#include <cstdint>
#include <string>

#include "trainer/checkpoint.h"

namespace {

std::uint64_t Fnv1a(const std::string& bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) != 0) bytes += "\nfnv1a64=" + std::to_string(Fnv1a(bytes)) + "\n";
  try {
    const tilefeed::trainer::Checkpoint checkpoint =
        tilefeed::trainer::ParseCheckpoint(bytes, "fuzz");
    // Checked with __builtin_trap, not assert: fuzz builds define NDEBUG.
    if ((checkpoint.parameters.size() + checkpoint.velocity.size()) * sizeof(float) > size) {
      __builtin_trap();
    }
  } catch (const tilefeed::trainer::CheckpointError&) {
  }
  return 0;
}
