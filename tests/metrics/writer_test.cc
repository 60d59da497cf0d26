// metrics/metrics.h: the Writer's records, its sampler beside a feeding thread, paths and
// JSON escaping. The schema itself is checked against every tool by test_metrics.py.

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "metrics/json_line.h"
#include "metrics/metrics.h"
#include "tests/support/temp_dir.h"

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

}  // namespace
}  // namespace tilefeed::metrics
