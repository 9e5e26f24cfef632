#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include "core/dump_reader.h"
#include "core/dump_writer.h"
#include "core/json_cursor.h"
#include "core/json_writer.h"
#include "test_util.h"

using namespace msprobe;
using namespace msprobe::testing;

namespace {

// A streamed reading, `chunk` bytes at a time, must give what the in-memory reading gives.
void expect_streaming_agrees(const std::string& text) {
  const std::string whole = reading_outcome(
      [&](const CallSink& sink) { return read_dump(std::string_view(text), "dump.json", sink); });
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{4096}}) {
    const std::string streamed = reading_outcome([&](const CallSink& sink) {
      JsonCursor cur = msprobe::testing::chunked_cursor(text, chunk);
      return read_dump(cur, "dump.json", sink);
    });
    ASSERT_EQ(streamed, whole) << "chunk " << chunk << " of: " << text.substr(0, 200);
  }
}

std::vector<CallRecord> read_all(const std::string& text, DumpHeader* header = nullptr) {
  expect_streaming_agrees(text);
  std::vector<CallRecord> out;
  DumpHeader h = read_dump(text, "dump.json", [&](CallRecord&& r) { out.push_back(std::move(r)); });
  if (header) *header = h;
  return out;
}

std::string read_error(const std::string& text) {
  return error_of<DumpError>([&] { read_all(text); });
}

}  // namespace

TEST(DumpReader, ReadsHeaderAndCallsInFileOrder) {
  DumpHeader h;
  auto recs = read_all(R"({"task": "tensor", "level": "mix", "dump_data_dir": "/d/x",
    "data": {"Torch.b.0.forward": {"input_args": [], "input_kwargs": {}, "output": []},
             "Torch.a.0.forward": {"input_args": [], "input_kwargs": {}, "output": []},
             "Module.m.M.forward.0": {"input_args": [], "input_kwargs": {}, "output": []}}})",
                       &h);
  EXPECT_EQ(h.task, "tensor");
  EXPECT_EQ(h.level, "mix");
  ASSERT_TRUE(h.dump_data_dir.has_value());
  EXPECT_EQ(*h.dump_data_dir, "/d/x");
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].name, "Torch.b.0.forward");
  EXPECT_EQ(recs[1].name, "Torch.a.0.forward");
  EXPECT_EQ(recs[2].name, "Module.m.M.forward.0");
}

TEST(DumpReader, NullDumpDataDir) {
  DumpHeader h;
  read_all(R"({"task": "statistics", "level": "L1", "dump_data_dir": null, "data": {}})", &h);
  EXPECT_FALSE(h.dump_data_dir.has_value());
}

TEST(DumpReader, BarePythonNonFiniteTokens) {
  auto r =
      record(fwd("Torch.x.0.forward", T("Infinity", "-Infinity", "NaN", "1e+38"), F("-Infinity")));
  const Entry& e = r.inputs.at(0);
  EXPECT_TRUE(std::isinf(e.max.number) && e.max.number > 0);
  EXPECT_TRUE(std::isinf(e.min.number) && e.min.number < 0);
  EXPECT_TRUE(std::isnan(e.mean.number));
  EXPECT_DOUBLE_EQ(e.norm.number, 1e38);
  EXPECT_TRUE(r.outputs.at(0).value.non_finite());
  EXPECT_LT(r.outputs.at(0).value.number, 0);
}

TEST(DumpReader, NonFiniteStringsInAnyCase) {
  auto r = record(
      fwd("Torch.x.0.forward", T("\"inf\"", "\"-INF\"", "\"NaN\"", "\"Inf\""), T("\"nan\"")));
  const Entry& e = r.inputs.at(0);
  EXPECT_TRUE(std::isinf(e.max.number) && e.max.number > 0);
  EXPECT_TRUE(std::isinf(e.min.number) && e.min.number < 0);
  EXPECT_TRUE(std::isnan(e.mean.number));
  EXPECT_TRUE(std::isinf(e.norm.number));
  EXPECT_TRUE(std::isnan(r.outputs.at(0).max.number));
}

