// Session terms, refusals, and peers that cannot be trusted: a reader and a trainer that
// disagree must not train on the wrong data, and a hostile or broken peer must not hang,
// crash or starve either side.

#include "tilefeed/transport/session.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tests/transport/test_data.h"
#include "tilefeed/transport/streams.h"
#include "transport/frame.h"
#include "transport/reader_endpoint.h"
#include "transport/socket_util.h"
#include "transport/wire.h"
#include "transport/zmq_context.h"

namespace tilefeed::transport {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using detail::Control;
using detail::MessageType;

constexpr std::size_t kSamples = 40;
constexpr std::size_t kBatch = 4;
constexpr int kSide = 8;

SessionTerms Terms(std::uint64_t epochs = 1) {
  SessionTerms t;
  const loader::DatasetIdentity id = loader::Identify(testing::RawSource(kSamples, kSide));
  t.dataset = {id.samples, id.digest};  // as on the wire: no class count
  t.image_size = kSide;
  t.batch_size = kBatch;
  t.mode = 1;
  t.epochs = epochs;
  return t;
}

// The reader's loader for a session on `agreed`: its slice, seed and position.
std::unique_ptr<loader::Loader> OpenAt(const SessionTerms& agreed) {
  loader::LoaderOptions o =
      testing::SmallOptions(kBatch, kSide, agreed.epochs - agreed.first_epoch);
  o.slice = {static_cast<int>(agreed.slice_index), static_cast<int>(agreed.slice_count)};
  o.seed = agreed.seed;
  return std::make_unique<loader::Loader>(
      std::make_unique<testing::RawSource>(kSamples, kSide), o,
      loader::LoaderState{agreed.seed, agreed.first_epoch, agreed.first_position, kSamples});
}

TEST(SessionTerms, RoundTripAndRejectMalformedBytes) {
  SessionTerms t = Terms(3);
  t.slice_index = 1;
  t.slice_count = 2;
  t.first_position = 12;
  t.drop_last = true;
  const EncodedSessionTerms bytes = EncodeSessionTerms(t);
  ASSERT_EQ(ParseSessionTerms(bytes), t);
  EXPECT_FALSE(ParseSessionTerms(std::span(bytes).first(kSessionTermsSize - 1)));
  EncodedSessionTerms bad = bytes;
  bad[0] = std::byte{0};  // magic
  EXPECT_FALSE(ParseSessionTerms(bad));
  bad = bytes;
  bad[24] = std::byte{2};  // slice index 2 of 2
  EXPECT_FALSE(ParseSessionTerms(bad));
  bad = bytes;
  bad.push_back(std::byte{'!'});  // an augment text that does not parse
  EXPECT_FALSE(ParseSessionTerms(bad));
  bad = bytes;
  bad[kSessionTermsSize] = std::byte{'x'};  // a schedule SizeSchedule::Parse refuses
  EXPECT_FALSE(ParseSessionTerms(bad));
  bad = bytes;
  bad[40] = std::byte{0xff};  // a schedule length past the part
  EXPECT_FALSE(ParseSessionTerms(bad));
  SessionTerms padded = t;  // "032" parses as 32, but only the written-back text goes
  padded.image_size = loader::SizeSchedule(32);
  bad = EncodeSessionTerms(padded);
  bad.insert(bad.begin() + kSessionTermsSize, std::byte{'0'});
  bad[40] = std::byte{3};
  EXPECT_FALSE(ParseSessionTerms(bad));
  t.augment = "RandomResizedCrop(), RandAugment(magnitude=5)";
  t.image_size = loader::SizeSchedule::Parse("160,8:224");
  EXPECT_EQ(ParseSessionTerms(EncodeSessionTerms(t)), t);
}

// A reader and a trainer with other augment specs refuse each other, naming both texts.
TEST(SessionTerms, AnotherAugmentSpecIsADisagreement) {
  SessionTerms trainer = Terms();
  const SessionTerms reader = Terms();
  trainer.augment = "RandomResizedCrop(), RandomErasing()";
  EXPECT_EQ(Disagreement(trainer, reader),
            "augment: trainer 'RandomResizedCrop(), RandomErasing()', reader "
            "'RandomResizedCrop(), RandomHorizontalFlip()'");
}

// The decode scaling decides the pixels (fast decodes at other DCT scales), so a reader whose
// scaling differs from the trainer's refuses it, naming both.
TEST(SessionTerms, AnotherDecodeScalingIsADisagreement) {
  SessionTerms trainer = Terms();
  const SessionTerms reader = Terms();
  trainer.decode_scaling = codecs::DecodeScaling::kFast;
  EXPECT_EQ(Disagreement(trainer, reader), "decode scaling: trainer fast, reader exact");
  EXPECT_EQ(ParseSessionTerms(EncodeSessionTerms(trainer)), trainer);
}

// The terms part as docs/wire-protocol.md lays it out, byte by byte: the one identity
// struct (loader::DatasetIdentity) must not change what goes on the wire.
TEST(SessionTerms, TheBytesAreTheDocumentedLayout) {
  SessionTerms t;
  t.dataset = {.samples = 40, .digest = 0x0123456789abcdefu, .classes = 10};
  t.slice_index = 1;
  t.slice_count = 3;
  t.seed = 7;
  t.image_size = loader::SizeSchedule::Parse("160,8:224");
  t.batch_size = 32;
  t.mode = 1;
  t.remainder = 1;
  t.drop_last = true;
  t.decode_scaling = codecs::DecodeScaling::kFast;
  t.epochs = 90;
  t.first_epoch = 4;
  t.first_position = 96;
  EncodedSessionTerms want(kSessionTermsSize);
  auto put = [&want](std::size_t offset, std::uint64_t value, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) want[offset + i] = std::byte(value >> (8 * i));
  };
  put(0, 0x32534654, 4);  // "TFS2"
  put(4, 5, 2);           // flags: drop-last, decode scaling fast
  put(6, 1, 1);           // mode: eval
  put(7, 1, 1);           // remainder: drop
  put(8, 40, 8);          // dataset samples
  put(16, 0x0123456789abcdefu, 8);
  put(24, 1, 4);
  put(28, 3, 4);
  put(32, 7, 8);
  put(40, 9, 4);  // the schedule's text after byte 79: 9 bytes
  for (char c : std::string("160,8:224")) want.push_back(std::byte(c));
  put(44, 32, 4);
  put(48, 90, 8);
  put(56, 4, 8);
  put(64, 96, 8);
  for (const char c : std::string_view("RandomResizedCrop(), RandomHorizontalFlip()")) {
    want.push_back(std::byte(c));  // the augment text, to the end
  }
  EXPECT_EQ(EncodeSessionTerms(t), want);
  // The class count is not on the wire: the same bytes without it, and a parsed part has 0.
  SessionTerms without_classes = t;
  without_classes.dataset.classes = 0;
  EXPECT_EQ(EncodeSessionTerms(without_classes), want);
  const std::optional<SessionTerms> parsed = ParseSessionTerms(want);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, without_classes);
}

