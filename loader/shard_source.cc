#include "loader/shard_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <span>
#include <utility>

#include "codecs/image.h"
#include "codecs/jpeg.h"
#include "codecs/jpeg_index.h"
#include "codecs/png.h"
#include "codecs/raw.h"
#include "loader/detail/file_io.h"
#include "loader/detail/shard_format.h"

namespace tilefeed::loader {
namespace {

using detail::RecordCodec;
using detail::UniqueFd;

// A manifest larger than this is not one of ours (a 1 M-class dataset stays far below).
constexpr std::size_t kMaxManifestBytes = std::size_t{256} << 20;

ShardCodec ToShardCodec(RecordCodec codec) {
  switch (codec) {
    case RecordCodec::kJpeg:
      return ShardCodec::kJpeg;
    case RecordCodec::kLz4Raw:
      return ShardCodec::kLz4Raw;
    case RecordCodec::kIndexedJpeg:
      return ShardCodec::kIndexedJpeg;
  }
  return ShardCodec::kJpeg;
}

RecordCodec ToRecordCodec(ShardCodec codec) {
  switch (codec) {
    case ShardCodec::kJpeg:
      return RecordCodec::kJpeg;
    case ShardCodec::kLz4Raw:
      return RecordCodec::kLz4Raw;
    case ShardCodec::kIndexedJpeg:
      return RecordCodec::kIndexedJpeg;
  }
  return RecordCodec::kJpeg;
}

struct LoadedManifest {
  std::string path;
  std::string dir;
  detail::Manifest manifest;
};

LoadedManifest LoadManifest(const std::string& manifest_or_dir) {
  LoadedManifest out;
  std::string path = manifest_or_dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    out.dir = path;
    out.path = path + "/" + std::string(detail::kManifestFileName);
  } else {
    out.path = path;
    const std::size_t slash = path.rfind('/');
    out.dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  }
  std::vector<std::byte> bytes;
  if (auto error = detail::ReadRegularFile(AT_FDCWD, out.path.c_str(), kMaxManifestBytes, bytes)) {
    throw SourceError(out.path, "cannot read shard manifest: " + *error);
  }
  try {
    out.manifest = detail::ParseManifest(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const detail::ShardFormatError& e) {
    throw SourceError(out.path, std::string("bad shard manifest: ") + e.what());
  }
  return out;
}

std::string ShardPath(const LoadedManifest& m, std::size_t shard) {
  return (m.dir == "/" ? "" : m.dir) + "/" + m.manifest.shards[shard].file_name;
}

struct OpenedShard {
  UniqueFd fd;
  detail::ShardIndex index;
};

// Opens shard `number` and checks it against the manifest with one fstat and two
// preads: the header, then exactly the footer whose size the record count gives.
OpenedShard OpenShard(const LoadedManifest& m, std::size_t number, const std::string& path) {
  const detail::ManifestShard& expected = m.manifest.shards[number];
  OpenedShard out;
  out.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!out.fd) {
    const int error = errno;
    if (error == EMFILE) {
      throw SourceError(path,
                        "too many open files: a ShardDataset keeps every shard open; "
                        "raise the limit (ulimit -n) above the shard count");
    }
    detail::ThrowWithErrno(path, "cannot open shard: ", error);
  }
  struct stat st;
  if (::fstat(out.fd.get(), &st) != 0) detail::ThrowWithErrno(path, "fstat: ", errno);
  if (!S_ISREG(st.st_mode)) throw SourceError(path, "shard is not a regular file");
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size != expected.bytes) {
    throw SourceError(path, "shard is " + std::to_string(file_size) + " bytes, the manifest says " +
                                std::to_string(expected.bytes) +
                                (file_size < expected.bytes ? " (truncated)" : ""));
  }
  try {
    std::array<std::byte, detail::kShardHeaderSize> head{};
    const ssize_t n = detail::PreadFull(out.fd.get(), head.data(), head.size(), 0);
    if (n < 0) detail::ThrowWithErrno(path, "reading shard header: ", errno);
    const detail::ShardHeader header =
        detail::ParseShardHeader(std::span(head).first(static_cast<std::size_t>(n)));
    if (header.shard_number != number) {
      throw detail::ShardFormatError("header says shard " + std::to_string(header.shard_number) +
                                     ", the manifest lists it as shard " + std::to_string(number));
    }
    if (header.codec != m.manifest.codec) {
      throw detail::ShardFormatError("shard codec differs from the manifest's");
    }
    if (header.record_count != expected.records) {
      throw detail::ShardFormatError("header says " + std::to_string(header.record_count) +
                                     " records, the manifest " + std::to_string(expected.records));
    }
    // record_count was checked against the manifest only, so bound it by the file size
    // before it sizes a buffer.
    if (expected.records > file_size / detail::kIndexEntrySize ||
        detail::FooterSize(expected.records) > file_size - detail::kShardHeaderSize) {
      throw detail::ShardFormatError("file too small for an index of " +
                                     std::to_string(expected.records) + " records");
    }
    std::vector<std::byte> tail(detail::FooterSize(expected.records));
    const auto tail_offset = static_cast<off_t>(file_size - tail.size());
    const ssize_t t = detail::PreadFull(out.fd.get(), tail.data(), tail.size(), tail_offset);
    if (t < 0) detail::ThrowWithErrno(path, "reading shard footer: ", errno);
    if (static_cast<std::size_t>(t) != tail.size()) {
      throw detail::ShardFormatError("file shrank while its footer was read");
    }
    out.index = detail::ParseShardFooter(tail, file_size);
    if (out.index.footer_checksum != expected.footer_checksum) {
      throw detail::ShardFormatError(
          "footer checksum differs from the manifest's (a shard of "
          "another pack?)");
    }
  } catch (const detail::ShardFormatError& e) {
    throw SourceError(path, e.what());
  }
  const std::size_t classes = m.manifest.class_names.size();
  for (std::size_t r = 0; r < out.index.entries.size(); ++r) {
    if (classes > 0 && static_cast<std::size_t>(out.index.entries[r].label) >= classes) {
      throw SourceError(path, "record " + std::to_string(r) + " has label " +
                                  std::to_string(out.index.entries[r].label) + " but there are " +
                                  std::to_string(classes) + " classes");
    }
  }
  return out;
}

