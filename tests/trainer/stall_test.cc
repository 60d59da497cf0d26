#include "trainer/stall.h"

#include <gtest/gtest.h>

namespace tilefeed::trainer {
namespace {

TEST(StallMeter, StallIsWaitOverStepTime) {
  StallMeter meter;
  EXPECT_EQ(meter.stall_fraction(), 0.0);
  meter.AddFill(5.0);  // the pipeline fill is not a stall
  meter.AddStep(0.0, 1.0);
  meter.AddStep(1.0, 1.0);
  meter.AddStep(0.5, 0.5);
  EXPECT_EQ(meter.steps(), 3u);
  EXPECT_DOUBLE_EQ(meter.wait_seconds(), 1.5);
  EXPECT_DOUBLE_EQ(meter.busy_seconds(), 2.5);
  EXPECT_DOUBLE_EQ(meter.step_seconds(), 4.0);
  EXPECT_DOUBLE_EQ(meter.stall_fraction(), 1.5 / 4.0);
  EXPECT_DOUBLE_EQ(meter.fill_seconds(), 5.0);
}

TEST(StallMeter, MergeAddsInstances) {
  StallMeter a;
  a.AddStep(1.0, 3.0);
  StallMeter b;
  b.AddStep(0.0, 4.0);
  b.AddFill(2.0);
  a.Merge(b);
  EXPECT_EQ(a.steps(), 2u);
  EXPECT_DOUBLE_EQ(a.stall_fraction(), 1.0 / 8.0);
  EXPECT_DOUBLE_EQ(a.fill_seconds(), 2.0);
}

TEST(StallMeter, AllWaitIsFullStall) {
  StallMeter meter;
  meter.AddStep(2.0, 0.0);
  EXPECT_DOUBLE_EQ(meter.stall_fraction(), 1.0);
}

TEST(EpochReport, JsonLineHasEveryFieldAndNullsForAbsentOnes) {
  EpochReport report;
  report.epoch = 2;
  report.images = 640;
  report.images_per_second = 123.5;
  report.stall_percent = 1.25;
  report.accuracy = 0.5;
  report.steps = 4;
  report.seconds = 2.0;
  report.allreduce = "overlap";
  report.allreduce_exposed_seconds = 0.25;
  const std::string line = ToJsonLine(report);
  EXPECT_NE(line.find("\"step_ms\":500"), std::string::npos);
  EXPECT_NE(line.find("\"allreduce\":\"overlap\""), std::string::npos);
  EXPECT_NE(line.find("\"allreduce_exposed_seconds\":0.25"), std::string::npos);
  EXPECT_NE(line.find("\"epoch\":2"), std::string::npos);
  EXPECT_NE(line.find("\"images\":640"), std::string::npos);
  EXPECT_NE(line.find("\"images_per_second\":123.5"), std::string::npos);
  EXPECT_NE(line.find("\"stall_percent\":1.25"), std::string::npos);
  EXPECT_NE(line.find("\"accuracy\":0.5"), std::string::npos);
  EXPECT_NE(line.find("\"val_accuracy\":null"), std::string::npos);
  EXPECT_EQ(line.front(), '{');
  EXPECT_EQ(line.back(), '}');
}

}  // namespace
}  // namespace tilefeed::trainer