TEST(SessionTerms, TheIdentityIsComparedBySamplesAndDigest) {
  const testing::RawSource source(kSamples, kSide);
  SessionTerms trainer = Terms();
  trainer.dataset = loader::Identify(source);  // what train --data states, classes included
  trainer.dataset.classes = 10;
  const SessionTerms reader = Terms();  // as on the wire: the class count left out
  EXPECT_EQ(reader.dataset.classes, 0u);
  EXPECT_EQ(reader.dataset.samples, kSamples);
  EXPECT_EQ(reader.dataset.digest, trainer.dataset.digest);
  EXPECT_FALSE(Disagreement(trainer, reader));
  EXPECT_FALSE(Disagreement(trainer, *ParseSessionTerms(EncodeSessionTerms(reader))));
  trainer.dataset.digest ^= 1;
  EXPECT_THAT(Disagreement(trainer, reader).value_or(""), HasSubstr("dataset: trainer 40 samples"));
}

TEST(SessionTerms, EachDifferenceNamesBothValues) {
  const SessionTerms reader = Terms(2);
  struct Case {
    void (*change)(SessionTerms&);
    const char* line;
  };
  const Case cases[] = {
      {[](SessionTerms& t) { t.dataset.samples = 41; }, "dataset: trainer 41 samples"},
      {[](SessionTerms& t) { t.slice_count = 2; },
       "slice (instance/instances): trainer 0/2, reader "
       "0/1 (the whole dataset)"},
      {[](SessionTerms& t) { t.seed = 1; }, "seed: trainer 1, reader 0"},
      {[](SessionTerms& t) { t.image_size = 16; }, "image size: trainer 16, reader 8"},
      {[](SessionTerms& t) { t.batch_size = 8; }, "batch size: trainer 8, reader 4"},
      {[](SessionTerms& t) { t.mode = 0; }, "mode: trainer train, reader eval"},
      {[](SessionTerms& t) { t.remainder = 1; }, "remainder: trainer drop, reader pad"},
      {[](SessionTerms& t) { t.drop_last = true; }, "drop-last: trainer on, reader off"},
      {[](SessionTerms& t) { t.epochs = 3; }, "epochs: trainer 3, reader 2"},
  };
  for (const Case& c : cases) {
    SessionTerms trainer = reader;
    c.change(trainer);
    const std::optional<std::string> line = Disagreement(trainer, reader);
    ASSERT_TRUE(line) << c.line;
    EXPECT_THAT(*line, HasSubstr(c.line));
  }
  SessionTerms unknown = reader;
  unknown.dataset = {};  // a trainer without --data
  EXPECT_FALSE(Disagreement(unknown, reader));
}

