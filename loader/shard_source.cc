#include "loader/shard_source.h"

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

#include "codecs/jpeg_coefficients.h"
#include "codecs/jpeg_index.h"
#include "codecs/png.h"
#include "codecs/raw.h"
#include "loader/file_io.h"
#include "loader/merged_reads.h"
#include "loader/range_file.h"
#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"

namespace tilefeed::loader {
namespace {

using detail::RecordCodec;

// A manifest larger than this is not one of ours (a 1 M-class dataset stays far below).
constexpr std::size_t kMaxManifestBytes = std::size_t{256} << 20;

struct LoadedManifest {
  std::string path;
  std::string dir;
  detail::Manifest manifest;
};

LoadedManifest LoadManifest(const std::string& manifest_or_dir, const RemoteOptions& remote) {
  LoadedManifest out;
  std::string path = manifest_or_dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  struct stat st;
  const bool is_dir = IsRemoteLocation(path)
                          ? !path.ends_with("/" + std::string(detail::kManifestFileName))
                          : ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (is_dir) {
    out.dir = path;
    out.path = detail::JoinLocation(path, std::string(detail::kManifestFileName));
  } else {
    out.path = path;
    out.dir = detail::ParentOf(path);
  }
  std::vector<std::byte> bytes;
  try {
    bytes = detail::ReadWholeFile(out.path, remote, kMaxManifestBytes);
  } catch (const SourceError& e) {
    throw SourceError(out.path, "cannot read shard manifest: " + e.reason());
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
  return detail::JoinLocation(m.dir, m.manifest.shards[shard].file_name);
}

struct OpenedShard {
  std::unique_ptr<detail::RangeFile> file;
  detail::ShardIndex index;
};

// Refuses a coefficient shard whose records are of a layout this build no longer reads
// (codecs/jpeg_coefficients.h), naming it and the repack command, so that such a pack
// fails when opened rather than sample by sample. A pack is written with one layout, so
// the header of the first coefficient record among the first few is enough; reading it
// costs one small read. Anything else wrong with it is left to the record's own read.
void RefuseRetiredLayout(const detail::RangeFile& file, const detail::ShardIndex& index,
                         const std::string& path) {
  constexpr std::size_t kRecordsLooked = 8;
  // The record header and a coefficient record's header up to its coding byte (at most
  // 16 + 3 * 4 + 128 * 4 + 8 bytes).
  constexpr std::size_t kHeadBytes = detail::kRecordHeaderSize + 1024;
  std::vector<std::byte> head;
  for (std::size_t r = 0; r < std::min(kRecordsLooked, index.entries.size()); ++r) {
    const detail::IndexEntry& entry = index.entries[r];
    head.resize(std::min<std::size_t>(entry.size, kHeadBytes));
    if (!file.Read(entry.offset, head).empty()) return;
    if (detail::ReadRecordLayout(head).codec != RecordCodec::kCoefficients) continue;
    try {
      codecs::ReadCoefficientInfo(
          std::span<const std::byte>(head).subspan(detail::kRecordHeaderSize));
    } catch (const codecs::DecodeError& e) {
      // kUnsupported is a retired layout; a prefix of a good record fails otherwise.
      if (e.kind() == codecs::DecodeErrorKind::kUnsupported) {
        throw SourceError(path, "record " + std::to_string(r) + " is " + e.what());
      }
    }
    return;
  }
}

// Opens shard `number` and checks it against the manifest with two reads: the header,
// then exactly the footer whose size the record count gives.
OpenedShard OpenShard(const LoadedManifest& m, std::size_t number, const std::string& path,
                      const RemoteOptions& remote,
                      const std::shared_ptr<detail::HttpSession>& session) {
  const detail::ManifestShard& expected = m.manifest.shards[number];
  OpenedShard out;
  // A remote shard's size comes from the manifest (no HEAD request); a wrong one fails the
  // footer read or its checksum below.
  out.file = detail::OpenRangeFile(path, remote, expected.bytes, session);
  const std::uint64_t file_size = out.file->size();
  if (file_size != expected.bytes) {
    throw SourceError(path, "shard is " + std::to_string(file_size) + " bytes, the manifest says " +
                                std::to_string(expected.bytes) +
                                (file_size < expected.bytes ? " (truncated)" : ""));
  }
  try {
    std::array<std::byte, detail::kShardHeaderSize> head{};
    if (file_size < head.size()) throw detail::ShardFormatError("file too small for a header");
    if (std::string error = out.file->Read(0, head); !error.empty()) {
      throw SourceError(path, "reading shard header: " + error);
    }
    const detail::ShardHeader header = detail::ParseShardHeader(head);
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
    if (std::string error = out.file->Read(file_size - tail.size(), tail); !error.empty()) {
      throw SourceError(path, "reading shard footer: " + error);
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
  if (m.manifest.codec == RecordCodec::kCoefficients) {
    RefuseRetiredLayout(*out.file, out.index, path);
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
// ReadV, so the payload lands at the start of the caller's buffer without a copy.
// Returns an empty string on success, else the reason.
std::string ReadRecord(const detail::RangeFile& file, const detail::IndexEntry& entry,
                       RecordCodec codec, std::array<std::byte, detail::kRecordHeaderSize>& header,
                       std::vector<std::byte>& payload) {
  payload.resize(entry.size - detail::kRecordHeaderSize);
  const iovec parts[2] = {{header.data(), header.size()}, {payload.data(), payload.size()}};
  if (std::string error = file.ReadV(entry.offset, parts); !error.empty()) return error;
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
    case RecordCodec::kCoefficients:
      info.codec = SampleCodec::kCoefficients;
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

  RecordVerdict Check(const detail::RangeFile& file, const detail::IndexEntry& entry,
                      RecordCodec codec) {
    RecordVerdict verdict;
    verdict.reason = ReadRecord(file, entry, codec, header, payload);
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
        case RecordCodec::kCoefficients:
          codecs::CheckCoefficients(payload);
          return verdict;
        case RecordCodec::kJpeg:
          CheckEncoded(image, verdict);
          return verdict;
      }
    } catch (const codecs::DecodeError& e) {
      verdict.reason = e.what();
      verdict.note = false;
    }
    return verdict;
  }

  // An image file's bytes: a PNG is verified (and noted), a JPEG entropy-decoded, anything
  // else fails. Throws codecs::DecodeError.
  void CheckEncoded(std::span<const std::byte> image, RecordVerdict& verdict) {
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
  }

  // A sample that `source` read (`result`, bytes in `bytes`), checked as the loader will
  // decode it. PNGs are not noted: a folder or tar holds them as they are.
  RecordVerdict CheckSample(const ReadResult& result, std::span<const std::byte> bytes) {
    RecordVerdict verdict;
    if (!result.ok) {
      verdict.reason = result.error;
      return verdict;
    }
    try {
      if (result.info.codec == SampleCodec::kEncoded) {
        CheckEncoded(bytes, verdict);
        if (verdict.note) verdict = {};
      } else if (result.info.codec == SampleCodec::kLz4Raw) {
        codecs::ReadRawInfo(bytes);
      }
    } catch (const codecs::DecodeError& e) {
      verdict = {e.what(), false};
    }
    return verdict;
  }
};

}  // namespace

std::vector<ShardProblem> VerifySamples(
    const Source& source, const std::function<void(std::uint64_t, std::uint64_t)>& on_record) {
  constexpr std::size_t kChunk = 16;  // a loader chunk: merged reads, requests in flight
  const std::size_t n = source.size();
  tbb::enumerable_thread_specific<RecordChecker> checkers;
  std::vector<RecordVerdict> verdicts(n);
  std::vector<ShardProblem> problems;
  // Blocks of 64 chunks keep progress reports flowing and memory bounded.
  for (std::size_t block = 0; block < n; block += 64 * kChunk) {
    const std::size_t end = std::min(n, block + 64 * kChunk);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(block, end, kChunk), [&](const auto& range) {
      std::vector<std::uint64_t> indices(range.size());
      for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = range.begin() + i;
      std::vector<std::vector<std::byte>> buffers(indices.size());
      std::vector<ReadResult> results(indices.size());
      source.ReadMany(indices, buffers, results);
      RecordChecker& checker = checkers.local();
      for (std::size_t i = 0; i < indices.size(); ++i) {
        verdicts[indices[i]] = checker.CheckSample(results[i], buffers[i]);
      }
    });
    for (std::size_t i = block; i < end; ++i) {
      if (!verdicts[i].reason.empty()) {
        problems.push_back({source.Describe(i), std::move(verdicts[i].reason), verdicts[i].note});
      }
      if (on_record) on_record(i + 1, n);
    }
  }
  return problems;
}

ShardManifest ReadShardManifest(const std::string& manifest_or_dir, const RemoteOptions& remote) {
  const LoadedManifest m = LoadManifest(manifest_or_dir, remote);
  ShardManifest out;
  out.path = m.path;
  out.codec = m.manifest.codec;
  out.records = m.manifest.records;
  out.class_names = m.manifest.class_names;
  for (std::size_t s = 0; s < m.manifest.shards.size(); ++s) {
    out.shards.push_back(
        {ShardPath(m, s), m.manifest.shards[s].records, m.manifest.shards[s].bytes});
  }
  return out;
}

bool IsShardDataset(const std::string& path) {
  if (IsRemoteLocation(path)) return path.ends_with("/" + std::string(detail::kManifestFileName));
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
    const std::function<void(std::uint64_t, std::uint64_t)>& on_record,
    const RemoteOptions& remote) {
  const LoadedManifest m = LoadManifest(manifest_or_dir, remote);
  std::vector<ShardProblem> problems;
  tbb::enumerable_thread_specific<RecordChecker> checkers;
  std::vector<RecordVerdict> verdicts;
  std::uint64_t done = 0;
  const auto session = detail::MakeHttpSession();
  for (std::size_t s = 0; s < m.manifest.shards.size(); ++s) {
    const std::string path = ShardPath(m, s);
    OpenedShard shard;
    try {
      shard = OpenShard(m, s, path, remote, session);
    } catch (const SourceError& e) {
      problems.push_back({e.where(), e.reason()});
      done += m.manifest.shards[s].records;
      if (on_record) on_record(done, m.manifest.records);
      continue;
    }
    // Decoding dominates, so a shard's records are checked in parallel (RangeFile reads may
    // run concurrently) and reported in order afterwards.
    const std::vector<detail::IndexEntry>& entries = shard.index.entries;
    verdicts.assign(entries.size(), RecordVerdict{});
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, entries.size(), 4),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        RecordChecker& checker = checkers.local();
                        for (std::size_t r = range.begin(); r != range.end(); ++r) {
                          verdicts[r] = checker.Check(*shard.file, entries[r], m.manifest.codec);
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
  const LoadedManifest m = LoadManifest(manifest_or_dir, options.remote);
  std::unique_ptr<ShardDataset> dataset(new ShardDataset());
  dataset->read_options_ = options;
  dataset->codec_ = m.manifest.codec;
  dataset->class_names_ = m.manifest.class_names;
  dataset->entries_.reserve(m.manifest.records);
  dataset->record_begin_.reserve(m.manifest.shards.size() + 1);
  dataset->record_begin_.push_back(0);
  const auto session = detail::MakeHttpSession();  // shared by the remote shards
  for (std::size_t s = 0; s < m.manifest.shards.size(); ++s) {
    std::string path = ShardPath(m, s);
    OpenedShard shard = OpenShard(m, s, path, options.remote, session);
    dataset->entries_.insert(dataset->entries_.end(), shard.index.entries.begin(),
                             shard.index.entries.end());
    dataset->record_begin_.push_back(dataset->entries_.size());
    Shard opened{std::move(path), nullptr, nullptr, 0};
    if (options.io == ShardIo::kMmap) {
      if (shard.file->fd() < 0) {
        throw SourceError(opened.path, "ShardIo::kMmap needs a local file");
      }
      // OpenShard checked the size against the manifest; a shard is never empty.
      const auto bytes = static_cast<std::size_t>(m.manifest.shards[s].bytes);
      void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, shard.file->fd(), 0);
      if (map == MAP_FAILED) detail::ThrowWithErrno(opened.path, "mmap: ", errno);
      opened.map = static_cast<const std::byte*>(map);
      opened.map_bytes = bytes;
    }
    opened.file = std::move(shard.file);
    dataset->shards_.push_back(std::move(opened));
  }
  return dataset;
}

ShardDataset::~ShardDataset() {
  for (const Shard& shard : shards_) {
    if (shard.map != nullptr) ::munmap(const_cast<std::byte*>(shard.map), shard.map_bytes);
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
  const std::string reason = ReadRecord(*shards_[shard].file, e, codec_, header, buffer);
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
  const std::string reason = detail::CheckRecord(header, buffer, e, codec_);
  if (!reason.empty()) throw SourceError(s.path + "#" + std::to_string(record), reason);
  return InfoFrom(header, e.label);
}

struct ShardDataset::GroupRead {
  const std::uint32_t* order = nullptr;
  std::size_t count = 0;
  std::span<const std::uint64_t> indices;
  std::span<std::vector<std::byte>> buffers;
  std::span<ReadResult> results;
  std::span<std::array<std::byte, detail::kRecordHeaderSize>> headers;  // one per record
  std::span<iovec> parts;                                               // two per record
  detail::RangeRead* read = nullptr;
};

void ShardDataset::ReadMany(std::span<const std::uint64_t> indices,
                            std::span<std::vector<std::byte>> buffers,
                            std::span<ReadResult> results) const {
  if (read_options_.io != ShardIo::kPread || !read_options_.coalesce) {
    Source::ReadMany(indices, buffers, results);
    return;
  }
  const detail::MergedRuns plan =
      detail::PlanMergedRuns(indices, read_options_.max_gap, [&](std::uint64_t index) {
        const Entry& e = entries_[index];
        return detail::Extent{static_cast<std::uint32_t>(Locate(index).first), e.offset, e.size};
      });
  // Every run's read is set up first and all are issued together, so that a remote
  // dataset has a chunk's requests in flight at once.
  std::vector<std::array<std::byte, detail::kRecordHeaderSize>> headers(indices.size());
  std::vector<iovec> parts(2 * indices.size());
  std::vector<detail::RangeRead> reads(plan.runs.size());
  std::vector<GroupRead> groups(plan.runs.size());
  for (std::size_t r = 0; r < plan.runs.size(); ++r) {
    const auto [first, count] = plan.runs[r];
    groups[r] = {&plan.order[first],
                 count,
                 indices,
                 buffers,
                 results,
                 std::span(headers).subspan(first, count),
                 std::span(parts).subspan(2 * first, 2 * count),
                 &reads[r]};
    PrepareGroup(groups[r]);
  }
  read_calls_.fetch_add(reads.size(), std::memory_order_relaxed);
  detail::ReadRanges(reads);
  for (GroupRead& group : groups) FinishGroup(group);
}

void ShardDataset::PrepareGroup(GroupRead& g) const {
  // Each record's payload buffer also takes the gap after it, so the whole range lands in
  // the caller's buffers; sized first, since a resize may move a buffer.
  for (std::size_t i = 0; i < g.count; ++i) {
    const Entry& e = entries_[g.indices[g.order[i]]];
    std::size_t gap = 0;
    if (i + 1 < g.count) gap = entries_[g.indices[g.order[i + 1]]].offset - (e.offset + e.size);
    g.buffers[g.order[i]].resize(e.size - detail::kRecordHeaderSize + gap);
  }
  for (std::size_t i = 0; i < g.count; ++i) {
    std::vector<std::byte>& b = g.buffers[g.order[i]];
    g.parts[2 * i] = {g.headers[i].data(), g.headers[i].size()};
    g.parts[2 * i + 1] = {b.data(), b.size()};
  }
  const std::uint64_t index = g.indices[g.order[0]];
  *g.read = {shards_[Locate(index).first].file.get(), entries_[index].offset, g.parts, {}};
}

void ShardDataset::FinishGroup(GroupRead& g) const {
  const std::string& error = g.read->error;
  if (!error.empty() && (g.read->file->fd() < 0 || g.count == 1)) {
    // A remote read already spent its retries: every record of the run gets its error.
    for (std::size_t i = 0; i < g.count; ++i) {
      g.results[g.order[i]].ok = false;
      g.results[g.order[i]].error = error;
    }
    return;
  }
  if (!error.empty()) {
    // An error or a short read: read each record alone, which retries short reads and
    // says which record is affected and why.
    for (std::size_t i = 0; i < g.count; ++i) {
      ReadOne(*this, static_cast<std::size_t>(g.indices[g.order[i]]), g.buffers[g.order[i]],
              g.results[g.order[i]]);
    }
    return;
  }
  for (std::size_t i = 0; i < g.count; ++i) {
    const Entry& e = entries_[g.indices[g.order[i]]];
    std::vector<std::byte>& b = g.buffers[g.order[i]];
    ReadResult& r = g.results[g.order[i]];
    b.resize(e.size - detail::kRecordHeaderSize);
    r.error = detail::CheckRecord(g.headers[i], b, e, codec_);
    r.ok = r.error.empty();
    if (r.ok) r.info = InfoFrom(g.headers[i], e.label);
  }
}

std::string ShardDataset::Describe(std::size_t index) const {
  const auto [shard, record] = Locate(index);
  return shards_[shard].path + "#" + std::to_string(record);
}

}  // namespace tilefeed::loader
