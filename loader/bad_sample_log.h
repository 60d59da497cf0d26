#pragma once

// BadSampleLog turns the loader's bad-sample reports into lines for people, bounded: the
// first `full_lines` reports each give one line with the sample's path (or record id) and
// the reason, then one line says that further ones are only counted. A job over a dataset
// with a million broken files stays readable, and no bad file goes unmentioned: the count
// is always available (count(), and the tools put it in their epoch lines and metrics).
//
// Thread safety: operator() may be called concurrently (the loader calls its sink from
// worker threads); the sink is called under a lock, one line at a time.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "loader/range_file.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {

class BadSampleLog {
 public:
  // `sink` receives each line without a trailing newline; `prefix` starts every line
  // (e.g. "train: instance 1: ").
  BadSampleLog(std::function<void(const std::string&)> sink, std::string prefix,
               std::size_t full_lines = 20)
      : sink_(std::move(sink)), prefix_(std::move(prefix)), full_lines_(full_lines) {}

  void operator()(const BadSample& bad) {
    std::lock_guard lock(mutex_);
    ++count_;
    if (count_ <= full_lines_) {
      sink_(detail::RedactUrl(prefix_ + "bad sample " + bad.where + " (epoch " +
                              std::to_string(bad.epoch) + "): " + bad.reason));
    }
    if (count_ == full_lines_) {
      sink_(prefix_ + "further bad samples are counted, not listed (" +
            std::to_string(full_lines_) + " listed)");
    }
  }

  // Reports so far.
  std::uint64_t count() const {
    std::lock_guard lock(mutex_);
    return count_;
  }

 private:
  std::function<void(const std::string&)> sink_;
  std::string prefix_;
  std::size_t full_lines_;
  mutable std::mutex mutex_;
  std::uint64_t count_ = 0;
};

}  // namespace tilefeed::loader