// Reads the record's header into `header` and its payload into `payload` with one
// preadv, so the payload lands at the start of the caller's buffer without a copy.
// Returns an empty string on success, else the reason.
std::string ReadRecord(int fd, const detail::IndexEntry& entry, RecordCodec codec,
                       std::array<std::byte, detail::kRecordHeaderSize>& header,
                       std::vector<std::byte>& payload) {
  payload.resize(entry.size - detail::kRecordHeaderSize);
  iovec parts[2] = {{header.data(), header.size()}, {payload.data(), payload.size()}};
  const std::size_t total = entry.size;
  const auto offset = static_cast<off_t>(entry.offset);
  ssize_t n;
  do {
    n = ::preadv(fd, parts, 2, offset);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return "read: " + detail::ErrnoMessage(errno);
  auto done = static_cast<std::size_t>(n);
  // Short reads are rare on regular files; finish each part with the retrying pread.
  if (done < header.size()) {
    const ssize_t h = detail::PreadFull(fd, header.data() + done, header.size() - done,
                                        offset + static_cast<off_t>(done));
    if (h < 0) return "read: " + detail::ErrnoMessage(errno);
    done += static_cast<std::size_t>(h);
  }
  if (done >= header.size() && done < total) {
    const ssize_t p = detail::PreadFull(fd, payload.data() + (done - header.size()), total - done,
                                        offset + static_cast<off_t>(done));
    if (p < 0) return "read: " + detail::ErrnoMessage(errno);
    done += static_cast<std::size_t>(p);
  }
  if (done != total) {
    return "short read: " + std::to_string(done) + " of " + std::to_string(total) +
           " bytes (shard truncated since open?)";
  }
  return detail::CheckRecord(header, payload, entry, codec);
}

SampleInfo InfoFrom(std::span<const std::byte> header, std::int32_t label) {
  const detail::RecordLayout layout = detail::ReadRecordLayout(header);
  SampleInfo info;
  info.label = label;
  switch (layout.codec) {
    case RecordCodec::kJpeg:
      info.codec = SampleCodec::kEncoded;
      break;
    case RecordCodec::kLz4Raw:
      info.codec = SampleCodec::kLz4Raw;
      break;
    case RecordCodec::kIndexedJpeg:
      info.codec = SampleCodec::kIndexedJpeg;
      info.index_size = layout.index_size;
      break;
  }
  return info;
}

// What VerifyShards found in one record: nothing (empty reason), a failure, or a note.
struct RecordVerdict {
  std::string reason;
  bool note = false;
};

// Checks one record the way the loader will read it, with its own decoders and buffers
// (one per verifying thread). An image record is decoded as far as its pixels depend on
// the data: a JPEG's headers and all its entropy-coded data (no IDCT; a corrupt-data
// warning fails, as under the loader's default policy), a PNG through IEND.
struct RecordChecker {
  codecs::JpegDecoder jpeg;
  codecs::PngDecoder png;
  std::array<std::byte, detail::kRecordHeaderSize> header{};
  std::vector<std::byte> payload;

  RecordVerdict Check(int fd, const detail::IndexEntry& entry, RecordCodec codec) {
    RecordVerdict verdict;
    verdict.reason = ReadRecord(fd, entry, codec, header, payload);
    if (!verdict.reason.empty()) return verdict;
    const detail::RecordLayout layout = detail::ReadRecordLayout(header);
    const auto image = std::span<const std::byte>(payload).subspan(layout.index_size);
    try {
      switch (layout.codec) {
        case RecordCodec::kLz4Raw:
          try {
            codecs::ReadRawInfo(payload);
          } catch (const codecs::DecodeError& e) {
            verdict.reason = std::string("bad raw tensor header: ") + e.what();
          }
          return verdict;
        case RecordCodec::kIndexedJpeg:
          codecs::ParseIndex(std::span<const std::byte>(payload).first(layout.index_size), image);
          jpeg.EntropyDecode(image);
          return verdict;
        case RecordCodec::kJpeg:
          if (codecs::IsPng(image)) {
            png.Verify(image);
            verdict.reason = "PNG image stored as it came (it decodes)";
            verdict.note = true;
          } else if (const char* what = codecs::SniffNonJpeg(image)) {
            verdict.reason = std::string("not a JPEG or PNG (") + what +
                             "): the loader will report it as a bad sample";
          } else {
            jpeg.EntropyDecode(image);
          }
          return verdict;
      }
    } catch (const codecs::DecodeError& e) {
      verdict.reason = e.what();
      verdict.note = false;
    }
    return verdict;
  }
};

// Records merged into one read at most; bounds the iovec and header arrays on the stack.
constexpr std::size_t kMaxGroupRecords = 32;
// ReadMany sorts the indices in blocks of this many, with the order kept on the stack.
constexpr std::size_t kSortBlock = 64;

}  // namespace

