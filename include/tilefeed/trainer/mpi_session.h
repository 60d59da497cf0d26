#pragma once

// Collectives: the few collective operations data-parallel training needs (broadcast the
// parameters, all-reduce the gradients and the epoch figures, compare parameter checksums),
// behind an interface so the trainer does not see MPI. MpiSession (below) implements
// it over MPI_COMM_WORLD; LocalCollectives is the one-instance identity, for
// tests and single-process tools.
//
// Every instance calls the same collectives in the same order with the same sizes; a
// mismatch is a bug (MPI would hang or fail). After an all-reduce every instance holds the
// identical result, so instances that apply the same update stay bit-identical.
//
// Non-blocking all-reduce (for overlapping gradients with the backward pass): StartAllreduceSum
// begins a sum over one span and returns at once; Progress() lets the library move pending
// ones along (OpenMPI has no progress thread: a non-blocking collective advances only inside
// MPI calls, so the caller calls Progress() between pieces of compute); WaitAllreduces()
// returns when every started one is done. Until then the spans must stay alive and
// untouched. The element-wise sum is the same operation as AllreduceSum, so a span reduced
// in pieces holds what one blocking call would give (exactly so for two instances, where
// each element is one addition a + b; with more, the library's summation order could in
// principle differ between its blocking and non-blocking algorithms — every instance still
// gets the same bits, which the trainer's checksum check confirms).
// The base class does them as blocking calls, which is correct for any implementation.
//
// Thread safety: a Collectives object is used by one thread, the one that made it (MPI is
// initialised with MPI_THREAD_FUNNELED).
//
// MpiSession: the one MPI session of a process, made in main() and passed down as the
// trainer's Collectives. The constructor initialises MPI (MPI_THREAD_FUNNELED: only the
// thread that made the session calls MPI) and the destructor finalises it. It works under
// mpirun/poprun and without a launcher (OpenMPI's singleton init: one instance).
//
// The collective watchdog: every collective is started non-blocking and waited for in a
// loop of MPI_Test calls that, after a short spin (2 ms by default), sleeps between tests
// (from 10 us, doubling up to 250 us by default), so an instance waiting for a late peer
// uses a few per cent of a core, not a whole one. An instance that
// waits longer than collective_timeout asks every other instance, over a private duplicate of
// MPI_COMM_WORLD, which collective it is waiting in; each waiting instance answers from its
// own wait loop. After a grace period (at most 1 s) the waiter throws CollectiveTimeout,
// whose what() names the collective and the instances that did not answer (stopped, hung,
// or busy outside MPI for longer than the timeout) or that wait in another collective.
// main() then ends the whole job with Abort(). Nothing of this is sent while collectives
// complete in time.
//
// Ownership: move-only; the moved-from session owns nothing and finalises nothing. MPI may
// be initialised once per process, so a process makes at most one MpiSession.
// Thread safety: as Collectives; construction and destruction on the main thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tilefeed::trainer {

// A failed collective or MPI call; what() names the call and MPI's error string.
class MpiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  // This instance's index in [0, size()).
  virtual int rank() const = 0;
  // The number of instances.
  virtual int size() const = 0;
  // Replaces `data` on every instance by its elementwise sum over all instances.
  virtual void AllreduceSum(std::span<float> data) = 0;
  virtual void AllreduceSum(std::span<double> data) = 0;
  // Replaces `data` by its elementwise maximum over all instances.
  virtual void AllreduceMax(std::span<double> data) = 0;
  // The minimum and maximum of `value` over all instances.
  virtual std::pair<std::uint64_t, std::uint64_t> AllreduceMinMax(std::uint64_t value) = 0;
  // Copies `data` from instance `root` to every instance.
  virtual void Broadcast(std::span<std::byte> data, int root) = 0;

  // Starts replacing `data` by its elementwise sum over all instances (see above).
  virtual void StartAllreduceSum(std::span<float> data) { AllreduceSum(data); }
  // Advances pending non-blocking all-reduces without waiting for them.
  virtual void Progress() {}
  // Returns when every all-reduce started since the last call is complete.
  virtual void WaitAllreduces() {}
};

