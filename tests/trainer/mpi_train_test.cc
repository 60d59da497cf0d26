// Runs under mpirun -np 2 (see tests/CMakeLists.txt): every rank trains a few steps on the
// same tiny dataset (its own shard) and the parameters must come out bit-identical.

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"
#include "tests/trainer/tiny_dataset.h"
#include "tests/trainer/train_runs.h"
#include "tilefeed/trainer/mpi_session.h"
#include "trainer/stall.h"

namespace tilefeed::trainer {
namespace {

MpiSession* session = nullptr;  // made in main; MPI allows one init per process

TEST(MpiTraining, InstancesStayBitIdenticalAndTheGlobalBatchAddsUp) {
  ASSERT_NE(session, nullptr);
  // Each rank writes its own copy; the files are a pure function of the arguments.
  testing::TempDir data("tilefeed-mpi-data");
  testing::WriteTinyImageFolder(data.path(), 3, 8);  // 24 images, 12 per rank
  testing::RunConfig config;
  config.data = data.path();
  config.epochs = 3;
  config.batch = 2;
  config.replicas = 2;
  config.accumulation = 2;
  const testing::RunResult result = testing::TrainTiny(config, *session);
  const auto instances = static_cast<std::size_t>(session->size());
  EXPECT_EQ(result.global_batch, std::size_t{2} * 2u * instances * 2u);
  // 24 / size samples per rank in batches of 2; each step takes 2 replicas x 2 of them.
  EXPECT_EQ(result.steps, 3u * ((24 / instances / 2) / 4));
  ASSERT_FALSE(result.reports.empty());
  EXPECT_EQ(result.reports[0].images, result.reports[0].steps * result.global_batch);
  // Byte-identical parameters on every rank (Train() also checked every step).
  const std::uint64_t checksum = ParameterChecksum(result.parameters);
  const auto [low, high] = session->AllreduceMinMax(checksum);
  EXPECT_EQ(low, high);
  std::vector<float> summed = result.parameters;
  session->AllreduceSum(std::span<float>(summed));
  for (std::size_t i = 0; i < summed.size(); i += 97) {
    EXPECT_EQ(summed[i], result.parameters[i] * static_cast<float>(instances));
  }
}

// The overlapped all-reduce (per-segment MPI_Iallreduce during the backward pass, replicas
// summed first) sums every element in the same order as the blocking one, so after several
// steps with replicas and accumulation both give the same bits.
TEST(MpiTraining, OverlappedAllreduceGivesTheBlockingParameters) {
  ASSERT_NE(session, nullptr);
  testing::TempDir data("tilefeed-mpi-data");
  testing::WriteTinyImageFolder(data.path(), 3, 8);
  testing::RunConfig config;
  config.data = data.path();
  config.epochs = 3;
  config.batch = 2;
  config.replicas = 2;
  config.accumulation = 1;
  config.allreduce = AllreduceMode::kBlocking;
  const testing::RunResult blocking = testing::TrainTiny(config, *session);
  config.allreduce = AllreduceMode::kOverlap;
  const testing::RunResult overlap = testing::TrainTiny(config, *session);
  ASSERT_GT(blocking.steps, 2u);
  EXPECT_EQ(overlap.steps, blocking.steps);
  ASSERT_EQ(overlap.parameters.size(), blocking.parameters.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < blocking.parameters.size(); ++i) {
    if (overlap.parameters[i] != blocking.parameters[i]) ++differing;
  }
  EXPECT_EQ(differing, 0u) << "of " << blocking.parameters.size() << " parameters";
  EXPECT_EQ(overlap.velocity, blocking.velocity);
  ASSERT_FALSE(overlap.reports.empty());
  EXPECT_EQ(overlap.reports.front().allreduce, "overlap");
  EXPECT_EQ(blocking.reports.front().allreduce, "blocking");
  // And the instances agree with each other.
  const auto [low, high] = session->AllreduceMinMax(ParameterChecksum(overlap.parameters));
  EXPECT_EQ(low, high);
}

}  // namespace
}  // namespace tilefeed::trainer

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tilefeed::trainer::MpiSession mpi(&argc, &argv);
  tilefeed::trainer::session = &mpi;
  // Only rank 0 prints; every rank's failures still fail the job through its exit code.
  if (mpi.rank() != 0) {
    delete ::testing::UnitTest::GetInstance()->listeners().Release(
        ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  }
  return RUN_ALL_TESTS();
}
