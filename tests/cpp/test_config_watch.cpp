#include "core/config_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace msprobe {
namespace {

class ConfigWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("config_watch_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "config.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Written so that its modification time or size differs from the last writing.
  void write(const std::string& text) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ofstream(path_) << text;
  }
  static std::string config(const char* enable, const char* level = "L1") {
    return std::string(R"({"task": "statistics", "dump_path": "/tmp/d", "level": ")") + level +
           R"(", "dump_enable": )" + enable + "}";
  }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(ConfigWatchTest, DumpEnableTurnsTheDumpOffAndOnWhenDue) {
  write(config("true"));
  ConfigWatch watch(path_, nlohmann::json::object(), true);
  write(config("false "));
  EXPECT_EQ(watch.poll(100.0), "config.json re-read: dump_enable is false: the dump is off");
  EXPECT_FALSE(watch.enabled());
  write(config("true  "));
  EXPECT_EQ(watch.poll(101.0), "");  // off: looked at every 3 s only
  EXPECT_FALSE(watch.enabled());
  EXPECT_EQ(watch.poll(103.5), "config.json re-read: dump_enable is true: the dump is on");
  EXPECT_TRUE(watch.enabled());
  EXPECT_EQ(watch.poll(110.0), "");  // unchanged file
}

TEST_F(ConfigWatchTest, AnInvalidFileTurnsTheDumpOff) {
  write(config("true"));
  ConfigWatch watch(path_, nlohmann::json::object(), true);
  write(R"({"task": "statistics", "dump_path": "/tmp/d", "level": "L7", "dump_enable": true})");
  const std::string said = watch.poll(100.0);
  EXPECT_NE(said.find("the dump is off until the file is valid again"), std::string::npos) << said;
  EXPECT_NE(said.find("L7"), std::string::npos) << said;
  EXPECT_FALSE(watch.enabled());
}

TEST_F(ConfigWatchTest, OtherChangesAreToldOnceAndNotTaken) {
  write(config("true"));
  ConfigWatch watch(path_, nlohmann::json::object(), true);
  write(config("true", "mix"));
  EXPECT_NE(watch.poll(100.0).find("only dump_enable is taken"), std::string::npos);
  EXPECT_TRUE(watch.enabled());
  write(config("false", "L0"));
  EXPECT_EQ(watch.poll(101.0), "config.json re-read: dump_enable is false: the dump is off");
}

}  // namespace
}  // namespace msprobe
