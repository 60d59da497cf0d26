#pragma once

// MpiSession: the one MPI session of a process, made in main() and passed down as the
// trainer's Collectives. The constructor initialises MPI (MPI_THREAD_FUNNELED: only the
// thread that made the session calls MPI) and the destructor finalises it. It works under
// mpirun/poprun and without a launcher (OpenMPI's singleton init: one instance).
//
// Ownership: move-only; the moved-from session owns nothing and finalises nothing. MPI may
// be initialised once per process, so a process makes at most one MpiSession.
// Thread safety: as Collectives; construction and destruction on the main thread.

#include <vector>

#include "trainer/collectives.h"

namespace tilefeed::trainer {

class MpiSession final : public Collectives {
 public:
  // Initialises MPI. Throws MpiError if MPI refuses or is already initialised, or if it
  // cannot give MPI_THREAD_FUNNELED.
  MpiSession(int* argc, char*** argv);
  ~MpiSession() override;
  MpiSession(MpiSession&& other) noexcept;
  MpiSession& operator=(MpiSession&& other) noexcept;
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void AllreduceSum(std::span<float> data) override;
  void AllreduceSum(std::span<double> data) override;
  void AllreduceMax(std::span<double> data) override;
  std::pair<std::uint64_t, std::uint64_t> AllreduceMinMax(std::uint64_t value) override;
  void Broadcast(std::span<std::byte> data, int root) override;
  // MPI_Iallreduce / MPI_Testall / MPI_Waitall.
  void StartAllreduceSum(std::span<float> data) override;
  void Progress() override;
  void WaitAllreduces() override;
  // Ends every instance's run with `code` (for a failure on one instance that the others
  // would otherwise wait for forever in the next collective).
  [[noreturn]] void Abort(int code) const;

 private:
  bool active_ = false;  // this object initialised MPI and must finalise it
  int rank_ = 0;
  int size_ = 1;
  // Pending MPI_Iallreduce requests (MPI_Request handles, kept opaque here so this header
  // does not include mpi.h).
  struct Pending;
  std::vector<Pending> pending_;
};

}  // namespace tilefeed::trainer