const char* ToString(ShardCodec codec) { return detail::CodecName(ToRecordCodec(codec)); }

ShardManifest ReadShardManifest(const std::string& manifest_or_dir) {
  const LoadedManifest m = LoadManifest(manifest_or_dir);
  ShardManifest out;
  out.path = m.path;
  out.codec = ToShardCodec(m.manifest.codec);
  out.records = m.manifest.records;
  out.class_names = m.manifest.class_names;
  for (std::size_t s = 0; s < m.manifest.shards.size(); ++s) {
    out.shards.push_back(
        {ShardPath(m, s), m.manifest.shards[s].records, m.manifest.shards[s].bytes});
  }
  return out;
}

bool IsShardDataset(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  if (S_ISDIR(st.st_mode)) {
    const std::string manifest = path + "/" + std::string(detail::kManifestFileName);
    return ::stat(manifest.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  }
  const std::size_t slash = path.rfind('/');
  return S_ISREG(st.st_mode) &&
         path.substr(slash == std::string::npos ? 0 : slash + 1) == detail::kManifestFileName;
}

std::vector<ShardProblem> VerifyShards(
    const std::string& manifest_or_dir,
    const std::function<void(std::uint64_t, std::uint64_t)>& on_record) {
  const LoadedManifest m = LoadManifest(manifest_or_dir);
  std::vector<ShardProblem> problems;
  tbb::enumerable_thread_specific<RecordChecker> checkers;
  std::vector<RecordVerdict> verdicts;
  std::uint64_t done = 0;
  for (std::size_t s = 0; s < m.manifest.shards.size(); ++s) {
    const std::string path = ShardPath(m, s);
    OpenedShard shard;
    try {
      shard = OpenShard(m, s, path);
    } catch (const SourceError& e) {
      problems.push_back({e.where(), e.reason()});
      done += m.manifest.shards[s].records;
      if (on_record) on_record(done, m.manifest.records);
      continue;
    }
    // Decoding dominates, so a shard's records are checked in parallel (pread shares the
    // descriptor safely) and reported in order afterwards.
    const std::vector<detail::IndexEntry>& entries = shard.index.entries;
    verdicts.assign(entries.size(), RecordVerdict{});
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, entries.size(), 4),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        RecordChecker& checker = checkers.local();
                        for (std::size_t r = range.begin(); r != range.end(); ++r) {
                          verdicts[r] = checker.Check(shard.fd.get(), entries[r], m.manifest.codec);
                        }
                      });
    for (std::size_t r = 0; r < entries.size(); ++r) {
      if (!verdicts[r].reason.empty()) {
        problems.push_back(
            {path + "#" + std::to_string(r), std::move(verdicts[r].reason), verdicts[r].note});
      }
      if (on_record) on_record(++done, m.manifest.records);
    }
  }
  return problems;
}

