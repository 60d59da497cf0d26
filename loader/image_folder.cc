#include "loader/image_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string_view>
#include <utility>

#include "loader/file_io.h"
#include "loader/shard_format.h"

// Indexing reads each directory once with readdir and trusts d_type, which every local
// Linux file system fills in; only DT_UNKNOWN (some network and FUSE file systems) and
// symlinks cost an fstatat. Nothing is stat'ed per regular file, which is what keeps a
// 1.28 M-file tree to a few seconds. File names go into one arena per class and are
// sorted with a comparator that compares a directory rank and then raw bytes.
//
// Directories are opened by their path relative to the class directory rather than by
// holding a descriptor per level, so a deep tree cannot exhaust descriptors; a loop is
// a directory whose (st_dev, st_ino) equals one of its ancestors'. Only true loops are
// cut: a directory reached twice through different symlinks is indexed twice, as
// torchvision's os.walk(followlinks=True) does.

namespace tilefeed::loader {

using detail::ErrnoMessage;
using detail::ThrowWithErrno;
using detail::UniqueFd;

namespace {
struct ClassScan;
}  // namespace

struct ImageFolder::Index {
  std::vector<std::string> class_names;
  std::vector<std::string> warnings;
  SkippedFiles skipped_files;
  std::vector<char> paths;
  std::vector<std::uint64_t> path_offsets;
  std::vector<std::int32_t> labels;

  // Appends the classes' files, labelled by class, and their warnings, in class order;
  // frees each scan once it is copied, so the peak is about twice the path arena.
  void AddClasses(std::vector<ClassScan>& scans);
};

namespace {

struct DirCloser {
  void operator()(DIR* dir) const noexcept { ::closedir(dir); }
};
using UniqueDir = std::unique_ptr<DIR, DirCloser>;

constexpr std::uint32_t kNoParent = ~std::uint32_t{0};

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// `lower_extensions` are already lower case.
bool HasExtension(std::string_view name, const std::vector<std::string>& lower_extensions) {
  for (const std::string& ext : lower_extensions) {
    if (name.size() < ext.size()) continue;
    const std::string_view tail = name.substr(name.size() - ext.size());
    if (std::equal(tail.begin(), tail.end(), ext.begin(),
                   [](char a, char b) { return AsciiLower(a) == b; })) {
      return true;
    }
  }
  return false;
}

// The lower-cased extension of a file name with its dot, "" when it has none (like
// Python's os.path.splitext, a leading dot does not start one: ".DS_Store" has none).
std::string LowerExtension(std::string_view name) {
  const std::size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return {};
  std::string ext(name.substr(dot));
  for (char& c : ext) c = AsciiLower(c);
  return ext;
}

bool IsDotOrDotDot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

std::string JoinPath(std::string_view a, std::string_view b) {
  std::string path;
  path.reserve(a.size() + 1 + b.size());
  path.append(a);
  if (!a.empty() && !b.empty() && a.back() != '/') path.push_back('/');
  path.append(b);
  return path;
}

// What one class directory yields, in torchvision's order.
struct ClassScan {
  std::vector<char> paths;  // NUL-terminated paths relative to the class directory
  std::vector<std::uint64_t> offsets;
  std::vector<std::string> warnings;
  std::map<std::string, std::size_t> skipped;  // files by lower-cased extension
};

struct DirNode {
  std::string path;  // relative to the class directory; "" is the class directory itself
  std::uint32_t parent = kNoParent;
  dev_t dev = 0;
  ino_t ino = 0;
};

struct FileEntry {
  std::uint32_t dir;          // index into the DirNode list
  std::uint32_t name_size;    // bytes, without NUL
  std::uint64_t name_offset;  // into the scan's name arena
};

class ClassScanner {
 public:
  ClassScanner(int root_fd, const std::string& root, const std::string& class_name,
               const struct stat& root_stat, const std::vector<std::string>& lower_extensions)
      : root_fd_(root_fd),
        root_(root),
        class_path_(JoinPath(root, class_name)),
        class_name_(class_name),
        root_stat_(root_stat),
        extensions_(lower_extensions) {}

