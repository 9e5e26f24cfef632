// append_output (issue 55): the earlier run's folders msprobe 26.2.0 goes on writing into.
#include <gtest/gtest.h>

#include "core/config_error.h"
#include "core/monitor_append.h"
#include "core/monitor_config.h"

using namespace msprobe;

TEST(MonitorAppend, TimeTagsOrderWithinAYear) {
  EXPECT_LT(*monitor_time_order("Jan31_23-59-59"), *monitor_time_order("Feb01_00-00-00"));
  EXPECT_LT(*monitor_time_order("Dec03_21-34-40"), *monitor_time_order("Dec03_21-34-41"));
  EXPECT_EQ(monitor_time_order("dec03_21-34-40"), monitor_time_order("Dec03_21-34-40"));
  EXPECT_FALSE(monitor_time_order("Dec03 21:34:40"));
  EXPECT_FALSE(monitor_time_order("Foo03_21-34-40"));
  EXPECT_FALSE(monitor_time_order("Dec03_21-34-40x"));
}

TEST(MonitorAppend, EachRanksFolderWithinTheTimes) {
  const std::vector<std::string> names = {
      "Dec03_21-34-40-rank0-1a2b3c4d", "Dec03_21-34-41-rank1-5e6f7a8b",
      "Dec03_22-00-00-rank2-00000000", "anomaly_detected", "Dec03_21-34-40-rankx-1"};
  const auto folders = monitor_append_folders(names, "Dec03_21-34-40", "Dec03_21-35-00");
  ASSERT_EQ(folders.size(), 2u);
  EXPECT_EQ(folders.at(0), "Dec03_21-34-40-rank0-1a2b3c4d");
  EXPECT_EQ(folders.at(1), "Dec03_21-34-41-rank1-5e6f7a8b");
}

TEST(MonitorAppend, TheConfigTakesTwoTimesInOrder) {
  const auto parse = [](const char* text) {
    return parse_monitor_config(nlohmann::json::parse(text), "m.json");
  };
  EXPECT_EQ(parse(R"({"append_output": ["Dec03_21-34-40", "Dec04_00-00-00"]})")
                .output.append_output.size(),
            2u);
  EXPECT_TRUE(parse(R"({"append_output": []})").output.append_output.empty());
  for (const char* bad : {R"({"append_output": ["Dec03_21-34-40"]})",
                          R"({"append_output": ["Dec04_00-00-00", "Dec03_21-34-40"]})",
                          R"({"append_output": ["yesterday", "today"]})",
                          R"({"append_output": "Dec03_21-34-40"})"}) {
    EXPECT_THROW(parse(bad), ConfigError) << bad;
  }
}