std::unique_ptr<ShardDataset> ShardDataset::Open(const std::string& manifest_or_dir,
                                                 const ShardReadOptions& options) {
  const LoadedManifest m = LoadManifest(manifest_or_dir);
  std::unique_ptr<ShardDataset> dataset(new ShardDataset());
  dataset->read_options_ = options;
  dataset->codec_ = ToShardCodec(m.manifest.codec);
  dataset->class_names_ = m.manifest.class_names;
  dataset->entries_.reserve(m.manifest.records);
  dataset->record_begin_.reserve(m.manifest.shards.size() + 1);
  dataset->record_begin_.push_back(0);
  for (std::size_t s = 0; s < m.manifest.shards.size(); ++s) {
    std::string path = ShardPath(m, s);
    OpenedShard shard = OpenShard(m, s, path);
    for (const detail::IndexEntry& e : shard.index.entries) {
      dataset->entries_.push_back({e.offset, e.checksum, e.size, e.label});
    }
    dataset->record_begin_.push_back(dataset->entries_.size());
    Shard opened{std::move(path), -1, nullptr, 0};
    if (options.io == ShardIo::kMmap) {
      // OpenShard checked the size against the manifest; a shard is never empty.
      const auto bytes = static_cast<std::size_t>(m.manifest.shards[s].bytes);
      void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, shard.fd.get(), 0);
      if (map == MAP_FAILED) detail::ThrowWithErrno(opened.path, "mmap: ", errno);
      opened.map = static_cast<const std::byte*>(map);
      opened.map_bytes = bytes;
    }
    opened.fd = shard.fd.release();
    dataset->shards_.push_back(std::move(opened));
  }
  return dataset;
}

ShardDataset::~ShardDataset() {
  for (const Shard& shard : shards_) {
    if (shard.map != nullptr) ::munmap(const_cast<std::byte*>(shard.map), shard.map_bytes);
    ::close(shard.fd);
  }
}

std::pair<std::size_t, std::size_t> ShardDataset::Locate(std::size_t index) const {
  const auto it = std::upper_bound(record_begin_.begin(), record_begin_.end(), index);
  const auto shard = static_cast<std::size_t>(it - record_begin_.begin()) - 1;
  return {shard, index - record_begin_[shard]};
}

SampleInfo ShardDataset::Read(std::size_t index, std::vector<std::byte>& buffer) const {
  if (read_options_.io == ShardIo::kMmap) return ReadMapped(index, buffer);
  const Entry& e = entries_[index];
  const auto [shard, record] = Locate(index);
  std::array<std::byte, detail::kRecordHeaderSize> header{};
  read_calls_.fetch_add(1, std::memory_order_relaxed);
  const std::string reason = ReadRecord(shards_[shard].fd, {e.offset, e.checksum, e.size, e.label},
                                        ToRecordCodec(codec_), header, buffer);
  if (!reason.empty()) {
    throw SourceError(shards_[shard].path + "#" + std::to_string(record), reason);
  }
  return InfoFrom(header, e.label);
}

SampleInfo ShardDataset::ReadMapped(std::size_t index, std::vector<std::byte>& buffer) const {
  const Entry& e = entries_[index];
  const auto [shard, record] = Locate(index);
  const Shard& s = shards_[shard];
  // Open checked that every record lies inside the file, which is what is mapped.
  const std::byte* at = s.map + e.offset;
  buffer.resize(e.size - detail::kRecordHeaderSize);
  std::memcpy(buffer.data(), at + detail::kRecordHeaderSize, buffer.size());
  const std::span<const std::byte> header(at, detail::kRecordHeaderSize);
  const std::string reason = detail::CheckRecord(
      header, buffer, {e.offset, e.checksum, e.size, e.label}, ToRecordCodec(codec_));
  if (!reason.empty()) throw SourceError(s.path + "#" + std::to_string(record), reason);
  return InfoFrom(header, e.label);
}

