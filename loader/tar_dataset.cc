#include "loader/tar_dataset.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "loader/block_cache.h"
#include "loader/file_io.h"
#include "loader/merged_reads.h"
#include "loader/range_file.h"
#include "loader/shard_format.h"
#include "loader/tar_format.h"

namespace tilefeed::loader {
namespace {

using detail::RangeFile;
using detail::TarEntryKind;

// The scan reads headers through a window of this many bytes, so small members (.cls,
// pax records) and their neighbours' headers cost no extra read.
constexpr std::size_t kScanWindow = std::size_t{64} << 10;
// Pax records, GNU long names and .cls members larger than this are malformed.
constexpr std::uint64_t kMaxMetaBytes = std::uint64_t{1} << 20;
constexpr std::uint64_t kMaxLabelBytes = 64;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A gzip-compressed WebDataset shard, by name (webdataset's TarWriter(compress=True) and
// its test shards): .tar.gz or .tgz.
bool IsGzipTarName(std::string_view name) {
  return EndsWith(name, ".tar.gz") || EndsWith(name, ".tgz");
}

// Why gzip-compressed data is refused, and how to convert it: a shard named .tar.gz/.tgz, or
// one named .tar that starts with gzip's magic bytes (1f 8b) where a tar header should be.
std::string GzipRefusal(bool named_tar) {
  return std::string(named_tar ? "gzip-compressed, although named .tar"
                               : "a gzip-compressed WebDataset shard (.tar.gz/.tgz)") +
         ", which tilefeed does not read: it reads shards in place by offset, and gzip has none "
         "to seek to; decompress once with " +
         (named_tar ? "`gunzip -c FILE > NEW.tar`"
                    : "`gunzip -k FILE` (FILE.tar.gz or FILE.tgz becomes FILE.tar)") +
         " and give the .tar files";
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// WebDataset's split of a member name: the key is everything before the first '.' of the
// last path component, the extension (lower-cased) everything after it.
std::optional<std::pair<std::string, std::string>> SplitKey(const std::string& name) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) return std::nullopt;
  return std::pair{name.substr(0, dot), Lower(std::string_view(name).substr(dot + 1))};
}

// One sample as the scan found it.
struct ScannedSample {
  std::string key;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::int32_t label = 0;
  std::string problem;  // empty for a good sample
};

struct ScannedTar {
  std::vector<ScannedSample> samples;
  std::uint64_t ignored_keys = 0;
};

// Reads a RangeFile through a window of kScanWindow bytes.
class WindowReader {
 public:
  explicit WindowReader(const RangeFile& file) : file_(file) {}

  // The bytes [offset, offset + size), or a reason. REQUIRES: size <= kMaxMetaBytes.
  std::span<const std::byte> Get(std::uint64_t offset, std::size_t size, std::string& error) {
    if (offset < begin_ || offset + size > begin_ + window_.size()) {
      const std::uint64_t left = file_.size() - offset;
      window_.resize(static_cast<std::size_t>(
          std::min<std::uint64_t>(left, std::max<std::uint64_t>(size, kScanWindow))));
      begin_ = offset;
      error = file_.Read(offset, window_);
      if (!error.empty()) {
        window_.clear();
        return {};
      }
    }
    return std::span<const std::byte>(window_).subspan(offset - begin_, size);
  }

 private:
  const RangeFile& file_;
  std::uint64_t begin_ = 0;
  std::vector<std::byte> window_;
};

// Groups consecutive members by key, as WebDataset does.
class SampleGrouper {
 public:
  SampleGrouper(ScannedTar& out, std::uint64_t max_member_bytes)
      : out_(out), max_member_bytes_(max_member_bytes) {}

  // A regular member `name` whose data lies at [offset, offset + size); `label_text` holds
  // a .cls member's bytes. `truncated` says the data runs past the end of the file.
  void Member(const std::string& name, std::uint64_t offset, std::uint64_t size,
              std::span<const std::byte> label_text, bool truncated) {
    const auto split = SplitKey(name);
    if (!split) return;  // no key.extension: not part of a sample
    const auto& [key, ext] = *split;
    if (!current_ || current_->key != key) Flush();
    if (!current_) {
      // Group{} rather than emplace(): clang does not see a nested struct with default
      // member initializers as default-constructible inside its enclosing class.
      current_ = Group{};
      current_->key = key;
    }
    Group& g = *current_;
    if (ext == "jpg" || ext == "jpeg" || ext == "png") {
      if (g.has_image) return;  // the first image in tar order is the sample's
      g.has_image = true;
      g.image_name = name;
      g.offset = offset;
      g.size = size;
      if (truncated) g.problem = "member " + name + " is truncated (the tar ends inside it)";
      if (size > max_member_bytes_ && g.problem.empty()) {
        g.problem = "member " + name + " is " + std::to_string(size) +
                    " bytes, over the limit of " + std::to_string(max_member_bytes_);
      }
    } else if (ext == "cls") {
      if (g.has_label) return;
      g.has_label = true;
      if (truncated) {
        g.label_problem = "member " + name + " is truncated (the tar ends inside it)";
      } else {
        ParseLabel(name, label_text, g);
      }
    } else if (g.other.empty()) {
      g.other = name;
    }
  }