TEST(DumpReader, TensorFieldsAndScalarKinds) {
  auto r = record(R"("Torch.x.0.forward": {"input_args": [
      {"type": "torch.Tensor", "dtype": "torch.int64", "shape": [3], "Max": 9, "Min": -2,
       "Mean": 1.5, "Norm": 10.0, "requires_grad": false, "md5": "0a1b2c3d", "data_name": "x.pt"},
      {"type": "torch.Tensor", "dtype": "torch.bool", "shape": [], "Max": true, "Min": false,
       "Mean": null, "Norm": null, "requires_grad": false},
      {"type": "torch.Size", "value": [2, 3]}, {"type": "str", "value": "mean"}, null,
      [{"type": "int", "value": 1}, [null]]],
      "output": []})");
  ASSERT_EQ(r.inputs.size(), 6u);
  const Entry& t = r.inputs[0];
  EXPECT_TRUE(t.is_tensor());
  EXPECT_EQ(t.dtype, "torch.int64");
  EXPECT_EQ(t.shape, std::vector<int64_t>{3});
  EXPECT_EQ(t.max.kind, Scalar::Kind::Int);
  EXPECT_EQ(t.max.integer, 9);
  EXPECT_EQ(t.mean.kind, Scalar::Kind::Float);
  EXPECT_EQ(t.md5, "0a1b2c3d");
  EXPECT_EQ(t.data_name, "x.pt");
  EXPECT_EQ(r.inputs[1].max.kind, Scalar::Kind::Bool);
  EXPECT_EQ(r.inputs[1].mean.kind, Scalar::Kind::Null);
  EXPECT_TRUE(r.inputs[1].has_shape);
  EXPECT_TRUE(r.inputs[1].shape.empty());
  EXPECT_EQ(r.inputs[2].value.kind, Scalar::Kind::Raw);
  EXPECT_EQ(r.inputs[2].value.text(), "[2, 3]");
  EXPECT_EQ(r.inputs[3].value.kind, Scalar::Kind::String);
  EXPECT_EQ(r.inputs[3].value.text(), "mean");
  EXPECT_EQ(r.inputs[4].kind, Entry::Kind::Null);
  ASSERT_EQ(r.inputs[5].kind, Entry::Kind::List);
  ASSERT_EQ(r.inputs[5].items.size(), 2u);
  EXPECT_EQ(r.inputs[5].items[1].kind, Entry::Kind::List);
  EXPECT_TRUE(r.kwargs.empty());  // record without input_kwargs
}

TEST(DumpReader, BackwardRecordKeyedInput) {
  auto r = record(bwd("Functional.linear.0.backward", clean(), clean() + ", " + nan_t()));
  EXPECT_TRUE(r.uses_input_key);
  EXPECT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.outputs.size(), 2u);
}

TEST(DumpReader, KwargsKeepTheirOrder) {
  auto r = record(fwd("Functional.x.0.forward", clean(), clean(),
                      R"("weight": null, "alpha": {"type": "float", "value": 2.0}, "eps": null)"));
  ASSERT_EQ(r.kwargs.size(), 3u);
  EXPECT_EQ(r.kwargs[0].first, "weight");
  EXPECT_EQ(r.kwargs[1].first, "alpha");
  EXPECT_EQ(r.kwargs[2].first, "eps");
  EXPECT_DOUBLE_EQ(r.kwargs[1].second.value.number, 2.0);
}

TEST(DumpReader, StringEscapesInNames) {
  auto recs = read_all(R"({"data": {"Torch.a\"b\u00e9.0.forward": {"output": []}}})");
  EXPECT_EQ(recs.at(0).name, "Torch.a\"b\xc3\xa9.0.forward");
}

