#include "transport/shm.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "loader/image_folder.h"
#include "tests/transport/test_data.h"
#include "tilefeed/transport/streams.h"
#include "transport/reader_endpoint.h"

namespace tilefeed::transport {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// This process's segments of `job` still named in /dev/shm.
int SegmentsOf(const std::string& job) {
  const std::string prefix = "tilefeed-" + std::to_string(getuid()) + "-" + job + "-";
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

std::string UniqueJob(const char* name) { return std::string(name) + std::to_string(getpid()); }

TEST(SharedMemoryRing, RoundTripsAndLeavesNothingBehind) {
  tilefeed::testing::TempDir data = testing::MakeJpegFolder(6);
  const loader::LoaderOptions options = testing::SmallOptions(4, 24, 2);
  loader::Loader reference(loader::ImageFolder::Open(data.path().string()), options);
  LoaderStream in_process(reference);
  const testing::Collected expected = testing::Drain(in_process, 10);

  const std::string job = UniqueJob("roundtrip");
  Context context;
  loader::LoaderOptions shared_options = options;
  shared_options.slot_memory = SharedSlots::Create(shared_options, job);
  EXPECT_EQ(SegmentsOf(job), 1);
  loader::Loader loader(loader::ImageFolder::Open(data.path().string()), shared_options);
  ReaderEndpoint sender(context, loader, {.endpoint = "shm://" + job});
  SendResult result = SendResult::kStopped;
  std::jthread serving([&](std::stop_token stop) { result = sender.Run(stop); });
  {
    ZmqBatchStream stream(context, {.endpoint = sender.endpoint(), .credits = 3});
    // Both sides have mapped the ring: its name is already gone.
    EXPECT_EQ(SegmentsOf(job), 0);
    // The first batch, read and dropped before the rest (its slot goes back to the loader).
    std::optional<ReceivedBatch> first = stream.Next();
    ASSERT_TRUE(first);
    const testing::Collected::One one{
        first->epoch(),
        first->index(),
        {first->images().begin(), first->images().end()},
        {first->labels().begin(), first->labels().end()},
        {first->sample_indices().begin(), first->sample_indices().end()}};
    first.reset();
    testing::Collected received = testing::Drain(stream, 10);
    received.batches.insert(received.batches.begin(), one);
    EXPECT_TRUE(stream.ended());
    ASSERT_EQ(received.batches.size(), expected.batches.size());
    for (std::size_t i = 0; i < expected.batches.size(); ++i) {
      EXPECT_TRUE(received.batches[i] == expected.batches[i]) << "batch " << i;
    }
  }
  serving.join();
  EXPECT_EQ(result, SendResult::kCompleted);
  EXPECT_EQ(SegmentsOf(job), 0);
}

// A same-host reader that shrank its segment killed the trainer with SIGBUS. The
// opened mapping is guarded: a read past the new end reads zeros and the segment says it
// shrank. (On main this test dies of SIGBUS at the read.)
TEST(SharedMemoryRing, AShrunkSegmentReadsZerosInsteadOfRaisingSigbus) {
  const std::size_t bytes = std::size_t{64} * 4096;
  const std::string name = detail::MakeSegmentName(UniqueJob("shrink"));
  detail::ShmSegment created = detail::ShmSegment::Create(name, bytes);
  std::memset(created.data(), 0x5a, bytes);
  const detail::ShmSegment opened = detail::ShmSegment::Open(name, bytes);
  EXPECT_FALSE(opened.Shrunk());
  // The peer cuts its file to one page.
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  created.Unlink();
  EXPECT_TRUE(opened.Shrunk());
  EXPECT_EQ(opened.FileBytes(), 4096u);
  // The first page is still the peer's; every later one now reads as zeros.
  const volatile std::byte* data = opened.data();
  const std::byte first = data[0];
  const std::byte last = data[bytes - 1];
  const std::byte middle = data[std::ptrdiff_t{5} * 4096];
  EXPECT_EQ(first, std::byte{0x5a});
  EXPECT_EQ(last, std::byte{0});
  EXPECT_EQ(middle, std::byte{0});
  EXPECT_TRUE(opened.Shrunk());
  // A SIGBUS outside every guarded mapping still ends the process as before.
  EXPECT_DEATH(raise(SIGBUS), "");
}

TEST(SharedMemoryRing, ShmEndpointsNameTheRingAndNeedSharedSlots) {
  const std::string job = UniqueJob("endpoint");
  const std::string endpoint = "shm://" + job;
  EXPECT_TRUE(IsShmEndpoint(endpoint));
  EXPECT_THAT(ZmqEndpoint(endpoint), ::testing::StartsWith("ipc://"));
  EXPECT_THAT(ZmqEndpoint(endpoint),
              ::testing::EndsWith("/tilefeed-" + std::to_string(geteuid()) + "/" + job + ".sock"));
  EXPECT_EQ(ZmqEndpoint("tcp://127.0.0.1:1"), "tcp://127.0.0.1:1");
  EXPECT_EQ(ZmqEndpoint("tcp://localhost:1"), "tcp://127.0.0.1:1");  // a name: its address
  EXPECT_EQ(ZmqEndpoint("tcp://[::1]:1"), "tcp://[::1]:1");
  EXPECT_THROW((void)ZmqEndpoint("shm://"), std::invalid_argument);
  EXPECT_THROW((void)ZmqEndpoint("shm://a/b"), std::invalid_argument);

  Context context;
  loader::LoaderOptions options = testing::SmallOptions(2, 8, 1);
  {
    // Shared memory without SharedSlots under the loader: refused, not copied.
    loader::Loader plain(std::make_unique<testing::RawSource>(16, 8), options);
    EXPECT_THROW(ReaderEndpoint(context, plain, {.endpoint = endpoint}), std::invalid_argument);
    // SharedSlots made for other options: the loader refuses them.
    loader::LoaderOptions other = options;
    other.slot_memory = SharedSlots::Create(options, job);
    other.batch_size = 4;
    EXPECT_THROW(loader::Loader(std::make_unique<testing::RawSource>(16, 8), other),
                 std::invalid_argument);
  }
  EXPECT_EQ(SegmentsOf(job), 0);  // SharedSlots unlinks its name when it goes
  options.slot_memory = SharedSlots::Create(options, job);
  loader::Loader loader(std::make_unique<testing::RawSource>(16, 8), options);
  ReaderEndpoint sender(context, loader, {.endpoint = endpoint});
  std::jthread serving([&](std::stop_token stop) { (void)sender.Run(stop); });
  ZmqBatchStream stream(context, {.endpoint = endpoint, .credits = 2});
  const testing::Collected received = testing::Drain(stream, 10);
  EXPECT_EQ(received.batches.size(), 8u);
  EXPECT_TRUE(stream.ended());
}

TEST(SharedMemoryRing, HeldBatchesHoldTheirSlots) {
  const std::string job = UniqueJob("held");
  Context context;
  loader::LoaderOptions options = testing::SmallOptions(2, 8, 0);
  options.prefetch_depth = 2;
  options.slot_memory = SharedSlots::Create(options, job);
  loader::Loader loader(std::make_unique<testing::RawSource>(100, 8), options);
  ReaderEndpoint sender(context, loader, {.endpoint = "shm://" + job});
  std::jthread serving([&](std::stop_token stop) { (void)sender.Run(stop); });
  ZmqBatchStream stream(context, {.endpoint = sender.endpoint(), .credits = 2});
  std::optional<ReceivedBatch> a = stream.Next();
  std::optional<ReceivedBatch> b = stream.Next();
  ASSERT_TRUE(a && b);
  const std::vector<std::uint8_t> a_bytes(a->images().begin(), a->images().end());
  // Two slots, both held: nothing more can come, and a's slot is not overwritten.
  const auto until = Clock::now() + 200ms;
  while (Clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(sender.batches_sent(), 2u);
  EXPECT_EQ(std::vector<std::uint8_t>(a->images().begin(), a->images().end()), a_bytes);
  b.reset();  // returns one slot
  std::optional<ReceivedBatch> c = stream.Next();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->index(), 2u);
  // Sent is counted just after the send: wait for it rather than race it.
  const auto deadline = Clock::now() + 60s;  // a bound only a hang reaches
  while (sender.batches_sent() < 3 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(sender.batches_sent(), 3u);
}

TEST(SharedMemoryRing, ASigkilledCreatorLeavesNothingAfterTheNextStart) {
  const std::string job = UniqueJob("killed");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The creator: makes a segment and is killed before anyone maps (and unlinks) it.
    detail::ShmSegment segment = detail::ShmSegment::Create(detail::MakeSegmentName(job), 1 << 16);
    const char byte = 1;
    (void)!write(ready[1], &byte, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  EXPECT_EQ(SegmentsOf(job), 1);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(SegmentsOf(job), 1);  // the kernel does not clean /dev/shm
  // The next sender to offer shared memory removes it (RemoveStaleSegments).
  EXPECT_GE(detail::RemoveStaleSegments(), 1);
  EXPECT_EQ(SegmentsOf(job), 0);
}

// Waits up to `limit` for one byte on `fd`: the byte, or -1 on timeout or end of file.
int ReadByteWithin(int fd, std::chrono::milliseconds limit) {
  pollfd waiting{.fd = fd, .events = POLLIN, .revents = 0};
  if (poll(&waiting, 1, static_cast<int>(limit.count())) != 1) return -1;
  char byte = 0;
  return read(fd, &byte, 1) == 1 ? byte : -1;
}

// The trainer, in its own process: waits for a byte on `go` (the sender stands), maps the
// ring, takes a batch, writes 1 (or 0 without one) to `ready`, then waits to be killed.
// End of file on `go` (the parent failed before the sender stood) ends it.
[[noreturn]] void RunTrainerUntilKilled(int go, int ready, const std::string& endpoint) {
  char byte = 0;
  if (read(go, &byte, 1) != 1) _exit(1);
  Context child_context;
  ZmqBatchStream stream(child_context, {.endpoint = endpoint, .credits = 2});
  std::optional<ReceivedBatch> batch = stream.Next();
  byte = batch ? 1 : 0;
  (void)!write(ready, &byte, 1);
  pause();
  _exit(0);
}

// Kills and reaps a child process on destruction, unless `pid` was set to 0 (reaped).
struct Reaper {
  pid_t pid;
  ~Reaper() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

TEST(SharedMemoryRing, ASigkilledTrainerIsNoticedAndLeavesNothing) {
  const std::string job = UniqueJob("trainerkill");
  const std::string endpoint = "shm://" + job;
  // The trainer is forked before this process starts any thread (ZeroMQ's, the loader's): a
  // child forked from a multi-threaded process may inherit a lock another thread held (the
  // allocator's) and hang on its first malloc.
  int go[2];
  int ready[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(go[1]);
    close(ready[0]);
    RunTrainerUntilKilled(go[0], ready[1], endpoint);
  }
  close(go[0]);
  close(ready[1]);
  // Whatever happens below, the child does not outlive the test.
  Reaper reaper{child};

  Context context;
  loader::LoaderOptions options = testing::SmallOptions(2, 8, 0);
  options.slot_memory = SharedSlots::Create(options, job);
  loader::Loader loader(std::make_unique<testing::RawSource>(100, 8), options);
  ReaderEndpoint sender(context, loader,
                        {.endpoint = endpoint,
                         .heartbeat_interval = 50ms,
                         // The kill is noticed as silence: 5 s, so that a live trainer on a
                         // loaded machine is never taken for a dead one.
                         .peer_timeout = 5s});
  std::exception_ptr error;
  // Run(stop): a failed assertion below must not leave the sender waiting for a trainer.
  std::jthread serving([&](std::stop_token stop) {
    try {
      (void)sender.Run(stop);
    } catch (...) {
      error = std::current_exception();
    }
  });
  const char byte = 1;
  ASSERT_EQ(write(go[1], &byte, 1), 1);
  close(go[1]);
  ASSERT_EQ(ReadByteWithin(ready[0], 60s), 1) << "the trainer took no batch within 60 s";
  close(ready[0]);
  EXPECT_EQ(SegmentsOf(job), 0);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  reaper.pid = 0;
  const auto killed_at = Clock::now();
  serving.join();
  EXPECT_LT(Clock::now() - killed_at, 60s);  // a bound only a hang reaches
  ASSERT_TRUE(error);
  try {
    std::rethrow_exception(error);
  } catch (const TransportError& e) {
    EXPECT_THAT(e.what(), HasSubstr("trainer at "));
  }
  EXPECT_EQ(SegmentsOf(job), 0);
}

}  // namespace
}  // namespace tilefeed::transport
