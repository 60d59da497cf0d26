#pragma once

// ListSource: a dataset given as a list of samples, each an image file's path or the
// encoded bytes themselves, with its label (Python's Loader([(path or bytes, label), ...])
// and Loader("train.csv")). The files are read when a worker asks for them, like an
// ImageFolder's; bytes given in the list are held by the source.
//
// Thread safety: immutable after construction; Read() may run on any number of threads.

#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loader/file_io.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {

struct ListSample {
  std::string path;              // read from this file when `bytes` is empty
  std::vector<std::byte> bytes;  // the encoded image itself, or empty
  std::int32_t label = 0;
};

class ListSource : public Source {
 public:
  // `class_names` may be empty. Throws std::invalid_argument for a sample with neither a
  // path nor bytes, or a negative label.
  ListSource(std::vector<ListSample> samples, std::vector<std::string> class_names);

  std::size_t size() const override { return samples_.size(); }
  // Throws SourceError naming the path for a file that cannot be read.
  SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override;
  // The path, or "sample <index> (<n> bytes given)".
  std::string Describe(std::size_t index) const override;
  const std::vector<std::string>& class_names() const override { return class_names_; }
  std::int32_t Label(std::size_t index) const override { return samples_[index].label; }
  std::uint64_t Fingerprint(std::size_t index) const override {  // the size, given or stat
    const ListSample& s = samples_[index];
    return s.bytes.empty() ? detail::FileSize(AT_FDCWD, s.path) : s.bytes.size();
  }

 private:
  std::vector<ListSample> samples_;
  std::vector<std::string> class_names_;
};

}  // namespace tilefeed::loader
