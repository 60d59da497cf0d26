#include "tilefeed/launch/launch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tilefeed::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LaunchPlan Plan(int instances, std::vector<std::string> hosts = {}) {
  LaunchPlan plan;
  plan.instances = instances;
  plan.hosts = std::move(hosts);
  plan.program = {"./train", "--epochs", "2"};
  return plan;
}

HostFacts Facts(int cores, bool root = false) { return HostFacts{cores, root, "/usr/bin/mpirun"}; }

TEST(BuildMpirunCommand, BindsInstancesToTheirOwnCores) {
  LaunchPlan plan = Plan(4);
  plan.replicas_per_instance = 2;
  const MpirunCommand command = BuildMpirunCommand(plan, Facts(16));
  EXPECT_FALSE(command.oversubscribed);
  EXPECT_TRUE(command.warning.empty());
  EXPECT_THAT(command.argv,
              ElementsAre("/usr/bin/mpirun", "-np", "4", "--map-by", "slot:PE=4", "--bind-to",
                          "core", "--mca", "mpi_yield_when_idle", "1", "-x", "TILEFEED_INSTANCES=4",
                          "-x", "TILEFEED_REPLICAS_PER_INSTANCE=2", "-x",
                          "TILEFEED_CORES_PER_INSTANCE=4", "./train", "--epochs", "2"));
}

TEST(BuildMpirunCommand, AsRootAndOversubscribed) {
  const MpirunCommand command = BuildMpirunCommand(Plan(8), Facts(2, /*root=*/true));
  EXPECT_TRUE(command.oversubscribed);
  EXPECT_THAT(command.warning, HasSubstr("oversubscribing"));
  EXPECT_EQ(command.warning.find('\n'), std::string::npos);
  const std::string line = ShellJoin(command.argv);
  EXPECT_THAT(line, HasSubstr("/usr/bin/mpirun --allow-run-as-root -np 8 --oversubscribe "
                              "--map-by slot --bind-to none"));
}

TEST(BuildMpirunCommand, ExplicitCoresCanOversubscribe) {
  LaunchPlan plan = Plan(2);
  plan.cores_per_instance = 3;
  EXPECT_TRUE(BuildMpirunCommand(plan, Facts(4)).oversubscribed);
  plan.cores_per_instance = 2;
  const MpirunCommand command = BuildMpirunCommand(plan, Facts(4));
  EXPECT_FALSE(command.oversubscribed);
  EXPECT_THAT(ShellJoin(command.argv), HasSubstr("--map-by slot:PE=2 --bind-to core"));
}

TEST(BuildMpirunCommand, SpreadsOverHosts) {
  const MpirunCommand command = BuildMpirunCommand(Plan(4, {"a", "b"}), Facts(8));
  EXPECT_THAT(ShellJoin(command.argv), HasSubstr("-np 4 --host a:2,b:2 --map-by slot:PE=4"));
  // 5 over 2 hosts: 3 slots each, so the first host takes 3.
  EXPECT_THAT(ShellJoin(BuildMpirunCommand(Plan(5, {"a", "b"}), Facts(8)).argv),
              HasSubstr("--host a:3,b:3"));
}

TEST(BuildMpirunCommand, RefusesBadPlans) {
  EXPECT_THROW(BuildMpirunCommand(Plan(0), Facts(4)), LaunchError);
  LaunchPlan no_program = Plan(2);
  no_program.program.clear();
  EXPECT_THROW(BuildMpirunCommand(no_program, Facts(4)), LaunchError);
  LaunchPlan no_replicas = Plan(2);
  no_replicas.replicas_per_instance = 0;
  EXPECT_THROW(BuildMpirunCommand(no_replicas, Facts(4)), LaunchError);
  EXPECT_THROW(BuildMpirunCommand(Plan(2, {"a", ""}), Facts(4)), LaunchError);
  try {
    BuildMpirunCommand(Plan(2), HostFacts{4, false, ""});
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("mpirun not found"));
  }
}

TEST(ParseHostList, SplitsAndRejectsEmptyNames) {
  EXPECT_THAT(ParseHostList("h1,h2,h3"), ElementsAre("h1", "h2", "h3"));
  EXPECT_THAT(ParseHostList("solo"), ElementsAre("solo"));
  for (const char* bad : {"", "a,,b", ",a", "a,", "a b"}) {
    EXPECT_THROW(ParseHostList(bad), LaunchError) << bad;
  }
}

TEST(ShellQuote, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(ShellQuote("plain/path-1.0_x=y"), "plain/path-1.0_x=y");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("two words"), "'two words'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellJoin({"a", "b c"}), "a 'b c'");
}

TEST(FindInPath, FindsExecutables) {
  EXPECT_EQ(FindInPath("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(FindInPath("sh", "/nonexistent"), "");
  EXPECT_EQ(FindInPath("/bin/sh", ""), "/bin/sh");
}

}  // namespace
}  // namespace tilefeed::launch
