#include "loader/list_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tilefeed::loader {
namespace {

// Closes a file descriptor on scope exit.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// The whole file at `path` into `buffer`; SourceError naming it otherwise.
void ReadWholeFile(const std::string& path, std::vector<std::byte>& buffer) {
  const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw SourceError(path, std::strerror(errno));
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw SourceError(path, std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw SourceError(path, "not a regular file");
  buffer.resize(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  while (done < buffer.size()) {
    const ssize_t n =
        ::pread(file.fd, buffer.data() + done, buffer.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SourceError(path, std::strerror(errno));
    if (n == 0) throw SourceError(path, "the file shrank while being read");
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

ListSource::ListSource(std::vector<ListSample> samples, std::vector<std::string> class_names)
    : samples_(std::move(samples)), class_names_(std::move(class_names)) {
  for (std::size_t i = 0; i < samples_.size(); ++i) {
    if (samples_[i].path.empty() && samples_[i].bytes.empty()) {
      throw std::invalid_argument("ListSource: sample " + std::to_string(i) +
                                  " has neither a path nor bytes");
    }
    if (samples_[i].label < 0) {
      throw std::invalid_argument("ListSource: sample " + std::to_string(i) + " has label " +
                                  std::to_string(samples_[i].label) + "; labels are >= 0");
    }
  }
}

SampleInfo ListSource::Read(std::size_t index, std::vector<std::byte>& buffer) const {
  const ListSample& sample = samples_[index];
  if (sample.bytes.empty()) {
    ReadWholeFile(sample.path, buffer);
  } else {
    buffer.assign(sample.bytes.begin(), sample.bytes.end());
  }
  SampleInfo info;
  info.label = sample.label;
  return info;
}

std::string ListSource::Describe(std::size_t index) const {
  const ListSample& sample = samples_[index];
  if (sample.bytes.empty()) return sample.path;
  return "sample " + std::to_string(index) + " (" + std::to_string(sample.bytes.size()) +
         " bytes given)";
}

}  // namespace tilefeed::loader
