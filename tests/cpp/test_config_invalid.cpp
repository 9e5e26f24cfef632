// The exact one-line message of every kind of invalid config.json (docs/config.md).

#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "core/config.h"
#include "test_util.h"

namespace msprobe {
namespace {

using msprobe::testing::error_of;
using nlohmann::json;

std::string config_error(const std::string& text) {
  return error_of<ConfigError>([&] { parse_config(json::parse(text), "config.json"); });
}

struct InvalidCase {
  const char* doc;
  const char* message;
};

void PrintTo(const InvalidCase& c, std::ostream* os) {
  *os << c.doc;
}

class InvalidConfigTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidConfigTest, ExactMessage) {
  EXPECT_EQ(config_error(GetParam().doc), GetParam().message) << GetParam().doc;
}

INSTANTIATE_TEST_SUITE_P(
    ConfigTest, InvalidConfigTest,
    ::testing::Values(
        // The document itself.
        InvalidCase{R"([1])", R"(config.json: expected a JSON object, got [1])"},
        InvalidCase{R"("x")", R"(config.json: expected a JSON object, got "x")"},
        // task
        InvalidCase{
            R"({"dump_path": "d", "task": 5})",
            R"(config.json: task: expected one of statistics, tensor, overflow_check, grad_probe, free_benchmark, structure, got 5)"},
        InvalidCase{
            R"({"dump_path": "d", "task": "stats"})",
            R"(config.json: task: expected one of statistics, tensor, overflow_check, grad_probe, free_benchmark, structure, got "stats")"},
        InvalidCase{
            R"({"dump_path": "d", "task": null})",
            R"(config.json: task: expected one of statistics, tensor, overflow_check, grad_probe, free_benchmark, structure, got null)"},
        // dump_path
        InvalidCase{
            R"({"task": "tensor"})",
            R"(config.json: dump_path: expected a non-empty string (required), got nothing)"},
        InvalidCase{R"({"dump_path": ""})",
                    R"(config.json: dump_path: expected a non-empty string, got "")"},
        InvalidCase{R"({"dump_path": null})",
                    R"(config.json: dump_path: expected a non-empty string, got null)"},
        InvalidCase{R"({"dump_path": ["a"]})",
                    R"(config.json: dump_path: expected a non-empty string, got ["a"])"},
        // rank and step
        InvalidCase{
            R"({"dump_path": "d", "rank": 5})",
            R"(config.json: rank: expected a list of integers >= 0 and "a-b" ranges, got 5)"},
        InvalidCase{
            R"({"dump_path": "d", "rank": [-1]})",
            R"(config.json: rank[0]: expected an integer >= 0 or a range "a-b" with a <= b, got -1)"},
        InvalidCase{
            R"({"dump_path": "d", "step": [0, "5-2"]})",
            R"(config.json: step[1]: expected an integer >= 0 or a range "a-b" with a <= b, got "5-2")"},
        InvalidCase{
            R"({"dump_path": "d", "step": [1.0]})",
            R"(config.json: step[0]: expected an integer >= 0 or a range "a-b" with a <= b, got 1.0)"},
        InvalidCase{
            R"({"dump_path": "d", "step": [true]})",
            R"(config.json: step[0]: expected an integer >= 0 or a range "a-b" with a <= b, got true)"},
        InvalidCase{
            R"({"dump_path": "d", "step": ["3"]})",
            R"(config.json: step[0]: expected an integer >= 0 or a range "a-b" with a <= b, got "3")"},
        InvalidCase{
            R"({"dump_path": "d", "step": ["1-x"]})",
            R"(config.json: step[0]: expected an integer >= 0 or a range "a-b" with a <= b, got "1-x")"},
        InvalidCase{
            R"({"dump_path": "d", "step": ["-1-3"]})",
            R"(config.json: step[0]: expected an integer >= 0 or a range "a-b" with a <= b, got "-1-3")"},
        InvalidCase{
            R"({"dump_path": "d", "step": [18446744073709551615]})",
            R"(config.json: step[0]: expected an integer >= 0 or a range "a-b" with a <= b, got 18446744073709551615)"},
        // level
        InvalidCase{R"({"dump_path": "d", "level": "L3"})",
                    R"(config.json: level: expected one of L0, L1, mix, debug, got "L3")"},
        InvalidCase{R"({"dump_path": "d", "level": "l1"})",
                    R"(config.json: level: expected one of L0, L1, mix, debug, got "l1")"},
        InvalidCase{R"({"dump_path": "d", "level": null})",
                    R"(config.json: level: expected one of L0, L1, mix, debug, got null)"},
        // statistics and tensor sections
        InvalidCase{R"({"dump_path": "d", "statistics": []})",
                    R"(config.json: statistics: expected an object, got [])"},
        InvalidCase{R"({"dump_path": "d", "tensor": null})",
                    R"(config.json: tensor: expected an object, got null)"},
        InvalidCase{R"({"dump_path": "d", "statistics": {"scope": ["a"]}})",
                    R"(config.json: statistics.scope: expected [] or two call names, got ["a"])"},
        InvalidCase{
            R"({"dump_path": "d", "statistics": {"scope": ["a", "b", "c"]}})",
            R"(config.json: statistics.scope: expected [] or two call names, got ["a","b","c"])"},
        InvalidCase{R"({"dump_path": "d", "tensor": {"scope": ["a", ""]}})",
                    R"(config.json: tensor.scope[1]: expected a non-empty string, got "")"},
        InvalidCase{R"({"dump_path": "d", "tensor": {"scope": "a"}})",
                    R"(config.json: tensor.scope: expected [] or two call names, got "a")"},
        InvalidCase{
            R"({"dump_path": "d", "tensor": {"list": "relu"}})",
            R"(config.json: tensor.list: expected a list of non-empty strings, got "relu")"},
        InvalidCase{R"({"dump_path": "d", "statistics": {"list": ["relu", 1]}})",
                    R"(config.json: statistics.list[1]: expected a non-empty string, got 1)"},
        InvalidCase{
            R"({"dump_path": "d", "statistics": {"data_mode": []}})",
            R"(config.json: statistics.data_mode: expected ["all"] or a non-empty list of forward, backward, input, output, got [])"},
        InvalidCase{
            R"({"dump_path": "d", "statistics": {"data_mode": "all"}})",
            R"(config.json: statistics.data_mode: expected ["all"] or a non-empty list of forward, backward, input, output, got "all")"},
        InvalidCase{
            R"({"dump_path": "d", "statistics": {"data_mode": ["all", "forward"]}})",
            R"(config.json: statistics.data_mode: expected ["all"] or a non-empty list of forward, backward, input, output, got ["all","forward"])"},
        InvalidCase{
            R"({"dump_path": "d", "tensor": {"data_mode": ["forward", "forward"]}})",
            R"(config.json: tensor.data_mode[1]: expected a mode not already listed, got "forward")"},
        InvalidCase{
            R"({"dump_path": "d", "tensor": {"data_mode": ["fwd"]}})",
            R"(config.json: tensor.data_mode[0]: expected one of all, forward, backward, input, output, got "fwd")"},
        InvalidCase{
            R"({"dump_path": "d", "statistics": {"summary_mode": "crc"}})",
            R"(config.json: statistics.summary_mode: expected one of statistics, md5, xor, got "crc")"},
        InvalidCase{R"({"dump_path": "d", "tensor": {"file_format": "pt"}})",
                    R"(config.json: tensor.file_format: expected one of npy, bin, got "pt")"},
        InvalidCase{R"({"dump_path": "d", "tensor": {"online_run_ut": "no"}})",
                    R"(config.json: tensor.online_run_ut: expected true or false, got "no")"},
        // overflow_check
        InvalidCase{R"({"dump_path": "d", "overflow_check": 1})",
                    R"(config.json: overflow_check: expected an object, got 1)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"overflow_nums": 0}})",
            R"(config.json: overflow_check.overflow_nums: expected -1 or an integer >= 1, got 0)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"overflow_nums": -2}})",
            R"(config.json: overflow_check.overflow_nums: expected -1 or an integer >= 1, got -2)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"overflow_nums": true}})",
            R"(config.json: overflow_check.overflow_nums: expected -1 or an integer >= 1, got true)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"overflow_nums": 3.0}})",
            R"(config.json: overflow_check.overflow_nums: expected -1 or an integer >= 1, got 3.0)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"overflow_nums": "3"}})",
            R"(config.json: overflow_check.overflow_nums: expected -1 or an integer >= 1, got "3")"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"action": "stop"}})",
            R"(config.json: overflow_check.action: expected one of raise, continue, got "stop")"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"stop_level": "low"}})",
            R"(config.json: overflow_check.stop_level: expected one of critical, high, medium, got "low")"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"mutation_threshold": 0}})",
            R"(config.json: overflow_check.mutation_threshold: expected a finite number > 0, got 0)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"mutation_threshold": -1.5}})",
            R"(config.json: overflow_check.mutation_threshold: expected a finite number > 0, got -1.5)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"mutation_threshold": "1e5"}})",
            R"(config.json: overflow_check.mutation_threshold: expected a finite number > 0, got "1e5")"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"mutation_threshold": false}})",
            R"(config.json: overflow_check.mutation_threshold: expected a finite number > 0, got false)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"rules": "extra.yaml"}})",
            R"(config.json: overflow_check.rules: expected a list of non-empty strings, got "extra.yaml")"},
        InvalidCase{R"({"dump_path": "d", "overflow_check": {"rules": ["a.yaml", ""]}})",
                    R"(config.json: overflow_check.rules[1]: expected a non-empty string, got "")"},
        InvalidCase{R"({"dump_path": "d", "overflow_check": {"compat": 1}})",
                    R"(config.json: overflow_check.compat: expected true or false, got 1)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"stop_on": "op"}})",
            R"(config.json: overflow_check.stop_on: expected a list of origins (op, input, parameter, peer), got "op")"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"stop_on": ["op", "nan"]}})",
            R"(config.json: overflow_check.stop_on[1]: expected one of op, input, parameter, peer, got "nan")"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"dump_skipped_steps": "yes"}})",
            R"(config.json: overflow_check.dump_skipped_steps: expected true or false, got "yes")"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"min_loss_scale": "1"}})",
            R"(config.json: overflow_check.min_loss_scale: expected a finite number >= 0, got "1")"},
        // headroom: a share of the range; at 1 it would warn only at the largest finite value
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"headroom": 1}})",
            R"(config.json: overflow_check.headroom: expected a number from 0 (off) up to, not including, 1, got 1)"},
        InvalidCase{
            R"({"dump_path": "d", "overflow_check": {"headroom": -0.1}})",
            R"(config.json: overflow_check.headroom: expected a number from 0 (off) up to, not including, 1, got -0.1)"},
        InvalidCase{R"({"dump_path": "d", "overflow_check": {"check_mode": 1}})",
                    R"(config.json: overflow_check.check_mode: expected a string, got 1)"},
        // msprobe's top-level keys that are accepted but still type-checked
        InvalidCase{R"({"dump_path": "d", "is_deterministic": "yes"})",
                    R"(config.json: is_deterministic: expected true or false, got "yes")"},
        InvalidCase{R"({"dump_path": "d", "async_dump": 0})",
                    R"(config.json: async_dump: expected true or false, got 0)"},
        InvalidCase{
            R"({"dump_path": "d", "framework": "mindspore"})",
            R"(config.json: framework: expected "pytorch" (msprobe_cpp is the PyTorch side of msprobe), got "mindspore")"},
        InvalidCase{R"({"dump_path": "d", "seed": 1.5})",
                    R"(config.json: seed: expected an integer, got 1.5)"}),
    // Readable test names: the case number.
    [](const ::testing::TestParamInfo<InvalidCase>& info) {
      return "case" + std::to_string(info.index);
    });

}  // namespace
}  // namespace msprobe
