// Tests of the config.json reader (docs/config.md): defaults, a full round trip, keyword overrides,
// range lists, and the exact one-line message of every kind of rejection.

#include "core/config.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace msprobe {
namespace {

using msprobe::testing::error_of;
using nlohmann::json;
namespace fs = std::filesystem;

std::string config_error(const std::string& text, const json& overrides = json::object(),
                         const std::string& source = "config.json") {
  return error_of<ConfigError>([&] { parse_config(json::parse(text), source, overrides); });
}

TEST(ConfigTest, DefaultsWhenOnlyDumpPathIsGiven) {
  Config c = parse_config(json{{"dump_path", "./dump"}}, "config.json");
  EXPECT_EQ(c.task, Task::Statistics);
  EXPECT_EQ(c.dump_path, "./dump");
  EXPECT_TRUE(c.rank.all());
  EXPECT_TRUE(c.step.all());
  EXPECT_EQ(c.level, Level::L1);
  for (const CollectSection* s : {&c.statistics, &c.tensor}) {
    EXPECT_TRUE(s->scope.empty());
    EXPECT_TRUE(s->list.empty());
    EXPECT_TRUE(s->data_mode.forward && s->data_mode.backward);
    EXPECT_TRUE(s->data_mode.input && s->data_mode.output);
    EXPECT_EQ(s->summary_mode, SummaryMode::Statistics);
  }
  EXPECT_EQ(c.overflow_check.overflow_nums, 1);
  EXPECT_EQ(c.overflow_check.action, Action::Raise);
  EXPECT_EQ(c.overflow_check.stop_level, Severity::Critical);
  EXPECT_DOUBLE_EQ(c.overflow_check.mutation_threshold, 1e5);
  EXPECT_TRUE(c.overflow_check.rules.empty());
  EXPECT_FALSE(c.overflow_check.compat);
  EXPECT_EQ(c.overflow_check.sync, SyncMode::Auto);
  EXPECT_EQ(c.overflow_check.sync_batch_calls, 256);
}

TEST(ConfigTest, SyncModes) {
  Config c = parse_config(
      json{{"dump_path", "d"}, {"overflow_check", {{"sync", "batch"}, {"sync_batch_calls", 8}}}},
      "config.json");
  EXPECT_EQ(c.overflow_check.sync, SyncMode::Batch);
  EXPECT_EQ(c.overflow_check.sync_batch_calls, 8);
  c = parse_config(json::object(), "PrecisionDebugger", json{{"dump_path", "d"}, {"sync", "call"}});
  EXPECT_EQ(c.overflow_check.sync, SyncMode::Call);
}

TEST(ConfigTest, FullConfigRoundTrip) {
  Config c = parse_config(json::parse(R"({
    "task": "overflow_check", "dump_path": "/tmp/out", "rank": [1, "4-6"], "step": ["0-2", 7],
    "level": "mix",
    "statistics": {"scope": ["Module.conv1.Conv2d.forward.0", "Module.fc2.Linear.forward.0"],
                   "list": ["relu"], "data_mode": ["forward", "input"], "summary_mode": "md5"},
    "tensor": {"scope": [], "list": ["Tensor.permute.1.forward", "matmul"],
               "data_mode": ["backward", "output"]},
    "overflow_check": {"overflow_nums": -1, "action": "continue", "stop_level": "high",
                       "mutation_threshold": 1000, "rules": ["extra.yaml", "/abs/r.yaml"],
                       "compat": true}
  })"),
                          "config.json", json::object(), "/etc/cfg");
  EXPECT_EQ(c.task, Task::OverflowCheck);
  EXPECT_EQ(c.dump_path, "/tmp/out");
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(c.rank.ranges(), (Ranges{{1, 1}, {4, 6}}));
  EXPECT_EQ(c.step.ranges(), (Ranges{{0, 2}, {7, 7}}));
  EXPECT_EQ(c.level, Level::Mix);

  EXPECT_EQ(c.statistics.scope, (std::vector<std::string>{"Module.conv1.Conv2d.forward.0",
                                                          "Module.fc2.Linear.forward.0"}));
  EXPECT_EQ(c.statistics.list, std::vector<std::string>{"relu"});
  EXPECT_TRUE(c.statistics.data_mode.forward);
  EXPECT_FALSE(c.statistics.data_mode.backward);
  EXPECT_TRUE(c.statistics.data_mode.input);
  EXPECT_FALSE(c.statistics.data_mode.output);
  EXPECT_EQ(c.statistics.summary_mode, SummaryMode::Md5);

