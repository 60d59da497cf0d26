#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>

#include "tilefeed/launch/launch.h"

namespace tilefeed::launch {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(DetectInstance, DefaultsToOneInstance) {
  EXPECT_EQ(DetectInstance(Env({})), (InstanceInfo{0, 1, 0, 1}));
  EXPECT_EQ(DetectInstance(Env({{"TILEFEED_INSTANCES", "1"}})), (InstanceInfo{0, 1, 0, 1}));
}

TEST(DetectInstance, ReadsOpenMpi) {
  const InstanceInfo info = DetectInstance(Env({{"OMPI_COMM_WORLD_RANK", "5"},
                                                {"OMPI_COMM_WORLD_SIZE", "8"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                                {"TILEFEED_INSTANCES", "8"}}));
  EXPECT_EQ(info, (InstanceInfo{5, 8, 1, 4}));
  EXPECT_EQ(SliceOf(info).index, 5);
  EXPECT_EQ(SliceOf(info).count, 8);
}

TEST(DetectInstance, ReadsPmi) {
  EXPECT_EQ(DetectInstance(Env({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}})),
            (InstanceInfo{2, 3, 2, 3}));
}

TEST(DetectInstance, RejectsBadValues) {
  for (const auto& vars : std::initializer_list<std::map<std::string, std::string>>{
           {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
           {{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
           {{"OMPI_COMM_WORLD_RANK", "1 "}, {"OMPI_COMM_WORLD_SIZE", "2"}},
           {{"OMPI_COMM_WORLD_SIZE", "2"}},
           {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}},
           {{"OMPI_COMM_WORLD_RANK", "0"},
            {"OMPI_COMM_WORLD_SIZE", "2"},
            {"TILEFEED_INSTANCES", "4"}},
           {{"TILEFEED_INSTANCES", "4"}},
       }) {
    EXPECT_THROW(DetectInstance(Env(vars)), std::invalid_argument);
  }
}

}  // namespace
}  // namespace tilefeed::launch
