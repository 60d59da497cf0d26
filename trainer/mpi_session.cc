#include "trainer/mpi_session.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>

namespace tilefeed::trainer {
namespace {

// Turns an MPI return code into an MpiError naming the call.
void Check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw MpiError(std::string(call) +
                 " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

// MPI counts are int; gradient vectors of more than 2^31 elements go in pieces.
template <typename T, typename Fn>
void InChunks(std::span<T> data, Fn&& fn) {
  constexpr std::size_t kMaxCount = INT_MAX;
  for (std::size_t offset = 0; offset < data.size(); offset += kMaxCount) {
    const std::size_t count = std::min(kMaxCount, data.size() - offset);
    fn(data.data() + offset, static_cast<int>(count));
  }
}

}  // namespace

struct MpiSession::Pending {
  MPI_Request request = MPI_REQUEST_NULL;
};

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  Check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized) throw MpiError("MPI is already initialised: make one MpiSession per process");
  int provided = 0;
  Check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  active_ = true;
  // Failures come back as codes and become MpiError instead of killing the job silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    active_ = false;
    throw MpiError("MPI_Init_thread: MPI_THREAD_FUNNELED not provided");
  }
  Check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  Check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

MpiSession::~MpiSession() {
  if (!active_) return;
  // Requests still pending (an exception between start and wait) must finish before
  // MPI_Finalize; every instance started the same ones, so they complete.
  if (!pending_.empty()) {
    try {
      WaitAllreduces();
    } catch (const MpiError&) {
    }
  }
  MPI_Finalize();
}

MpiSession::MpiSession(MpiSession&& other) noexcept
    : active_(std::exchange(other.active_, false)),
      rank_(other.rank_),
      size_(other.size_),
      pending_(std::move(other.pending_)) {}

MpiSession& MpiSession::operator=(MpiSession&& other) noexcept {
  if (this != &other) {
    if (active_) MPI_Finalize();
    active_ = std::exchange(other.active_, false);
    rank_ = other.rank_;
    size_ = other.size_;
    pending_ = std::move(other.pending_);
  }
  return *this;
}

void MpiSession::AllreduceSum(std::span<float> data) {
  InChunks(data, [](float* p, int n) {
    Check(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce(float, sum)");
  });
}

void MpiSession::AllreduceSum(std::span<double> data) {
  InChunks(data, [](double* p, int n) {
    Check(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce(double, sum)");
  });
}

void MpiSession::AllreduceMax(std::span<double> data) {
  InChunks(data, [](double* p, int n) {
    Check(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
          "MPI_Allreduce(double, max)");
  });
}

std::pair<std::uint64_t, std::uint64_t> MpiSession::AllreduceMinMax(std::uint64_t value) {
  std::uint64_t low = 0;
  std::uint64_t high = 0;
  Check(MPI_Allreduce(&value, &low, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD),
        "MPI_Allreduce(uint64, min)");
  Check(MPI_Allreduce(&value, &high, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD),
        "MPI_Allreduce(uint64, max)");
  return {low, high};
}

void MpiSession::Broadcast(std::span<std::byte> data, int root) {
  InChunks(data, [root](std::byte* p, int n) {
    Check(MPI_Bcast(p, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  });
}

void MpiSession::StartAllreduceSum(std::span<float> data) {
  InChunks(data, [this](float* p, int n) {
    Pending pending;
    Check(MPI_Iallreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &pending.request),
          "MPI_Iallreduce(float, sum)");
    pending_.push_back(pending);
  });
}

void MpiSession::Progress() {
  // One MPI_Test per request: each call also drives OpenMPI's progress engine, and a
  // completed request becomes MPI_REQUEST_NULL (testing that again is allowed and cheap).
  for (Pending& p : pending_) {
    if (p.request == MPI_REQUEST_NULL) continue;
    int done = 0;
    Check(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), "MPI_Test(all-reduce)");
  }
}

void MpiSession::WaitAllreduces() {
  for (Pending& p : pending_) {
    if (p.request == MPI_REQUEST_NULL) continue;
    const int code = MPI_Wait(&p.request, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) {
      pending_.clear();
      Check(code, "MPI_Wait(all-reduce)");
    }
  }
  pending_.clear();
}

void MpiSession::Abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace tilefeed::trainer
