// metrics/metrics.h: the Writer's records, its sampler beside a feeding thread, paths and
// JSON escaping. The schema itself is checked against every tool by test_metrics.py.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "loader/address.h"
#include "metrics/cli.h"
#include "metrics/json_line.h"
#include "metrics/metrics.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/transport/context.h"

namespace tilefeed::metrics {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(JsonLineTest, EscapesStringsAndWritesNullForNonFinite) {
  EXPECT_EQ(detail::JsonString("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  detail::JsonLine line;
  line.Add("x", 1.5).Add("nan", 0.0 / 0.0).Add("s", "t").AddNull("n");
  EXPECT_EQ(line.str(), "{\"x\":1.5,\"nan\":null,\"s\":\"t\",\"n\":null}");
}

TEST(ResolvePathTest, PlaceholderOrOneFilePerInstance) {
  EXPECT_EQ(ResolvePath("run-{instance}.jsonl", 3, 4), "run-3.jsonl");
  EXPECT_EQ(ResolvePath("/x/run.jsonl", 1, 2), "/x/run.1.jsonl");
  EXPECT_EQ(ResolvePath("/x/run.jsonl", 0, 1), "/x/run.jsonl");
}

RunInfo Info() {
  RunInfo info;
  info.tool = "test";
  return info;
}

TEST(WriterTest, RefusesAFileItCannotOpen) {
  WriterOptions options;
  options.path = "/nonexistent-dir/m.jsonl";
  EXPECT_THROW(Writer(options, Info()), MetricsError);
  options.path = "/dev/null";
  options.interval_seconds = 0;
  EXPECT_THROW(Writer(options, Info()), MetricsError);
}

TEST(WriterTest, SamplesWhileAnotherThreadFeedsSteps) {
  testing::TempDir dir;
  WriterOptions options;
  options.path = (dir.path() / "m.jsonl").string();
  options.interval_seconds = 0.01;
  options.progress_line = false;
  RunInfo info = Info();
  info.feeds_steps = true;
  info.options = {{"--name", "quote\" and \\ slash"}};
  Writer writer(options, info);
  std::atomic<std::uint64_t> images{0};
  writer.SetLoader([&images] {
    loader::LoaderMetrics m;
    m.images = images.load();
    m.batches = m.images / 8;
    m.decode_seconds = 0.001 * static_cast<double>(m.images);
    m.slots = 4;
    m.mean_ready_batches = 2;
    return m;
  });
  std::thread feeder([&] {
    for (int i = 0; i < 2000; ++i) {
      images += 8;
      writer.AddStep(i / 1000, 8, 0.0001, 0.0009);
      if (i == 999) writer.EndEpoch(0, 0.5);
    }
  });
  feeder.join();
  writer.SetLoader({});  // the figures so far are kept
  writer.Finish("completed");
  writer.Finish("error", "ignored: already finished");
  const Totals totals = writer.totals();
  EXPECT_EQ(totals.images, 16000u);
  EXPECT_EQ(totals.step, 2000u);
  EXPECT_NEAR(totals.decode_seconds, 16.0, 1e-9);
  EXPECT_EQ(totals.ring_slots, 4u);
  EXPECT_NEAR(totals.wait_seconds, 0.2, 1e-9);
  EXPECT_NEAR(totals.busy_seconds, 1.8, 1e-9);

  const std::vector<std::string> lines = Lines(options.path);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines.front().rfind("{\"record\":\"config\"", 0), 0u);
  EXPECT_NE(lines.front().find("\"--name\":\"quote\\\" and \\\\ slash\""), std::string::npos);
  EXPECT_EQ(lines.back().rfind("{\"record\":\"end\"", 0), 0u);
  EXPECT_NE(lines.back().find("\"exit\":\"completed\""), std::string::npos);
  EXPECT_NE(lines.back().find("\"images\":16000"), std::string::npos);
  int epochs = 0;
  for (const std::string& line : lines) epochs += line.find("\"record\":\"epoch\"") != line.npos;
  EXPECT_EQ(epochs, 1);
}

// A URL's user:password is no record's business: the dataset, its option and an error
// naming it are written with "***@" (loader::detail::RedactUrl, applied to every string).
TEST(WriterTest, RecordsNoCredentialsOfAUrl) {
  testing::TempDir dir;
  WriterOptions options;
  options.path = (dir.path() / "m.jsonl").string();
  options.progress_line = false;
  const std::string url = "http://alice:s3cret@example.com/train-{0..9}.tar";
  RunInfo info = Info();
  info.dataset = url;
  info.options = {{"--data", url}};
  {
    Writer writer(options, info);
    writer.Finish("error", url + ": HTTP 404");
  }
  std::ifstream in(options.path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.find("s3cret"), std::string::npos) << text;
  EXPECT_NE(text.find("\"dataset\":\"http://***@example.com/train-{0..9}.tar\""), std::string::npos)
      << text;
}

// train's signal thread writes "stopped" while its main thread may be finishing the run:
// both join the sampler, which two threads at once may not. One end record, the first.
TEST(WriterTest, FinishFromTwoThreadsAtOnceWritesOneEndRecord) {
  testing::TempDir dir;
  for (int round = 0; round < 100; ++round) {
    WriterOptions options;
    options.path = (dir.path() / ("m" + std::to_string(round) + ".jsonl")).string();
    options.progress_line = false;
    Writer writer(options, Info());
    std::latch start(2);
    std::jthread signal([&] {
      start.arrive_and_wait();
      writer.Finish("stopped");
    });
    start.arrive_and_wait();
    writer.Finish("completed");
    signal.join();
    int ends = 0;
    for (const std::string& line : Lines(options.path)) {
      ends += line.rfind("{\"record\":\"end\"", 0) == 0;
    }
    ASSERT_EQ(ends, 1) << "round " << round;
  }
}

TEST(WriterTest, DestroyedWithoutFinishSaysAbandoned) {
  testing::TempDir dir;
  WriterOptions options;
  options.path = (dir.path() / "m.jsonl").string();
  options.progress_line = false;
  { Writer writer(options, Info()); }
  const std::vector<std::string> lines = Lines(options.path);
  ASSERT_EQ(lines.size(), 3u);  // config, the last interval, end
  EXPECT_NE(lines.back().find("\"exit\":\"abandoned\""), std::string::npos);
}

// The metrics port is an address to listen on, read by the readers' parser with the readers'
// loopback rule (loader/address.h): what tilefeed-serve --bind tcp://SPELLING refuses,
// --metrics port=SPELLING refuses with the same line.
std::string ReaderRefusal(const std::string& spelling) {
  const std::string endpoint = "tcp://" + spelling;
  try {
    (void)transport::ParseEndpoint(endpoint, /*bind=*/true);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();  // "endpoint 'tcp://...': REASON"
    return what.substr(what.find("': ") + 3);
  }
  if (transport::IsLoopbackEndpoint(endpoint)) return "";
  return loader::NotLoopback(transport::ParseEndpoint(endpoint, true).host);
}

std::string MetricsRefusal(const std::string& spelling) {
  Flags flags;
  flags.port = spelling;
  try {
    (void)ListenAddress(flags);
  } catch (const MetricsError& e) {
    return e.what();
  }
  return "";
}

TEST(MetricsPortTest, RefusesWhatAReaderRefusesWithTheSameLine) {
  // Every interface (":P", "*:P", "[::]:P", an IPv4-mapped 0.0.0.0) is refused like any
  // address beyond this host.
  for (const char* spelling :
       {":0", "*:0", "[::]:0", "0.0.0.0:9400", "[::ffff:0.0.0.0]:9400", "::ffff:0.0.0.0:9400",
        "[]:9400", "10.1.2.3:9400", "127.0.0.1:1;0.0.0.0:9400", "127.0.0.1:65536", "127.0.0.1:x",
        "no-such-host.invalid:9400"}) {
    const std::string reader = ReaderRefusal(spelling);
    ASSERT_FALSE(reader.empty()) << spelling << ": the reader takes it";
    const std::string metrics = MetricsRefusal(spelling);
    // The same line; a refusal of the loopback rule goes on to say how to allow it.
    EXPECT_EQ(metrics.rfind("--metrics port=" + std::string(spelling) + ": " + reader, 0), 0u)
        << spelling << "\n  reader:  " << reader << "\n  metrics: " << metrics;
  }
  for (const char* spelling : {"0", "9400", "127.0.0.1:0", "localhost:9400", "[::1]:9400"}) {
    EXPECT_EQ(MetricsRefusal(spelling), "") << spelling;
  }
}

// Whether a TCP connection to `address`:`port` (IPv4) is accepted.
bool Connects(const char* address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, address, &to.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0;
  ::close(fd);
  return ok;
}

TEST(MetricsPortTest, ListensOnLoopbackOnlyUnlessTold) {
  Flags flags;
  flags.port = "0";
  ::testing::internal::CaptureStderr();
  Session session = Open(flags, Info());
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("warning"), std::string::npos);
  ASSERT_NE(session.exporter, nullptr);
  const int port = session.exporter->port();
  EXPECT_EQ(session.exporter->address(), "127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(Connects("127.0.0.1", port));
  // Bound to 127.0.0.1 itself, not to every interface: another address of this host (here
  // another loopback one, present on every Linux host) is refused.
  EXPECT_FALSE(Connects("127.0.0.2", port));

  // Every interface only when bind= says so, with a warning line.
  flags.bind = "0.0.0.0";
  ::testing::internal::CaptureStderr();
  Session everywhere = Open(flags, Info());
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(
                "warning: the metrics endpoint listens beyond this host (--metrics bind=0.0.0.0), "
                "without authentication"),
            std::string::npos);
  ASSERT_NE(everywhere.exporter, nullptr);
  EXPECT_TRUE(Connects("127.0.0.2", everywhere.exporter->port()));
  flags.port = "127.0.0.1:0";  // and the address is given once
  EXPECT_THROW(Open(flags, Info()), MetricsError);
}

}  // namespace
}  // namespace tilefeed::metrics
