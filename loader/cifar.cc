#include "loader/cifar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <filesystem>
#include <utility>

#include "loader/file_io.h"

namespace tilefeed::loader {

using detail::ErrnoMessage;
using detail::ThrowWithErrno;
using detail::UniqueFd;

namespace {

std::vector<std::string> BatchNames(Split split) {
  if (split != Split::kTrain) return {"test_batch.bin"};  // val and test: the held-out batch
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
          "data_batch_5.bin"};
}

std::vector<std::string> DefaultClassNames() {
  return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
}

// batches.meta.txt holds one name per line; the official file ends with blank lines and
// some copies have CRLF endings, so lines are trimmed and blank ones dropped.
std::vector<std::string> ParseClassNames(const std::vector<std::byte>& bytes) {
  std::vector<std::string> names;
  std::string line;
  auto flush = [&] {
    const auto first = line.find_first_not_of(" \t\r");
    if (first != std::string::npos) {
      names.push_back(line.substr(first, line.find_last_not_of(" \t\r") + 1 - first));
    }
    line.clear();
  };
  for (std::byte b : bytes) {
    if (b == std::byte{'\n'}) {
      flush();
    } else {
      line.push_back(static_cast<char>(b));
    }
  }
  flush();
  return names;
}

}  // namespace

std::unique_ptr<Cifar10> Cifar10::Open(const std::string& dir, Split split) {
  std::vector<UniqueFd> fds;
  std::vector<Batch> batches;
  std::vector<std::size_t> record_begin = {0};
  for (std::string& name : BatchNames(split)) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (!fd) ThrowWithErrno(path, "", errno);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) ThrowWithErrno(path, "", errno);
    if (!S_ISREG(st.st_mode)) throw SourceError(path, "not a regular file");
    const auto bytes = static_cast<std::size_t>(st.st_size);
    if (bytes == 0 || bytes % kRecordBytes != 0) {
      throw SourceError(path, "size " + std::to_string(bytes) +
                                  " bytes is not a non-zero multiple of the 3073-byte "
                                  "record (1 label byte + 3072 pixel bytes)");
    }
    record_begin.push_back(record_begin.back() + bytes / kRecordBytes);
    batches.push_back(Batch{std::move(name), -1});
    fds.push_back(std::move(fd));
  }

  std::vector<std::string> class_names = DefaultClassNames();
  const std::string meta_path = (std::filesystem::path(dir) / "batches.meta.txt").string();
  // A missing meta file is normal (the standard names apply); one that exists but
  // cannot be read or parsed is reported rather than silently replaced.
  if (::access(meta_path.c_str(), F_OK) == 0) {
    std::vector<std::byte> meta;
    if (auto reason = detail::ReadRegularFile(AT_FDCWD, meta_path.c_str(), 1 << 20, meta)) {
      throw SourceError(meta_path, *reason);
    }
    class_names = ParseClassNames(meta);
    if (class_names.size() != kClasses) {
      throw SourceError(meta_path, "expected 10 class names, one per line, found " +
                                       std::to_string(class_names.size()));
    }
  }

  // The descriptors stay owned by `fds` until the object that closes them exists.
  auto source = std::unique_ptr<Cifar10>(
      new Cifar10(dir, std::move(batches), std::move(record_begin), std::move(class_names)));
  for (std::size_t b = 0; b < fds.size(); ++b) source->batches_[b].fd = fds[b].release();
  return source;
}

Cifar10::Cifar10(std::string dir, std::vector<Batch> batches, std::vector<std::size_t> record_begin,
                 std::vector<std::string> class_names)
    : dir_(std::move(dir)),
      batches_(std::move(batches)),
      record_begin_(std::move(record_begin)),
      class_names_(std::move(class_names)) {}

Cifar10::~Cifar10() {
  for (const Batch& batch : batches_) {
    if (batch.fd >= 0) ::close(batch.fd);
  }
}

std::pair<std::size_t, std::size_t> Cifar10::Locate(std::size_t index) const {
  assert(index < size());
  const auto next = std::upper_bound(record_begin_.begin(), record_begin_.end(), index);
  const auto batch = static_cast<std::size_t>(next - record_begin_.begin()) - 1;
  return {batch, index - record_begin_[batch]};
}

std::int32_t Cifar10::CheckedLabel(std::size_t index, std::byte label_byte) const {
  const auto label = std::to_integer<std::int32_t>(label_byte);
  if (label >= kClasses) {
    throw SourceError(Describe(index), "label " + std::to_string(label) + " is outside 0..9");
  }
  return label;
}

SampleInfo Cifar10::Read(std::size_t index, std::vector<std::byte>& buffer) const {
  const auto [batch, record] = Locate(index);
  std::array<std::byte, kRecordBytes> chw;
  const ssize_t n = detail::PreadFull(batches_[batch].fd, chw.data(), chw.size(),
                                      static_cast<off_t>(record * kRecordBytes));
  if (n < 0) {
    const int error = errno;
    throw SourceError(Describe(index), ErrnoMessage(error));
  }
  if (static_cast<std::size_t>(n) != kRecordBytes) {
    throw SourceError(Describe(index), "file shrank after Open: record is cut short");
  }
  const std::int32_t label = CheckedLabel(index, chw[0]);

  // CHW planes to interleaved HWC: pixel p's channel c lives at 1 + c * 1024 + p.
  constexpr std::size_t kPlane = std::size_t{kHeight} * kWidth;
  buffer.resize(kPixelBytes);
  const std::byte* planes = chw.data() + 1;
  std::byte* out = buffer.data();
  for (std::size_t p = 0; p < kPlane; ++p) {
    out[3 * p + 0] = planes[p];
    out[3 * p + 1] = planes[kPlane + p];
    out[3 * p + 2] = planes[2 * kPlane + p];
  }
  return SampleInfo{label, SampleCodec::kRawHwc, kHeight, kWidth, kChannels};
}

std::string Cifar10::Describe(std::size_t index) const {
  const auto [batch, record] = Locate(index);
  return batches_[batch].name + "#" + std::to_string(record);
}

std::int32_t Cifar10::Label(std::size_t index) const {
  const auto [batch, record] = Locate(index);
  std::byte label{};
  const ssize_t n =
      detail::PreadFull(batches_[batch].fd, &label, 1, static_cast<off_t>(record * kRecordBytes));
  if (n < 0) {
    const int error = errno;
    throw SourceError(Describe(index), ErrnoMessage(error));
  }
  if (n != 1) throw SourceError(Describe(index), "file shrank after Open: record is missing");
  return CheckedLabel(index, label);
}

}  // namespace tilefeed::loader
