#include "core/monitor_row_table.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace msprobe {
namespace {

std::vector<MonitorValue> reals(std::vector<double> xs) {
  std::vector<MonitorValue> out;
  for (double x : xs) out.push_back(MonitorValue::of_real(x));
  return out;
}

// "tag=v1;v2 tag=..." of the table's rows, in order.
std::string rows_text(const MonitorRowTable& t) {
  std::string out;
  const std::vector<MonitorRow> rows = t.rows(7);
  for (size_t i = 0; i < rows.size(); ++i) {
    out += (i ? " " : "") + t.tag(i) + "=";
    for (size_t k = 0; k < rows[i].values.size(); ++k) {
      out += (k ? ";" : "") + std::to_string(static_cast<int>(rows[i].values[k].real));
    }
  }
  return out;
}

TEST(MonitorRowTable, RowsComeInFirstPutOrderAndAPutAgainKeepsItsPlace) {
  MonitorRowTable t;
  t.put("0:b.input:0", reals({1, 2}));
  t.put("0:a.input:0", reals({3, 4}));
  t.put("0:b.input:0", reals({5, 6}));
  EXPECT_EQ(rows_text(t), "0:b.input:0=5;6 0:a.input:0=3;4");
  const std::vector<MonitorRow> rows = t.rows(7);
  EXPECT_EQ(rows[0].vpp_stage, "0");
  EXPECT_EQ(rows[0].name, "b.input");
  EXPECT_EQ(rows[0].after, std::vector<std::string>{"0"});
  EXPECT_EQ(rows[0].step, 7);
}

TEST(MonitorRowTable, AfterClearTheOrderIsTheNextRoundsOwn) {
  MonitorRowTable t;
  t.put("0:a", reals({1}));
  t.put("0:b", reals({2}));
  t.clear();
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(rows_text(t), "");
  t.put("0:b", reals({3}));
  t.put("0:c", reals({4}));
  t.put("0:a", reals({5}));
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(rows_text(t), "0:b=3 0:c=4 0:a=5");
}

TEST(MonitorRowTable, ACopyKeepsItsRowsWhateverTheTableIsPutAfter) {
  // The write thread formats a copy while the next step fills the table: a new tag then goes
  // into tags of the table's own, and values into its own cells.
  MonitorRowTable t;
  t.put("0:a", reals({1}));
  const MonitorRowTable copy = t;
  t.clear();
  t.put("0:new", reals({9}));
  t.put("0:a", reals({8}));
  EXPECT_EQ(rows_text(copy), "0:a=1");
  EXPECT_EQ(rows_text(t), "0:new=9 0:a=8");
  const MonitorRowTable second = t;
  t.put("0:third", reals({7}));
  EXPECT_EQ(rows_text(second), "0:new=9 0:a=8");
  EXPECT_EQ(rows_text(t), "0:new=9 0:a=8 0:third=7");
}

TEST(MonitorRowTable, ARowMayChangeItsNumberOfValues) {
  MonitorRowTable t;
  t.put("0:a", reals({1, 2}));
  t.put("0:b", reals({3}));
  t.put("0:a", reals({4, 5, 6}));
  EXPECT_EQ(rows_text(t), "0:a=4;5;6 0:b=3");
  t.put("0:a", {});
  EXPECT_EQ(rows_text(t), "0:a= 0:b=3");
}

TEST(MonitorRowTable, CopiesReadOnAnotherThreadWhileTheTableLearnsNewTags) {
  // The monitor's hand-over: each step a copy goes to the write thread, which reads its rows while
  // the next step puts again, new tags among them (a module first called late).
  MonitorRowTable t;
  std::vector<std::thread> readers;
  std::vector<std::string> seen(50);
  for (int step = 0; step < 50; ++step) {
    t.clear();
    for (int k = 0; k <= step; ++k) t.put("0:m" + std::to_string(k), reals({double(step)}));
    readers.emplace_back([copy = MonitorRowTable(t), &out = seen[step]] {
      out = rows_text(copy);
    });
  }
  for (auto& r : readers) r.join();
  EXPECT_EQ(seen[0], "0:m0=0");
  EXPECT_EQ(seen[2], "0:m0=2 0:m1=2 0:m2=2");
  EXPECT_EQ(seen[49].substr(seen[49].size() - 8), "0:m49=49");
}

}  // namespace
}  // namespace msprobe