TEST(SessionTerms, TheReaderTakesTheTrainersPositionUnlessPinned) {
  SessionTerms trainer = Terms(3);
  trainer.first_epoch = 1;
  trainer.first_position = 8;
  SessionTerms reader = Terms(3);
  EXPECT_FALSE(Disagreement(trainer, reader));
  EXPECT_EQ(Agreed(trainer, reader).first_epoch, 1u);
  EXPECT_EQ(Agreed(trainer, reader).first_position, 8u);
  reader.position_pinned = true;
  EXPECT_THAT(Disagreement(trainer, reader).value_or(""),
              HasSubstr("data position: trainer epoch 1 position 8, reader epoch 0 position 0"));
}

// A sender with terms and keep_serving, on its own thread.
class Reader {
 public:
  explicit Reader(Context& context, SessionTerms terms = Terms(), std::size_t max_connections = 0)
      : sender_(context,
                {.endpoint = "tcp://127.0.0.1:*",
                 .max_connections = max_connections,
                 .keep_serving = true,
                 .log = [this](const std::string& line) { Log(line); }},
                std::move(terms), OpenAt),
        thread_([this](std::stop_token stop) {
          try {
            result_ = sender_.Run(stop);
          } catch (const std::exception& e) {
            error_ = e.what();
          }
        }) {}
  ~Reader() { thread_.request_stop(); }
  std::string endpoint() const { return sender_.endpoint(); }
  // Joins; "" or what Run threw.
  std::string Join() {
    thread_.join();
    return error_;
  }
  SendResult result() const { return result_; }
  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  void Log(const std::string& line) {
    std::lock_guard lock(mutex_);
    lines_.push_back(line);
  }
  std::mutex mutex_;
  std::vector<std::string> lines_;
  ReaderEndpoint sender_;
  SendResult result_ = SendResult::kStopped;
  std::string error_;
  std::jthread thread_;
};