  void Flush() {
    if (!current_) return;
    Group& g = *current_;
    if (!g.has_image && !g.has_label) {
      ++out_.ignored_keys;
    } else {
      ScannedSample s{g.key, g.offset, g.size, g.label, g.problem};
      if (s.problem.empty() && !g.has_image) {
        s.problem = "no image member (" + g.key + ".jpg/.jpeg/.png) beside " + g.key + ".cls" +
                    (g.other.empty() ? "" : "; found " + g.other);
      }
      if (s.problem.empty() && !g.has_label) s.problem = "no " + g.key + ".cls member (the label)";
      if (s.problem.empty()) s.problem = g.label_problem;
      out_.samples.push_back(std::move(s));
    }
    current_.reset();
  }

 private:
  struct Group {
    std::string key;
    bool has_image = false;
    bool has_label = false;
    std::string image_name;
    std::string other;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
    std::int32_t label = 0;
    std::string problem;
    std::string label_problem;
  };

  static void ParseLabel(const std::string& name, std::span<const std::byte> text, Group& g) {
    std::string_view s(reinterpret_cast<const char*>(text.data()), text.size());
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) {
      s.remove_suffix(1);
    }
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    std::int64_t value = 0;
    bool ok = !s.empty() && s.size() <= 10;
    for (char c : s) {
      if (c < '0' || c > '9') ok = false;
      if (ok) value = value * 10 + (c - '0');
    }
    if (!ok || value > INT32_MAX) {
      g.label_problem = "member " + name + " is not a non-negative decimal integer label";
      return;
    }
    g.label = static_cast<std::int32_t>(value);
  }

