// Run under `mpirun -np N` or `poprun --instances N` (any N >= 1): checks that every rank's
// DetectInstance() agrees with MPI, and that the ranks' loader shards of an epoch are
// disjoint, equal in size and together cover the dataset. Exits 0 on success; rank 0 prints
// "N instances: OK" or what failed.

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "tests/transport/test_data.h"
#include "tilefeed/launch/launch.h"
#include "tilefeed/loader/loader.h"

namespace {

// The MPI session: one object in main.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv) { MPI_Init(argc, argv); }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace tilefeed;
  MpiSession mpi(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  int failures = 0;
  launch::InstanceInfo instance;
  try {
    instance = launch::DetectInstance(launch::ProcessEnvironment());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: DetectInstance: %s\n", rank, e.what());
    ++failures;
  }
  if (instance.index != rank || instance.count != size) {
    std::fprintf(stderr, "rank %d of %d: DetectInstance says %d of %d\n", rank, size,
                 instance.index, instance.count);
    ++failures;
  }

  // A multiple of the rank count, so no instance pads its shard (padding repeats samples,
  // which is not what this checks); each shard is three full batches of 4.
  constexpr std::size_t kSamplesPerRank = 12;
  const std::size_t samples = kSamplesPerRank * static_cast<std::size_t>(size);
  loader::LoaderOptions options = transport::testing::SmallOptions(4, 8, 1);
  options.workers = 1;
  options.slice = launch::SliceOf(instance);
  loader::Loader loader(std::make_unique<transport::testing::RawSource>(samples, 8), options);
  std::vector<unsigned long long> mine;
  for (loader::Batch& batch : loader) {
    mine.insert(mine.end(), batch.sample_indices().begin(), batch.sample_indices().end());
  }

  if (mine.size() != kSamplesPerRank) {
    std::fprintf(stderr, "rank %d: %zu samples in its shard, expected %zu\n", rank, mine.size(),
                 kSamplesPerRank);
    ++failures;
  }
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(size);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> offsets(size, 0);
  for (int i = 1; i < size; ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  std::vector<unsigned long long> all(offsets.back() + counts.back());
  MPI_Allgatherv(mine.data(), count, MPI_UNSIGNED_LONG_LONG, all.data(), counts.data(),
                 offsets.data(), MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
  std::sort(all.begin(), all.end());
  std::vector<unsigned long long> want(samples);
  for (std::size_t i = 0; i < samples; ++i) want[i] = i;
  if (all != want) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "shards are not a disjoint cover: %zu indices gathered for %zu samples\n",
                   all.size(), samples);
    }
    ++failures;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%d instances: %s\n", size, total == 0 ? "OK" : "FAILED");
  return total == 0 ? 0 : 1;
}
