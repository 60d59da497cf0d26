#include "trainer/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/trainer/tiny_dataset.h"
#include "tests/trainer/train_runs.h"
#include "tilefeed/trainer/mpi_session.h"
#include "trainer/stall.h"

namespace tilefeed::trainer {
namespace {

using tilefeed::testing::TempDir;

Checkpoint Sample() {
  Checkpoint c;
  c.step = 12;
  c.epoch = 3;
  c.core = "reference";
  c.data_position = {5, 3, 40, 90};
  c.parameters = {1.5f, -2.0f, 3.25f, 0.0f};
  c.velocity = {0.1f, 0.2f, -0.3f, 0.4f};
  c.global_batch = 256;
  c.dataset_digest = 0xfedcba9876543210;
  return c;
}

TEST(Checkpoint, RoundTripsAndLeavesNoTemporaryFile) {
  TempDir dir("tilefeed-ckpt");
  EXPECT_FALSE(ReadCheckpoint(dir.path() / "none").has_value());
  WriteCheckpoint(dir.path() / "run", Sample());
  Checkpoint second = Sample();
  second.step = 13;
  WriteCheckpoint(dir.path() / "run", second);  // replaces the first
  const std::optional<Checkpoint> read = ReadCheckpoint(dir.path() / "run");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, second);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() / "run")) {
    EXPECT_EQ(entry.path().filename(), "checkpoint.tfck");
    ++files;
  }
  EXPECT_EQ(files, 1);
}

// A pid that no process has now: a child's, after it was reaped.
pid_t DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

// A writer SIGKILLed mid-write left its model-sized temporary file for good.
TEST(Checkpoint, RemovesTemporaryFilesOfDeadWritersOnly) {
  TempDir dir("tilefeed-ckpt");
  const std::filesystem::path run = dir.path() / "run";
  std::filesystem::create_directories(run);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::string dead = std::to_string(DeadPid());
  const std::string live = std::to_string(getppid());
  const std::string prefix = ".checkpoint.tfck.tmp.";
  const std::vector<std::string> stale = {prefix + dead, prefix + host + "." + dead};
  const std::vector<std::string> kept = {prefix + host + "." + live,
                                         prefix + "another-host." + dead, prefix + "notapid"};
  for (const auto& names : {stale, kept}) {
    for (const std::string& name : names) std::ofstream(run / name) << "partial";
  }
  WriteCheckpoint(run, Sample());
  for (const std::string& name : stale) EXPECT_FALSE(std::filesystem::exists(run / name)) << name;
  for (const std::string& name : kept) EXPECT_TRUE(std::filesystem::exists(run / name)) << name;
  // Opening a checkpoint cleans too.
  std::ofstream(run / stale[1]) << "partial";
  EXPECT_TRUE(ReadCheckpoint(run).has_value());
  EXPECT_FALSE(std::filesystem::exists(run / stale[1]));
}

TEST(Checkpoint, RefusesADamagedOrTruncatedFile) {
  TempDir dir("tilefeed-ckpt");
  WriteCheckpoint(dir.path(), Sample());
  const auto path = CheckpointPath(dir.path());
  std::vector<std::byte> bytes = testing::ReadFile(path);
  bytes[bytes.size() / 2] ^= std::byte{0x40};
  testing::WriteFile(path, bytes);
  EXPECT_THROW(ReadCheckpoint(dir.path()), CheckpointError);
  bytes.resize(bytes.size() / 2);
  testing::WriteFile(path, bytes);
  EXPECT_THROW(ReadCheckpoint(dir.path()), CheckpointError);
}

// Files with a data position line this version refuses, each with a valid checksum (of all
// before the trailer), so that the refusal is the line's: the retired remote format that
// train --readers wrote (no seed or dataset size) and a loader state that cannot be.
TEST(Checkpoint, RefusesARetiredOrImpossibleDataPositionNamingTheFile) {
  struct Case {
    const char* line;
    const char* checksum;
    const char* why;
  };
  const Case cases[] = {
      {"tilefeed-remote-state v1 epoch=1 position=64", "12216936293313675323",
       "its data position is in the retired format 'tilefeed-remote-state v1 epoch=1 "
       "position=64' (no seed or dataset size)"},
      {"tilefeed-loader-state v1 seed=1 epoch=1 position=64 size=10", "18443514433520957398",
       "data position: loader state position 64 is past the dataset size 10"},
  };
  for (const Case& c : cases) {
    TempDir dir("tilefeed-ckpt");
    std::ofstream(CheckpointPath(dir.path()), std::ios::binary)
        << "tilefeed-checkpoint v1 step=20 epoch=1 core=reference parameters=0 velocity=0 "
           "global_batch=4\n"
        << c.line << "\n\nfnv1a64=" << c.checksum << "\n";
    try {
      (void)ReadCheckpoint(dir.path());
      ADD_FAILURE() << "read a checkpoint whose data position is " << c.line;
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("checkpoint " + CheckpointPath(dir.path()).string() + ": "),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(c.why), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

// Training in two runs (stop, then --resume) gives bit-identical parameters and optimizer
// state to one uninterrupted run: mid-epoch, at an epoch's end, and across epochs.
class ResumeTest : public ::testing::TestWithParam<std::uint64_t> {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir("tilefeed-resume-data");
    testing::WriteTinyImageFolder(data_->path(), 3, 6);  // 18 images: 4 steps per epoch
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }
  static TempDir* data_;
};
TempDir* ResumeTest::data_ = nullptr;

TEST_P(ResumeTest, TwoRunsEqualOne) {
  LocalCollectives local;
  TempDir checkpoints("tilefeed-resume-ckpt");
  testing::RunConfig config;
  config.data = data_->path();
  config.checkpoint_dir = checkpoints.path();
  config.epochs = 3;
  const testing::RunResult whole = TrainTiny(config, local);
  ASSERT_EQ(whole.steps, 12u);

  config.max_steps = GetParam();
  config.checkpoint_every = GetParam();
  const testing::RunResult first = TrainTiny(config, local);
  ASSERT_EQ(first.steps, GetParam());
  config.max_steps = 0;
  config.checkpoint_every = 0;
  config.resume = true;
  const testing::RunResult second = TrainTiny(config, local);
  EXPECT_EQ(second.steps, 12u);
  EXPECT_EQ(second.parameters, whole.parameters);  // bit-identical
  EXPECT_EQ(second.velocity, whole.velocity);
  EXPECT_NE(first.parameters, whole.parameters);
}

INSTANTIATE_TEST_SUITE_P(StopAfter, ResumeTest, ::testing::Values(3, 4, 6));

TEST(Trainer, ReplicasAndAccumulationStayIdenticalAndLearn) {
  LocalCollectives local;
  TempDir data("tilefeed-replica-data");
  testing::WriteTinyImageFolder(data.path(), 3, 8);  // 24 images, 6 batches of 4
  testing::RunConfig config;
  config.data = data.path();
  config.epochs = 4;
  config.replicas = 2;
  config.accumulation = 1;
  config.batch = 4;
  const testing::RunResult result = TrainTiny(config, local);  // checks every step
  EXPECT_EQ(result.global_batch, 8u);
  EXPECT_EQ(result.steps, 12u);
  ASSERT_EQ(result.reports.size(), 4u);
  EXPECT_LT(result.reports.back().loss, result.reports.front().loss);
}

}  // namespace
}  // namespace tilefeed::trainer