  EXPECT_TRUE(c.tensor.scope.empty());
  EXPECT_EQ(c.tensor.list, (std::vector<std::string>{"Tensor.permute.1.forward", "matmul"}));
  EXPECT_FALSE(c.tensor.data_mode.forward);
  EXPECT_TRUE(c.tensor.data_mode.backward);
  EXPECT_FALSE(c.tensor.data_mode.input);
  EXPECT_TRUE(c.tensor.data_mode.output);

  EXPECT_EQ(c.overflow_check.overflow_nums, -1);
  EXPECT_EQ(c.overflow_check.action, Action::Continue);
  EXPECT_EQ(c.overflow_check.stop_level, Severity::High);
  EXPECT_DOUBLE_EQ(c.overflow_check.mutation_threshold, 1000.0);
  EXPECT_EQ(c.overflow_check.rules,
            (std::vector<std::string>{"/etc/cfg/extra.yaml", "/abs/r.yaml"}));
  EXPECT_TRUE(c.overflow_check.compat);
}

TEST(ConfigTest, CollectPicksTheTaskSection) {
  json doc = json::parse(
      R"({"dump_path": "d", "statistics": {"list": ["a"]}, "tensor": {"list": ["b"]}})");
  doc["task"] = "tensor";
  EXPECT_EQ(parse_config(doc, "config.json").collect().list, std::vector<std::string>{"b"});
  doc["task"] = "statistics";
  EXPECT_EQ(parse_config(doc, "config.json").collect().list, std::vector<std::string>{"a"});
  doc["task"] = "overflow_check";
  EXPECT_EQ(parse_config(doc, "config.json").collect().list, std::vector<std::string>{"a"});
}

TEST(ConfigTest, RulesStayRelativeWithoutBaseDir) {
  Config c = parse_config(
      json::parse(R"({"dump_path": "d", "overflow_check": {"rules": ["r.yaml"]}})"), "config.json");
  EXPECT_EQ(c.overflow_check.rules, std::vector<std::string>{"r.yaml"});
}

// msprobe 1.1.x's shipped config.json, plus keys from its documentation: a user pastes it as is.
TEST(ConfigTest, AcceptsMsprobeOwnConfig) {
  Config c = parse_config(json::parse(R"({
    "task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1",
    "enable_dataloader": false, "is_deterministic": true, "async_dump": false,
    "framework": "pytorch", "seed": 1234,
    "tensor": {"scope": [], "list": [], "data_mode": ["all"], "file_format": "npy",
               "online_run_ut": false, "nfs_path": "", "host": "", "port": -1, "tls_path": "./",
               "online_run_ut_recompute": false},
    "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
    "overflow_check": {"overflow_nums": 1, "check_mode": "all"},
    "run_ut": {"white_list": [], "black_list": [], "error_data_path": "./"},
    "grad_probe": {"grad_level": "L1", "param_list": [], "bounds": [-1, 0, 1]},
    "free_benchmark": {"scope": [], "list": [], "fuzz_device": "npu", "if_preheat": false}
  })"),
                          "config.json");
  EXPECT_EQ(c.task, Task::Statistics);
  EXPECT_EQ(c.dump_path, "./dump_path");
  EXPECT_FALSE(c.async_dump);
}

TEST(ConfigTest, AsyncDumpIsMsprobesKey) {
  EXPECT_TRUE(parse_config(json::parse(R"({"dump_path": "d", "async_dump": true})"), "config.json")
                  .async_dump);
  EXPECT_FALSE(parse_config(json::parse(R"({"dump_path": "d", "async_dump": false})"), "c.json")
                   .async_dump);
}

// Issue 56: left out, the tasks that write every listed step write beside the training; those
// that write only flagged steps write them in stop().
TEST(ConfigTest, AsyncDumpLeftOutIsOnForStatisticsAndTensorOnly) {
  const auto async_of = [](const char* task) {
    return parse_config(json{{"dump_path", "d"}, {"task", task}}, "config.json").async_dump;
  };
  EXPECT_TRUE(parse_config(json::parse(R"({"dump_path": "d"})"), "config.json").async_dump);
  EXPECT_TRUE(async_of("statistics"));
  EXPECT_TRUE(async_of("tensor"));
  EXPECT_FALSE(async_of("overflow_check"));
  EXPECT_FALSE(async_of("structure"));
  EXPECT_TRUE(parse_config(json{{"dump_path", "d"}, {"task", "overflow_check"}}, "c.json",
                           json{{"async_dump", true}})
                  .async_dump);
}

