#include "loader/list_source.h"

#include <fcntl.h>

#include <limits>
#include <stdexcept>

#include "loader/file_io.h"

namespace tilefeed::loader {

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
    // No size limit: the caller chose the files.
    const std::size_t no_limit = std::numeric_limits<std::size_t>::max();
    if (auto reason = detail::ReadRegularFile(AT_FDCWD, sample.path.c_str(), no_limit, buffer)) {
      throw SourceError(sample.path, *reason);
    }
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