  ScannedTar& out_;
  std::uint64_t max_member_bytes_;
  std::optional<Group> current_;
};

[[noreturn]] void ThrowAt(const RangeFile& file, std::uint64_t offset, const std::string& what) {
  throw SourceError(file.name(), "tar header at byte " + std::to_string(offset) + ": " + what);
}

// Reads the data of a pax or long-name member.
std::span<const std::byte> MetaData(WindowReader& reader, const RangeFile& file,
                                    std::uint64_t header_offset, std::uint64_t size) {
  if (size > kMaxMetaBytes) ThrowAt(file, header_offset, "extended header too large");
  if (header_offset + detail::kTarBlockSize + size > file.size()) {
    ThrowAt(file, header_offset, "extended header runs past the end of the file");
  }
  std::string error;
  auto data =
      reader.Get(header_offset + detail::kTarBlockSize, static_cast<std::size_t>(size), error);
  if (!error.empty()) ThrowAt(file, header_offset, error);
  return data;
}

ScannedTar ScanTar(const RangeFile& file, std::uint64_t max_member_bytes) {
  ScannedTar out;
  SampleGrouper grouper(out, max_member_bytes);
  WindowReader reader(file);
  std::optional<std::string> next_name;
  // A pax size for the next header; a plain value, not an optional, which g++ 12 warns
  // about as maybe-uninitialized.
  std::uint64_t next_size = 0;
  bool has_next_size = false;
  std::uint64_t at = 0;
  while (at + detail::kTarBlockSize <= file.size()) {
    std::string error;
    const auto block = reader.Get(at, detail::kTarBlockSize, error);
    if (!error.empty()) ThrowAt(file, at, error);
    detail::TarHeader h;
    try {
      h = detail::ParseTarHeader(block);
    } catch (const detail::TarFormatError& e) {
      if (at == 0 && block[0] == std::byte{0x1f} && block[1] == std::byte{0x8b}) {
        throw SourceError(file.name(), GzipRefusal(true));
      }
      ThrowAt(file, at, e.what());
    }
    if (h.kind == TarEntryKind::kEnd) break;
    if (has_next_size && h.kind == TarEntryKind::kFile) h.size = next_size;
    const std::uint64_t data = at + detail::kTarBlockSize;
    const bool truncated = h.size > file.size() - data;
    if (h.kind == TarEntryKind::kPax || h.kind == TarEntryKind::kLongName) {
      const auto bytes = MetaData(reader, file, at, h.size);
      try {
        if (h.kind == TarEntryKind::kLongName) {
          const auto* chars = reinterpret_cast<const char*>(bytes.data());
          next_name = std::string(chars, strnlen(chars, bytes.size()));
        } else {
          detail::PaxOverrides pax = detail::ParsePaxRecords(bytes);
          if (pax.path) next_name = std::move(*pax.path);
          if (pax.size) {
            next_size = *pax.size;
            has_next_size = true;
          }
        }
      } catch (const detail::TarFormatError& e) {
        ThrowAt(file, at, e.what());
      }
    } else if (h.kind == TarEntryKind::kFile) {
      const std::string name = next_name ? *next_name : h.name;
      std::span<const std::byte> label_text;  // left empty for an over-long .cls: rejected
      const auto split = SplitKey(name);
      if (!truncated && split && split->second == "cls" && h.size <= kMaxLabelBytes) {
        label_text = reader.Get(data, static_cast<std::size_t>(h.size), error);
        if (!error.empty()) ThrowAt(file, at, error);
      }
      grouper.Member(name, data, h.size, label_text, truncated);
      next_name.reset();
      has_next_size = false;
    }
    if (truncated) break;
    at = data + detail::TarPaddedSize(h.size);
  }
  grouper.Flush();
  return out;
}

// The sidecar index: "TFTARIX2", tar size, tar mtime (ns), ETag length (u32) and bytes
// (empty for a local tar), sample count, ignored keys, then per sample offset, size (u64),
// label (i32), key and problem lengths (u32) and their bytes, then XXH3 of everything
// before. Native byte order: it is a per-host cache.
constexpr std::string_view kSidecarMagic = "TFTARIX2";
constexpr std::uint64_t kMaxSidecarBytes = std::uint64_t{4} << 30;

template <class T>
void Put(std::vector<std::byte>& out, const T& value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

// Reads from a sidecar's bytes, failing (ok = false) instead of reading past the end.
struct SidecarCursor {
  std::span<const std::byte> bytes;
  std::size_t at = 0;
  bool ok = true;
  template <class T>
  T Get() {
    T value{};
    if (!ok || bytes.size() - at < sizeof(T)) {
      ok = false;
      return value;
    }
    std::memcpy(&value, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return value;
  }
  std::string GetString(std::uint32_t size) {
    if (!ok || bytes.size() - at < size) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(bytes.data() + at), size);
    at += size;
    return s;
  }
};

using TarStamp = detail::FileStamp;

std::optional<ScannedTar> ReadSidecar(const std::string& path, const TarStamp& stamp) {
  std::vector<std::byte> bytes;
  if (detail::ReadRegularFile(AT_FDCWD, path.c_str(), kMaxSidecarBytes, bytes)) {
    return std::nullopt;
  }
  if (bytes.size() < kSidecarMagic.size() + 8 ||
      std::memcmp(bytes.data(), kSidecarMagic.data(), kSidecarMagic.size()) != 0) {
    return std::nullopt;
  }
  const auto body = std::span<const std::byte>(bytes).first(bytes.size() - 8);
  std::uint64_t checksum;
  std::memcpy(&checksum, bytes.data() + body.size(), 8);
  if (detail::Checksum(body) != checksum) return std::nullopt;
  SidecarCursor c{body, kSidecarMagic.size()};
  if (c.Get<std::uint64_t>() != stamp.size || c.Get<std::int64_t>() != stamp.mtime_ns ||
      c.GetString(c.Get<std::uint32_t>()) != stamp.etag || !c.ok) {
    return std::nullopt;
  }
  ScannedTar out;
  const auto count = c.Get<std::uint64_t>();
  out.ignored_keys = c.Get<std::uint64_t>();
  for (std::uint64_t i = 0; c.ok && i < count; ++i) {
    ScannedSample s;
    s.offset = c.Get<std::uint64_t>();
    s.size = c.Get<std::uint64_t>();
    s.label = c.Get<std::int32_t>();
    const auto key_size = c.Get<std::uint32_t>();
    const auto problem_size = c.Get<std::uint32_t>();
    s.key = c.GetString(key_size);
    s.problem = c.GetString(problem_size);
    // Entries must lie inside the tar; anything else means the sidecar is not this tar's.
    if (s.offset > stamp.size || s.size > stamp.size - s.offset) c.ok = false;
    out.samples.push_back(std::move(s));
  }
  if (!c.ok || c.at != body.size()) return std::nullopt;
  return out;
}

std::vector<std::byte> SidecarBytes(const TarStamp& stamp, const ScannedTar& tar) {
  std::vector<std::byte> out;
  out.insert(out.end(), reinterpret_cast<const std::byte*>(kSidecarMagic.data()),
             reinterpret_cast<const std::byte*>(kSidecarMagic.data()) + kSidecarMagic.size());
  Put(out, stamp.size);
  Put(out, stamp.mtime_ns);
  Put(out, static_cast<std::uint32_t>(stamp.etag.size()));
  out.insert(out.end(), reinterpret_cast<const std::byte*>(stamp.etag.data()),
             reinterpret_cast<const std::byte*>(stamp.etag.data()) + stamp.etag.size());
  Put(out, static_cast<std::uint64_t>(tar.samples.size()));
  Put(out, tar.ignored_keys);
  for (const ScannedSample& s : tar.samples) {
    Put(out, s.offset);
    Put(out, s.size);
    Put(out, s.label);
    Put(out, static_cast<std::uint32_t>(s.key.size()));
    Put(out, static_cast<std::uint32_t>(s.problem.size()));
    const auto* k = reinterpret_cast<const std::byte*>(s.key.data());
    out.insert(out.end(), k, k + s.key.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.problem.data());
    out.insert(out.end(), p, p + s.problem.size());
  }
  Put(out, detail::Checksum(out));
  return out;
}

// Where a tar's sidecar lives: beside a local tar; for a remote one, among the cache's
// files ("<cache_dir>/blocks/<XXH3 of the URL>.tfidx"), or nowhere without a cache.
std::string SidecarPath(const RangeFile& file, const TarOptions& options) {
  if (!IsRemoteLocation(file.name())) return file.name() + ".tfidx";
  if (options.remote.cache_dir.empty()) return {};
  return detail::CacheFilesDir(options.remote) + "/" +
         detail::Hex(detail::Checksum(std::as_bytes(std::span(file.name())))) + ".tfidx";
}

ScannedTar IndexTar(const RangeFile& file, const TarOptions& options) {
  std::optional<TarStamp> stamp = options.sidecar ? file.stamp() : std::nullopt;
  const std::string sidecar = stamp ? SidecarPath(file, options) : std::string();
  if (sidecar.empty()) stamp.reset();
  if (stamp) {
    if (auto cached = ReadSidecar(sidecar, *stamp)) return std::move(*cached);
  }
  ScannedTar scanned = ScanTar(file, options.max_member_bytes);
  if (!stamp) return scanned;
  // Best effort: a read-only directory or a full disk leaves the tar without a sidecar. A
  // remote tar's is stored like a block, under the cache's limit.
  const std::vector<std::byte> bytes = SidecarBytes(*stamp, scanned);
  if (IsRemoteLocation(file.name())) {
    detail::StoreInCache(options.remote, sidecar, {bytes});
  } else {
    detail::ReplaceFile(sidecar, sidecar + ".tmp." + std::to_string(::getpid()), {bytes}, false);
  }
  return scanned;
}

// Expands one "{A..B}" range; a location without '{' is returned as is.
std::vector<std::string> ExpandBraces(const std::string& pattern) {
  const std::size_t open = pattern.find('{');
  if (open == std::string::npos) return {pattern};
  const std::size_t close = pattern.find('}', open);
  const std::size_t dots = pattern.find("..", open);
  if (close == std::string::npos || dots == std::string::npos || dots > close ||
      pattern.find('{', open + 1) != std::string::npos) {
    throw SourceError(pattern, "malformed brace pattern (want one {A..B} range of numbers)");
  }
  const std::string first = pattern.substr(open + 1, dots - open - 1);
  const std::string last = pattern.substr(dots + 2, close - dots - 2);
  const auto is_number = [](const std::string& s) {
    return !s.empty() && s.size() <= 9 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!is_number(first) || !is_number(last) || std::stoul(first) > std::stoul(last)) {
    throw SourceError(pattern, "malformed brace pattern (want {A..B} with numbers A <= B)");
  }
  std::vector<std::string> out;
  for (unsigned long n = std::stoul(first); n <= std::stoul(last); ++n) {
    std::string digits = std::to_string(n);
    if (digits.size() < first.size()) digits.insert(0, first.size() - digits.size(), '0');
    out.push_back(pattern.substr(0, open) + digits + pattern.substr(close + 1));
  }
  return out;
}

// The .tar files of `dir`, sorted, and (in `gzipped`) its .tar.gz/.tgz files.
std::vector<std::string> ListTarNames(const std::string& dir, std::vector<std::string>& gzipped) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) detail::ThrowWithErrno(dir, "cannot list directory: ", errno);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (EndsWith(name, ".tar")) out.push_back(detail::JoinLocation(dir, name));
    if (IsGzipTarName(name)) gzipped.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  std::sort(gzipped.begin(), gzipped.end());
  return out;
}