TEST(DumpReader, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(read_error(""), "dump.json:1:1: empty file, expected a dump.json object");
  EXPECT_EQ(read_error("  \n "), "dump.json:2:2: empty file, expected a dump.json object");
  EXPECT_EQ(read_error("[1, 2]"), "dump.json:1:1: expected an object, got a list");
  EXPECT_EQ(read_error("{\"data\": {\"a\": {\"input_args\": [1"),
            "dump.json:1:33: expected ',' or ']', got end of file");
  EXPECT_EQ(read_error("{\n \"data\": {\n  \"A.b.0.forward\": {\"input_args\": 5}}}"),
            "dump.json:3:35: data.\"A.b.0.forward\".input_args: expected a list, got a number");
  EXPECT_EQ(read_error("{\"data\": []}"), "dump.json:1:10: data: expected an object, got a list");
  EXPECT_EQ(read_error("{\"data\": {\"x\": 3}}"),
            "dump.json:1:16: data.\"x\": expected an object, got a number");
  EXPECT_EQ(read_error("{\"data\": {\"x\": {\"input_kwargs\": []}}}"),
            "dump.json:1:33: data.\"x\".input_kwargs: expected an object, got a list");
  EXPECT_EQ(read_error("{\"data\": {\"x\": {\"output\": [{\"Max\": [1]}]}}}"),
            "dump.json:1:36: data.\"x\".output.Max: expected a number, string, boolean or null, "
            "got a list");
  EXPECT_EQ(read_error("{\"data\": {\"x\": {\"output\": [{\"type\": 7}]}}}"),
            "dump.json:1:37: data.\"x\".output.type: expected a string, got a number");
  EXPECT_EQ(read_error("{\"data\": {\"x\": {\"output\": [{\"shape\": [2, \"a\"]}]}}}"),
            "dump.json:1:42: data.\"x\".output.shape: expected a list of integers");
  EXPECT_EQ(read_error("{\"task\": \"statistics\"}"),
            "dump.json:1:1: no \"data\" object: not a dump.json");
  EXPECT_EQ(read_error("{\"data\": {}} x"),
            "dump.json:1:14: unexpected content after the top-level object");
  EXPECT_EQ(read_error("{\"data\": {\"x\": {\"output\": [nan]}}}"),
            "dump.json:1:28: unexpected character 'n'");
  EXPECT_EQ(read_error("{\"data\": {\"x\" {}}}"), "dump.json:1:15: expected ':', got '{'");
  EXPECT_EQ(read_error("{\"data\": {\"x\": {\"output\": [1,]}}}"),
            "dump.json:1:30: expected a value after ','");
  EXPECT_EQ(read_error("{\"data\": {\"unterminated}}"), "dump.json:1:12: unterminated string");
}

TEST(DumpReader, TruncationAtEveryByteIsAnErrorNotACrash) {
  const std::string full =
      "{\"task\": \"overflow_check\", \"level\": \"L1\", \"dump_data_dir\": null, \"data\": {" +
      fwd("Tensor.__mul__.0.forward", T("1.5", "-Infinity", "NaN", "2e+38") + ", " + F("1e+38"),
          inf_t(), R"("alpha": {"type": "int", "value": 2})") +
      ", " + bwd("Tensor.__mul__.0.backward", clean(), "[" + clean() + ", null]") + "}}";
  ASSERT_EQ(read_all(full).size(), 2u);
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string cut = full.substr(0, n);
    EXPECT_THROW(read_all(cut), DumpError) << "prefix of " << n << " bytes";
  }
}

TEST(DumpReader, DeepNestingIsRefused) {
  std::string deep = "{\"data\": {\"x\": {\"output\": ";
  deep += std::string(100000, '[');
  EXPECT_THROW(read_all(deep), DumpError);
}

