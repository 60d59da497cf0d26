#include "tilefeed/trainer/mpi_session.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <utility>

namespace tilefeed::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// Tags on the watchdog's communicator.
constexpr int kQueryTag = 1;   // payload: the asker's collective sequence number
constexpr int kAnswerTag = 2;  // payload: the answerer's collective sequence number

// The wait loop's sleep: short at first (most collectives of a step finish within tens of
// microseconds of the last arrival), then doubling up to MpiSessionOptions::max_wait_sleep,
// so that a long wait costs a wake-up every 250 us by default (a few per cent of a core).
constexpr std::chrono::microseconds kFirstSleep{10};
// The diagnosis loop's sleep between probes for answers.
constexpr std::chrono::microseconds kProbeSleep{250};
// How long a timed-out instance waits for the others to say where they are.
constexpr std::chrono::milliseconds kMaxGrace{1000};

// Turns an MPI return code into an MpiError naming the call.
void Check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw MpiError(std::string(call) +
                 " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

// MPI counts are int; vectors of more than 2^31 elements go in pieces.
template <typename T, typename Fn>
void InChunks(std::span<T> data, Fn&& fn) {
  constexpr std::size_t kMaxCount = INT_MAX;
  for (std::size_t offset = 0; offset < data.size(); offset += kMaxCount) {
    const std::size_t count = std::min(kMaxCount, data.size() - offset);
    fn(data.data() + offset, static_cast<int>(count));
  }
}

std::string RankList(const std::vector<int>& ranks) {
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return list;
}

}  // namespace

struct MpiSession::Requests {
  std::vector<MPI_Request> requests;
  std::deque<std::uint64_t> buffers;  // send buffers that must outlive their requests

  // True when every request is complete (completed ones become MPI_REQUEST_NULL).
  bool TestAll(const char* what) {
    if (requests.empty()) return true;
    int done = 0;
    Check(
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
        what);
    return done != 0;
  }
};

struct MpiSession::Comm {
  MPI_Comm comm = MPI_COMM_NULL;
};

MpiSession::MpiSession(int* argc, char*** argv, const MpiSessionOptions& options)
    : timeout_(options.collective_timeout),
      max_sleep_(options.max_wait_sleep),
      spin_(options.spin_before_sleep),
      pending_(std::make_unique<Requests>()),
      answers_(std::make_unique<Requests>()),
      watchdog_(std::make_unique<Comm>()) {
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
  Check(MPI_Comm_dup(MPI_COMM_WORLD, &watchdog_->comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(watchdog_->comm, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  if (!active_) return;
  // Requests still pending (an exception between start and wait) must finish before
  // MPI_Finalize; every instance started the same ones, so they complete.
  if (!pending_->requests.empty()) {
    try {
      WaitAllreduces();
    } catch (const MpiError&) {
    }
  }
  if (watchdog_->comm != MPI_COMM_NULL) MPI_Comm_free(&watchdog_->comm);
  MPI_Finalize();
}

void MpiSession::AnswerQueries() {
  if (answers_->TestAll("MPI_Testall(watchdog answers)")) {
    answers_->requests.clear();
    answers_->buffers.clear();
  }
  while (true) {
    int waiting = 0;
    MPI_Status status;
    Check(MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, watchdog_->comm, &waiting, &status),
          "MPI_Iprobe(watchdog)");
    if (!waiting) return;
    std::uint64_t asked = 0;
    Check(MPI_Recv(&asked, 1, MPI_UINT64_T, status.MPI_SOURCE, kQueryTag, watchdog_->comm,
                   MPI_STATUS_IGNORE),
          "MPI_Recv(watchdog query)");
    answers_->buffers.push_back(sequence_);
    MPI_Request request = MPI_REQUEST_NULL;
    Check(MPI_Isend(&answers_->buffers.back(), 1, MPI_UINT64_T, status.MPI_SOURCE, kAnswerTag,
                    watchdog_->comm, &request),
          "MPI_Isend(watchdog answer)");
    answers_->requests.push_back(request);
  }
}

void MpiSession::Wait(Requests& requests, const char* what) {
  const auto start = Clock::now();
  std::chrono::microseconds sleep = std::min(kFirstSleep, max_sleep_);
  while (!requests.TestAll(what)) {
    if (size_ > 1) AnswerQueries();
    const auto waited = Clock::now() - start;
    if (timeout_.count() > 0 && waited >= timeout_) {
      throw CollectiveTimeout(Diagnose(what, std::chrono::duration<double>(waited).count()));
    }
    if (waited < spin_ || sleep.count() == 0) continue;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, max_sleep_);
  }
  requests.requests.clear();
  requests.buffers.clear();
}

std::string MpiSession::Diagnose(const char* what, double waited_seconds) {
  // Ask everyone; the answers say who is waiting where. The queries to instances that never
  // answer stay in flight, so their buffers live in answers_ (the session's), not here.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    answers_->buffers.push_back(sequence_);
    MPI_Request request = MPI_REQUEST_NULL;
    Check(MPI_Isend(&answers_->buffers.back(), 1, MPI_UINT64_T, r, kQueryTag, watchdog_->comm,
                    &request),
          "MPI_Isend(watchdog query)");
    answers_->requests.push_back(request);
  }
  std::vector<std::int64_t> where(static_cast<std::size_t>(size_), -1);  // -1: no answer
  where[static_cast<std::size_t>(rank_)] = static_cast<std::int64_t>(sequence_);
  int answered = 1;
  const auto grace = std::min(kMaxGrace, timeout_);
  const auto deadline = Clock::now() + grace;
  while (answered < size_ && Clock::now() < deadline) {
    AnswerQueries();
    int arrived = 0;
    MPI_Status status;
    Check(MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, watchdog_->comm, &arrived, &status),
          "MPI_Iprobe(watchdog answer)");
    if (!arrived) {
      std::this_thread::sleep_for(kProbeSleep);
      continue;
    }
    std::uint64_t at = 0;
    Check(MPI_Recv(&at, 1, MPI_UINT64_T, status.MPI_SOURCE, kAnswerTag, watchdog_->comm,
                   MPI_STATUS_IGNORE),
          "MPI_Recv(watchdog answer)");
    std::int64_t& slot = where[static_cast<std::size_t>(status.MPI_SOURCE)];
    if (slot < 0) ++answered;
    slot = static_cast<std::int64_t>(at);
  }
  std::vector<int> missing;
  std::string elsewhere;
  for (int r = 0; r < size_; ++r) {
    const std::int64_t at = where[static_cast<std::size_t>(r)];
    if (at < 0) {
      missing.push_back(r);
    } else if (at != static_cast<std::int64_t>(sequence_)) {
      elsewhere +=
          "; instance " + std::to_string(r) + " waits in collective #" + std::to_string(at);
    }
  }
  char times[96];
  std::snprintf(times, sizeof(times), "after %.1f s (--collective-timeout %g s): ", waited_seconds,
                static_cast<double>(timeout_.count()) / 1000.0);
  std::string line = "collective #" + std::to_string(sequence_) + " (" + what +
                     ") timed out on instance " + std::to_string(rank_) + " of " +
                     std::to_string(size_) + " " + times;
  if (!missing.empty()) {
    line += std::string(missing.size() == 1 ? "instance " : "instances ") + RankList(missing) +
            " did not arrive (stopped, hung, or busy outside MPI)";
  } else {
    line += "every instance answered";
  }
  return line + elsewhere;
}