// The .tar files of `dir`. A gzip-compressed shard among them is refused, not skipped:
// leaving it out would silently drop its samples.
std::vector<std::string> TarsInDirectory(const std::string& dir) {
  std::vector<std::string> gzipped;
  std::vector<std::string> out = ListTarNames(dir, gzipped);
  if (!gzipped.empty()) {
    throw SourceError(detail::JoinLocation(dir, gzipped.front()),
                      GzipRefusal(false) + " (" + std::to_string(gzipped.size()) +
                          " such file(s) in the directory)");
  }
  if (out.empty()) throw SourceError(dir, "no .tar files in the directory");
  return out;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return !IsRemoteLocation(path) && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::vector<std::string> ListTarShards(const std::string& location) {
  std::string path = location;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (IsDirectory(path)) return TarsInDirectory(path);
  if (IsGzipTarName(path)) throw SourceError(path, GzipRefusal(false));
  return ExpandBraces(path);
}

bool IsTarDataset(const std::string& location) {
  if (EndsWith(location, ".tar") || IsGzipTarName(location)) return true;
  if (!IsDirectory(location)) return false;
  const std::string manifest = location + "/" + std::string(detail::kManifestFileName);
  struct stat st;
  if (::stat(manifest.c_str(), &st) == 0) return false;
  try {
    // gzip-compressed shards make it a tar dataset too, so that opening it says why not.
    std::vector<std::string> gzipped;
    return !ListTarNames(location, gzipped).empty() || !gzipped.empty();
  } catch (const SourceError&) {
    return false;
  }
}

std::unique_ptr<TarDataset> TarDataset::Open(const std::string& location,
                                             const TarOptions& options) {
  return OpenFiles(ListTarShards(location), options);
}

std::unique_ptr<TarDataset> TarDataset::OpenFiles(const std::vector<std::string>& tars,
                                                  const TarOptions& options) {
  assert(options.max_classes > 0);
  std::unique_ptr<TarDataset> d(new TarDataset());
  d->options_ = options;
  std::int32_t max_label = -1;
  const auto session = detail::MakeHttpSession();  // shared by the remote tars
  for (const std::string& path : tars) {
    auto file = detail::OpenRangeFile(path, options.remote, {}, session);
    ScannedTar scanned = IndexTar(*file, options);
    const auto tar = static_cast<std::uint32_t>(d->tars_.size());
    for (ScannedSample& s : scanned.samples) {
      // Checked here rather than in the scan so that a sidecar index written under
      // another limit is held to this one.
      if (s.problem.empty() && s.label >= options.max_classes) {
        s.problem = "member " + s.key + ".cls holds label " + std::to_string(s.label) +
                    ", past the limit of " + std::to_string(options.max_classes) +
                    " classes (labels 0 to " + std::to_string(options.max_classes - 1) + ")";
      }
      Entry e{s.offset, s.size, s.label, tar, -1};
      if (!s.problem.empty()) {
        e.problem = static_cast<std::int32_t>(d->problems_.size());
        d->problems_.push_back(std::move(s.problem));
      } else {
        max_label = std::max(max_label, s.label);
      }
      d->entries_.push_back(e);
      d->keys_.push_back(std::move(s.key));
    }
    d->ignored_keys_ += scanned.ignored_keys;
    d->tars_.push_back({path, std::move(file)});
  }
  for (std::int32_t c = 0; c <= max_label; ++c) d->class_names_.push_back(std::to_string(c));
  return d;
}

TarDataset::~TarDataset() = default;

std::string TarDataset::Describe(std::size_t index) const {
  return tars_[entries_[index].tar].path + "#" + keys_[index];
}

std::int32_t TarDataset::Label(std::size_t index) const {
  const Entry& e = entries_[index];
  return e.problem >= 0 ? -1 : e.label;
}

SampleInfo TarDataset::Read(std::size_t index, std::vector<std::byte>& buffer) const {
  const Entry& e = entries_[index];
  if (e.problem >= 0) throw SourceError(Describe(index), problems_[e.problem]);
  buffer.resize(static_cast<std::size_t>(e.size));
  read_calls_.fetch_add(1, std::memory_order_relaxed);
  if (std::string error = tars_[e.tar].file->Read(e.offset, buffer); !error.empty()) {
    throw SourceError(Describe(index), error);
  }
  SampleInfo info;
  info.label = e.label;
  return info;
}

struct TarDataset::RunRead {
  const std::uint32_t* order = nullptr;
  std::size_t count = 0;
  std::span<const std::uint64_t> indices;
  std::span<std::vector<std::byte>> buffers;
  std::span<ReadResult> results;
  std::span<iovec> parts;  // one per sample
  detail::RangeRead* read = nullptr;
};

void TarDataset::ReadMany(std::span<const std::uint64_t> indices,
                          std::span<std::vector<std::byte>> buffers,
                          std::span<ReadResult> results) const {
  if (!options_.coalesce) {
    Source::ReadMany(indices, buffers, results);
    return;
  }
  const detail::MergedRuns plan =
      detail::PlanMergedRuns(indices, options_.max_gap, [&](std::uint64_t index) {
        const Entry& e = entries_[index];
        // A bad sample gets a run of its own (size 0 at offset 0 never merges forward).
        if (e.problem >= 0) return detail::Extent{e.tar, 0, 0};
        return detail::Extent{e.tar, e.offset, e.size};
      });
  // Every run's read is set up first and all are issued together, so that remote tars
  // have a chunk's requests in flight at once.
  std::vector<iovec> parts(indices.size());
  std::vector<detail::RangeRead> reads(plan.runs.size());
  std::vector<RunRead> runs(plan.runs.size());
  for (std::size_t r = 0; r < plan.runs.size(); ++r) {
    const auto [first, count] = plan.runs[r];
    runs[r] = {&plan.order[first],
               count,
               indices,
               buffers,
               results,
               std::span(parts).subspan(first, count),
               &reads[r]};
    PrepareRun(runs[r]);
  }
  detail::ReadRanges(reads);
  for (RunRead& run : runs) FinishRun(run);
}

void TarDataset::PrepareRun(RunRead& run) const {
  const Entry& first = entries_[run.indices[run.order[0]]];
  if (first.problem >= 0) return;  // no read: FinishRun reports the problem
  // Each buffer also takes the gap after its member, so the whole range lands in the
  // caller's buffers; sized first, since a resize may move a buffer.
  for (std::size_t i = 0; i < run.count; ++i) {
    const Entry& e = entries_[run.indices[run.order[i]]];
    std::uint64_t gap = 0;
    if (i + 1 < run.count) {
      gap = entries_[run.indices[run.order[i + 1]]].offset - (e.offset + e.size);
    }
    run.buffers[run.order[i]].resize(static_cast<std::size_t>(e.size + gap));
  }
  for (std::size_t i = 0; i < run.count; ++i) {
    run.parts[i] = {run.buffers[run.order[i]].data(), run.buffers[run.order[i]].size()};
  }
  read_calls_.fetch_add(1, std::memory_order_relaxed);
  *run.read = {tars_[first.tar].file.get(), first.offset, run.parts, {}};
}

void TarDataset::FinishRun(RunRead& run) const {
  const std::string& error = run.read->error;
  const bool local = run.read->file != nullptr && run.read->file->fd() >= 0;
  if (run.read->file == nullptr || (!error.empty() && local && run.count > 1)) {
    // A bad sample; or a local error or short read: each member read alone says which
    // is affected.
    for (std::size_t i = 0; i < run.count; ++i) {
      ReadOne(*this, static_cast<std::size_t>(run.indices[run.order[i]]), run.buffers[run.order[i]],
              run.results[run.order[i]]);
    }
    return;
  }
  for (std::size_t i = 0; i < run.count; ++i) {
    const Entry& e = entries_[run.indices[run.order[i]]];
    ReadResult& r = run.results[run.order[i]];
    run.buffers[run.order[i]].resize(static_cast<std::size_t>(e.size));
    r.ok = error.empty();
    r.error = error;
    if (r.ok) r.info = SampleInfo{.label = e.label};
  }
}

}  // namespace tilefeed::loader
