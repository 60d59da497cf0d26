// Tests datasets read over HTTP against a real nginx on loopback (started by the test, see
// nginx_server.h): batches over http:// equal local ones for shards and tars, with and
// without the block cache; a server stopped mid-read and started again costs retries, not
// samples; a server gone makes each affected sample a bad sample naming its URL, in
// bounded time; a corrupt byte served fails the record's checksum; the cache stays under
// its limit, also when two readers share it; s3:// requests carry a well-formed SigV4
// Authorization header (nginx cannot check the signature itself, so the test checks its
// form in the access log). Hostile servers: a corrupt cached block is fetched
// again; a full cache disk stops the cache with one warning instead of re-downloading; a
// redirect loop, a trickling server, HTTP 400 and a gzip-encoded body each end in one line
// within stated bounds, with the requests counted at the server.

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "loader/range_file.h"
#include "loader/shard_source.h"
#include "loader/shard_writer.h"
#include "loader/tar_dataset.h"
#include "tests/loader/nginx_server.h"
#include "tests/loader/webdataset_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;
using testing::NginxServer;
using testing::TempDir;

constexpr int kSamples = 60;

// A served root with tars ("wds/train-000000.tar", ...) and the same samples packed into
// tilefeed shards ("shards/"), and nginx serving it.
class RemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() / "www";
    fs::create_directories(root_ / "wds");
    testing::WriteWebDataset(dir_.path() / "scratch", (root_ / "wds" / "train-%06d.tar").string(),
                             testing::MakeImageSamples(kSamples, 4), 25);
    PackOptions pack;
    pack.output_dir = (root_ / "shards").string();
    pack.shard_bytes = 30000;
    pack.workers = 1;
    TarOptions local_tars;
    local_tars.sidecar = false;  // nothing but the tars is served from wds/
    PackDataset(*TarDataset::Open((root_ / "wds").string(), local_tars), pack);
    server_ = std::make_unique<NginxServer>(root_, dir_.path() / "nginx");
  }

  RemoteOptions Remote() const {
    RemoteOptions o;
    o.retries = 2;
    o.backoff = std::chrono::milliseconds(10);
    o.counters = &counters_;
    return o;
  }

  std::string Url(const std::string& path) const { return server_->url() + "/" + path; }

  // Every sample's bytes, read with ReadMany in chunks of 16.
  static std::vector<ReadResult> ReadAll(const Source& source,
                                         std::vector<std::vector<std::byte>>& buffers) {
    std::vector<std::uint64_t> indices(source.size());
    for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = i;
    buffers.assign(indices.size(), {});
    std::vector<ReadResult> results(indices.size());
    for (std::size_t at = 0; at < indices.size(); at += 16) {
      const std::size_t n = std::min<std::size_t>(16, indices.size() - at);
      source.ReadMany(std::span(indices).subspan(at, n), std::span(buffers).subspan(at, n),
                      std::span(results).subspan(at, n));
    }
    return results;
  }

  TempDir dir_;
  fs::path root_;
  std::unique_ptr<NginxServer> server_;
  mutable RemoteCounters counters_;
};

std::pair<std::vector<std::uint8_t>, std::vector<std::int32_t>> Batches(
    std::unique_ptr<Source> source) {
  LoaderOptions options;
  options.batch_size = 8;
  options.image_size = 24;
  options.workers = 2;
  options.seed = 21;
  options.epochs = 2;
  options.shuffle = true;
  options.locality.block = 4;  // chunks read with ReadMany, merged
  Loader loader(std::move(source), options);
  std::vector<std::uint8_t> images;
  std::vector<std::int32_t> labels;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (Batch& batch : loader) {
      images.insert(images.end(), batch.images().begin(), batch.images().end());
      labels.insert(labels.end(), batch.labels().begin(), batch.labels().end());
    }
  }
  return {images, labels};
}

TEST_F(RemoteTest, HttpTarAndLocalBatchesAreIdentical) {
  DatasetOptions local;
  local.tar.sidecar = false;
  const auto expected = Batches(OpenDataset((root_ / "shards").string(), local).source);
  ASSERT_EQ(expected.second.size(), 2u * kSamples);
  DatasetOptions remote;
  remote.remote = Remote();
  EXPECT_EQ(Batches(OpenDataset(Url("shards"), remote).source), expected) << "http shards";
  EXPECT_EQ(Batches(OpenDataset(Url("shards/tilefeed-manifest.txt"), remote).source), expected);
  EXPECT_EQ(Batches(OpenDataset(Url("wds/train-{000000..000002}.tar"), remote).source), expected)
      << "http tars";
  EXPECT_EQ(Batches(OpenDataset((root_ / "wds").string(), local).source), expected) << "tars";
  remote.remote.cache_dir = (dir_.path() / "cache").string();
  remote.remote.cache_block = 8192;
  EXPECT_EQ(Batches(OpenDataset(Url("shards"), remote).source), expected) << "cold cache";
  const std::uint64_t requests = counters_.requests.load();
  EXPECT_EQ(Batches(OpenDataset(Url("shards"), remote).source), expected) << "warm cache";
  // A warm open fetches the manifest again (a HEAD and a GET); the shards' headers, footers
  // and records all come from the cache.
  EXPECT_EQ(counters_.requests.load() - requests, 2u);
  EXPECT_GT(counters_.cache_hits.load(), 0u);
}

