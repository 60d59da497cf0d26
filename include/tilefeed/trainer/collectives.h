#pragma once

// Collectives: the few collective operations data-parallel training needs (broadcast the
// parameters, all-reduce the gradients and the epoch figures, compare parameter checksums),
// behind an interface so the trainer does not see MPI. MpiSession (tilefeed/trainer/mpi_session.h)
// implements it over MPI_COMM_WORLD; LocalCollectives is the one-instance identity, for
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

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <utility>

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

}  // namespace tilefeed::trainer