TEST(ConfigTest, AsyncDumpIsAKeywordToo) {
  const json file = json::parse(R"({"dump_path": "d", "async_dump": false})");
  EXPECT_TRUE(parse_config(file, "config.json", json::parse(R"({"async_dump": true})")).async_dump);
  EXPECT_FALSE(
      parse_config(file, "config.json", json::parse(R"({"async_dump": null})")).async_dump);
  try {
    parse_config(file, "config.json", json::parse(R"({"async_dump": "yes"})"));
    FAIL() << "a string is no bool";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PrecisionDebugger(async_dump=...)"), std::string::npos)
        << e.what();
  }
}

TEST(ConfigTest, OverridesReplaceFileValues) {
  json file = json::parse(R"({"task": "statistics", "dump_path": "./a", "level": "L0",
                              "step": [5], "rank": [3]})");
  json overrides = json::parse(
      R"({"task": "tensor", "step": [0, "2-3"], "level": "mix", "dump_path": "/tmp/x", "rank": [0]})");
  Config c = parse_config(file, "config.json", overrides);
  EXPECT_EQ(c.task, Task::Tensor);
  EXPECT_EQ(c.dump_path, "/tmp/x");
  EXPECT_EQ(c.level, Level::Mix);
  EXPECT_TRUE(c.step.contains(0));
  EXPECT_FALSE(c.step.contains(1));
  EXPECT_TRUE(c.step.contains(3));
  EXPECT_FALSE(c.step.contains(5));
  EXPECT_TRUE(c.rank.contains(0));
  EXPECT_FALSE(c.rank.contains(3));
}

TEST(ConfigTest, OverridesAloneConfigureWithoutFile) {
  Config c = parse_config(json::object(), "PrecisionDebugger",
                          json{{"dump_path", "/tmp/x"}, {"task", "overflow_check"}});
  EXPECT_EQ(c.dump_path, "/tmp/x");
  EXPECT_EQ(c.task, Task::OverflowCheck);
  EXPECT_EQ(c.level, Level::L1);
}

TEST(ConfigTest, OverrideRepairsTheFileValueItReplaces) {
  Config c = parse_config(json::parse(R"({"dump_path": "", "level": "L3"})"), "config.json",
                          json{{"dump_path", "/tmp/x"}, {"level", "L0"}});
  EXPECT_EQ(c.dump_path, "/tmp/x");
  EXPECT_EQ(c.level, Level::L0);
}

// Python's None is what PrecisionDebugger passes for a keyword that was not given.
TEST(ConfigTest, NullOverridesAreIgnored) {
  Config c = parse_config(json::parse(R"({"dump_path": "./a", "level": "mix"})"), "config.json",
                          json{{"level", nullptr}, {"task", nullptr}});
  EXPECT_EQ(c.level, Level::Mix);
  EXPECT_EQ(parse_config(json{{"dump_path", "d"}}, "config.json", json()).dump_path, "d");
}

TEST(ConfigTest, RangeListContains) {
  RangeList all;
  EXPECT_TRUE(all.all());
  EXPECT_TRUE(all.contains(0));
  EXPECT_TRUE(all.contains(123456789));

  RangeList some({{1, 1}, {4, 6}});
  EXPECT_FALSE(some.all());
  EXPECT_FALSE(some.contains(0));
  EXPECT_TRUE(some.contains(1));
  EXPECT_FALSE(some.contains(2));
  EXPECT_TRUE(some.contains(4));
  EXPECT_TRUE(some.contains(5));
  EXPECT_TRUE(some.contains(6));
  EXPECT_FALSE(some.contains(7));
}