TEST_F(RemoteTest, ServerStoppedAndStartedAgainLosesNothing) {
  ShardReadOptions read;
  read.remote = Remote();
  read.remote.retries = 12;  // 50 ms doubling to the 2 s cap: about 15 s of patience
  read.remote.backoff = std::chrono::milliseconds(50);
  const auto remote = ShardDataset::Open(Url("shards"), read);
  const auto local = ShardDataset::Open((root_ / "shards").string());
  std::vector<std::uint64_t> first_half(kSamples / 2), second_half(kSamples / 2);
  for (int i = 0; i < kSamples / 2; ++i) {
    first_half[i] = i;
    second_half[i] = kSamples / 2 + i;
  }
  std::vector<std::vector<std::byte>> buffers(kSamples / 2);
  std::vector<ReadResult> results(kSamples / 2);
  remote->ReadMany(first_half, buffers, results);
  for (const ReadResult& r : results) ASSERT_TRUE(r.ok) << r.error;
  server_->Stop();
  const std::uint64_t retries = counters_.retries.load();
  // The server comes back once the reads have seen it gone (a retry counted), so they
  // must ride out the gap within their retry budget, however long the start takes. nginx is
  // restarted from this thread: it dies with the thread that started it (PR_SET_PDEATHSIG).
  auto reads =
      std::async(std::launch::async, [&] { remote->ReadMany(second_half, buffers, results); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (counters_.retries.load() == retries && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server_->Start();
  reads.get();
  EXPECT_GT(counters_.retries.load(), retries);
  std::vector<std::byte> expected;
  for (int i = 0; i < kSamples / 2; ++i) {
    ASSERT_TRUE(results[i].ok) << results[i].error;
    local->Read(second_half[i], expected);
    EXPECT_EQ(buffers[i], expected);
  }
}

TEST_F(RemoteTest, ServerGoneMakesBadSamplesNamingTheUrl) {
  DatasetOptions options;
  options.remote = Remote();
  auto source = OpenDataset(Url("shards"), options).source;
  auto tars = OpenDataset(Url("wds/train-{000000..000002}.tar"), options).source;
  server_->Stop();
  const auto start = std::chrono::steady_clock::now();
  for (const Source* s : {source.get(), tars.get()}) {
    std::vector<std::vector<std::byte>> buffers;
    const std::vector<ReadResult> results = ReadAll(*s, buffers);
    for (std::size_t i = 0; i < results.size(); ++i) {
      EXPECT_FALSE(results[i].ok);
      EXPECT_NE(results[i].error.find("libcurl"), std::string::npos) << results[i].error;
      EXPECT_NE(results[i].error.find("after 3 tries"), std::string::npos) << results[i].error;
      EXPECT_EQ(s->Describe(i).rfind(server_->url() + "/", 0), 0u) << s->Describe(i);
    }
  }
  // The loader's fail policy stops with the URL of the first sample it could not read.
  LoaderOptions lo;
  lo.batch_size = 8;
  lo.image_size = 16;
  lo.workers = 1;
  lo.bad_sample_policy = BadSamplePolicy::kFail;
  try {
    Loader loader(std::move(source), lo);
    for ([[maybe_unused]] Batch& batch : loader) {
    }
    ADD_FAILURE() << "the loader read a dataset whose server is gone";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(server_->url() + "/shards/shard-"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST_F(RemoteTest, ACorruptByteServedFailsTheChecksum) {
  ShardReadOptions read;
  read.remote = Remote();
  const auto remote = ShardDataset::Open(Url("shards"), read);
  const auto [shard, record] = remote->Locate(5);
  const std::vector<std::byte> file =
      testing::ReadFile(ReadShardManifest((root_ / "shards").string()).shards[shard].path);
  // Corrupt a byte in the middle of the record, after open (the footer is unchanged).
  std::vector<std::byte> bytes;
  remote->Read(5, bytes);
  const auto at = std::search(file.begin(), file.end(), bytes.begin(), bytes.end()) - file.begin();
  testing::XorByte(ReadShardManifest((root_ / "shards").string()).shards[shard].path,
                   static_cast<std::uint64_t>(at) + bytes.size() / 2, 0x10);
  std::vector<std::vector<std::byte>> buffers;
  const std::vector<ReadResult> results = ReadAll(*remote, buffers);
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i == 5) {
      EXPECT_FALSE(results[i].ok);
      EXPECT_NE(results[i].error.find("checksum"), std::string::npos) << results[i].error;
    } else {
      EXPECT_TRUE(results[i].ok) << i << ": " << results[i].error;
    }
  }
  EXPECT_EQ(remote->Describe(5),
            Url("shards/shard-0000" + std::to_string(shard) + ".tfs#") + std::to_string(record));
}

// Cuts a tar 10 bytes into the data of its last .jpg member (whose name is in its header
// block).
void CutIntoLastJpeg(const fs::path& tar) {
  const std::vector<std::byte> bytes = testing::ReadFile(tar);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::size_t name = text.rfind(".jpg");
  ASSERT_NE(name, std::string_view::npos);
  fs::resize_file(tar, name - name % 512 + 512 + 10);
}

// The merged runs of one ReadMany are requested together: 16 runs of one record each (no
// gap is merged) are 16 requests of one ReadRanges call, and each record is right. How
// many connections they use is not checked: on loopback a transfer may finish inside
// libcurl's first pass, before the next one starts, so one connection can serve them all.
TEST_F(RemoteTest, AChunksRunsAreRequestedTogether) {
  ShardReadOptions read;
  read.remote = Remote();
  read.max_gap = 0;
  const auto remote = ShardDataset::Open(Url("shards"), read);
  std::vector<std::uint64_t> indices;
  for (std::uint64_t i = 0; i < 32; i += 2) indices.push_back(i);
  std::vector<std::vector<std::byte>> buffers(indices.size());
  std::vector<ReadResult> results(indices.size());
  const std::uint64_t requests = counters_.requests.load();
  remote->ReadMany(indices, buffers, results);
  for (const ReadResult& r : results) EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(counters_.requests.load() - requests, indices.size());
  const auto local = ShardDataset::Open((root_ / "shards").string());
  std::vector<std::byte> expected;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    local->Read(indices[i], expected);
    EXPECT_EQ(buffers[i], expected) << indices[i];
  }
}

// A remote tar's index is kept among the cache's blocks: a second open is one HEAD per tar;
// a tar changed on the server (its ETag) or a damaged index means a new scan.
TEST_F(RemoteTest, RemoteTarIndexIsKeptInTheCacheDirectory) {
  TarOptions options;
  options.remote = Remote();
  options.remote.cache_dir = (dir_.path() / "cache").string();
  const std::string tars = Url("wds/train-{000000..000002}.tar");
  auto requests_of_open = [&] {
    const std::uint64_t before = counters_.requests.load();
    const auto d = TarDataset::Open(tars, options);
    std::vector<std::vector<std::byte>> buffers;
    const std::vector<ReadResult> results = ReadAll(*d, buffers);
    EXPECT_EQ(results.size(), static_cast<std::size_t>(kSamples));
    for (std::size_t i = 0; i < results.size(); ++i) {
      EXPECT_TRUE(results[i].ok) << results[i].error;
      EXPECT_EQ(results[i].info.label, d->Label(i));
    }
    return counters_.requests.load() - before;
  };
  const std::uint64_t scanned = requests_of_open();
  // Every later open: three HEADs, and the reads come from the block cache.
  EXPECT_EQ(requests_of_open(), 3u);
  std::vector<fs::path> indexes;
  for (const auto& e : fs::directory_iterator(dir_.path() / "cache" / "blocks")) {
    if (e.path().extension() == ".tfidx") indexes.push_back(e.path());
  }
  ASSERT_EQ(indexes.size(), 3u);
  const fs::path tar0 = root_ / "wds" / "train-000000.tar";
  fs::last_write_time(tar0, fs::last_write_time(tar0) + std::chrono::seconds(5));
  EXPECT_GT(requests_of_open(), 3u) << "a changed tar is scanned again";
  EXPECT_EQ(requests_of_open(), 3u);
  // A damaged index is rescanned (from the block cache, so no more requests) and rewritten.
  const std::vector<std::byte> good = testing::ReadFile(indexes[0]);
  for (const fs::path& index : indexes) testing::XorByte(index, 40, 0x01);
  EXPECT_EQ(requests_of_open(), 3u);
  EXPECT_EQ(testing::ReadFile(indexes[0]), good) << "the damaged index was not replaced";
  EXPECT_GT(scanned, 3u);
}

// Each bad remote input gives one line naming the URL and the reason.
TEST_F(RemoteTest, BadRemoteInputsGiveOneClearLine) {
  auto open_error = [&](const std::string& location) {
    try {
      DatasetOptions options;
      options.remote = Remote();
      OpenDataset(location, options);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("opened");
  };
  const std::string missing = open_error(Url("wds/missing-000000.tar"));
  EXPECT_NE(missing.find(Url("wds/missing-000000.tar")), std::string::npos) << missing;
  EXPECT_NE(missing.find("HTTP 404"), std::string::npos) << missing;
  EXPECT_EQ(missing.find("tries"), std::string::npos) << "a 404 is not retried: " << missing;
  const std::string failing = open_error(Url("status500/train-000000.tar"));
  EXPECT_NE(failing.find("HTTP 500 (after 3 tries)"), std::string::npos) << failing;
  for (const std::string& e : {missing, failing}) EXPECT_EQ(e.find('\n'), std::string::npos);

  // A truncated tar: the member the tar ends in is a bad sample.
  fs::create_directories(root_ / "cut");
  const fs::path cut_tar = root_ / "cut" / "train-000000.tar";
  fs::copy_file(root_ / "wds" / "train-000000.tar", cut_tar);
  CutIntoLastJpeg(cut_tar);
  TarOptions tar_options;
  tar_options.remote = Remote();
  const auto cut = TarDataset::Open(Url("cut/train-000000.tar"), tar_options);
  std::vector<std::vector<std::byte>> buffers;
  std::vector<ReadResult> results = ReadAll(*cut, buffers);
  ASSERT_FALSE(results.empty());
  EXPECT_NE(results.back().error.find("is truncated"), std::string::npos) << results.back().error;

  // A tar changed on the server after its index was made: its reads fail (HTTP 412)
  // instead of mixing two versions; the other tars still read.
  const auto tars = TarDataset::Open(Url("wds/train-{000000..000002}.tar"), tar_options);
  const fs::path tar0 = root_ / "wds" / "train-000000.tar";
  fs::last_write_time(tar0, fs::last_write_time(tar0) + std::chrono::seconds(5));
  results = ReadAll(*tars, buffers);
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (tars->Describe(i).find("train-000000.tar#") == std::string::npos) {
      EXPECT_TRUE(results[i].ok) << results[i].error;
      continue;
    }
    EXPECT_NE(results[i].error.find("the file changed on the server since it was opened (ETag \""),
              std::string::npos)
        << results[i].error;
    EXPECT_EQ(results[i].error.find('\n'), std::string::npos);
  }

  // A shard cut short on the server after open: its reads past the new end fail naming the
  // new size (the Content-Range's total), or with HTTP 416 for a range that starts past it.
  ShardReadOptions read;
  read.remote = Remote();
  const auto shards = ShardDataset::Open(Url("shards"), read);
  const std::string shard0 = ReadShardManifest((root_ / "shards").string()).shards[0].path;
  fs::resize_file(shard0, fs::file_size(shard0) / 2);
  results = ReadAll(*shards, buffers);
  int short_reads = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok) continue;
    EXPECT_EQ(shards->Locate(i).first, 0u) << results[i].error;
    const bool clear =
        results[i].error.starts_with("the file changed on the server since it was opened (size ") ||
        results[i].error.starts_with("HTTP 416");
    EXPECT_TRUE(clear) << results[i].error;
    short_reads += 1;
  }
  EXPECT_GT(short_reads, 0);
}

// tilefeed-inspect --verify on remote datasets: VerifyShards over range requests catches a
// corrupt record; VerifySamples reads every sample of remote tars and names the bad one.
TEST_F(RemoteTest, VerifyChecksRemoteShardsAndTars) {
  EXPECT_TRUE(VerifyShards(Url("shards"), {}, Remote()).empty());
  const std::string shard0 = ReadShardManifest((root_ / "shards").string()).shards[0].path;
  testing::XorByte(shard0, fs::file_size(shard0) / 2, 0x20);
  const std::vector<ShardProblem> shard_problems = VerifyShards(Url("shards"), {}, Remote());
  ASSERT_EQ(shard_problems.size(), 1u);
  EXPECT_EQ(shard_problems[0].where.rfind(Url("shards/shard-00000.tfs#"), 0), 0u)
      << shard_problems[0].where;

  TarOptions options;
  options.remote = Remote();
  const auto tars = TarDataset::Open(Url("wds/train-{000000..000002}.tar"), options);
  std::uint64_t reported = 0;
  EXPECT_TRUE(
      VerifySamples(*tars, [&](std::uint64_t done, std::uint64_t) { reported = done; }).empty());
  EXPECT_EQ(reported, static_cast<std::uint64_t>(kSamples));
  CutIntoLastJpeg(root_ / "wds" / "train-000002.tar");
  const auto cut = TarDataset::Open(Url("wds/train-{000000..000002}.tar"), options);
  const std::vector<ShardProblem> problems = VerifySamples(*cut);
  ASSERT_FALSE(problems.empty());
  for (const ShardProblem& p : problems) {
    EXPECT_EQ(p.where.rfind(Url("wds/train-000002.tar#"), 0), 0u) << p.where;
    EXPECT_FALSE(p.reason.empty());
    EXPECT_EQ(p.reason.find('\n'), std::string::npos);
  }
}

std::uint64_t DirectoryBytes(const fs::path& dir) {
  std::uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    // Another reader's temporary block may be renamed or removed between listing and size.
    std::error_code error;
    const std::uintmax_t bytes = e.file_size(error);
    if (!error && e.path().filename() != "lock") total += bytes;
  }
  return total;
}

