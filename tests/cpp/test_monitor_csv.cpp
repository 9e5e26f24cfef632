// The training monitor's CSVs (issue 55): each expected text below is what pandas 3.0.6 wrote
// for the same rows in msprobe 26.2.0's venv (DataFrame(rows).round(6).fillna("nan")
// .to_csv(index=False, header=False)).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/monitor_csv.h"

using namespace msprobe;

namespace {

MonitorRow row(const std::string& name, int64_t step, std::vector<MonitorValue> values,
               bool micro_step) {
  MonitorRow r;
  r.vpp_stage = "0";
  r.name = name;
  if (micro_step) r.after = {"0"};
  r.step = step;
  r.values = std::move(values);
  return r;
}

MonitorValue real(double v) { return MonitorValue::of_real(v); }
MonitorValue integer(int64_t v) { return MonitorValue::of_integer(v); }
MonitorValue text(const char* v) { return MonitorValue::of_text(v); }

}  // namespace

TEST(MonitorCsv, FileNamesHoldStepCountPerRecordSteps) {
  EXPECT_EQ(monitor_csv_name("actv", 0, 1), "actv_0-0.csv");
  EXPECT_EQ(monitor_csv_name("actv_grad", 7, 1), "actv_grad_7-7.csv");
  EXPECT_EQ(monitor_csv_name("grad_reduced", 7, 5), "grad_reduced_5-9.csv");
  EXPECT_EQ(monitor_csv_name("exp_avg_sq", 10, 5), "exp_avg_sq_10-14.csv");
}

TEST(MonitorCsv, HeaderHasAMicroStepColumnInTheActivationFilesOnly) {
  EXPECT_EQ(monitor_csv_header(true, {"min", "max", "shape", "dtype"}),
            "vpp_stage,name,step,micro_step,min,max,shape,dtype\n");
  EXPECT_EQ(monitor_csv_header(false, {"norm", "shape", "dtype"}),
            "vpp_stage,name,step,norm,shape,dtype\n");
}

TEST(MonitorCsv, AMissingRowTurnsItsWritesIntegerColumnsIntoReals) {
  // An input without a gradient (msprobe's None) is a row of nan, shape and dtype too; in that
  // write the other rows' `nans` print 0.0.
  const MonitorValue none = MonitorValue::missing();
  const std::vector<MonitorRow> rows = {
      row("fc1.input", 0, {none, none, none, none, none, none, none, none}, true),
      row("fc1.output", 0,
          {real(-0.05454412), real(0.0350881), real(0.11979123), real(0.578125), integer(0),
           real(-0.000100123), text("[16, 8]"), text("torch.float32")},
          true),
      row("a,b", 0,
          {real(1e-07), real(2.5e-06), real(1234567.1234567),
           real(std::numeric_limits<double>::infinity()), integer(3), real(4.41e-05), text("[8]"),
           text("torch.float32")},
          true),
  };
  EXPECT_EQ(monitor_csv_rows(rows, 6),
            "0,fc1.input,0,0,nan,nan,nan,nan,nan,nan,nan,nan\n"
            "0,fc1.output,0,0,-0.054544,0.035088,0.119791,0.578125,0.0,-0.0001,\"[16, 8]\","
            "torch.float32\n"
            "0,\"a,b\",0,0,0.0,2e-06,1234567.123457,inf,3.0,4.4e-05,[8],torch.float32\n");
}

TEST(MonitorCsv, IntegerColumnsStayIntegersAndMixedOnesPrintReals) {
  const double nan = std::nan("");
  const std::vector<MonitorRow> rows = {
      row("fc1.weight", 1,
          {real(0.0), real(4.4e-05), real(4.6e-05), real(0.03125), integer(0), real(3e-06),
           text("[8, 4]"), text("torch.float32")},
          false),
      row("fc1.bias", 1,
          {integer(-3), integer(7), real(2.0), real(0.5), integer(0), real(nan), text("[]"),
           text("torch.int64")},
          false),
  };
  EXPECT_EQ(monitor_csv_rows(rows, 6),
            "0,fc1.weight,1,0.0,4.4e-05,4.6e-05,0.03125,0,3e-06,\"[8, 4]\",torch.float32\n"
            "0,fc1.bias,1,-3.0,7.0,2.0,0.5,0,nan,[],torch.int64\n");
}

TEST(MonitorCsv, RoundsAsNumpyDoes) {
  EXPECT_EQ(numpy_round(2.5, 0), 2.0);  // half to even
  EXPECT_EQ(numpy_round(3.5, 0), 4.0);
  EXPECT_EQ(numpy_round(-1.5, 0), -2.0);
  EXPECT_EQ(numpy_round(2.5e-06, 6), 2e-06);
  EXPECT_EQ(numpy_round(-0.000100123, 6), -0.0001);
  EXPECT_TRUE(std::isnan(numpy_round(std::nan(""), 6)));
  EXPECT_EQ(numpy_round(-std::numeric_limits<double>::infinity(), 6),
            -std::numeric_limits<double>::infinity());
}

TEST(MonitorCsv, CollectivesRowsAreLongerAndTheirFirstValueTakesTheNameColumn) {
  // msprobe 26.2.0's `other` file with mg_direction and cc_distribution on (ops min, max): an
  // mg_direction row, then a collective's [name, first value, step, the rest] over two tags.
  const double nan = std::nan("");
  const std::vector<std::vector<MonitorValue>> rows = {
      monitor_row_cells(row("0.weight", 2, {real(1.0), real(1.0), text("[]"),
                                            text("torch.float32")}, false)),
      {text("all_gather"), real(-0.2685525417327881), integer(2), real(0.2091734),
       real(nan), real(nan), real(1.0), real(2.0000004), real(nan), real(nan)},
  };
  EXPECT_EQ(monitor_csv_cells(rows, 6),
            "0,0.weight,2,1.0,1.0,[],torch.float32,nan,nan,nan\n"
            "all_gather,-0.2685525417327881,2,0.209173,nan,nan,1.0,2.0,nan,nan\n");
}

TEST(MonitorCsv, CollectivesAloneRoundTheirNameColumn) {
  const std::vector<std::vector<MonitorValue>> rows = {
      {text("broadcast"), real(0.12345678), integer(0), real(5.0)},
      {text("all_reduce"), real(1.0), integer(0), real(3.0), real(7.0)},
  };
  EXPECT_EQ(monitor_csv_cells(rows, 6),
            "broadcast,0.123457,0,5.0,nan\n"
            "all_reduce,1.0,0,3.0,7.0\n");
}