TEST(ConfigTest, RangeListMergesUnsortedOverlappingAndAdjacentRanges) {
  RangeList some({{9, 9}, {4, 6}, {1, 1}, {5, 7}, {2, 2}, {20, 30}, {25, 26}});
  const std::vector<std::pair<int64_t, int64_t>> merged = {{1, 2}, {4, 7}, {9, 9}, {20, 30}};
  EXPECT_EQ(some.ranges(), merged);
  EXPECT_EQ(some.last(), 30);
  for (int64_t v : {1, 2, 4, 7, 9, 20, 26, 30}) EXPECT_TRUE(some.contains(v)) << v;
  for (int64_t v : {0, 3, 8, 10, 19, 31}) EXPECT_FALSE(some.contains(v)) << v;

  // A config that lists every step it wants, backwards, with one step left out.
  std::vector<std::pair<int64_t, int64_t>> listed;
  for (int64_t v = 99999; v >= 0; --v)
    if (v != 5000) listed.push_back({v, v});
  RangeList steps(std::move(listed));
  const std::vector<std::pair<int64_t, int64_t>> two = {{0, 4999}, {5001, 99999}};
  EXPECT_EQ(steps.ranges(), two);
  EXPECT_FALSE(steps.contains(5000));
  EXPECT_TRUE(steps.contains(99999));
  EXPECT_FALSE(steps.contains(100000));

  // A range that ends at the largest step: merging must not step past it.
  const int64_t max = std::numeric_limits<int64_t>::max();
  RangeList to_the_end({{0, max}, {5, 5}, {max, max}});
  const std::vector<std::pair<int64_t, int64_t>> one = {{0, max}};
  EXPECT_EQ(to_the_end.ranges(), one);
  EXPECT_TRUE(to_the_end.contains(max));
}

TEST(ConfigTest, RangeListsFromConfig) {
  Config c = parse_config(json::parse(R"({"dump_path": "d", "step": [0, "3-3", "10-12", 0]})"),
                          "config.json");
  EXPECT_TRUE(c.step.contains(0));
  EXPECT_FALSE(c.step.contains(1));
  EXPECT_TRUE(c.step.contains(3));
  EXPECT_TRUE(c.step.contains(11));
  EXPECT_FALSE(c.step.contains(13));
  EXPECT_TRUE(c.rank.all());
}

TEST(ConfigTest, EnumNames) {
  EXPECT_STREQ(to_string(Task::Statistics), "statistics");
  EXPECT_STREQ(to_string(Task::Tensor), "tensor");
  EXPECT_STREQ(to_string(Task::OverflowCheck), "overflow_check");
  EXPECT_STREQ(to_string(Level::L0), "L0");
  EXPECT_STREQ(to_string(Level::L1), "L1");
  EXPECT_STREQ(to_string(Level::Mix), "mix");
  EXPECT_STREQ(to_string(Severity::Medium), "medium");
  EXPECT_STREQ(to_string(Severity::High), "high");
  EXPECT_STREQ(to_string(Severity::Critical), "critical");
}

// Issue 44: every bad field of a file at once, one line each, in the order of the fields' reading.
TEST(ConfigTest, EveryErrorOfAFileIsToldAtOnce) {
  EXPECT_EQ(config_error(R"({"levle": "L1", "task": "nope", "dump_path": "", "step": "x"})"),
            "config.json: levle: unknown key; did you mean \"level\"?\n"
            "config.json: task: expected one of statistics, tensor, overflow_check, grad_probe, "
            "free_benchmark, structure, got \"nope\"\n"
            "config.json: dump_path: expected a non-empty string, got \"\"\n"
            "config.json: step: expected a list of integers >= 0 and \"a-b\" ranges, got \"x\"");
}

// Inside a section too: every bad key and every bad value, in the order they are read.
TEST(ConfigTest, EveryErrorOfASectionIsToldAtOnce) {
  EXPECT_EQ(config_error(R"({"dump_path": "d", "overflow_check": {"overflow_num": 2,
      "action": "halt", "stop_level": "low", "headroom": 2, "replya": true}})"),
            "config.json: overflow_check.overflow_num: unknown key; did you mean "
            "\"overflow_nums\"?\n"
            "config.json: overflow_check.replya: unknown key; did you mean \"replay\"?\n"
            "config.json: overflow_check.action: expected one of raise, continue, got \"halt\"\n"
            "config.json: overflow_check.stop_level: expected one of critical, high, medium, got "
            "\"low\"\n"
            "config.json: overflow_check.headroom: expected a number from 0 (off) up to, not "
            "including, 1, got 2");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "statistics": {"scope": 3, "summary_mode": "x"},
      "tensor": {"list": [1], "online_run_ut": true}})"),
            "config.json: statistics.scope: expected [] or two call names, got 3\n"
            "config.json: statistics.summary_mode: expected one of statistics, md5, xor, got \"x\"\n"
            "config.json: tensor.list[0]: expected a non-empty string, got 1\n"
            "config.json: tensor.online_run_ut: online run_ut is an msprobe feature that "
            "msprobe_cpp does not support; expected false, got true");
}