// Two readers (as two processes of one host would) share a cache far smaller than the
// dataset: it never holds more than its limit, and every read still returns the right bytes.
TEST_F(RemoteTest, TheCacheNeverExceedsItsLimit) {
  RemoteOptions o = Remote();
  o.cache_dir = (dir_.path() / "cache").string();
  o.cache_block = 4096;
  o.cache_limit = std::uint64_t{6} * 4096;
  ShardReadOptions read;
  read.remote = o;
  const auto local = ShardDataset::Open((root_ / "shards").string());
  std::vector<std::vector<std::byte>> expected;
  ReadAll(*local, expected);
  std::atomic<std::uint64_t> max_seen{0};
  auto reader = [&] {
    const auto remote = ShardDataset::Open(Url("shards"), read);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::vector<std::byte>> buffers;
      const std::vector<ReadResult> results = ReadAll(*remote, buffers);
      for (std::size_t i = 0; i < results.size(); ++i) {
        EXPECT_TRUE(results[i].ok) << results[i].error;
        EXPECT_EQ(buffers[i], expected[i]);
      }
      std::uint64_t seen = DirectoryBytes(o.cache_dir);
      std::uint64_t old = max_seen.load();
      while (seen > old && !max_seen.compare_exchange_weak(old, seen)) {
      }
    }
  };
  // Both readers run as futures: an exception in either (a failed open) is caught here and
  // fails the test, where a throwing std::thread body or an unjoined thread would abort.
  std::future<void> readers[] = {std::async(std::launch::async, reader),
                                 std::async(std::launch::async, reader)};
  for (std::future<void>& r : readers) {
    try {
      r.get();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "a cache reader threw: " << e.what();
    }
  }
  EXPECT_LE(max_seen.load(), o.cache_limit);
  EXPECT_LE(DirectoryBytes(o.cache_dir), o.cache_limit);
  EXPECT_GT(counters_.evictions.load(), 0u);
  EXPECT_GT(counters_.cache_fills.load(), 6u);
}