void ShardDataset::ReadMany(std::span<const std::uint64_t> indices,
                            std::span<std::vector<std::byte>> buffers,
                            std::span<ReadResult> results) const {
  if (read_options_.io != ShardIo::kPread || !read_options_.coalesce) {
    Source::ReadMany(indices, buffers, results);
    return;
  }
  std::array<std::uint32_t, kSortBlock> order;
  std::array<std::uint32_t, kSortBlock> shard_of;
  for (std::size_t block = 0; block < indices.size(); block += kSortBlock) {
    const std::size_t n = std::min(kSortBlock, indices.size() - block);
    for (std::size_t i = 0; i < n; ++i) {
      order[i] = static_cast<std::uint32_t>(block + i);
      shard_of[i] =
          static_cast<std::uint32_t>(Locate(static_cast<std::size_t>(indices[block + i])).first);
    }
    // By shard, then offset; ties (a repeated index) by position, so the result does not
    // depend on the sort.
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n),
              [&](std::uint32_t a, std::uint32_t b) {
                const std::uint32_t sa = shard_of[a - block], sb = shard_of[b - block];
                if (sa != sb) return sa < sb;
                const std::uint64_t oa = entries_[indices[a]].offset;
                const std::uint64_t ob = entries_[indices[b]].offset;
                return oa != ob ? oa < ob : a < b;
              });
    std::size_t k = 0;
    while (k < n) {
      const std::uint32_t shard = shard_of[order[k] - block];
      const Entry& first = entries_[indices[order[k]]];
      std::uint64_t end = first.offset + first.size;
      std::size_t g = k + 1;
      while (g < n && g - k < kMaxGroupRecords && shard_of[order[g] - block] == shard) {
        const Entry& next = entries_[indices[order[g]]];
        // A repeated record (offset before the end) starts a new read of its own.
        if (next.offset < end || next.offset - end > read_options_.max_gap) break;
        end = next.offset + next.size;
        ++g;
      }
      if (g - k == 1) {
        ReadOne(*this, static_cast<std::size_t>(indices[order[k]]), buffers[order[k]],
                results[order[k]]);
      } else {
        ReadGroup(shard, order.data() + k, g - k, indices, buffers, results);
      }
      k = g;
    }
  }
}

void ShardDataset::ReadGroup(std::size_t shard, const std::uint32_t* order, std::size_t count,
                             std::span<const std::uint64_t> indices,
                             std::span<std::vector<std::byte>> buffers,
                             std::span<ReadResult> results) const {
  std::array<std::array<std::byte, detail::kRecordHeaderSize>, kMaxGroupRecords> headers;
  std::array<iovec, 2 * kMaxGroupRecords> parts;
  // Each record's payload buffer also takes the gap after it, so the whole range lands in
  // the caller's buffers; sized first, since a resize may move a buffer.
  for (std::size_t i = 0; i < count; ++i) {
    const Entry& e = entries_[indices[order[i]]];
    std::size_t gap = 0;
    if (i + 1 < count) gap = entries_[indices[order[i + 1]]].offset - (e.offset + e.size);
    buffers[order[i]].resize(e.size - detail::kRecordHeaderSize + gap);
  }
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<std::byte>& b = buffers[order[i]];
    parts[2 * i] = {headers[i].data(), headers[i].size()};
    parts[2 * i + 1] = {b.data(), b.size()};
  }
  const Entry& first = entries_[indices[order[0]]];
  const Entry& last = entries_[indices[order[count - 1]]];
  const std::uint64_t total = last.offset + last.size - first.offset;
  read_calls_.fetch_add(1, std::memory_order_relaxed);
  ssize_t n;
  do {
    n = ::preadv(shards_[shard].fd, parts.data(), static_cast<int>(2 * count),
                 static_cast<off_t>(first.offset));
  } while (n < 0 && errno == EINTR);
  if (n < 0 || static_cast<std::uint64_t>(n) != total) {
    // An error or a short read: read each record alone, which retries short reads and
    // says which record is affected and why.
    for (std::size_t i = 0; i < count; ++i) {
      ReadOne(*this, static_cast<std::size_t>(indices[order[i]]), buffers[order[i]],
              results[order[i]]);
    }
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const Entry& e = entries_[indices[order[i]]];
    std::vector<std::byte>& b = buffers[order[i]];
    ReadResult& r = results[order[i]];
    b.resize(e.size - detail::kRecordHeaderSize);
    r.error = detail::CheckRecord(headers[i], b, {e.offset, e.checksum, e.size, e.label},
                                  ToRecordCodec(codec_));
    r.ok = r.error.empty();
    if (r.ok) r.info = InfoFrom(headers[i], e.label);
  }
}

std::string ShardDataset::Describe(std::size_t index) const {
  const auto [shard, record] = Locate(index);
  return shards_[shard].path + "#" + std::to_string(record);
}

}  // namespace tilefeed::loader