// One instance: every collective leaves its data as it is.
class LocalCollectives final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void AllreduceSum(std::span<float>) override {}
  void AllreduceSum(std::span<double>) override {}
  void AllreduceMax(std::span<double>) override {}
  std::pair<std::uint64_t, std::uint64_t> AllreduceMinMax(std::uint64_t value) override {
    return {value, value};
  }
  void Broadcast(std::span<std::byte>, int) override {}
  void StartAllreduceSum(std::span<float>) override {}
};

// A collective that did not complete within the timeout; what() names the instances that
// did not arrive.
class CollectiveTimeout : public MpiError {
 public:
  using MpiError::MpiError;
};

struct MpiSessionOptions {
  // A collective that waits longer than this throws CollectiveTimeout (zero: wait forever).
  // The default leaves room for the slowest legitimate wait, an instance that opens a large
  // dataset or fills its pipeline before the first step.
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(300)};
  // The longest sleep between two MPI_Test calls of a wait. Longer costs less CPU while a
  // peer is late but adds up to this much latency to each round of a collective's algorithm
  // (docs/scaling.md); zero tests without sleeping (a spinning core).
  std::chrono::microseconds max_wait_sleep{250};
  // A wait tests without sleeping this long first: a collective whose peers are all there
  // needs many MPI calls to move its fragments along, and sleeping between them would add
  // milliseconds to every step (docs/scaling.md).
  std::chrono::microseconds spin_before_sleep{2000};
};

class MpiSession final : public Collectives {
 public:
  // Initialises MPI. Throws MpiError if MPI refuses or is already initialised, or if it
  // cannot give MPI_THREAD_FUNNELED.
  MpiSession(int* argc, char*** argv, const MpiSessionOptions& options = {});
  ~MpiSession() override;
  // Not movable: a process has one session, made in main() and passed down by reference.
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Changes the watchdog's timeout for later collectives (zero: wait forever).
  void set_collective_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds collective_timeout() const { return timeout_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Each throws MpiError, or CollectiveTimeout past the timeout.
  void AllreduceSum(std::span<float> data) override;
  void AllreduceSum(std::span<double> data) override;
  void AllreduceMax(std::span<double> data) override;
  std::pair<std::uint64_t, std::uint64_t> AllreduceMinMax(std::uint64_t value) override;
  void Broadcast(std::span<std::byte> data, int root) override;
  // MPI_Iallreduce / MPI_Testall / the watchdog's wait.
  void StartAllreduceSum(std::span<float> data) override;
  void Progress() override;
  void WaitAllreduces() override;
  // Ends every instance's run with `code` (for a failure on one instance that the others
  // would otherwise wait for in the next collective).
  [[noreturn]] void Abort(int code) const;

 private:
  struct Requests;
  // AllreduceSum (double) and AllreduceMax: one all-reduce of `data` in place.
  void AllreduceDoubles(std::span<double> data, bool max);
  // Waits for every request in `requests` under the watchdog; `what` names the collective.
  void Wait(Requests& requests, const char* what);
  // Answers other instances' "where are you?" queries (see above).
  void AnswerQueries();
  // Asks every other instance where it is and returns the line for CollectiveTimeout.
  std::string Diagnose(const char* what, double waited_seconds);

  bool active_ = false;  // this object initialised MPI and must finalise it
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds max_sleep_;
  std::chrono::microseconds spin_;
  std::uint64_t sequence_ = 0;         // collectives started so far (the same on every instance)
  std::unique_ptr<Requests> pending_;  // started MPI_Iallreduce requests
  std::unique_ptr<Requests> answers_;  // answers in flight to other instances' queries
  struct Comm;
  std::unique_ptr<Comm> watchdog_;  // a duplicate of MPI_COMM_WORLD for the queries
};

}  // namespace tilefeed::trainer