bool AllOf(std::string_view s, std::size_t n, bool (*ok)(char)) {
  return s.size() == n && std::all_of(s.begin(), s.end(), ok);
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); }

// An access log line (nginx_server.h) of a request under /bucket/imagenet/ that succeeded
// and carries "Authorization: AWS4-HMAC-SHA256 Credential=AKIDTILEFEEDTEST/<yyyymmdd>/
// eu-west-3/s3/aws4_request, SignedHeaders=<...host...>, Signature=<64 hex>" and an
// x-amz-date of the form yyyymmddThhmmssZ. (No std::regex: g++ 12 warns inside it under
// the sanitizers.)
bool IsSignedLine(std::string_view line) {
  const std::string_view request = line.substr(0, line.find(" conn="));
  if (!(request.starts_with("GET /bucket/imagenet/") ||
        request.starts_with("HEAD /bucket/imagenet/")) ||
      !(request.ends_with(" 200") || request.ends_with(" 206"))) {
    return false;
  }
  constexpr std::string_view kAuth = " auth=[AWS4-HMAC-SHA256 Credential=AKIDTILEFEEDTEST/";
  std::size_t at = line.find(kAuth);
  if (at == std::string_view::npos) return false;
  std::string_view rest = line.substr(at + kAuth.size());
  if (!AllOf(rest.substr(0, 8), 8, IsDigit)) return false;
  rest.remove_prefix(8);
  constexpr std::string_view kScope = "/eu-west-3/s3/aws4_request, SignedHeaders=";
  if (!rest.starts_with(kScope)) return false;
  rest.remove_prefix(kScope.size());
  const std::size_t comma = rest.find(", Signature=");
  if (comma == std::string_view::npos || rest.substr(0, comma).find("host") == std::string::npos) {
    return false;
  }
  rest.remove_prefix(comma + 12);
  if (!AllOf(rest.substr(0, 64), 64, IsHex) || !rest.substr(64).starts_with("] date=[")) {
    return false;
  }
  const std::string_view date = rest.substr(64 + 8);
  return date.size() == 17 && AllOf(date.substr(0, 8), 8, IsDigit) && date[8] == 'T' &&
         AllOf(date.substr(9, 6), 6, IsDigit) && date.substr(15) == "Z]";
}