void MpiSession::AllreduceSum(std::span<float> data) {
  StartAllreduceSum(data);
  WaitAllreduces();
}

void MpiSession::AllreduceSum(std::span<double> data) { AllreduceDoubles(data, false); }

void MpiSession::AllreduceMax(std::span<double> data) { AllreduceDoubles(data, true); }

void MpiSession::AllreduceDoubles(std::span<double> data, bool max) {
  ++sequence_;
  Requests requests;
  InChunks(data, [&](double* p, int n) {
    requests.requests.push_back(MPI_REQUEST_NULL);
    Check(MPI_Iallreduce(MPI_IN_PLACE, p, n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD,
                         &requests.requests.back()),
          max ? "MPI_Iallreduce(double, max)" : "MPI_Iallreduce(double, sum)");
  });
  Wait(requests, max ? "all-reduce (double, max)" : "all-reduce (double, sum)");
}

std::pair<std::uint64_t, std::uint64_t> MpiSession::AllreduceMinMax(std::uint64_t value) {
  ++sequence_;
  std::uint64_t low = 0;
  std::uint64_t high = 0;
  Requests requests;
  requests.requests.assign(2, MPI_REQUEST_NULL);
  Check(
      MPI_Iallreduce(&value, &low, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD, &requests.requests[0]),
      "MPI_Iallreduce(uint64, min)");
  Check(MPI_Iallreduce(&value, &high, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                       &requests.requests[1]),
        "MPI_Iallreduce(uint64, max)");
  Wait(requests, "all-reduce (parameter checksum min/max)");
  return {low, high};
}

void MpiSession::Broadcast(std::span<std::byte> data, int root) {
  ++sequence_;
  Requests requests;
  InChunks(data, [&](std::byte* p, int n) {
    requests.requests.push_back(MPI_REQUEST_NULL);
    Check(MPI_Ibcast(p, n, MPI_BYTE, root, MPI_COMM_WORLD, &requests.requests.back()),
          "MPI_Ibcast");
  });
  Wait(requests, "broadcast");
}

void MpiSession::StartAllreduceSum(std::span<float> data) {
  // One sequence number per step's gradient all-reduce, however many pieces it has.
  if (pending_->requests.empty()) ++sequence_;
  InChunks(data, [this](float* p, int n) {
    pending_->requests.push_back(MPI_REQUEST_NULL);
    Check(MPI_Iallreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                         &pending_->requests.back()),
          "MPI_Iallreduce(float, sum)");
  });
}

void MpiSession::Progress() {
  // MPI_Testall drives OpenMPI's progress engine; completed requests become
  // MPI_REQUEST_NULL (testing those again is allowed and cheap).
  if (!pending_->requests.empty()) pending_->TestAll("MPI_Testall(all-reduce)");
}

void MpiSession::WaitAllreduces() {
  try {
    Wait(*pending_, "gradient all-reduce");
  } catch (...) {
    pending_->requests.clear();
    throw;
  }
}

void MpiSession::Abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace tilefeed::trainer