// Sends `parts` from a DEALER and returns the reply's text part (an error's).
std::string Exchange(zmq::socket_t& dealer, const std::vector<std::vector<std::byte>>& parts) {
  for (std::size_t i = 0; i < parts.size(); ++i) {
    dealer.send(zmq::buffer(parts[i]),
                i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  std::vector<zmq::message_t> reply;
  if (!zmq::recv_multipart(dealer, std::back_inserter(reply))) return "(no reply)";
  const std::optional<Control> control = detail::ParseControl(detail::Bytes(reply.at(0)));
  if (!control || control->type != MessageType::kError || reply.size() != 2)
    return "(not an error)";
  return reply[1].to_string();
}

std::vector<std::byte> Bytes(const auto& array) { return {array.begin(), array.end()}; }

zmq::socket_t Dealer(Context& context, const std::string& endpoint) {
  zmq::socket_t dealer(context.impl().context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 10000);
  dealer.connect(endpoint);
  return dealer;
}

StreamOptions TrainerOptions(const std::string& endpoint, SessionTerms terms = Terms()) {
  return {.endpoint = endpoint, .credits = 2, .terms = terms, .classes = 10};
}

TEST(Sessions, AnIntrudersHelloDoesNotTakeTheSession) {
  Context context;
  Reader reader(context);
  zmq::socket_t intruder = Dealer(context, reader.endpoint());
  const auto hello = detail::EncodeControl({MessageType::kHello, 4, 1});
  EXPECT_THAT(Exchange(intruder, {Bytes(hello)}),
              HasSubstr("refused: a hello without well-formed session terms"));
  const std::string text = "hello";
  EXPECT_THAT(Exchange(intruder, {std::vector<std::byte>(
                                     reinterpret_cast<const std::byte*>(text.data()),
                                     reinterpret_cast<const std::byte*>(text.data()) + 5)}),
              HasSubstr("refused: a malformed first message: first part is 5 bytes"));
  const auto credit = detail::EncodeControl({MessageType::kCredit, 1});
  EXPECT_THAT(Exchange(intruder, {Bytes(credit)}), HasSubstr("no session"));

  ZmqBatchStream stream(context, TrainerOptions(reader.endpoint()));
  const testing::Collected got = testing::Drain(stream, 1);
  EXPECT_EQ(got.batches.size(), kSamples / kBatch);
  EXPECT_TRUE(stream.ended());
  EXPECT_EQ(reader.Join(), "");
  EXPECT_EQ(reader.result(), SendResult::kCompleted);
  EXPECT_GE(reader.lines().size(), 3u);  // every refusal is logged
}

// How many of `fds` the peer has closed (after whatever greeting it sent), waiting until
// `want` of them are or `limit` passes (a bound only a hang reaches).
int ClosedByPeer(const std::vector<int>& fds, int want, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<bool> closed(fds.size(), false);
  int count = 0;
  char buffer[64];
  while (count < want && std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (closed[i]) continue;
      pollfd p{fds[i], POLLIN, 0};
      if (poll(&p, 1, 10) != 1) continue;
      if (recv(fds[i], buffer, sizeof buffer, 0) <= 0) {
        closed[i] = true;
        ++count;
      }
    }
  }
  return count;
}

// Out of descriptors, libzmq's accept loop spins a core; the sender keeps at most
// max_connections open and shuts down the rest as they come, while its trainer is served.
TEST(Sessions, ConnectionsBeyondTheCapAreDroppedWhileTheTrainerIsServed) {
  Context context;
  Reader reader(context, Terms(), /*max_connections=*/2);
  ZmqBatchStream stream(context, TrainerOptions(reader.endpoint()));  // the first connection
  const std::string endpoint = reader.endpoint();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port =
      htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1))));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    fds.push_back(fd);
  }
  // One more fits under the cap; the other five are shut down (that one too, later: it never
  // says hello).
  const int dropped = ClosedByPeer(fds, 5, 60s);
  for (const int fd : fds) close(fd);
  EXPECT_GE(dropped, 5);
  const testing::Collected got = testing::Drain(stream, 1);
  EXPECT_EQ(got.batches.size(), kSamples / kBatch);
  EXPECT_TRUE(stream.ended());
  EXPECT_EQ(reader.Join(), "");
  EXPECT_EQ(reader.result(), SendResult::kCompleted);
  const std::vector<std::string> lines = reader.lines();
  EXPECT_THAT(lines, ::testing::Contains(HasSubstr("refused connections: 2 are open")));
}