// What nginx served under `prefix` (requests and body bytes, from its access log). nginx
// writes a request's line once it has finished it, which may be just after the client has
// the response: waits (up to 30 s) until at least `at_least` lines are there.
struct Served {
  std::uint64_t requests = 0;
  std::uint64_t bytes = 0;
};
Served ServedUnder(const NginxServer& server, std::string_view prefix, std::uint64_t at_least) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    Served served;
    std::ifstream log(server.access_log());
    for (std::string line; std::getline(log, line);) {
      const std::size_t uri = line.find(' ') + 1;
      if (line.compare(uri, prefix.size(), prefix) != 0) continue;
      served.requests += 1;
      const std::size_t bytes = line.find(" bytes=");
      if (bytes != std::string::npos) served.bytes += std::stoull(line.substr(bytes + 7));
    }
    if (served.requests >= at_least || std::chrono::steady_clock::now() > deadline) return served;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The error that opening `location` gives, or "opened".
std::string OpenError(const std::string& location, const RemoteOptions& remote) {
  try {
    DatasetOptions options;
    options.remote = remote;
    OpenDataset(location, options);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "opened";
}

// A cached block is served without asking the server, and tars have no record
// checksums: a flipped byte in a cached tar block became other pixels, and in a cached
// shard block a checksum error on every later run. A cached block whose checksum fails is
// dropped and fetched again: the server's bytes, more requests, and the next pass all hits.
TEST_F(RemoteTest, ACorruptCachedBlockIsDroppedAndFetchedAgain) {
  TarOptions local_tar_options;
  local_tar_options.sidecar = false;
  std::vector<std::vector<std::byte>> expected_tar;
  ReadAll(*TarDataset::Open((root_ / "wds").string(), local_tar_options), expected_tar);
  std::vector<std::vector<std::byte>> expected_shard;
  ReadAll(*ShardDataset::Open((root_ / "shards").string()), expected_shard);

  RemoteOptions o = Remote();
  o.cache_dir = (dir_.path() / "cache").string();
  o.cache_block = 8192;
  TarOptions tar_options;
  tar_options.remote = o;
  ShardReadOptions shard_options;
  shard_options.remote = o;
  const auto tars = TarDataset::Open(Url("wds/train-{000000..000002}.tar"), tar_options);
  const auto shards = ShardDataset::Open(Url("shards"), shard_options);
  using Case = std::pair<const Source*, const std::vector<std::vector<std::byte>>*>;
  const Case cases[] = {{tars.get(), &expected_tar}, {shards.get(), &expected_shard}};
  auto read_all = [&] {
    for (const auto& [source, expected] : cases) {
      std::vector<std::vector<std::byte>> buffers;
      const std::vector<ReadResult> results = ReadAll(*source, buffers);
      for (std::size_t i = 0; i < results.size(); ++i) {
        EXPECT_TRUE(results[i].ok) << source->Describe(i) << ": " << results[i].error;
        EXPECT_TRUE(buffers[i] == (*expected)[i]) << source->Describe(i) << " differs";
      }
    }
  };
  read_all();  // fills the cache
  int flipped = 0;
  for (const auto& e : fs::directory_iterator(dir_.path() / "cache" / "blocks")) {
    if (e.path().extension() == ".tfidx") continue;  // tar indexes, read at open only
    testing::XorByte(e.path(), fs::file_size(e.path()) / 3, 0x08);
    flipped += 1;
  }
  ASSERT_GT(flipped, 3);
  const std::uint64_t before = counters_.requests.load();
  read_all();
  const std::uint64_t after = counters_.requests.load();
  EXPECT_GT(after, before) << "the corrupt blocks are fetched again";
  // Every block read again was caught (some hold only headers read at open).
  EXPECT_GT(counters_.cache_bad.load(), 0u);
  EXPECT_LE(counters_.cache_bad.load(), static_cast<std::uint64_t>(flipped));
  read_all();
  EXPECT_EQ(counters_.requests.load(), after) << "and stored again: the next pass is all hits";
}

// Unmounts on scope exit (lazily, so a file still open does not keep it).
struct Unmount {
  fs::path path;
  ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
};

// A cache directory on a full filesystem stored nothing, so every read fetched
// its whole block again (667.8 MB received for a 2.6 MB pack). The cache lives on a tmpfs
// of 32 KiB here, room for one block: the server sends about the dataset's size.
TEST_F(RemoteTest, AFullCacheDiskStopsCachingAndReadsDirectly) {
  const fs::path small = dir_.path() / "small";
  fs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=32k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs (the test needs root): " << std::strerror(errno);
  }
  const Unmount unmount{small};
  RemoteOptions o = Remote();
  o.cache_dir = (small / "cache").string();
  o.cache_block = 16384;
  std::mutex mutex;
  std::vector<std::string> warnings;
  o.warn = [&](const std::string& line) {
    std::lock_guard lock(mutex);
    warnings.push_back(line);
  };
  ShardReadOptions read;
  read.remote = o;
  const auto remote = ShardDataset::Open(Url("shards"), read);
  const auto local = ShardDataset::Open((root_ / "shards").string());
  std::uint64_t dataset_bytes = 0;
  for (const auto& e : fs::directory_iterator(root_ / "shards")) dataset_bytes += e.file_size();
  std::vector<std::byte> bytes, expected;
  for (std::size_t i = 0; i < remote->size(); ++i) {
    remote->Read(i, bytes);
    local->Read(i, expected);
    EXPECT_TRUE(bytes == expected) << remote->Describe(i);
  }
  const Served served = ServedUnder(*server_, "/shards/", counters_.requests.load());
  EXPECT_EQ(served.requests, counters_.requests.load());
  EXPECT_LE(served.bytes, 2 * dataset_bytes)
      << served.requests << " requests for a dataset of " << dataset_bytes << " bytes";
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind(o.cache_dir + ": cannot store cache blocks (", 0), 0u) << warnings[0];
  EXPECT_NE(warnings[0].find("No space left on device"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("caching stops"), std::string::npos) << warnings[0];
}

