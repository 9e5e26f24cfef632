#include "core/dump_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/dump_reader.h"

namespace msprobe {
namespace {

// What `write` writes, on one line (indent 0, newlines dropped; strings escape theirs).
template <class Write>
std::string compact(Write&& write) {
  JsonWriter w(0);
  write(w);
  std::string text = w.take();
  text.erase(std::remove(text.begin(), text.end(), '\n'), text.end());
  return text;
}

std::string scalar(const Scalar& s) {
  return compact([&](JsonWriter& w) { write_scalar(w, s); });
}

std::string entry(const Entry& e) {
  return compact([&](JsonWriter& w) { write_entry(w, e); });
}

std::string record(const CallRecord& rec) {
  return compact([&](JsonWriter& w) {
    w.begin_object();
    write_record(w, rec);
    w.end_object();
  });
}

Entry tensor(double max) {
  Entry e;
  e.kind = Entry::Kind::Object;
  e.type = "torch.Tensor";
  e.dtype = "torch.float32";
  e.shape = Shape({2});
  e.max = Scalar::of_float(max);
  e.min = Scalar::of_float(0.0);
  e.mean = Scalar::of_float(0.5);
  e.norm = Scalar::of_float(1.0);
  e.requires_grad = Scalar::of_bool(false);
  return e;
}

// json.dumps(doc, indent=1) of a msprobe 1.1.1 dump: every kind of entry the reader keeps.
const char* const kDump = R"({
 "task": "statistics",
 "level": "mix",
 "framework": "pytorch",
 "dump_data_dir": "/d/dump_tensor_data",
 "data": {
  "Torch.add.0.forward": {
   "input_args": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float16",
     "shape": [
      2
     ],
     "Max": 1.5,
     "Min": -2.0,
     "Mean": 0.25,
     "Norm": 3.0,
     "requires_grad": false
    },
    null,
    [
     {
      "type": "int",
      "value": 3
     }
    ],
    {
     "type": "slice",
     "value": [
      0,
      null
     ]
    }
   ],
   "input_kwargs": {
    "alpha": {
     "type": "float",
     "value": -Infinity
    },
    "dtype": {
     "type": "torch.dtype",
     "value": "torch.float32"
    },
    "group": {
     "type": "torch.ProcessGroup",
     "group_ranks": [
      0
     ],
     "group_id": "abc"
    },
    "memory_format": {
     "type": "torch.memory_format",
     "format": "torch.contiguous_format"
    }
   },
   "output": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float16",
     "shape": [],
     "Max": Infinity,
     "Min": -Infinity,
     "Mean": NaN,
     "Norm": Infinity,
     "requires_grad": true,
     "Max_except_inf_nan": 1e-05,
     "md5": "1a2b3c4d",
     "data_name": "Torch.add.0.forward.output.0.pt"
    }
   ]
  },
  "Module.fc.Linear.backward.0": {
   "input": [
    {
     "hidden": {
      "type": "torch.Tensor",
      "dtype": "torch.float16",
      "shape": [],
      "Max": 1e+38,
      "Min": 0.0,
      "Mean": 1e-07,
      "Norm": 100000.0,
      "requires_grad": false
     },
     "past": null,
     "empty": {}
    }
   ],
   "output": [
    null
   ]
  }
 }
})";

TEST(DumpWriterTest, AReadDumpIsWrittenBackByteForByte) {
  std::vector<CallRecord> records;
  const DumpHeader head =
      read_dump(kDump, "dump.json", [&](CallRecord&& r) { records.push_back(std::move(r)); });
  ASSERT_EQ(records.size(), 2u);
  std::vector<const CallRecord*> order;
  for (const CallRecord& r : records) order.push_back(&r);
  EXPECT_EQ(dump_json(head, order), kDump);
}

TEST(DumpWriterTest, ScalarsOfEveryKind) {
  EXPECT_EQ(scalar(Scalar()), "null");
  EXPECT_EQ(scalar(Scalar::null()), "null");
  EXPECT_EQ(scalar(Scalar::of_bool(true)), "true");
  EXPECT_EQ(scalar(Scalar::of_int(-4)), "-4");
  EXPECT_EQ(scalar(Scalar::of_float(2.0)), "2.0");
  EXPECT_EQ(scalar(Scalar::of_float(std::numeric_limits<double>::quiet_NaN())), "NaN");
  EXPECT_EQ(scalar(Scalar::of_string("a\"\xC3\xA9")), R"("a\"\u00e9")");
  EXPECT_EQ(scalar(Scalar::of_raw("[0, null]")), "[0, null]");
  EXPECT_EQ(scalar(Scalar::of_list({Scalar::of_int(1), Scalar::of_list({}), Scalar::null()})),
            "[1,[],null]");
}

TEST(DumpWriterTest, EntriesWithoutAnObjectOfTheirOwn) {
  EXPECT_EQ(entry(Entry::null_entry()), "null");
  Entry other;
  other.kind = Entry::Kind::Other;  // a bare number or string: msprobe writes none
  EXPECT_EQ(entry(other), "null");
  EXPECT_EQ(entry(Entry::list({})), "[]");
  EXPECT_EQ(entry(Entry::list({Entry::null_entry(), Entry::list({})})), "[null,[]]");
  // A mapping's item without a key is named by its index.
  EXPECT_EQ(entry(Entry::map({"a"}, {Entry::null_entry(), Entry::null_entry()})),
            R"({"a": null,"1": null})");
}