TEST(Sessions, AMismatchedTrainerIsRefusedWithBothValues) {
  Context context;
  Reader reader(context);
  SessionTerms other = Terms();
  other.seed = 7;
  try {
    ZmqBatchStream stream(context, TrainerOptions(reader.endpoint(), other));
    FAIL() << "a trainer with another seed was served";
  } catch (const TransportError& e) {
    EXPECT_THAT(e.what(), HasSubstr("seed: trainer 7, reader 0"));
  }
  // The reader still serves the agreed trainer.
  ZmqBatchStream stream(context, TrainerOptions(reader.endpoint()));
  EXPECT_EQ(testing::Drain(stream, 1).batches.size(), kSamples / kBatch);
}

TEST(Sessions, AHostileCreditEndsTheSessionNotTheReader) {
  Context context;
  Reader reader(context);
  zmq::socket_t hostile = Dealer(context, reader.endpoint());
  const auto hello = detail::EncodeControl({MessageType::kHello, 1, 1});
  hostile.send(zmq::buffer(hello), zmq::send_flags::sndmore);
  hostile.send(zmq::buffer(EncodeSessionTerms(Terms())), zmq::send_flags::none);
  std::vector<zmq::message_t> welcome;
  ASSERT_TRUE(zmq::recv_multipart(hostile, std::back_inserter(welcome)));
  const auto ready = detail::EncodeControl({MessageType::kReady, 1});
  const auto flood = detail::EncodeControl({MessageType::kCredit, std::uint64_t{1} << 63});
  hostile.send(zmq::buffer(ready), zmq::send_flags::none);
  hostile.send(zmq::buffer(flood), zmq::send_flags::none);
  // Whatever the reader sent first, the session ends with an error naming the credit.
  std::string error;
  for (int i = 0; i < 100 && error.empty(); ++i) {
    std::vector<zmq::message_t> message;
    ASSERT_TRUE(zmq::recv_multipart(hostile, std::back_inserter(message)));
    const std::optional<Control> control = detail::ParseControl(detail::Bytes(message.at(0)));
    if (control && control->type == MessageType::kError) error = message.at(1).to_string();
  }
  EXPECT_THAT(error, HasSubstr("returned 9223372036854775808 credits"));
  ZmqBatchStream stream(context, TrainerOptions(reader.endpoint()));
  EXPECT_EQ(testing::Drain(stream, 1).batches.size(), kSamples / kBatch);
  EXPECT_EQ(reader.Join(), "");
}

