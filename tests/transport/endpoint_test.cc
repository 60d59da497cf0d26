// Endpoints are read the way ZeroMQ reads them, and a sender told to stay
// on loopback checks what ZeroMQ actually bound.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "tests/transport/test_data.h"
#include "tilefeed/transport/batch_stream.h"
#include "tilefeed/transport/context.h"
#include "tilefeed/transport/streams.h"
#include "transport/reader_endpoint.h"

namespace tilefeed::transport {
namespace {

using ::testing::HasSubstr;

TEST(ParseEndpoint, RefusesZeroMqSourceSyntax) {
  // ZeroMQ reads tcp://SOURCE;DEST: this would bind 0.0.0.0:5603.
  for (const bool bind : {true, false}) {
    try {
      (void)ParseEndpoint("tcp://127.0.0.1:1;0.0.0.0:5603", bind);
      FAIL() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("SOURCE;DEST"));
    }
  }
}

TEST(ParseEndpoint, ReadsWhatZeroMqReads) {
  const Endpoint tcp = ParseEndpoint("tcp://localhost:5555", false);
  EXPECT_EQ(tcp.scheme, "tcp");
  EXPECT_EQ(tcp.host, "localhost");
  EXPECT_EQ(tcp.port, "5555");
  EXPECT_EQ(ParseEndpoint("tcp://[::1]:7", false).host, "::1");
  EXPECT_EQ(ParseEndpoint("tcp://*:*", true).port, "*");
  EXPECT_EQ(ParseEndpoint("ipc:///tmp/x.sock", true).path, "/tmp/x.sock");
  EXPECT_EQ(ParseEndpoint("shm://job7", true).path, "job7");
  for (const char* bad : {"bogus", "foo://bar", "tcp://127.0.0.1", "tcp://:5", "tcp://h:99999",
                          "tcp://h:*", "ipc://", "shm://a/b", "tcp://h:0"}) {
    EXPECT_THROW((void)ParseEndpoint(bad, false), std::invalid_argument) << bad;
  }
  EXPECT_NO_THROW((void)ParseEndpoint("tcp://h:0", true));
}

TEST(IsLoopbackEndpoint, ByAddressAndByResolvedName) {
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://127.0.0.1:5"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://127.4.5.6:5"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://[::1]:5"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://localhost:5"));
  EXPECT_TRUE(IsLoopbackEndpoint("ipc:///tmp/x"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://0.0.0.0:5"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://*:5"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://10.1.2.3:5"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://127.0.0.1:1;0.0.0.0:5603"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://no-such-host.invalid:5"));
}

TEST(ReaderEndpoint, LoopbackOnlyChecksWhatZeroMqBound) {
  Context context;
  loader::Loader loader(std::make_unique<testing::RawSource>(16, 8),
                        testing::SmallOptions(2, 8, 0));
  try {
    ReaderEndpoint sender(context, loader, {.endpoint = "tcp://*:*", .loopback_only = true});
    FAIL() << "served on " << sender.endpoint();
  } catch (const TransportError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ZeroMQ bound tcp://0.0.0.0:"));
    EXPECT_THAT(e.what(), HasSubstr("not loopback"));
  }
  EXPECT_THROW(ReaderEndpoint(context, loader,
                              {.endpoint = "tcp://127.0.0.1:1;0.0.0.0:0", .loopback_only = true}),
               std::invalid_argument);
}

// Fails on main: ZeroMQ binds only addresses and interface names, so "localhost" was "No
// such device" although the tools called it loopback.
TEST(ReaderEndpoint, BindsAHostNameAsItsAddress) {
  Context context;
  loader::Loader loader(std::make_unique<testing::RawSource>(16, 8),
                        testing::SmallOptions(2, 8, 0));
  ReaderEndpoint sender(context, loader, {.endpoint = "tcp://localhost:*", .loopback_only = true});
  EXPECT_THAT(sender.endpoint(), HasSubstr("tcp://127."));
  EXPECT_TRUE(IsLoopbackEndpoint(sender.endpoint()));
}

}  // namespace
}  // namespace tilefeed::transport