TEST(DumpWriterTest, ObjectsAsMsprobeWritesEachType) {
  EXPECT_EQ(entry(Entry::scalar("int", Scalar::of_int(3))), R"({"type": "int","value": 3})");
  EXPECT_EQ(entry(Entry::scalar("torch.memory_format", Scalar::of_string("preserve_format"))),
            R"({"type": "torch.memory_format","format": "preserve_format"})");
  EXPECT_EQ(entry(Entry::scalar("NoneType", Scalar())), R"({"type": "NoneType"})");
  EXPECT_EQ(entry(Entry::scalar("torch.ProcessGroup", Scalar())),
            R"({"type": "torch.ProcessGroup"})");
}

TEST(DumpWriterTest, ATensorsChecksumTakesThePlaceOfItsStatistics) {
  Entry e = tensor(1.0);
  EXPECT_EQ(entry(e), R"({"type": "torch.Tensor","dtype": "torch.float32","shape": [2],)"
                      R"("Max": 1.0,"Min": 0.0,"Mean": 0.5,"Norm": 1.0,"requires_grad": false})");
  e.value = Scalar::of_string("0x00000000000000ff");
  EXPECT_EQ(entry(e), R"({"type": "torch.Tensor","dtype": "torch.float32","shape": [2],)"
                      R"("md5": "0x00000000000000ff","requires_grad": false})");
}

TEST(DumpWriterTest, RecordsKeepOnlyTheSidesTheyHave) {
  CallRecord rec;
  rec.name = "Torch.add.0.forward";
  rec.inputs = {tensor(1.0)};
  rec.kwargs = {{"alpha", Entry::scalar("int", Scalar::of_int(2))}};
  rec.outputs = {Entry::null_entry()};
  const std::string input = R"("input_args": [{"type": "torch.Tensor","dtype": "torch.float32",)"
                            R"("shape": [2],"Max": 1.0,"Min": 0.0,"Mean": 0.5,"Norm": 1.0,)"
                            R"("requires_grad": false}])";
  const std::string kwargs = R"("input_kwargs": {"alpha": {"type": "int","value": 2}})";
  EXPECT_EQ(record(rec),
            R"({"Torch.add.0.forward": {)" + input + "," + kwargs + R"(,"output": [null]}})");
  rec.has_outputs = false;
  EXPECT_EQ(record(rec), R"({"Torch.add.0.forward": {)" + input + "," + kwargs + "}}");
  rec.has_outputs = true;
  rec.has_inputs = false;
  EXPECT_EQ(record(rec), R"({"Torch.add.0.forward": {"output": [null]}})");
  rec.has_outputs = false;
  EXPECT_EQ(record(rec), R"({"Torch.add.0.forward": {}})");
}

TEST(DumpWriterTest, BackwardRecordsHaveInputAndNoKwargs) {
  CallRecord rec;
  rec.name = "Torch.add.0.backward";
  rec.uses_input_key = true;
  rec.inputs = {Entry::null_entry()};
  rec.kwargs = {{"ignored", Entry::null_entry()}};
  EXPECT_EQ(record(rec), R"({"Torch.add.0.backward": {"input": [null],"output": []}})");
}

TEST(DumpWriterTest, ModuleParametersFollowTheOutput) {
  CallRecord rec;
  rec.name = "Module.fc.Linear.forward.0";
  rec.has_parameters = true;
  rec.parameters = {{"weight", Entry::null_entry()}, {"bias", Entry::null_entry()}};
  EXPECT_EQ(record(rec), R"({"Module.fc.Linear.forward.0": {"input_args": [],"input_kwargs": {},)"
                         R"("output": [],"parameters": {"weight": null,"bias": null}}})");
  rec.name = "Module.fc.Linear.parameters_grad.0";
  rec.parameter_grads = true;
  rec.parameters = {{"weight", Entry::list({Entry::null_entry()})}};
  EXPECT_EQ(record(rec), R"({"Module.fc.Linear.parameters_grad.0": {"weight": [null]}})");
}

TEST(DumpWriterTest, ADebugRecordIsItsValueAlone) {
  CallRecord rec;
  rec.name = "loss.0.debug";
  rec.bare_value = true;
  EXPECT_EQ(record(rec), R"({"loss.0.debug": null})");
  rec.outputs = {Entry::scalar("float", Scalar::of_float(0.5)), Entry::null_entry()};
  EXPECT_EQ(record(rec), R"({"loss.0.debug": {"type": "float","value": 0.5}})");
}

TEST(DumpWriterTest, TheHeaderAloneAndAReusedBuffer) {
  DumpHeader head;
  head.task = "tensor";
  head.level = "L1";
  const std::string expected =
      "{\n \"task\": \"tensor\",\n \"level\": \"L1\",\n \"dump_data_dir\": null,\n \"data\": {}\n}";
  EXPECT_EQ(dump_json(head, {}), expected);
  EXPECT_EQ(dump_json(head, {}, std::string(100, 'x')), expected);
}

}  // namespace
}  // namespace msprobe