TEST(ConfigTest, DidYouMean) {
  EXPECT_EQ(config_error(R"({"dump_path": "d", "levle": "L1"})"),
            R"(config.json: levle: unknown key; did you mean "level"?)");
  EXPECT_EQ(config_error(R"({"dumppath": "d"})"),
            R"(config.json: dumppath: unknown key; did you mean "dump_path"?)");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "Task": "tensor"})"),
            R"(config.json: Task: unknown key; did you mean "task"?)");
  EXPECT_EQ(
      config_error(R"({"dump_path": "d", "overflow_check": {"overflow_num": 2}})"),
      R"(config.json: overflow_check.overflow_num: unknown key; did you mean "overflow_nums"?)");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "statistics": {"sumary_mode": "md5"}})"),
            R"(config.json: statistics.sumary_mode: unknown key; did you mean "summary_mode"?)");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "enable_dataloder": false})"),
            R"(config.json: enable_dataloder: unknown key; did you mean "enable_dataloader"?)");
}

// One edit is a typo of a key shorter than 5 letters, two of a longer one: beyond that the
// suggestion is more likely wrong than helpful, and the allowed keys are listed instead.
TEST(ConfigTest, DidYouMeanAllowsOneEditBelowFiveLettersAndTwoFromFive) {
  EXPECT_EQ(config_error(R"({"dump_path": "d", "stpe": [0]})"),
            R"(config.json: stpe: unknown key; did you mean "step"?)");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "tick": 1})"),
            "config.json: tick: unknown key; allowed: task, dump_path, rank, step, level, "
            "statistics, tensor, overflow_check, extra_apis, grad_probe, free_benchmark, "
            "async_dump, msprobe_generation, extra_info, precision, risk_level, dump_enable, "
            "custom_op_namespaces, load, acc_check, diff_check, nan_check, structure");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "lebal": "L1"})"),
            R"(config.json: lebal: unknown key; did you mean "level"?)");
}

// headroom's range is [0, 1): both ends of what is accepted.
TEST(ConfigTest, HeadroomFromZeroUpToOne) {
  for (double h : {0.0, 0.999}) {
    const Config c = parse_config(json{{"dump_path", "d"}, {"overflow_check", {{"headroom", h}}}},
                                  "config.json");
    EXPECT_EQ(c.overflow_check.headroom, h);
  }
}

TEST(ConfigTest, UnknownKeyWithoutCloseMatchListsAllowedKeys) {
  EXPECT_EQ(config_error(R"({"dump_path": "d", "verbosity": 3})"),
            "config.json: verbosity: unknown key; allowed: task, dump_path, rank, step, level, "
            "statistics, tensor, overflow_check, extra_apis, grad_probe, free_benchmark, "
            "async_dump, msprobe_generation, extra_info, precision, risk_level, dump_enable, "
            "custom_op_namespaces, load, acc_check, diff_check, nan_check, structure");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "tensor": {"file_mode": "md5"}})"),
            "config.json: tensor.file_mode: unknown key; allowed: scope, list, data_mode, slice, "
            "request_id, bench_path, summary_mode");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "overflow_check": {"max_calls": 2}})"),
            "config.json: overflow_check.max_calls: unknown key; allowed: overflow_nums, action, "
            "stop_level, stop_on, mutation_threshold, rules, compat, dump_skipped_steps, "
            "min_loss_scale, sync, sync_batch_calls, replay, headroom");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "a b\n": 1})"),
            R"(config.json: "a b\n": unknown key; allowed: task, dump_path, rank, step, level, )"
            "statistics, tensor, overflow_check, extra_apis, grad_probe, free_benchmark, "
            "async_dump, msprobe_generation, extra_info, precision, risk_level, dump_enable, "
            "custom_op_namespaces, load, acc_check, diff_check, nan_check, structure");
}