  ClassScan Run() {
    ClassScan out;
    UniqueFd class_fd(::openat(root_fd_, class_name_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!class_fd) {
      const int error = errno;
      out.warnings.push_back(class_path_ + ": cannot open class directory (" + ErrnoMessage(error) +
                             "); it has no images");
      return out;
    }
    dirs_.push_back(DirNode{});
    std::vector<std::uint32_t> pending = {0};
    while (!pending.empty()) {
      const std::uint32_t dir = pending.back();
      pending.pop_back();
      ScanDirectory(class_fd.get(), dir, pending, out);
    }
    Sort(out);
    return out;
  }

 private:
  std::string FullPath(std::string_view relative) const { return JoinPath(class_path_, relative); }

  // Returns the path of the ancestor that is the same directory as `dir`, if any.
  std::optional<std::string> LoopAncestor(std::uint32_t dir) const {
    const DirNode& node = dirs_[dir];
    for (std::uint32_t up = node.parent; up != kNoParent; up = dirs_[up].parent) {
      if (dirs_[up].dev == node.dev && dirs_[up].ino == node.ino) return FullPath(dirs_[up].path);
    }
    // A class directory linking back to root would otherwise walk every class again.
    if (root_stat_.st_dev == node.dev && root_stat_.st_ino == node.ino) {
      return root_;
    }
    return std::nullopt;
  }

  void AddFile(std::uint32_t dir, std::string_view name) {
    files_.push_back(FileEntry{dir, static_cast<std::uint32_t>(name.size()), names_.size()});
    names_.insert(names_.end(), name.begin(), name.end());
  }

  void ScanDirectory(int class_fd, std::uint32_t dir, std::vector<std::uint32_t>& pending,
                     ClassScan& out) {
    std::vector<std::string>& warnings = out.warnings;
    const char* open_path = dirs_[dir].path.empty() ? "." : dirs_[dir].path.c_str();
    UniqueFd fd(::openat(class_fd, open_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) {
      const int error = errno;
      // A directory removed since its parent was read simply has nothing to index.
      if (error != ENOENT) {
        warnings.push_back(FullPath(dirs_[dir].path) + ": cannot open directory (" +
                           ErrnoMessage(error) + "); skipped");
      }
      return;
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) {
      const int error = errno;
      warnings.push_back(FullPath(dirs_[dir].path) + ": " + ErrnoMessage(error) + "; skipped");
      return;
    }
    dirs_[dir].dev = st.st_dev;
    dirs_[dir].ino = st.st_ino;
    if (auto ancestor = LoopAncestor(dir)) {
      warnings.push_back(FullPath(dirs_[dir].path) + ": symlink loop (same directory as " +
                         *ancestor + "); not followed");
      return;
    }
    const int dir_fd = fd.get();
    UniqueDir stream(::fdopendir(dir_fd));
    if (!stream) {
      const int error = errno;
      warnings.push_back(FullPath(dirs_[dir].path) + ": " + ErrnoMessage(error) + "; skipped");
      return;
    }
    fd.release();  // now owned by `stream`
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(stream.get());
      if (entry == nullptr) {
        if (const int error = errno; error != 0) {
          warnings.push_back(FullPath(dirs_[dir].path) + ": error reading directory (" +
                             ErrnoMessage(error) + "); its listing may be incomplete");
        }
        break;
      }
      if (IsDotOrDotDot(entry->d_name)) continue;
      const std::string_view name(entry->d_name);
      bool is_dir = entry->d_type == DT_DIR;
      if (entry->d_type == DT_UNKNOWN || entry->d_type == DT_LNK) {
        struct stat target;
        if (::fstatat(dir_fd, entry->d_name, &target, 0) != 0) {
          const int error = errno;
          if (error == ENOENT && entry->d_type != DT_LNK) continue;  // removed meanwhile
          // torchvision indexes any name that is not a directory; do the same so that
          // the broken link is reported when read instead of vanishing from the dataset.
          const bool indexed = HasExtension(name, extensions_);
          warnings.push_back(FullPath(JoinPath(dirs_[dir].path, name)) + ": " +
                             (entry->d_type == DT_LNK ? "broken symlink" : "cannot stat") + " (" +
                             ErrnoMessage(error) + "); " +
                             (indexed ? "indexed, reading it will fail" : "skipped"));
          if (indexed) {
            AddFile(dir, name);
          } else {
            ++out.skipped[LowerExtension(name)];
          }
          continue;
        }
        is_dir = S_ISDIR(target.st_mode);
      }
      if (is_dir) {
        // A directory named like an image is walked, never indexed as a file.
        dirs_.push_back(DirNode{JoinPath(dirs_[dir].path, name), dir, 0, 0});
        pending.push_back(static_cast<std::uint32_t>(dirs_.size() - 1));
      } else if (HasExtension(name, extensions_)) {
        AddFile(dir, name);
      } else {
        ++out.skipped[LowerExtension(name)];
      }
    }
  }

  // Puts the files in os.walk order: directories by path, files by name, byte order.
  void Sort(ClassScan& out) {
    std::vector<std::uint32_t> by_path(dirs_.size());
    std::iota(by_path.begin(), by_path.end(), 0);
    std::sort(by_path.begin(), by_path.end(),
              [&](std::uint32_t a, std::uint32_t b) { return dirs_[a].path < dirs_[b].path; });
    std::vector<std::uint32_t> rank(dirs_.size());
    for (std::uint32_t i = 0; i < by_path.size(); ++i) rank[by_path[i]] = i;

    std::vector<FileEntry>& files = files_;
    const char* names = names_.data();
    std::sort(files.begin(), files.end(), [&](const FileEntry& a, const FileEntry& b) {
      if (a.dir != b.dir) return rank[a.dir] < rank[b.dir];
      const int c = std::memcmp(names + a.name_offset, names + b.name_offset,
                                std::min(a.name_size, b.name_size));
      return c != 0 ? c < 0 : a.name_size < b.name_size;
    });

    std::size_t bytes = 0;
    for (const FileEntry& f : files) bytes += dirs_[f.dir].path.size() + 1 + f.name_size + 1;
    out.paths.reserve(bytes);
    out.offsets.reserve(files.size());
    for (const FileEntry& f : files) {
      out.offsets.push_back(out.paths.size());
      const std::string& dir_path = dirs_[f.dir].path;
      out.paths.insert(out.paths.end(), dir_path.begin(), dir_path.end());
      if (!dir_path.empty()) out.paths.push_back('/');
      out.paths.insert(out.paths.end(), names + f.name_offset, names + f.name_offset + f.name_size);
      out.paths.push_back('\0');
    }
  }

  const int root_fd_;
  const std::string& root_;
  const std::string class_path_;
  const std::string& class_name_;
  const struct stat& root_stat_;
  const std::vector<std::string>& extensions_;
  std::vector<DirNode> dirs_;
  std::vector<FileEntry> files_;
  std::vector<char> names_;
};

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string ExtensionList(const std::vector<std::string>& extensions) {
  std::string list;
  for (const std::string& ext : extensions) list += (list.empty() ? "" : ", ") + ext;
  return list;
}

// Sums the classes' skipped files, most frequent extension first.
SkippedFiles CountSkipped(const std::vector<ClassScan>& scans) {
  std::map<std::string, std::size_t> total;
  for (const ClassScan& scan : scans) {
    for (const auto& [ext, files] : scan.skipped) total[ext] += files;
  }
  SkippedFiles skipped;
  skipped.by_extension.assign(total.begin(), total.end());
  std::stable_sort(skipped.by_extension.begin(), skipped.by_extension.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& entry : skipped.by_extension) skipped.count += entry.second;
  return skipped;
}

// "skipped 3 files tilefeed does not decode (...): 2 .webp, 1 .bmp".
std::string SkippedLine(const SkippedFiles& skipped, const std::vector<std::string>& extensions) {
  std::string line =
      "skipped " + std::to_string(skipped.count) + (skipped.count == 1 ? " file" : " files") +
      " tilefeed does not decode (not ending in " + ExtensionList(extensions) + "): ";
  constexpr std::size_t kListed = 10;
  for (std::size_t i = 0; i < skipped.by_extension.size() && i < kListed; ++i) {
    const auto& [ext, files] = skipped.by_extension[i];
    line += (i == 0 ? "" : ", ") + std::to_string(files) + " " +
            (ext.empty() ? std::string("without extension") : ext);
  }
  if (skipped.by_extension.size() > kListed) line += ", ...";
  return line;
}

// The names of root's entries that are directories or symlinks to directories, sorted
// in byte order like Python's sorted().
std::vector<std::string> ListClassDirectories(int root_fd, const std::string& root) {
  UniqueFd fd(::dup(root_fd));  // fdopendir takes ownership; root_fd stays ours
  // errno is saved before anything else runs: building the exception allocates.
  if (!fd) ThrowWithErrno(root, "", errno);
  UniqueDir stream(::fdopendir(fd.get()));
  if (!stream) ThrowWithErrno(root, "", errno);
  fd.release();
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(stream.get());
    if (entry == nullptr) {
      if (errno != 0) ThrowWithErrno(root, "error reading directory: ", errno);
      break;
    }
    if (IsDotOrDotDot(entry->d_name)) continue;
    bool is_dir = entry->d_type == DT_DIR;
    if (entry->d_type == DT_UNKNOWN || entry->d_type == DT_LNK) {
      struct stat st;
      // Like Python's DirEntry.is_dir(): a name that cannot be stat'ed is not a class.
      is_dir = ::fstatat(root_fd, entry->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) names.emplace_back(entry->d_name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The files a tilefeed pack leaves in its output directory before it writes its manifest
// (last): "shard-<digits>.tfs", with ".tmp" while a shard is being written, and the
// manifest's own temporary file. Counted in `root` when it turns out to be no ImageFolder.
std::size_t CountPackFiles(const std::string& root) {
  std::size_t count = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (name == std::string(detail::kManifestFileName) + ".tmp") ++count;
    if (!name.starts_with("shard-")) continue;
    std::size_t i = 6;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    const std::string_view rest = std::string_view(name).substr(i);
    if (i > 6 && (rest == ".tfs" || rest == ".tfs.tmp")) ++count;
  }
  return count;
}

std::vector<std::string> LowerCased(const std::vector<std::string>& extensions) {
  assert(!extensions.empty());
  std::vector<std::string> lower_extensions;
  for (const std::string& ext : extensions) {
    assert(!ext.empty());
    std::string lower = ext;
    for (char& c : lower) c = AsciiLower(c);
    lower_extensions.push_back(std::move(lower));
  }
  return lower_extensions;
}

UniqueFd OpenRootDirectory(const std::string& root) {
  UniqueFd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) {
    const int error = errno;
    if (error == ENOENT) throw SourceError(root, "no such directory");
    if (error == ENOTDIR) throw SourceError(root, "not a directory");
    throw SourceError(root, "cannot open directory: " + ErrnoMessage(error));
  }
  return root_fd;
}

// Scans every class directory. Classes are independent, so a large tree is scanned in
// parallel on the caller's TBB arena (1.0-1.7x faster for ImageNet's 1000 classes on 2
// cores); a small one is not worth the fan-out. The scans come back in class order, which
// keeps the index deterministic either way.
std::vector<ClassScan> ScanClasses(int root_fd, const std::string& root,
                                   const std::vector<std::string>& class_names,
                                   const struct stat& root_stat,
                                   const std::vector<std::string>& lower_extensions) {
  constexpr std::size_t kParallelClasses = 32;
  std::vector<ClassScan> scans(class_names.size());
  auto scan = [&](std::size_t c) {
    scans[c] = ClassScanner(root_fd, root, class_names[c], root_stat, lower_extensions).Run();
  };
  if (scans.size() < kParallelClasses) {
    for (std::size_t c = 0; c < scans.size(); ++c) scan(c);
  } else {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, scans.size(), 1),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        for (std::size_t c = range.begin(); c != range.end(); ++c) scan(c);
                      });
  }
  return scans;
}

std::vector<std::string> HiddenClassWarnings(const std::string& root,
                                             const std::vector<std::string>& class_names) {
  std::vector<std::string> warnings;
  for (const std::string& name : class_names) {
    if (name[0] == '.') {
      warnings.push_back(JoinPath(root, name) +
                         ": hidden directory used as a class, as torchvision does");
    }
  }
  return warnings;
}

// Throws SourceError when the scans found no image at all, or, unless
// `allow_empty_classes`, when a class directory has none.
void CheckImagesFound(const std::string& root, const std::vector<std::string>& class_names,
                      const std::vector<ClassScan>& scans, const SkippedFiles& skipped_files,
                      const std::vector<std::string>& extensions, bool allow_empty_classes) {
  std::size_t files = 0;
  std::vector<std::string> empty_classes;
  for (std::size_t c = 0; c < scans.size(); ++c) {
    files += scans[c].offsets.size();
    if (scans[c].offsets.empty()) empty_classes.push_back(class_names[c]);
  }
  if (files == 0) {
    throw SourceError(root,
                      "no images (files ending in " + ExtensionList(extensions) + ") in " +
                          std::to_string(class_names.size()) + " class directories" +
                          (skipped_files.count > 0 ? "; " + SkippedLine(skipped_files, extensions)
                                                   : std::string()));
  }
  if (!empty_classes.empty() && !allow_empty_classes) {
    std::string list;
    for (std::size_t i = 0; i < empty_classes.size() && i < 10; ++i) {
      list += (i == 0 ? "" : ", ") + empty_classes[i];
    }
    if (empty_classes.size() > 10) list += ", ...";
    throw SourceError(root, std::to_string(empty_classes.size()) +
                                " class directories have no images (files ending in " +
                                ExtensionList(extensions) + "): " + list +
                                "; set allow_empty_classes to index them anyway");
  }
}

}  // namespace

