#include "core/fact_fields.h"

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace msprobe {
namespace {

using Kind = FactValue::Kind;

// The fields written as the members of one object, indent 1 as the report writes.
std::string as_json(const std::vector<FactField>& fields) {
  JsonWriter w(1);
  w.begin_object();
  write_json_fields(w, fields);
  w.end_object();
  return w.take();
}

TEST(FactFieldsTest, ValuesKnowTheirKind) {
  EXPECT_EQ(FactValue().kind, Kind::Null);
  EXPECT_EQ(FactValue::of(true).kind, Kind::Bool);
  EXPECT_TRUE(FactValue::of(true).boolean);
  EXPECT_EQ(FactValue::of(7).integer, 7);
  EXPECT_EQ(FactValue::of(size_t{9}).kind, Kind::Int);
  EXPECT_EQ(FactValue::of(int64_t{-3}).integer, -3);
  EXPECT_EQ(FactValue::of(0.5).kind, Kind::Float);
  EXPECT_EQ(FactValue::of("call").kind, Kind::String);  // not a bool
  EXPECT_EQ(FactValue::of("call").text, "call");
}

TEST(FactFieldsTest, OptionalsAreNullWhenEmpty) {
  EXPECT_EQ(FactValue::of(std::optional<std::string>()).kind, Kind::Null);
  EXPECT_EQ(FactValue::of(std::optional<std::string>("x")).text, "x");
  EXPECT_EQ(FactValue::of(std::optional<double>()).kind, Kind::Null);
  EXPECT_EQ(FactValue::of(std::optional<double>(2.0)).number, 2.0);
}

TEST(FactFieldsTest, ListsAndRecords) {
  const FactValue list = FactValue::list(std::vector<int64_t>{2, 3});
  ASSERT_EQ(list.kind, Kind::List);
  ASSERT_EQ(list.items.size(), 2u);
  EXPECT_EQ(list.items[1].integer, 3);
  EXPECT_TRUE(FactValue::list(std::vector<std::string>{}).items.empty());
  const FactValue records = FactValue::list_of_records(
      {{FactField("a", nullptr, FactValue::of(1))}, {FactField("b", nullptr, FactValue::of(2))}});
  ASSERT_EQ(records.items.size(), 2u);
  EXPECT_EQ(records.items[0].kind, Kind::Record);
  EXPECT_STREQ(records.items[1].record.at(0).json, "b");
}

TEST(FactFieldsTest, EveryKindIsWrittenAsPythonsJsonWritesIt) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<FactField> fields = {
      FactField("none", "none", FactValue()),
      FactField("flag", "flag", FactValue::of(false)),
      FactField("count", "count", FactValue::of(12)),
      FactField("max", "max", FactValue::of(inf)),
      FactField("scale", "scale", FactValue::of(1e-05)),
      FactField("name", "name", FactValue::of("Torch.add.0.forward")),
      FactField("shape", "shape", FactValue::list(std::vector<int64_t>{2, 2})),
      FactField("arg", "arg", FactValue::of({FactField("index", "index", FactValue::of(0))})),
  };
  EXPECT_EQ(as_json(fields),
            "{\n \"none\": null,\n \"flag\": false,\n \"count\": 12,\n \"max\": Infinity,\n"
            " \"scale\": 1e-05,\n \"name\": \"Torch.add.0.forward\",\n"
            " \"shape\": [\n  2,\n  2\n ],\n \"arg\": {\n  \"index\": 0\n }\n}");
}

TEST(FactFieldsTest, FieldsWithoutAKeyOrLeftOutAreNotWritten) {
  const std::vector<FactField> fields = {
      FactField(nullptr, "python_only", FactValue::of(1)),
      FactField("kept", nullptr, FactValue::of(2)),
      FactField("optional", "optional", FactValue::of(3), "", false),
      FactField("nested", nullptr,
                FactValue::of({FactField(nullptr, "x", FactValue::of(4)),
                               FactField("y", "y", FactValue::of(5), "", false)})),
  };
  EXPECT_EQ(as_json(fields), "{\n \"kept\": 2,\n \"nested\": {}\n}");
  EXPECT_EQ(as_json({}), "{}");
}

TEST(FactFieldsTest, LinesAreIndentedUnderTheMessageInFieldOrder) {
  const std::vector<FactField> fields = {
      FactField("call", "call", FactValue::of("Torch.add.0.forward"), "call: Torch.add.0.forward"),
      FactField("step", "step", FactValue::of(3)),
      FactField(nullptr, nullptr, FactValue(), "note: a\n  b"),
  };
  EXPECT_EQ(field_lines(fields), "\n  call: Torch.add.0.forward\n  note: a\n  b");
  EXPECT_EQ(field_lines({FactField("step", "step", FactValue::of(3))}), "");
  EXPECT_EQ(field_lines({}), "");
}

}  // namespace
}  // namespace msprobe
