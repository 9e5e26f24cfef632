#include <gtest/gtest.h>

#include <limits>

#include "core/json_writer.h"

using namespace msprobe;

// Expected strings are what Python 3's repr() / json.dumps print for the same values.
TEST(FormatFloat, MatchesPythonRepr) {
  EXPECT_EQ(format_float(0.0), "0.0");
  EXPECT_EQ(format_float(-0.0), "-0.0");
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(2.5), "2.5");
  EXPECT_EQ(format_float(100000.0), "100000.0");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(format_float(0.0001), "0.0001");
  EXPECT_EQ(format_float(1e-05), "1e-05");
  EXPECT_EQ(format_float(1.5e-07), "1.5e-07");
  EXPECT_EQ(format_float(1e38), "1e+38");
  EXPECT_EQ(format_float(1.80338631384126e+38), "1.80338631384126e+38");
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(-3.4028234663852886e+38), "-3.4028234663852886e+38");
  EXPECT_EQ(format_float(5e-324), "5e-324");
  EXPECT_EQ(format_float(0.30000000000000004), "0.30000000000000004");
  EXPECT_EQ(format_float(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(format_float(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(format_float(-std::numeric_limits<double>::infinity()), "-Infinity");
}

TEST(JsonString, EscapesLikePythonEnsureAscii) {
  std::string out;
  append_json_string(out, "a\"b\\c\nd\te\x01 \xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(out, R"("a\"b\\c\nd\te\u0001 \u00e9 \ud83d\ude00")");
}

// json.dumps({"a": [], "b": {}, "c": [1, {"d": None}], "e": 1.5}, indent=1)
TEST(JsonWriter, LayoutMatchesPythonIndentOne) {
  JsonWriter w(1);
  w.begin_object();
  w.key("a");
  w.begin_array();
  w.end_array();
  w.key("b");
  w.begin_object();
  w.end_object();
  w.key("c");
  w.begin_array();
  w.value_int(1);
  w.begin_object();
  w.key("d");
  w.value_null();
  w.end_object();
  w.end_array();
  w.key("e");
  w.value_float(1.5);
  w.end_object();
  EXPECT_EQ(w.str(),
            "{\n \"a\": [],\n \"b\": {},\n \"c\": [\n  1,\n  {\n   \"d\": null\n  }\n ],\n"
            " \"e\": 1.5\n}");
}
