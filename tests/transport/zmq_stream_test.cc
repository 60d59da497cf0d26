#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "loader/image_folder.h"
#include "tests/transport/test_data.h"
#include "tilefeed/transport/streams.h"
#include "transport/curve.h"
#include "transport/reader_endpoint.h"
#include "transport/wire.h"
#include "transport/zmq_context.h"

namespace tilefeed::transport {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The seconds in "... silent for S s ..." of an error line, or -1 if there are none.
double SilentSeconds(const std::string& what) {
  const std::string key = "silent for ";
  const std::size_t at = what.find(key);
  if (at == std::string::npos) return -1;
  try {
    return std::stod(what.substr(at + key.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

// Runs a sender's Run() on its own thread and keeps the outcome.
class Serving {
 public:
  explicit Serving(ReaderEndpoint& sender)
      : thread_([this, &sender](std::stop_token stop) {
          try {
            result_ = sender.Run(stop);
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  // Joins, then returns what Run returned; rethrows what it threw.
  SendResult Join() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
    return result_;
  }
  void Stop() { thread_.request_stop(); }

 private:
  SendResult result_ = SendResult::kStopped;
  std::exception_ptr error_;
  std::jthread thread_;
};

// A bound on a wait that only a hang reaches: far above what a loaded machine under a
// sanitizer takes for what the tests wait for (milliseconds when idle).
constexpr auto kHang = 60s;

// Waits (bounded) until `done()`; the predicate reads state another thread changes.
template <typename Done>
bool WaitFor(Done done, std::chrono::milliseconds limit = kHang) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

std::string IpcEndpoint(const tilefeed::testing::TempDir& dir) {
  return "ipc://" + (dir.path() / "s").string();
}

class RoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(RoundTrip, DeliversTheInProcessLoadersBatchesByteForByte) {
  const bool use_tcp = GetParam();
  tilefeed::testing::TempDir data = testing::MakeJpegFolder(6);
  const loader::LoaderOptions options = testing::SmallOptions(4, 24, 2);

  loader::Loader reference(loader::ImageFolder::Open(data.path().string()), options);
  LoaderStream in_process(reference);
  const testing::Collected expected = testing::Drain(in_process, 10);
  ASSERT_EQ(expected.batches.size(), 10u);  // 18 samples, batches of 4: 5 per epoch

  Context context;
  tilefeed::testing::TempDir sockets("tilefeed-ipc");
  loader::Loader loader(loader::ImageFolder::Open(data.path().string()), options);
  ReaderEndpoint sender(context, loader,
                        {.endpoint = use_tcp ? "tcp://127.0.0.1:*" : IpcEndpoint(sockets)});
  Serving serving(sender);
  ZmqBatchStream stream(context, {.endpoint = sender.endpoint(), .credits = 2});
  EXPECT_EQ(stream.batches_per_epoch(), 5u);
  const testing::Collected received = testing::Drain(stream, 10);
  EXPECT_TRUE(stream.ended());
  EXPECT_FALSE(stream.Next().has_value());
  EXPECT_EQ(received.epoch_ends, expected.epoch_ends);
  ASSERT_EQ(received.batches.size(), expected.batches.size());
  for (std::size_t i = 0; i < expected.batches.size(); ++i) {
    EXPECT_TRUE(received.batches[i] == expected.batches[i]) << "batch " << i;
  }
  EXPECT_EQ(serving.Join(), SendResult::kCompleted);
  EXPECT_EQ(sender.batches_sent(), 10u);
}

INSTANTIATE_TEST_SUITE_P(Zmq, RoundTrip, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tcp" : "Ipc"; });

TEST(ZmqBatchStream, ASlowTrainerStopsTheReaderWithinItsCredits) {
  Context context;
  loader::LoaderOptions options = testing::SmallOptions(2, 8, 0);
  options.prefetch_depth = 8;
  loader::Loader loader(std::make_unique<testing::RawSource>(1000, 8), options);
  ReaderEndpoint sender(context, loader, {.endpoint = "tcp://127.0.0.1:*"});
  Serving serving(sender);
  ZmqBatchStream stream(context, {.endpoint = sender.endpoint(), .credits = 3});

  ASSERT_TRUE(WaitFor([&] { return stream.queued() == 3; }));
  // The sender has spent its credits and must not send more, however long we wait.
  const auto observe_until = Clock::now() + 300ms;
  while (Clock::now() < observe_until) {
    ASSERT_EQ(sender.batches_sent(), 3u);
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(stream.queued(), 3u);
  // Each batch taken returns one credit: exactly one more is sent.
  ASSERT_TRUE(stream.Next().has_value());
  ASSERT_TRUE(WaitFor([&] { return sender.batches_sent() == 4; }));
  ASSERT_TRUE(WaitFor([&] { return stream.queued() == 3; }));
  EXPECT_EQ(sender.batches_sent(), 4u);
}

TEST(ZmqBatchStream, TheReaderSeesATrainerLeaveEarly) {
  Context context;
  loader::Loader loader(std::make_unique<testing::RawSource>(100, 8),
                        testing::SmallOptions(2, 8, 0));
  ReaderEndpoint sender(context, loader, {.endpoint = "tcp://127.0.0.1:*"});
  Serving serving(sender);
  {
    ZmqBatchStream stream(context, {.endpoint = sender.endpoint()});
    ASSERT_TRUE(stream.Next().has_value());
    // Batches still in flight here go back to the loader when ZeroMQ drops them.
  }
  EXPECT_EQ(serving.Join(), SendResult::kPeerLeft);
}

// A reader that welcomes the trainer and then says nothing, as if it had been SIGKILLed.
TEST(ZmqBatchStream, ASilentReaderIsReportedWithinTheTimeout) {
  Context context;
  zmq::socket_t fake(context.impl().context, zmq::socket_type::router);
  fake.set(zmq::sockopt::linger, 0);
  fake.bind("tcp://127.0.0.1:*");
  const std::string endpoint = fake.get(zmq::sockopt::last_endpoint);
  std::jthread reader([&fake] {
    std::vector<zmq::message_t> hello;
    (void)zmq::recv_multipart(fake, std::back_inserter(hello));
    const auto welcome = detail::EncodeControl({detail::MessageType::kWelcome, 5});
    fake.send(hello[0], zmq::send_flags::sndmore);
    fake.send(zmq::buffer(welcome), zmq::send_flags::sndmore);
    fake.send(zmq::message_t(), zmq::send_flags::none);  // no session terms
  });
  // The timeout also bounds the wait for the welcome, which the reader thread above sends:
  // 3 s, far above a thread's scheduling delay on a loaded machine under ThreadSanitizer.
  // The silence is timed from the welcome, which comes after `start` but may come well
  // before the constructor returns (300 ms under TSan), so `start` is taken first.
  const auto start = Clock::now();
  ZmqBatchStream stream(context,
                        {.endpoint = endpoint, .heartbeat_interval = 50ms, .peer_timeout = 3s});
  EXPECT_EQ(stream.batches_per_epoch(), 5u);
  try {
    (void)stream.Next();
    FAIL() << "Next() returned from a silent reader";
  } catch (const TransportError& e) {
    EXPECT_THAT(e.what(), HasSubstr("reader at " + endpoint + " silent for "));
    // Never before the timeout; how long after it depends on the machine's load.
    EXPECT_GE(SilentSeconds(e.what()), 3.0) << e.what();
  }
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 2900ms);
  EXPECT_LT(elapsed, kHang);
  EXPECT_THROW((void)stream.Next(), TransportError);  // and it stays failed
}

TEST(ZmqBatchStream, NoReaderAtAllFailsTheConstructor) {
  Context context;
  const auto start = Clock::now();
  EXPECT_THROW(ZmqBatchStream(context, {.endpoint = "tcp://127.0.0.1:1",
                                        .heartbeat_interval = 50ms,
                                        .peer_timeout = 200ms}),
               TransportError);
  EXPECT_LT(Clock::now() - start, kHang);
}

// A trainer that says hello and ready, heartbeats until its one batch has been sent, then
// goes silent: the silence is timed from its last heartbeat, after the batch, so a loader
// slow to make that batch (a loaded machine) cannot turn it into a silence before it.
TEST(ReaderEndpoint, ASilentTrainerIsReportedWithinTheTimeout) {
  Context context;
  loader::Loader loader(std::make_unique<testing::RawSource>(100, 8),
                        testing::SmallOptions(2, 8, 0));
  ReaderEndpoint sender(
      context, loader,
      {.endpoint = "tcp://127.0.0.1:*", .heartbeat_interval = 50ms, .peer_timeout = 300ms});
  zmq::socket_t fake(context.impl().context, zmq::socket_type::dealer);
  fake.set(zmq::sockopt::linger, 0);
  fake.connect(sender.endpoint());
  const auto hello = detail::EncodeControl({detail::MessageType::kHello, 1});
  const auto ready = detail::EncodeControl({detail::MessageType::kReady, 1});
  const auto heartbeat = detail::EncodeControl({detail::MessageType::kHeartbeat});
  fake.send(zmq::buffer(hello), zmq::send_flags::none);
  fake.send(zmq::buffer(ready), zmq::send_flags::none);
  Serving serving(sender);
  const auto start = Clock::now();
  ASSERT_TRUE(WaitFor([&] {
    fake.send(zmq::buffer(heartbeat), zmq::send_flags::none);
    std::this_thread::sleep_for(10ms);  // the heartbeats' pace, far under the timeout
    return sender.batches_sent() == 1;
  }));
  try {
    (void)serving.Join();
    FAIL() << "Run() returned with a silent trainer";
  } catch (const TransportError& e) {
    EXPECT_THAT(e.what(), HasSubstr("trainer at "));
    EXPECT_GE(SilentSeconds(e.what()), 0.3) << e.what();  // never before the timeout
  }
  EXPECT_LT(Clock::now() - start, kHang);
  EXPECT_EQ(sender.batches_sent(), 1u);  // one credit, one batch
}

// CURVE, for networks that are not trusted, on a tcp loopback. The sender holds the secret key,
// the trainer its public key; the epoch arrives byte for byte as the in-process loader makes
// it.
TEST(Curve, DeliversAnEpochByteForByte) {
  tilefeed::testing::TempDir keys("tilefeed-curve");
  const std::string secret = (keys.path() / "reader.key").string();
  const std::string public_key = (keys.path() / "reader.pub").string();
  WriteCurveKeyFiles(GenerateCurveKeyPair(), secret, public_key);
  const loader::LoaderOptions options = testing::SmallOptions(4, 16, 1);

  loader::Loader reference(std::make_unique<testing::RawSource>(22, 16), options);
  LoaderStream in_process(reference);
  const testing::Collected expected = testing::Drain(in_process, 1);
  ASSERT_EQ(expected.batches.size(), 6u);  // 22 samples, batches of 4, last one partial

  Context context;
  loader::Loader loader(std::make_unique<testing::RawSource>(22, 16), options);
  ReaderEndpoint sender(context, loader,
                        {.endpoint = "tcp://127.0.0.1:*", .curve_secret_key_file = secret});
  Serving serving(sender);
  ZmqBatchStream stream(
      context, {.endpoint = sender.endpoint(), .credits = 2, .curve_server_key_file = public_key});
  const testing::Collected received = testing::Drain(stream, 1);
  EXPECT_EQ(received.epoch_ends, expected.epoch_ends);
  ASSERT_EQ(received.batches.size(), expected.batches.size());
  for (std::size_t i = 0; i < expected.batches.size(); ++i) {
    EXPECT_TRUE(received.batches[i] == expected.batches[i]) << "batch " << i;
  }
  EXPECT_EQ(serving.Join(), SendResult::kCompleted);
}

// A trainer given another key than the reader's never gets a welcome: the handshake fails
// silently, and the stream says so, naming the key file, within its peer timeout.
TEST(Curve, AWrongServerKeyFailsWithinTheTimeout) {
  tilefeed::testing::TempDir keys("tilefeed-curve");
  const std::string secret = (keys.path() / "reader.key").string();
  const std::string other_secret = (keys.path() / "other.key").string();
  const std::string other_public = (keys.path() / "other.pub").string();
  WriteCurveKeyFiles(GenerateCurveKeyPair(), secret, (keys.path() / "reader.pub").string());
  WriteCurveKeyFiles(GenerateCurveKeyPair(), other_secret, other_public);

  Context context;
  loader::Loader loader(std::make_unique<testing::RawSource>(100, 8),
                        testing::SmallOptions(2, 8, 0));
  ReaderEndpoint sender(context, loader,
                        {.endpoint = "tcp://127.0.0.1:*", .curve_secret_key_file = secret});
  Serving serving(sender);
  const auto start = Clock::now();
  try {
    ZmqBatchStream stream(context, {.endpoint = sender.endpoint(),
                                    .heartbeat_interval = 50ms,
                                    .peer_timeout = 500ms,
                                    .curve_server_key_file = other_public});
    FAIL() << "connected with the wrong server key";
  } catch (const TransportError& e) {
    EXPECT_THAT(e.what(), HasSubstr("never welcomed us"));
    EXPECT_THAT(e.what(), HasSubstr(other_public));
  }
  EXPECT_LT(Clock::now() - start, kHang);
  EXPECT_EQ(sender.batches_sent(), 0u);
  serving.Stop();
  EXPECT_EQ(serving.Join(), SendResult::kStopped);
}

TEST(Curve, AnAllowListAdmitsOnlyItsTrainers) {
  tilefeed::testing::TempDir keys("tilefeed-curve");
  auto path = [&](const char* name) { return (keys.path() / name).string(); };
  WriteCurveKeyFiles(GenerateCurveKeyPair(), path("reader.key"), path("reader.pub"));
  WriteCurveKeyFiles(GenerateCurveKeyPair(), path("intruder.key"), path("intruder.pub"));
  std::filesystem::create_directory(keys.path() / "allowed");
  WriteCurveKeyFiles(GenerateCurveKeyPair(), path("trainer.key"), path("allowed/trainer.pub"));
  const std::vector<std::string> allowed = ReadCurvePublicKeys({path("allowed")});
  ASSERT_EQ(allowed.size(), 1u);
  EXPECT_EQ(allowed[0], ReadCurveKeyFile(path("trainer.key"), true).public_key);

  std::mutex mutex;
  std::vector<std::string> refused;
  Context context;
  loader::Loader loader(std::make_unique<testing::RawSource>(16, 8),
                        testing::SmallOptions(2, 8, 1));
  ReaderEndpoint sender(context, loader,
                        {.endpoint = "tcp://127.0.0.1:*",
                         .curve_secret_key_file = path("reader.key"),
                         .curve_allowed_keys = allowed,
                         .on_refused = [&](const std::string& line) {
                           std::lock_guard lock(mutex);
                           refused.push_back(line);
                         }});
  Serving serving(sender);
  // A key that is not on the list, and no key file at all (a fresh key), are refused during
  // the handshake. The stream says so: at once when ZeroMQ drops the connection for good,
  // after peer_timeout when it keeps retrying (which of the two depends on whether it reads
  // the reader's ERROR before the disconnect), never with a hang.
  for (const std::string& client_key : {path("intruder.key"), std::string()}) {
    try {
      ZmqBatchStream stream(context, {.endpoint = sender.endpoint(),
                                      .heartbeat_interval = 50ms,
                                      .peer_timeout = 2s,
                                      .curve_server_key_file = path("reader.pub"),
                                      .curve_client_key_file = client_key});
      FAIL() << "a trainer that is not allowed was welcomed";
    } catch (const TransportError& e) {
      EXPECT_THAT(e.what(), HasSubstr("allow-list"));
      if (!client_key.empty()) {
        EXPECT_THAT(e.what(), HasSubstr(client_key));
      }
    }
  }
  {
    std::lock_guard lock(mutex);
    ASSERT_GE(refused.size(), 2u);
    EXPECT_THAT(refused[0], HasSubstr(ReadCurveKeyFile(path("intruder.pub"), false).public_key +
                                      " is not on the allow-list"));
  }
  // The allowed trainer streams the epoch.
  ZmqBatchStream stream(context, {.endpoint = sender.endpoint(),
                                  .curve_server_key_file = path("reader.pub"),
                                  .curve_client_key_file = path("trainer.key")});
  const testing::Collected received = testing::Drain(stream, 10);
  EXPECT_EQ(received.batches.size(), 8u);
  EXPECT_TRUE(stream.ended());
  EXPECT_EQ(serving.Join(), SendResult::kCompleted);

  // An allow-list without CURVE, or with no key file in it, is refused.
  EXPECT_THROW(ReaderEndpoint(context, loader,
                              {.endpoint = "tcp://127.0.0.1:*", .curve_allowed_keys = allowed}),
               std::invalid_argument);
  std::filesystem::create_directory(keys.path() / "empty");
  EXPECT_THROW((void)ReadCurvePublicKeys({path("empty")}), TransportError);
}

TEST(Curve, AReaderRefusesAMissingKeyFile) {
  Context context;
  loader::Loader loader(std::make_unique<testing::RawSource>(10, 8),
                        testing::SmallOptions(2, 8, 1));
  try {
    ReaderEndpoint sender(
        context, loader,
        {.endpoint = "tcp://127.0.0.1:*", .curve_secret_key_file = "/nonexistent/reader.key"});
    FAIL() << "bound without its key";
  } catch (const TransportError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/reader.key"));
  }
}

}  // namespace
}  // namespace tilefeed::transport