TEST(ConfigTest, UnsupportedMsprobeTasksAndLevels) {
  // run_ut is the one msprobe task refused: it compares against a benchmark run of its own.
  EXPECT_EQ(config_error(json{{"dump_path", "d"}, {"task", "run_ut"}}.dump()),
            "config.json: task: \"run_ut\" is an msprobe task that msprobe_cpp does not support; "
            "supported: statistics, tensor, overflow_check, grad_probe, free_benchmark, structure");
  // msprobe 26.x's L2 dumps NPU kernels: refused with that reason (test_config_msprobe26.cpp).
  EXPECT_EQ(config_error(R"({"dump_path": "d", "level": "L2"})"),
            R"(config.json: level: "L2" is an msprobe 26.x value that msprobe_cpp refuses: )"
            "level L2: it dumps NPU kernels through torch_npu (an Ascend NPU)");
  EXPECT_EQ(config_error(R"({"dump_path": "d", "tensor": {"online_run_ut": true}})"),
            "config.json: tensor.online_run_ut: online run_ut is an msprobe feature that "
            "msprobe_cpp does not support; expected false, got true");
}

TEST(ConfigTest, OverrideErrors) {
  const std::string file = R"({"dump_path": "d"})";
  EXPECT_EQ(config_error(file, json{{"level", "L3"}}),
            R"(PrecisionDebugger(level=...): expected one of L0, L1, mix, debug, got "L3")");
  EXPECT_EQ(config_error(file, json{{"step", json::array({0, "5-2"})}}),
            R"(PrecisionDebugger(step=...)[1]: expected an integer >= 0 or a range "a-b" with )"
            R"(a <= b, got "5-2")");
  EXPECT_EQ(config_error(file, json{{"rank", 0}}),
            R"(PrecisionDebugger(rank=...): expected a list of integers >= 0 and "a-b" ranges, )"
            "got 0");
  EXPECT_EQ(config_error(file, json{{"dump_path", ""}}),
            R"(PrecisionDebugger(dump_path=...): expected a non-empty string, got "")");
  EXPECT_EQ(
      config_error(file, json{{"task", "run_ut"}}),
      R"(PrecisionDebugger(task=...): "run_ut" is an msprobe task that msprobe_cpp does )"
      "not support; supported: statistics, tensor, overflow_check, grad_probe, free_benchmark, structure");
  const std::string allowed =
      "allowed: config_path, task, dump_path, rank, step, level, extra_apis, async_dump, model, "
      "on_overflow, "
      "and the "
      "overflow_check keys overflow_nums, "
      "action, stop_level, stop_on, mutation_threshold, rules, compat, dump_skipped_steps, "
      "min_loss_scale, sync, sync_batch_calls, replay, headroom";
  EXPECT_EQ(config_error(file, json{{"foo", 1}}),
            R"(PrecisionDebugger: unknown keyword argument "foo"; )" + allowed);
  EXPECT_EQ(config_error(file, json{{"overflow_check", json::object()}}),
            R"(PrecisionDebugger: unknown keyword argument "overflow_check"; )" + allowed);
  EXPECT_EQ(
      config_error(file, json{{"stop_on", json::array({"op", "batch"})}}),
      R"(PrecisionDebugger(stop_on=...)[1]: expected one of op, input, parameter, peer, got "batch")");
  EXPECT_EQ(config_error(file, json{{"min_loss_scale", -1}}),
            R"(PrecisionDebugger(min_loss_scale=...): expected a finite number >= 0, got -1)");
  EXPECT_EQ(config_error(file, json{{"sync", "step"}}),
            R"(PrecisionDebugger(sync=...): expected one of auto, call, batch, got "step")");
  EXPECT_EQ(
      config_error(file, json{{"sync_batch_calls", 0}}),
      "PrecisionDebugger(sync_batch_calls=...): expected an integer from 1 to 1000000, got 0");
  EXPECT_EQ(config_error(file, json::array({1})),
            "PrecisionDebugger: expected keyword arguments as a JSON object, got [1]");
}

TEST(ConfigTest, MissingDumpPathWithoutFile) {
  EXPECT_EQ(config_error("{}", json{{"task", "tensor"}}, "PrecisionDebugger"),
            "PrecisionDebugger: dump_path: expected a non-empty string (required), got nothing");
}

