#pragma once

// ImageFolder reads a directory tree laid out like torchvision's ImageFolder:
//
//   root/<class>/<file>             e.g. train/n01440764/n01440764_10026.JPEG
//   root/<class>/<subdir>/<file>    subdirectories are walked, symlinks followed
//
// The index matches torchvision's: class directories (hidden ones too, as torchvision
// does) sorted by name in byte order get labels 0..C-1; within a class, directories are
// visited in byte order of their path and each directory's files in byte order of their
// name (os.walk order, sorted). A file is indexed when its name ends with one of
// `extensions`, compared case-insensitively, whatever its contents: JPEG and PNG by
// default, the formats the loader decodes (it tells them apart by their bytes, so a PNG
// named .JPEG loads too). Every other file is skipped and counted by extension:
// skipped_files() has the counts and warnings() one line naming them ("skipped 3 files
// tilefeed does not decode ...: 2 .webp, 1 .bmp"), so no file disappears silently.
//
// Indexing reads directories only (no per-file stat) and keeps all paths in one
// arena, so a 1.28 M-file ImageNet tree is indexed in seconds and held in a few tens
// of MB. Class directories are scanned in parallel on the caller's TBB arena. Symlink
// loops, unreadable subdirectories and names that vanish during the scan do not stop
// indexing; they are listed in warnings().
//
// Ownership: an ImageFolder owns its index and a descriptor of `root`; files are opened
// relative to that descriptor, so renaming `root` after Open() does not break reads.
// Thread safety: immutable after Open(); all const members may be called concurrently.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loader/file_io.h"
#include "tilefeed/loader/dataset.h"  // the options
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {

// The files indexing skipped because their names do not end in an indexed extension.
struct SkippedFiles {
  std::size_t count = 0;
  // (extension, files): the extension lower-cased with its dot (".webp"), or "" for a
  // name without one; most files first, then by extension.
  std::vector<std::pair<std::string, std::size_t>> by_extension;
};

class ImageFolder final : public Source {
 public:
  // Indexes `root`. Throws SourceError naming `root` if it is missing, not a directory
  // or unreadable, has no class directories, has no images, or (unless
  // options.allow_empty_classes) has a class directory without images.
  // REQUIRES: options.extensions is not empty and has no empty string.
  static std::unique_ptr<ImageFolder> Open(const std::string& root,
                                           const ImageFolderOptions& options = {});

  ImageFolder(const ImageFolder&) = delete;
  ImageFolder& operator=(const ImageFolder&) = delete;
  ~ImageFolder() override;

  std::size_t size() const override { return labels_.size(); }
  // Reads the file's bytes; returns {label, kEncoded}. A zero-byte file reads as empty.
  // Throws SourceError(path, reason) if the file is gone, unreadable, not a regular file
  // or larger than options.max_file_bytes.
  // REQUIRES: index < size().
  SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override;
  // The file's path: root() + "/" + RelativePath(index).
  // REQUIRES: index < size().
  std::string Describe(std::size_t index) const override;
  const std::vector<std::string>& class_names() const override { return class_names_; }
  // REQUIRES: index < size().
  std::int32_t Label(std::size_t index) const override;
  // The file's size, from one stat. Throws SourceError like Read().
  std::uint64_t Fingerprint(std::size_t index) const override {
    return detail::FileSize(root_fd_, RelativePath(index));
  }

  // The file's path below root(): "<class>/<path within the class directory>".
  // REQUIRES: index < size().
  std::string RelativePath(std::size_t index) const;
  // `root` as given to Open(), without trailing slashes.
  const std::string& root() const { return root_; }
  // Non-fatal notes from indexing (symlink loop skipped, unreadable subdirectory,
  // dangling symlink indexed, ...), one line each, naming the path.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The files skipped for their extension (also summed up in one line of warnings()).
  const SkippedFiles& skipped_files() const { return skipped_files_; }

 private:
  struct Index;
  ImageFolder(std::string root, int root_fd, const ImageFolderOptions& options, Index&& index);

  std::string root_;
  int root_fd_;  // owned; closed by the destructor (the class is neither copied nor moved)
  std::size_t max_file_bytes_;
  std::vector<std::string> class_names_;
  std::vector<std::string> warnings_;
  SkippedFiles skipped_files_;
  // Sample i's path within its class directory is the NUL-terminated string at
  // paths_[path_offsets_[i]]; its class is labels_[i].
  std::vector<char> paths_;
  std::vector<std::uint64_t> path_offsets_;
  std::vector<std::int32_t> labels_;
};

}  // namespace tilefeed::loader
