#pragma once

// Cifar10 reads the CIFAR-10 binary distribution (cifar-10-batches-bin): the training
// split is data_batch_1.bin .. data_batch_5.bin, the held-out split (Split::kVal and
// Split::kTest alike) test_batch.bin. Each
// file is a sequence of 3073-byte records: one label byte (0..9), then 32x32 pixels as three
// 1024-byte planes (red, green, blue). Read() returns the pixels converted to HWC, so
// samples go to the decode stage as SampleCodec::kRawHwc with shape 32x32x3.
//
// Class names come from batches.meta.txt (one name per line) if it is present, else
// they are the standard ten ("airplane" .. "truck").
//
// Ownership: a Cifar10 keeps one open descriptor per batch file for its lifetime and
// reads records with pread. Thread safety: immutable after Open(); all const members
// may be called concurrently.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {

class Cifar10 final : public Source {
 public:
  static constexpr int kHeight = 32;
  static constexpr int kWidth = 32;
  static constexpr int kChannels = 3;
  static constexpr std::size_t kPixelBytes = std::size_t{kHeight} * kWidth * kChannels;
  static constexpr std::size_t kRecordBytes = 1 + kPixelBytes;
  static constexpr int kClasses = 10;

  // Opens the split's batch files in `dir`: data_batch_1..5.bin for Split::kTrain,
  // test_batch.bin for Split::kVal. Throws SourceError naming the file if one is
  // missing or unreadable, or if its size is not a non-zero multiple of 3073 bytes (the
  // message gives the size), or naming batches.meta.txt if it is present but does not
  // hold ten names.
  static std::unique_ptr<Cifar10> Open(const std::string& dir, Split split);

  Cifar10(const Cifar10&) = delete;
  Cifar10& operator=(const Cifar10&) = delete;
  ~Cifar10() override;

  std::size_t size() const override { return record_begin_.back(); }
  // Writes the record's 3072 pixels, HWC, into `buffer`; returns {label, kRawHwc, 32, 32,
  // 3}. Throws SourceError("<file>#<record>", reason) on an I/O error, a short read, or a
  // label above 9.
  // REQUIRES: index < size().
  SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override;
  // "<file name>#<record within the file>", e.g. "data_batch_3.bin#1234".
  // REQUIRES: index < size().
  std::string Describe(std::size_t index) const override;
  const std::vector<std::string>& class_names() const override { return class_names_; }
  // Reads the record's label byte. Throws SourceError like Read().
  // REQUIRES: index < size().
  std::int32_t Label(std::size_t index) const override;

  // The directory given to Open().
  const std::string& dir() const { return dir_; }

 private:
  struct Batch {
    std::string name;  // file name within dir_
    int fd;            // owned; closed by the destructor
  };
  Cifar10(std::string dir, std::vector<Batch> batches, std::vector<std::size_t> record_begin,
          std::vector<std::string> class_names);
  // The batch holding sample `index` and the record's number within it.
  std::pair<std::size_t, std::size_t> Locate(std::size_t index) const;
  std::int32_t CheckedLabel(std::size_t index, std::byte label_byte) const;

  std::string dir_;
  std::vector<Batch> batches_;
  // Sample i is in batch b where record_begin_[b] <= i < record_begin_[b + 1].
  std::vector<std::size_t> record_begin_;
  std::vector<std::string> class_names_;
};

}  // namespace tilefeed::loader
