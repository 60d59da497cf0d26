// DeviceFeed fed by a remote reader: a ReaderEndpoint serves a loader over ZeroMQ (ipc://)
// and the feed takes the ZmqBatchStream's batches, holding at most credits - 1 of them (the
// rule feed.h gives), so the reader always has a credit to send the next. Every landed
// batch equals the reference loader's, and the fake device sees no break of either rule.

#include <gtest/gtest.h>

#include <exception>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "tests/cuda/fake_device.h"
#include "tests/cuda/raw_source.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/cuda/feed.h"
#include "tilefeed/transport/context.h"
#include "tilefeed/transport/streams.h"
#include "transport/reader_endpoint.h"

namespace tilefeed::cuda {
namespace {

TEST(DeviceFeed, AReadersZeroMqStreamFeedsItByteForByte) {
  constexpr int kSide = 16;
  constexpr std::size_t kCredits = 3;
  const loader::LoaderOptions options = testing::RawOptions(4, kSide, 2);
  std::vector<std::vector<std::uint8_t>> expected;
  {
    loader::Loader reference(std::make_unique<testing::RawSource>(40, kSide), options);
    for (int epoch = 0; epoch < 2; ++epoch) {
      while (std::optional<loader::Batch> b = reference.Next()) {
        expected.emplace_back(b->images().begin(), b->images().end());
      }
    }
  }
  transport::Context context;
  tilefeed::testing::TempDir sockets("tilefeed-ipc");
  loader::Loader loader(std::make_unique<testing::RawSource>(40, kSide), options);
  transport::ReaderEndpoint sender(context, loader,
                                   {.endpoint = "ipc://" + (sockets.path() / "s").string()});
  std::exception_ptr send_error;
  std::jthread serving([&](std::stop_token stop) {
    try {
      sender.Run(stop);
    } catch (...) {
      send_error = std::current_exception();
    }
  });
  testing::FakeDevice device(2);
  {
    transport::ZmqBatchStream stream(context, {.endpoint = sender.endpoint(), .credits = kCredits});
    DeviceFeed feed(stream, device, 2, kCredits - 1);
    std::size_t landed = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
      while (std::optional<DeviceBatch> got = feed.Next(nullptr)) {
        ASSERT_LT(landed, expected.size());
        EXPECT_LE(feed.copies_in_flight(), kCredits - 1);
        EXPECT_EQ(device.images(got->buffer()), expected[landed]) << "batch " << landed;
        ++landed;
      }
    }
    EXPECT_EQ(landed, expected.size());
  }
  serving.join();
  EXPECT_FALSE(send_error);
  EXPECT_EQ(device.violations().slot_reused, 0);
  EXPECT_EQ(device.violations().buffer_reused, 0);
  EXPECT_EQ(device.pending(), 0u) << "the feed's destructor waits for its copies";
}

}  // namespace
}  // namespace tilefeed::cuda