TEST(DumpReader, FileErrors) {
  std::vector<CallRecord> out;
  auto sink = [&](CallRecord&& r) { out.push_back(std::move(r)); };
  EXPECT_EQ(error_of<DumpError>([&] { read_dump_file("/nonexistent/dump.json", sink); }),
            "/nonexistent/dump.json: cannot read: No such file or directory");
  EXPECT_EQ(error_of<DumpError>([&] { read_dump_file("/tmp", sink); }),
            "/tmp: cannot read: is a directory");
}

TEST(DumpReader, ReadsEveryMsprobeFixture) {
  for (const char* dir : {"mlp_statistics_L1", "mlp_statistics_mix", "mlp_overflow_check_L1"}) {
    std::vector<CallRecord> recs;
    DumpHeader h = read_dump_file(std::string(MSPROBE_FIXTURES_DIR) + "/" + dir + "/dump.json",
                                  [&](CallRecord&& r) { recs.push_back(std::move(r)); });
    EXPECT_FALSE(recs.empty()) << dir;
    EXPECT_EQ(h.level, std::string(dir) == "mlp_statistics_mix" ? "mix" : "L1");
    std::ifstream in(std::string(MSPROBE_FIXTURES_DIR) + "/" + dir + "/dump.json");
    expect_streaming_agrees(std::string(std::istreambuf_iterator<char>(in), {}));
  }
}

TEST(DumpReader, FixtureL1CallSequence) {
  std::vector<std::string> names;
  read_dump_file(std::string(MSPROBE_FIXTURES_DIR) + "/mlp_statistics_L1/dump.json",
                 [&](CallRecord&& r) { names.push_back(r.name); });
  const std::vector<std::string> expected = {"Functional.linear.0.forward",
                                             "Functional.relu.0.forward",
                                             "Functional.linear.1.forward",
                                             "Torch.tanh.0.forward",
                                             "Tensor.__mul__.0.forward",
                                             "Functional.linear.2.forward",
                                             "Functional.cross_entropy.0.forward",
                                             "Torch.ones_like.0.forward",
                                             "Functional.cross_entropy.0.backward",
                                             "Functional.linear.2.backward",
                                             "Tensor.__mul__.0.backward",
                                             "Torch.tanh.0.backward",
                                             "Functional.linear.1.backward",
                                             "Functional.relu.0.backward",
                                             "Functional.linear.0.backward",
                                             "Tensor.add_.0.forward",
                                             "Tensor.add_.1.forward",
                                             "Tensor.add_.2.forward",
                                             "Tensor.add_.3.forward",
                                             "Tensor.add_.4.forward",
                                             "Tensor.add_.5.forward"};
  EXPECT_EQ(names, expected);
}

TEST(DumpReader, ExceptInfNanFieldsRoundTripInMsprobesPlace) {
  // msprobe 1.1.1 (block_stat_mix, Tensor.masked_fill.0.forward's output): the key comes right
  // after requires_grad, and only for the extreme that is not finite.
  const std::string entry =
      R"({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 0.5, )"
      R"("Min": -Infinity, "Mean": -Infinity, "Norm": Infinity, "requires_grad": true, )"
      R"("Min_except_inf_nan": -0.25, "md5": "50ce5efd"})";
  auto recs = read_all(R"({"task": "statistics", "level": "L1", "dump_data_dir": null, "data": {)"
                       R"("Tensor.masked_fill.0.forward": {"input_args": [], "input_kwargs": {},)"
                       R"( "output": [)" +
                       entry + "]}}}");
  ASSERT_EQ(recs.size(), 1u);
  const Entry& e = recs[0].outputs.at(0);
  EXPECT_FALSE(e.finite.max.present());
  ASSERT_TRUE(e.finite.min.present());
  EXPECT_EQ(e.finite.min.number, -0.25);
  JsonWriter w(0);
  write_entry(w, e);
  std::string compact = w.take();
  compact.erase(std::remove(compact.begin(), compact.end(), '\n'), compact.end());
  EXPECT_NE(compact.find(R"("requires_grad": true,"Min_except_inf_nan": -0.25,"md5": "50ce5efd")"),
            std::string::npos)
      << compact;
  EXPECT_EQ(compact.find("Max_except_inf_nan"), std::string::npos);
}