void ImageFolder::Index::AddClasses(std::vector<ClassScan>& scans) {
  std::size_t files = 0;
  std::size_t bytes = 0;
  for (const ClassScan& scan : scans) {
    files += scan.offsets.size();
    bytes += scan.paths.size();
  }
  paths.reserve(bytes);
  path_offsets.reserve(files + 1);
  labels.reserve(files);
  for (std::size_t c = 0; c < scans.size(); ++c) {
    const std::uint64_t base = paths.size();
    for (std::uint64_t offset : scans[c].offsets) path_offsets.push_back(base + offset);
    labels.insert(labels.end(), scans[c].offsets.size(), static_cast<std::int32_t>(c));
    paths.insert(paths.end(), scans[c].paths.begin(), scans[c].paths.end());
    for (std::string& warning : scans[c].warnings) warnings.push_back(std::move(warning));
    scans[c] = ClassScan{};
  }
  path_offsets.push_back(paths.size());
}

std::unique_ptr<ImageFolder> ImageFolder::Open(const std::string& root_path,
                                               const ImageFolderOptions& options) {
  const std::vector<std::string> extensions = LowerCased(options.extensions);
  std::string root = StripTrailingSlashes(root_path);
  UniqueFd root_fd = OpenRootDirectory(root);
  struct stat root_stat;
  if (::fstat(root_fd.get(), &root_stat) != 0) ThrowWithErrno(root, "", errno);

  Index index;
  index.class_names = ListClassDirectories(root_fd.get(), root);
  if (index.class_names.empty()) {
    if (const std::size_t pack_files = CountPackFiles(root); pack_files > 0) {
      throw SourceError(root, "an interrupted pack: " + std::to_string(pack_files) +
                                  " shard files but no " + std::string(detail::kManifestFileName) +
                                  ", which tilefeed-pack writes last; pack again");
    }
    throw SourceError(root, "no class directories (expected <root>/<class>/<image>)");
  }
  if (index.class_names.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw SourceError(root, "too many class directories");
  }
  std::vector<ClassScan> scans =
      ScanClasses(root_fd.get(), root, index.class_names, root_stat, extensions);
  index.warnings = HiddenClassWarnings(root, index.class_names);
  index.skipped_files = CountSkipped(scans);
  CheckImagesFound(root, index.class_names, scans, index.skipped_files, extensions,
                   options.allow_empty_classes);
  if (index.skipped_files.count > 0) {
    index.warnings.push_back(root + ": " + SkippedLine(index.skipped_files, extensions));
  }
  index.AddClasses(scans);

  const int fd = root_fd.release();
  return std::unique_ptr<ImageFolder>(
      new ImageFolder(std::move(root), fd, options, std::move(index)));
}