TEST(ConfigTest, LongValuesAreShortenedToOneLine) {
  json doc = {{"dump_path", "d"}, {"step", std::string(200, 'x')}};
  std::string message = config_error(doc.dump());
  EXPECT_EQ(message,
            R"(config.json: step: expected a list of integers >= 0 and "a-b" ranges, got ")" +
                std::string(76, 'x') + "...");
}

}  // namespace
}  // namespace msprobe

namespace msprobe {
namespace {

TEST(ConfigTest, OverflowExtensionsDefaultAndParse) {
  const Config d = parse_config(json::parse(R"({"dump_path": "d"})"), "config.json");
  EXPECT_EQ(d.overflow_check.stop_on,
            (std::vector<Origin>{Origin::Op, Origin::Input, Origin::Parameter, Origin::Peer}));
  EXPECT_FALSE(d.overflow_check.dump_skipped_steps);
  EXPECT_DOUBLE_EQ(d.overflow_check.min_loss_scale, 1.0);
  EXPECT_TRUE(d.overflow_check.stops_on(Origin::Input));

  const Config c = parse_config(json::parse(R"({"dump_path": "d", "overflow_check": {
      "stop_on": ["input", "input"], "dump_skipped_steps": true, "min_loss_scale": 0.5}})"),
                                "config.json");
  EXPECT_EQ(c.overflow_check.stop_on, std::vector<Origin>{Origin::Input});
  EXPECT_FALSE(c.overflow_check.stops_on(Origin::Op));
  EXPECT_TRUE(c.overflow_check.dump_skipped_steps);
  EXPECT_DOUBLE_EQ(c.overflow_check.min_loss_scale, 0.5);
  const Config none = parse_config(
      json::parse(R"({"dump_path": "d", "overflow_check": {"stop_on": []}})"), "config.json");
  EXPECT_TRUE(none.overflow_check.stop_on.empty());
}

TEST(ConfigTest, OverflowKeysAsKeywordsOverrideTheFileKeyByKey) {
  const json file = json::parse(
      R"({"dump_path": "d", "overflow_check": {"overflow_nums": 3, "action": "continue",
          "rules": ["r.yaml"]}})");
  const Config c = parse_config(file, "config.json",
                                json{{"stop_on", json::array({"op"})},
                                     {"action", "raise"},
                                     {"rules", json::array({"k.yaml"})},
                                     {"min_loss_scale", 2}},
                                "/cfg");
  EXPECT_EQ(c.overflow_check.overflow_nums, 3);  // from the file
  EXPECT_EQ(c.overflow_check.action, Action::Raise);
  EXPECT_EQ(c.overflow_check.stop_on, std::vector<Origin>{Origin::Op});
  // A keyword's rule file is the caller's path, not the config folder's.
  EXPECT_EQ(c.overflow_check.rules, std::vector<std::string>{"k.yaml"});
  EXPECT_DOUBLE_EQ(c.overflow_check.min_loss_scale, 2.0);
  const Config from_file = parse_config(file, "config.json", json::object(), "/cfg");
  EXPECT_EQ(from_file.overflow_check.rules, std::vector<std::string>{"/cfg/r.yaml"});
}

TEST(ConfigTest, OriginNames) {
  EXPECT_STREQ(to_string(Origin::Op), "op");
  EXPECT_STREQ(to_string(Origin::Input), "input");
  EXPECT_STREQ(to_string(Origin::Parameter), "parameter");
}

}  // namespace
}  // namespace msprobe

namespace msprobe {
namespace {

TEST(ConfigTest, DeeplyNestedValueIsAMessageNotACrash) {
  // 100 000 levels under a checked key: the message shows a few and cuts the rest.
  std::string text = R"({"dump_path": "d", "task": )";
  for (int i = 0; i < 100000; ++i) text += '[';
  for (int i = 0; i < 100000; ++i) text += ']';
  text += "}";
  const std::string message = config_error(text);
  EXPECT_EQ(message.rfind("config.json: task: expected one of statistics, tensor, overflow_check, "
                          "grad_probe, free_benchmark, structure, "
                          "got [[[[[[[[[[[[[[[[[...]",
                          0),
            0u)
      << message;
  EXPECT_EQ(
      config_error(R"({"dump_path": "d", "task": [1, {"a": [2]}]})"),
      R"(config.json: task: expected one of statistics, tensor, overflow_check, grad_probe, free_benchmark, structure, got [1,{"a":[2]}])");
}

}  // namespace
}  // namespace msprobe