TEST(DumpReader, ProcessGroupArgumentsRoundTripAsMsprobeWritesThem) {
  // msprobe 1.1.1's record of a group= argument: {"type", "group_ranks", "group_id"}.
  const std::string group = R"({"type": "torch.ProcessGroup", "group_ranks": [0, 1], )"
                            R"("group_id": "3f7e0f2b2b8e3c0d6d0a6c1e0a1b2c3d"})";
  auto recs = read_all(R"({"task": "statistics", "level": "L1", "dump_data_dir": null, "data": {)"
                       R"("Distributed.all_reduce.0.forward": {"input_args": [], )"
                       R"("input_kwargs": {"group": )" +
                       group + R"(}, "output": []}}})");
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_EQ(recs[0].kwargs.size(), 1u);
  const Entry& e = recs[0].kwargs[0].second;
  EXPECT_EQ(e.type, "torch.ProcessGroup");
  EXPECT_EQ(e.group_id, "3f7e0f2b2b8e3c0d6d0a6c1e0a1b2c3d");
  JsonWriter w(0);
  write_entry(w, e);
  std::string compact = w.take();
  compact.erase(std::remove(compact.begin(), compact.end(), '\n'), compact.end());
  EXPECT_EQ(compact, R"({"type": "torch.ProcessGroup","group_ranks": [0, 1],)"
                     R"("group_id": "3f7e0f2b2b8e3c0d6d0a6c1e0a1b2c3d"})");
}

TEST(DumpReader, MappingEntriesRoundTripAsMsprobeWritesThem) {
  // msprobe 1.1.1 writes a dict, a dataclass (Hugging Face's ModelOutput) and a namedtuple as an
  // object of its fields, which has no "type" of its own; null fields stay.
  const std::string tensor =
      R"({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, )"
      R"("Min": 0.0, "Mean": 0.5, "Norm": 1.0, "requires_grad": true})";
  const std::string text =
      R"({"task": "statistics", "level": "mix", "dump_data_dir": null, "data": {)"
      R"("Module.model.LlamaModel.forward.0": {"input_args": [], "input_kwargs": {}, )"
      R"("output": [{"last_hidden_state": )" +
      tensor + R"(, "past_key_values": null, "hidden_states": [)" + tensor +
      R"(], "empty": {}}]}}})";
  auto recs = read_all(text);
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_EQ(recs[0].outputs.size(), 1u);
  const Entry& m = recs[0].outputs[0];
  ASSERT_EQ(m.kind, Entry::Kind::Map);
  ASSERT_EQ(m.keys, (std::vector<std::string>{"last_hidden_state", "past_key_values",
                                              "hidden_states", "empty"}));
  ASSERT_EQ(m.items.size(), 4u);
  EXPECT_TRUE(m.items[0].is_tensor());
  EXPECT_EQ(m.items[0].max.as_double(), 1.0);
  EXPECT_EQ(m.items[1].kind, Entry::Kind::Null);
  EXPECT_EQ(m.items[2].kind, Entry::Kind::List);
  EXPECT_EQ(m.items[3].kind, Entry::Kind::Map);
  EXPECT_TRUE(m.items[3].items.empty());
  JsonWriter w(0);
  write_entry(w, m);
  std::string compact = w.take();
  compact.erase(std::remove(compact.begin(), compact.end(), '\n'), compact.end());
  EXPECT_EQ(compact.substr(0, 22), R"({"last_hidden_state": )");
  EXPECT_NE(compact.find(R"("past_key_values": null)"), std::string::npos);
  EXPECT_NE(compact.find(R"("empty": {})"), std::string::npos);
}
