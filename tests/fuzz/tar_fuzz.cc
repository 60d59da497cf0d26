// libFuzzer target: TarDataset (loader/tar_dataset.h) on arbitrary bytes as a tar file:
// the header scan (ustar, pax, GNU long names), sample grouping, .cls labels, and then a
// read of every sample, one by one and merged. SourceError is the only acceptable failure,
// at open or per sample.
//
// A header checksum would stop almost every mutation, so when the first input byte is odd
// the target writes the correct checksum into every 512-byte block before opening; the
// fuzzer then reaches the size, type, name and pax checks behind it.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "loader/tar_dataset.h"

namespace {

void FixChecksums(std::vector<std::uint8_t>& tar) {
  for (std::size_t at = 0; at + 512 <= tar.size(); at += 512) {
    unsigned sum = 0;
    for (std::size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? 32u : tar[at + i];
    char field[8];
    std::snprintf(field, sizeof(field), "%06o", sum & 0777777u);
    for (int i = 0; i < 7; ++i) tar[at + 148 + i] = static_cast<std::uint8_t>(field[i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> tar(data, data + size);
  if (size > 0 && (data[0] & 1) != 0) FixChecksums(tar);
  const int fd = ::memfd_create("tar_fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (::write(fd, tar.data(), tar.size()) != static_cast<ssize_t>(tar.size())) {
    ::close(fd);
    return 0;
  }
  namespace loader = tilefeed::loader;
  loader::TarOptions options;
  options.sidecar = false;
  options.max_member_bytes = 1 << 20;
  try {
    const auto dataset =
        loader::TarDataset::OpenFiles({"/proc/self/fd/" + std::to_string(fd)}, options);
    std::vector<std::byte> buffer;
    std::vector<std::uint64_t> indices;
    for (std::size_t i = 0; i < dataset->size(); ++i) {
      loader::ReadResult r;
      loader::ReadOne(*dataset, i, buffer, r);
      (void)dataset->Label(i);
      (void)dataset->Describe(i);
      indices.push_back(i);
    }
    std::vector<std::vector<std::byte>> buffers(indices.size());
    std::vector<loader::ReadResult> results(indices.size());
    dataset->ReadMany(indices, buffers, results);
  } catch (const loader::SourceError&) {
  }
  ::close(fd);
  return 0;
}