// A redirect to itself was followed about 12,000 times in 5 s per try, reported
// as "Too large response headers" and retried. Redirects are capped at
// RemoteOptions::max_redirects (10): the open fails with one line after 11 requests, and
// is not retried.
TEST_F(RemoteTest, ARedirectLoopEndsAtTheRedirectCap) {
  const std::string error = OpenError(Url("loop/wds/train-000000.tar"), Remote());
  EXPECT_NE(error.find("redirect"), std::string::npos) << error;
  EXPECT_NE(error.find(Url("loop/wds/train-000000.tar")), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_EQ(counters_.retries.load(), 0u) << error;
  EXPECT_EQ(ServedUnder(*server_, "/loop/", 11).requests, 11u);
}

// A server trickling 64 bytes/s held each request for the whole request timeout,
// every try. A request slower than RemoteOptions::low_speed_limit (1024 bytes/s) for
// low_speed_time (10 s; 2 s here) fails: here, with one retry, the open of a tar whose header
// window trickles ends after the HEAD and two tries of its first read, long before the request
// timeout.
TEST_F(RemoteTest, ATricklingServerFailsAtTheLowSpeedLimit) {
  RemoteOptions o = Remote();
  o.retries = 1;
  o.request_timeout = std::chrono::seconds(30);
  o.low_speed_time = std::chrono::seconds(2);
  const std::string error = OpenError(Url("trickle/wds/train-000000.tar"), o);
  EXPECT_NE(error.find("too slow"), std::string::npos) << error;
  EXPECT_NE(error.find("(after 2 tries)"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_EQ(counters_.requests.load(), 3u) << error;
  EXPECT_EQ(ServedUnder(*server_, "/trickle/", 3).requests, 3u) << "a HEAD and two tries";
}

// Only 408, 429 and 5xx are retried, as the docs say: an HTTP 400 is requested
// once, whether the HEAD of an open gets it or a range request.
TEST_F(RemoteTest, Http400IsRequestedOnce) {
  const std::string head = OpenError(Url("status400/wds/train-000000.tar"), Remote());
  EXPECT_NE(head.find("HTTP 400"), std::string::npos) << head;
  EXPECT_EQ(head.find("tries"), std::string::npos) << head;
  EXPECT_EQ(ServedUnder(*server_, "/status400/", 1).requests, 1u);
  const std::string range = OpenError(Url("range400/wds/train-000000.tar"), Remote());
  EXPECT_NE(range.find("HTTP 400"), std::string::npos) << range;
  EXPECT_EQ(range.find("tries"), std::string::npos) << range;
  EXPECT_EQ(ServedUnder(*server_, "/range400/", 2).requests, 2u) << "a HEAD and one GET";
  EXPECT_EQ(counters_.retries.load(), 0u);
}

// A body the server sends with a Content-Encoding (gzip) is not the file's bytes
// and its ranges are not the file's ranges; the line says so instead of "short read" or a
// bad tar header.
TEST_F(RemoteTest, AGzipEncodedBodyIsNamed) {
  for (const std::string& path :
       {std::string("gzip-encoded/wds/train-000000.tar"), std::string("gzip-encoded/shards")}) {
    const std::string error = OpenError(Url(path), Remote());
    EXPECT_NE(error.find("Content-Encoding: gzip"), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

// s3://bucket/key goes to <endpoint>/bucket/key, signed with SigV4 (loader/detail/sigv4.cc;
// tests/loader/test_s3_botocore.py verifies the signature itself with botocore).
TEST_F(RemoteTest, S3RequestsAreSignedWithSigV4) {
  fs::create_directories(root_ / "bucket");
  fs::create_directory_symlink(root_ / "shards", root_ / "bucket" / "imagenet");
  ShardReadOptions read;
  read.remote = Remote();
  read.remote.s3_endpoint = server_->url();
  read.remote.aws_access_key_id = "AKIDTILEFEEDTEST";
  read.remote.aws_secret_access_key = "secret/key+value";
  read.remote.aws_region = "eu-west-3";
  const auto remote = ShardDataset::Open("s3://bucket/imagenet", read);
  EXPECT_EQ(remote->size(), static_cast<std::size_t>(kSamples));
  std::vector<std::byte> bytes;
  remote->Read(3, bytes);
  EXPECT_EQ(remote->Describe(0).rfind("s3://bucket/imagenet/shard-00000.tfs#", 0), 0u);
  std::ifstream log(server_->access_log());
  int lines = 0;
  for (std::string line; std::getline(log, line);) {
    if (line.find("/bucket/") == std::string::npos) continue;
    ++lines;
    EXPECT_TRUE(IsSignedLine(line)) << line;
  }
  EXPECT_GE(lines, 5) << "manifest HEAD and GET, shard header, footer and record reads";
}

// Credentials in a URL go to the server (Basic auth) and into no message: an error names
// the URL as http://***@host/..., and a presigned URL's signature, credential and token are
// hidden (detail::RedactUrl, which SourceError and the metrics records use).
TEST_F(RemoteTest, CredentialsInAUrlAreSentButNeverShown) {
  const std::string base = "http://alice:s3cret@127.0.0.1:" + std::to_string(server_->port());
  DatasetOptions options;
  options.remote = Remote();
  EXPECT_EQ(OpenDataset(base + "/shards", options).source->size(),
            static_cast<std::size_t>(kSamples));
  std::ifstream log(server_->access_log());
  const std::string lines((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(lines.find("auth=[Basic YWxpY2U6czNjcmV0]"), std::string::npos) << lines;

  const std::string error =
      OpenError(base +
                    "/wds/missing-000000.tar?X-Amz-Credential=CREDVALUE&X-Amz-Signature=SIGVALUE&"
                    "X-Amz-Security-Token=TOKENVALUE",
                Remote());
  EXPECT_NE(error.find("http://***@127.0.0.1:"), std::string::npos) << error;
  EXPECT_NE(error.find("HTTP 404"), std::string::npos) << error;
  for (const char* secret : {"alice", "s3cret", "CREDVALUE", "SIGVALUE", "TOKENVALUE"}) {
    EXPECT_EQ(error.find(secret), std::string::npos) << error;
  }
  EXPECT_EQ(detail::RedactUrl("see https://u:p@a@h:1/x?a=1&X-Amz-Signature=S&b=2 and s3://b/k"),
            "see https://***@h:1/x?a=1&X-Amz-Signature=***&b=2 and s3://b/k");
}

// Writes the samples of served tar `shard` (25 a tar) again, in reverse order, over the tar in
// place: the same size, other bytes at every offset and other labels; its mtime becomes now.
void RewriteReversed(const fs::path& scratch, const fs::path& tar, int shard) {
  std::vector<testing::TarSample> samples = testing::MakeImageSamples(kSamples, 4);
  samples.erase(samples.begin(), samples.begin() + std::ptrdiff_t{25} * shard);
  samples.resize(std::min<std::size_t>(samples.size(), 25));
  std::reverse(samples.begin(), samples.end());
  fs::create_directories(scratch / "rewritten");
  const std::vector<std::byte> bytes = testing::ReadFile(testing::WriteWebDataset(
      scratch / "rewrite", (scratch / "rewritten" / "new-%06d.tar").string(), samples, 25)[0]);
  ASSERT_EQ(bytes.size(), fs::file_size(tar));
  std::fstream out(tar, std::ios::in | std::ios::out | std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

// A tar rewritten in place with the same size, on a server that sends Last-Modified but no
// ETag, was served from the cache's old blocks for good (64 of 64 old labels): blocks were
// keyed by URL and size. They are keyed by the validator (the ETag, else Last-Modified), so
// the next open reads the new tar: its index, labels and bytes.
TEST_F(RemoteTest, ATarRewrittenWithTheSameSizeIsNotServedFromOldBlocks) {
  const fs::path tar0 = root_ / "wds" / "train-000000.tar";
  // Last-Modified has whole seconds: the first version is an hour old.
  fs::last_write_time(tar0, fs::last_write_time(tar0) - std::chrono::hours(1));
  TarOptions options;
  options.remote = Remote();
  options.remote.cache_dir = (dir_.path() / "cache").string();
  options.remote.cache_block = 8192;
  const std::string url = Url("no-etag/wds/train-000000.tar");
  std::vector<std::vector<std::byte>> buffers;
  for (const ReadResult& r : ReadAll(*TarDataset::Open(url, options), buffers)) {
    EXPECT_TRUE(r.ok) << r.error;
  }
  RewriteReversed(dir_.path(), tar0, 0);
  TarOptions local;
  local.sidecar = false;
  const auto expected = TarDataset::Open(tar0.string(), local);
  std::vector<std::vector<std::byte>> expected_bytes;
  ReadAll(*expected, expected_bytes);
  const auto remote = TarDataset::Open(url, options);
  const std::vector<ReadResult> results = ReadAll(*remote, buffers);
  ASSERT_EQ(results.size(), expected_bytes.size());
  int old = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(results[i].ok) << results[i].error;
    EXPECT_EQ(remote->Label(i), expected->Label(i)) << remote->Describe(i);
    old += buffers[i] != expected_bytes[i] ? 1 : 0;
  }
  EXPECT_EQ(old, 0) << "samples of the old version served";
}

// nginx's ETag and Last-Modified of a static file.
std::string NginxEtag(const fs::path& file) {
  struct stat st {};
  ::stat(file.c_str(), &st);
  char etag[64];
  std::snprintf(etag, sizeof(etag), "\"%llx-%llx\"", static_cast<unsigned long long>(st.st_mtime),
                static_cast<unsigned long long>(st.st_size));
  return etag;
}
std::string HttpDate(const fs::path& file) {
  struct stat st {};
  ::stat(file.c_str(), &st);
  std::tm tm{};
  ::gmtime_r(&st.st_mtime, &tm);
  char date[64];
  std::strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return date;
}

// A tar replaced mid-epoch (rewritten in place, the same size) on a server without ETags gave
// new pixels under old labels: ranges carried no condition. Every range now carries the
// validator (If-Match: the ETag, else If-Unmodified-Since: Last-Modified), so after the change
// each read of that tar fails with one line naming the old and the new validator, and none
// returns the new bytes; the other tars still read.
TEST_F(RemoteTest, ATarChangedMidRunFailsEveryReadNamingBothVersions) {
  for (const std::string prefix : {"no-etag/", ""}) {
    const int shard = prefix.empty() ? 1 : 0;
    const fs::path tar = root_ / "wds" / ("train-00000" + std::to_string(shard) + ".tar");
    fs::last_write_time(tar, fs::last_write_time(tar) - std::chrono::hours(1));
    const std::string was =
        prefix.empty() ? "ETag " + NginxEtag(tar) : "Last-Modified " + HttpDate(tar);
    TarOptions options;
    options.remote = Remote();
    const auto d = TarDataset::Open(Url(prefix + "wds/train-{000000..000002}.tar"), options);
    std::vector<std::vector<std::byte>> before, after;
    for (const ReadResult& r : ReadAll(*d, before)) EXPECT_TRUE(r.ok) << r.error;
    RewriteReversed(dir_.path(), tar, shard);
    std::string want = "the file changed on the server since it was opened (";
    want.append(was).append(", now ").append(prefix.empty() ? NginxEtag(tar) : HttpDate(tar));
    want.append("); open the dataset again to read it");
    const std::vector<ReadResult> results = ReadAll(*d, after);
    const std::string changed = Url(prefix + "wds/" + tar.filename().string() + "#");
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (d->Describe(i).rfind(changed, 0) != 0) {
        EXPECT_TRUE(results[i].ok && after[i] == before[i]) << d->Describe(i) << results[i].error;
        continue;
      }
      EXPECT_FALSE(results[i].ok) << d->Describe(i) << ": the new version read under the old index";
      EXPECT_EQ(results[i].error, want);
    }
  }
}

// The same change under a Loader that skips bad samples: its reads of the changed tar were
// bad samples, each replaced by another, and the run went on without the tar. It ends, with
// the one line, whatever the policy.
TEST_F(RemoteTest, ATarChangedMidRunEndsTheLoadersRun) {
  const fs::path tar = root_ / "wds" / "train-000001.tar";
  fs::last_write_time(tar, fs::last_write_time(tar) - std::chrono::hours(1));
  TarOptions options;
  options.remote = Remote();
  LoaderOptions lo;
  lo.batch_size = 5;
  lo.image_size = 16;
  lo.workers = 1;
  lo.prefetch_depth = 2;
  lo.epochs = 3;
  lo.bad_sample_policy = BadSamplePolicy::kSkip;
  Loader loader(TarDataset::Open(Url("no-etag/wds/train-{000000..000002}.tar"), options), lo);
  for ([[maybe_unused]] Batch& batch : loader) {
  }
  RewriteReversed(dir_.path(), tar, 1);
  try {
    for (int epoch = 1; epoch < 3; ++epoch) {
      for ([[maybe_unused]] Batch& batch : loader) {
      }
    }
    ADD_FAILURE() << "two more epochs ran on a tar that changed on the server";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the file changed on the server since it was opened"),
              std::string::npos)
        << e.what();
  }
}

// A 206 whose Content-Range is not the range asked for (a proxy or cache answering another
// range) was taken for the bytes asked for. Its start, end and total are checked.
TEST_F(RemoteTest, AContentRangeOtherThanTheOneAskedForFailsTheRead) {
  const std::uint64_t size = fs::file_size(root_ / "wds" / "train-000000.tar");
  const auto file = detail::OpenHttpFile(Url("first512/wds/train-000000.tar"), Remote(), size);
  std::vector<std::byte> bytes(512);
  EXPECT_EQ(file->Read(0, bytes), "");
  const std::string total = "/" + std::to_string(size);
  EXPECT_EQ(file->Read(1024, bytes), "the server sent Content-Range: bytes 0-511" + total +
                                         " for a request of bytes 1024-1535" + total);
}

// cache_limit bounded the block files only: remote tars' indexes, in index/, came on top
// (7.2 MB under a 4 MiB limit). They are kept among the blocks and stored under the cache's
// lock and limit like them, so everything the cache writes stays under it.
TEST_F(RemoteTest, TheCacheLimitCoversTarIndexes) {
  TarOptions options;
  options.remote = Remote();
  options.remote.cache_dir = (dir_.path() / "cache").string();
  options.remote.cache_block = 4096;
  options.remote.cache_limit = std::uint64_t{4} * (4096 + 8);
  for (int pass = 0; pass < 2; ++pass) {
    const auto d = TarDataset::Open(Url("wds/train-{000000..000002}.tar"), options);
    std::vector<std::vector<std::byte>> buffers;
    for (const ReadResult& r : ReadAll(*d, buffers)) EXPECT_TRUE(r.ok) << r.error;
    EXPECT_LE(DirectoryBytes(options.remote.cache_dir), options.remote.cache_limit) << pass;
  }
}

// A --cache-dir another user made was used as it was: blocks planted there, with tilefeed's
// own checksums, were served (64 of 64 samples not the server's). The cache directory is made
// 0700, and one another user owns, or group or others can write, is refused with one line.
TEST_F(RemoteTest, ACacheDirectoryOthersCanWriteIsRefused) {
  auto open_error = [&](const fs::path& cache) {
    RemoteOptions o = Remote();
    o.cache_dir = cache.string();
    return OpenError(Url("wds/train-000000.tar"), o);
  };
  const fs::path own = dir_.path() / "own";
  EXPECT_EQ(open_error(own), "opened");
  EXPECT_EQ(fs::status(own).permissions(), fs::perms::owner_all);
  EXPECT_EQ(fs::status(own / "blocks").permissions(), fs::perms::owner_all);
  fs::permissions(own, fs::perms::group_write | fs::perms::others_write, fs::perm_options::add);
  const std::string writable = open_error(own);
  EXPECT_EQ(
      writable.rfind(own.string() + ": refusing the cache directory (owner uid " +
                         std::to_string(::geteuid()) + ", mode 0722): group or others can write it",
                     0),
      0u)
      << writable;
  EXPECT_EQ(writable.find('\n'), std::string::npos);
  // A symbolic link is refused as the shm:// directory's is: whoever can replace the link
  // chooses the directory (one check, loader::detail::PrivateDirectoryProblem).
  fs::permissions(own, fs::perms::group_write | fs::perms::others_write, fs::perm_options::remove);
  fs::create_directory_symlink(own, dir_.path() / "link");
  EXPECT_EQ(open_error(dir_.path() / "link"),
            (dir_.path() / "link").string() +
                ": refusing the cache directory (a symbolic link): it must be the directory "
                "itself (blocks planted there would be served; use a directory of your own "
                "that only you can write)");
  // Another user's directory, made in a folder anyone may write (as /tmp).
  const fs::path shared = dir_.path() / "shared";
  fs::create_directory(shared);
  fs::permissions(shared, fs::perms::all | fs::perms::sticky_bit);
  fs::permissions(dir_.path(), fs::perms::others_exec, fs::perm_options::add);
  const fs::path theirs = shared / "cache";
  const std::string mkdir = "setpriv --reuid=65534 --regid=65534 --clear-groups mkdir -m 0755 " +
                            theirs.string() + " 2>&1";
  if (std::system(mkdir.c_str()) != 0) {
    GTEST_SKIP() << "cannot make a directory as user 65534 (" << mkdir << " failed; it needs root)";
  }
  const std::string other = open_error(theirs);
  EXPECT_EQ(other.rfind(theirs.string() +
                            ": refusing the cache directory (owner uid 65534, mode 0755): another "
                            "user owns it",
                        0),
            0u)
      << other;
}

// S3 answers a request for a bucket of another region at the wrong endpoint with a 307, which
// gave only "HTTP 307". The line says it is a redirect, where to, and what to set.
TEST_F(RemoteTest, AnS3RedirectSaysWhereToAndWhatToSet) {
  RemoteOptions o = Remote();
  o.s3_endpoint = server_->url();
  const std::string error = OpenError("s3://s3-307/wds/train-000000.tar", o);
  EXPECT_NE(error.find("HTTP 307: a redirect to "
                       "https://s3.eu-west-3.amazonaws.com/s3-307/wds/train-000000.tar"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("set AWS_REGION to the bucket's region"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

}  // namespace
}  // namespace tilefeed::loader