ImageFolder::ImageFolder(std::string root, int root_fd, const ImageFolderOptions& options,
                         Index&& index)
    : root_(std::move(root)),
      root_fd_(root_fd),
      max_file_bytes_(options.max_file_bytes),
      class_names_(std::move(index.class_names)),
      warnings_(std::move(index.warnings)),
      skipped_files_(std::move(index.skipped_files)),
      paths_(std::move(index.paths)),
      path_offsets_(std::move(index.path_offsets)),
      labels_(std::move(index.labels)) {}

ImageFolder::~ImageFolder() { ::close(root_fd_); }

SampleInfo ImageFolder::Read(std::size_t index, std::vector<std::byte>& buffer) const {
  assert(index < size());
  const std::int32_t label = labels_[index];
  const std::string& class_name = class_names_[static_cast<std::size_t>(label)];
  const char* in_class = paths_.data() + path_offsets_[index];
  const std::size_t in_class_size = path_offsets_[index + 1] - path_offsets_[index] - 1;

  // The path relative to root is assembled on the stack so that a read allocates nothing.
  char path[PATH_MAX];
  if (class_name.size() + 1 + in_class_size + 1 > sizeof(path)) {
    throw SourceError(Describe(index), ErrnoMessage(ENAMETOOLONG));
  }
  // The path is terminated by the last copy, which takes in_class's NUL too.
  // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
  std::memcpy(path, class_name.data(), class_name.size());
  path[class_name.size()] = '/';
  std::memcpy(path + class_name.size() + 1, in_class, in_class_size + 1);

  if (auto reason = detail::ReadRegularFile(root_fd_, path, max_file_bytes_, buffer)) {
    throw SourceError(Describe(index), std::move(*reason));
  }
  return SampleInfo{label, SampleCodec::kEncoded, 0, 0, 0};
}

std::string ImageFolder::Describe(std::size_t index) const {
  return JoinPath(root_, RelativePath(index));
}

std::int32_t ImageFolder::Label(std::size_t index) const {
  assert(index < size());
  return labels_[index];
}

std::string ImageFolder::RelativePath(std::size_t index) const {
  assert(index < size());
  return JoinPath(class_names_[static_cast<std::size_t>(labels_[index])],
                  paths_.data() + path_offsets_[index]);
}

}  // namespace tilefeed::loader