TEST(Sessions, ATrainerThatLeavesIsFollowedByOneThatContinuesFromItsPosition) {
  Context context;
  Reader reader(context, Terms(2));
  {
    ZmqBatchStream first(context, TrainerOptions(reader.endpoint(), Terms(2)));
    ASSERT_TRUE(first.Next().has_value());
    ASSERT_TRUE(first.Next().has_value());
  }
  // The first trainer's bye and the second's hello come on different connections: wait
  // until the reader has seen the bye, or the hello could find it still busy.
  const auto deadline = std::chrono::steady_clock::now() + 60s;  // only a hang reaches it
  auto left = [&] {
    for (const std::string& line : reader.lines()) {
      if (line.find("left before the end") != std::string::npos) return true;
    }
    return false;
  };
  while (!left() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(left());
  SessionTerms resumed = Terms(2);
  resumed.first_position = 2 * kBatch;
  ZmqBatchStream second(context, TrainerOptions(reader.endpoint(), resumed));
  const testing::Collected got = testing::Drain(second, 2);
  // The same samples, pixels and labels as an uninterrupted run's from its third batch on.
  std::unique_ptr<loader::Loader> whole = OpenAt(Terms(2));
  LoaderStream in_process(*whole);
  const testing::Collected expected = testing::Drain(in_process, 2);
  ASSERT_EQ(got.batches.size() + 2, expected.batches.size());
  for (std::size_t i = 0; i < got.batches.size(); ++i) {
    const auto& want = expected.batches[i + 2];
    EXPECT_EQ(got.batches[i].indices, want.indices) << "batch " << i;
    EXPECT_EQ(got.batches[i].labels, want.labels) << "batch " << i;
    EXPECT_EQ(got.batches[i].images, want.images) << "batch " << i;
  }
  EXPECT_TRUE(second.ended());
  EXPECT_EQ(reader.Join(), "");
}

// One data position, never re-derived: the stream's data position is the reader's loader state.
// Resumed mid-epoch, for one instance and for the last of three (whose epoch ends in a short
// batch that the padding takes past the dataset size), after every batch, epoch end and the
// end, the trainer's ZmqBatchStream says what an in-process loader on the agreed terms says.
// The trainer states no dataset: the size comes from the reader's echo.
class StreamPosition : public ::testing::TestWithParam<std::uint32_t> {};

// What an in-process loader on `agreed` hands out: after each Next() its state() and the
// first sample of the batch (none at an epoch's end), until it ends.
struct LoaderSteps {
  loader::LoaderState start;
  std::vector<loader::LoaderState> after;
  std::vector<std::optional<std::uint64_t>> first_sample;
};

LoaderSteps StepInProcess(const SessionTerms& agreed) {
  std::unique_ptr<loader::Loader> local = OpenAt(agreed);
  LoaderStream in_process(*local);
  LoaderSteps steps{in_process.position(), {}, {}};
  while (!in_process.ended()) {
    const std::optional<ReceivedBatch> batch = in_process.Next();
    steps.after.push_back(in_process.position());
    steps.first_sample.push_back(batch ? std::optional(batch->sample_indices()[0]) : std::nullopt);
  }
  return steps;
}

TEST_P(StreamPosition, IsTheInProcessLoadersStateAfterTheSameBatches) {
  SessionTerms terms = Terms(3);
  terms.slice_count = GetParam();
  terms.slice_index = GetParam() - 1;
  terms.seed = 7;
  SessionTerms trainer = terms;
  trainer.dataset = {};
  trainer.first_epoch = 1;
  trainer.first_position = 2 * kBatch * GetParam();
  // First, alone: two loaders starting at once race inside libtbb, where TSan cannot see.
  const LoaderSteps want = StepInProcess(Agreed(trainer, terms));
  Context context;
  Reader reader(context, terms);
  ZmqBatchStream stream(context, TrainerOptions(reader.endpoint(), trainer));
  EXPECT_EQ(stream.position(), want.start);
  EXPECT_EQ(stream.position().dataset_size, kSamples);
  std::size_t batches = 0;
  std::size_t clamped = 0;  // positions that the padding would have taken past the size
  for (std::size_t i = 0; i < want.after.size(); ++i) {
    const std::optional<ReceivedBatch> batch = stream.Next();
    ASSERT_EQ(batch.has_value(), want.first_sample[i].has_value()) << "step " << i;
    if (batch) {
      EXPECT_EQ(batch->sample_indices()[0], *want.first_sample[i]) << "step " << i;
      ++batches;
      if (want.after[i].position == kSamples && batch->size() < kBatch) ++clamped;
    }
    EXPECT_EQ(stream.position(), want.after[i]) << "step " << i;
  }
  EXPECT_TRUE(stream.ended());
  EXPECT_EQ(stream.position(), (loader::LoaderState{7, 3, 0, kSamples}));
  // One instance: 8 batches left of epoch 1, 10 of epoch 2. Three: of epoch 1's last 16
  // samples 6 each (4 + 2), of epoch 2 14 each (4 + 4 + 4 + 2).
  EXPECT_EQ(batches, GetParam() == 1 ? 18u : 6u);
  EXPECT_EQ(clamped, GetParam() == 3 ? 2u : 0u);
  EXPECT_EQ(reader.Join(), "");
}

INSTANTIATE_TEST_SUITE_P(Slices, StreamPosition, ::testing::Values(1u, 3u));

// A fake reader: answers the hello with a welcome that echoes the trainer's terms.
class FakeReader {
 public:
  explicit FakeReader(Context& context)
      : socket_(context.impl().context, zmq::socket_type::router) {
    // Not 0: libzmq 4.3.4 aborts (session_base.cpp:260) when a linger-0 close drops the rest
    // of a multipart batch just as the trainer disconnects (see ReaderEndpoint's destructor).
    socket_.set(zmq::sockopt::linger, 1000);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  }
  const std::string& endpoint() const { return endpoint_; }
  void Welcome() {
    std::vector<zmq::message_t> hello;
    (void)zmq::recv_multipart(socket_, std::back_inserter(hello));
    id_ = hello.at(0).to_string();
    Send({Bytes(detail::EncodeControl({MessageType::kWelcome, kSamples / kBatch})),
          std::vector<std::byte>(
              static_cast<const std::byte*>(hello.at(2).data()),
              static_cast<const std::byte*>(hello.at(2).data()) + hello.at(2).size())});
  }
  // A well-formed batch of `epoch` whose labels are all `label`, its samples those of the
  // epoch's order (Terms(): seed 0, one instance) or, `in_order` false, 0, 1, 2, ...
  void Batch(std::uint64_t index, std::int32_t label, std::uint64_t epoch = 0,
             bool in_order = true) {
    std::vector<std::uint8_t> images(kBatch * kSide * kSide * 3, 7);
    std::vector<std::int32_t> labels(kBatch, label);
    std::vector<std::uint64_t> indices(kBatch);
    const loader::EpochOrder order(kSamples, 0, epoch, true, {});
    for (std::size_t i = 0; i < kBatch; ++i) {
      const std::size_t position = (index * kBatch + i) % kSamples;
      indices[i] = in_order ? order[position] : position;
    }
    const BatchMeta meta{epoch, index, kBatch, kSide, kSide, 3, loader::Layout::kNhwc};
    const FrameHeader header = MakeFrameHeader(meta, images, labels, indices);
    auto raw = [](const auto& v) {
      const auto* p = reinterpret_cast<const std::byte*>(v.data());
      return std::vector<std::byte>(p, p + v.size() * sizeof(v[0]));
    };
    Send({Bytes(detail::EncodeControl({MessageType::kBatch})), Bytes(EncodeFrameHeader(header)),
          raw(images), raw(labels), raw(indices)});
  }
  void Send(const std::vector<std::vector<std::byte>>& parts) {
    socket_.send(zmq::buffer(id_), zmq::send_flags::sndmore);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      socket_.send(zmq::buffer(parts[i]),
                   i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
  std::string id_;
};

// Next() must fail with `message` within a bound, after at most `good` batches.
void ExpectFailure(ZmqBatchStream& stream, std::size_t good, const std::string& message) {
  for (std::size_t i = 0; i < good; ++i) ASSERT_TRUE(stream.Next().has_value());
  try {
    (void)stream.Next();
    FAIL() << "no error; expected " << message;
  } catch (const TransportError& e) {
    EXPECT_THAT(e.what(), HasSubstr(message));
  }
}

// A fake reader welcomes a trainer and plays `script`; the trainer's Next() must fail with
// `message` after `good` batches. Returns the stream's position then.
loader::LoaderState ExpectScriptFails(const std::function<void(FakeReader&)>& script,
                                      std::size_t good, const std::string& message) {
  Context context;
  FakeReader fake(context);
  std::jthread serve([&] {
    fake.Welcome();
    script(fake);
  });
  ZmqBatchStream stream(context, TrainerOptions(fake.endpoint()));
  ExpectFailure(stream, good, message);
  return stream.position();
}

TEST(HostileReader, ALabelOutsideTheClassesIsRefusedNamingTheSample) {
  const loader::EpochOrder order(kSamples, 0, 0, true, {});  // the fake's first sample
  ExpectScriptFails([](FakeReader& fake) { fake.Batch(0, 1'000'000'000); }, 0,
                    "sent sample " + std::to_string(order[0]) +
                        " (batch 0 of epoch 0) with label 1000000000; this trainer has 10 classes");
}

// A reader that sends the samples of another order (another epoch's, another seed's, its
// own) is refused at the first position that differs, naming the sample and the one due.
TEST(HostileReader, SamplesOutOfTheEpochsOrderAreRefusedNamingThePosition) {
  const loader::EpochOrder order(kSamples, 0, 0, true, {});
  ExpectScriptFails([](FakeReader& fake) { fake.Batch(0, 1, 0, /*in_order=*/false); }, 0,
                    "sent batch 0 of epoch 0 with sample 0 at position 0 where the agreed order "
                    "has sample " +
                        std::to_string(order[0]) + " (0 substituted)");
  ExpectScriptFails(
      [](FakeReader& fake) {
        fake.Batch(0, 1);
        fake.Batch(1, 1, 0, /*in_order=*/false);
      },
      1,
      "sent batch 1 of epoch 0 with sample 4 at position 4 where the agreed order has sample " +
          std::to_string(order[4]));
}

TEST(HostileReader, ABatchOfAnotherEpochIsRefused) {
  const loader::LoaderState at = ExpectScriptFails(
      [](FakeReader& fake) {
        fake.Batch(0, 1);
        fake.Batch(0, 1, /*epoch=*/1);  // with no end of epoch 0 between them
      },
      1, "sent batch 0 of epoch 1 during epoch 0");
  EXPECT_EQ(at, (loader::LoaderState{0, 0, kBatch, kSamples}));  // the first batch's only
}

TEST(HostileReader, AnUnrequestedBatchIsRefused) {
  Context context;
  FakeReader fake(context);
  std::jthread serve([&] {
    fake.Welcome();
    for (std::uint64_t i = 0; i < 50; ++i) fake.Batch(i, 1);  // credits: 2, then 1 per Next()
  });
  ZmqBatchStream stream(context, TrainerOptions(fake.endpoint()));
  serve.join();  // all 50 sent before the trainer grants its first extra credit
  // Each Next() grants a credit, and one may reach the fake before its batch 2 reaches the
  // trainer; so the refused batch is the first one beyond the credits granted by then, and
  // every batch before it has been delivered.
  std::uint64_t good = 0;
  try {
    while (good < 50 && stream.Next().has_value()) ++good;
    FAIL() << "no error after " << good << " batches";
  } catch (const TransportError& e) {
    EXPECT_GE(good, 2u);
    EXPECT_THAT(e.what(),
                HasSubstr("sent batch " + std::to_string(good) + " of epoch 0 without a credit (" +
                          std::to_string(good) + " granted, all spent)"));
  }
}

TEST(HostileReader, AMessageLargerThanABatchIsRefusedBeforeItIsHeld) {
  Context context;
  FakeReader fake(context);
  std::jthread serve([&] {
    fake.Welcome();
    fake.Send({Bytes(detail::EncodeControl({MessageType::kBatch})),
               std::vector<std::byte>(std::size_t{8} << 20)});
  });
  ZmqBatchStream stream(context, TrainerOptions(fake.endpoint()));
  ExpectFailure(stream, 0, "dropped the connection");
}

TEST(HostileReader, AnEarlyByeIsAnError) {
  ExpectScriptFails(
      [](FakeReader& fake) {
        fake.Batch(0, 1);
        fake.Send({Bytes(detail::EncodeControl({MessageType::kBye, 1}))});
      },
      1, "ended the stream early: 1 batches of epoch 0");
}

TEST(SharedMemoryName, ASecondReaderIsRefusedAndTheSocketFileGoes) {
  Context context;
  const std::string name = "session-test-" + std::to_string(getpid());
  const std::string endpoint = "shm://" + name;
  const std::filesystem::path file = ZmqEndpoint(endpoint).substr(6);
  {
    ReaderEndpoint first(context, {.endpoint = endpoint}, Terms(), OpenAt);
    EXPECT_TRUE(std::filesystem::exists(file));
    try {
      ReaderEndpoint second(context, {.endpoint = endpoint}, Terms(), OpenAt);
      FAIL() << "a second reader took " << endpoint;
    } catch (const TransportError& e) {
      EXPECT_THAT(e.what(), HasSubstr("another reader serves it"));
    }
  }
  EXPECT_FALSE(std::filesystem::exists(file));
}

}  // namespace
}  // namespace tilefeed::transport
