// Values written as Python writes them: grad_probe's CSVs must equal msprobe's byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/python_text.h"

using namespace msprobe;

TEST(PythonFloat, MatchesRepr) {
  // repr() of each, from CPython 3.11.
  EXPECT_EQ(python_float(0.1), "0.1");
  EXPECT_EQ(python_float(0.30000000000000004), "0.30000000000000004");
  EXPECT_EQ(python_float(1.0), "1.0");
  EXPECT_EQ(python_float(100.0), "100.0");
  EXPECT_EQ(python_float(0.0001), "0.0001");
  EXPECT_EQ(python_float(0.00001), "1e-05");
  EXPECT_EQ(python_float(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float(1e16), "1e+16");
  EXPECT_EQ(python_float(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(python_float(1.2345e22), "1.2345e+22");
  EXPECT_EQ(python_float(-0.0), "-0.0");
  EXPECT_EQ(python_float(0.0), "0.0");
  EXPECT_EQ(python_float(-2.5), "-2.5");
  EXPECT_EQ(python_float(5e-324), "5e-324");
  EXPECT_EQ(python_float(std::numeric_limits<double>::max()), "1.7976931348623157e+308");
  EXPECT_EQ(python_float(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(python_float(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(python_float(std::nan("")), "nan");
  // A float32 widened to double, as msprobe's .float().numpy().tolist() gives it.
  EXPECT_EQ(python_float(static_cast<double>(0.1f)), "0.10000000149011612");
}

TEST(PythonIntList, MatchesStr) {
  EXPECT_EQ(python_int_list({}), "[]");
  EXPECT_EQ(python_int_list({8}), "[8]");
  EXPECT_EQ(python_int_list({2, 3, 4}), "[2, 3, 4]");
}

TEST(CsvRow, QuotesAsCsvWriter) {
  EXPECT_EQ(csv_row({"a", "1.5", "[8]"}), "a,1.5,[8]\r\n");
  EXPECT_EQ(csv_row({"[2, 3]"}), "\"[2, 3]\"\r\n");
  EXPECT_EQ(csv_row({"say \"hi\""}), "\"say \"\"hi\"\"\"\r\n");
  EXPECT_EQ(csv_row({"two\nlines", ""}), "\"two\nlines\",\r\n");
}

TEST(CsvRow, ParsesBack) {
  const std::vector<std::string> fields = {"(-inf, -1]", "x", "say \"hi\"", "", "[2, 3]"};
  std::string line = csv_row(fields);
  line.resize(line.size() - 2);
  EXPECT_EQ(parse_csv_line(line), fields);
}
