// cc_distribution's aggregate over a step's calls (issue 55), as msprobe 26.2.0's op_aggregate
// folds its 0-d tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/monitor_aggregate.h"

using namespace msprobe;

namespace {
MonitorValue real(double v) { return MonitorValue::of_real(v); }
MonitorValue integer(int64_t v) { return MonitorValue::of_integer(v); }
}  // namespace

TEST(MonitorAggregate, MinimaMaximaSumsAndMeans) {
  const std::vector<MonitorValue> v = {real(2.0), real(-1.5), real(4.0)};
  EXPECT_EQ(monitor_aggregate(MonitorOp::Min, v).real, -1.5);
  EXPECT_EQ(monitor_aggregate(MonitorOp::Max, v).real, 4.0);
  EXPECT_EQ(monitor_aggregate(MonitorOp::Norm, v).real, 4.5);  // msprobe sums the norms
  EXPECT_EQ(monitor_aggregate(MonitorOp::Mean, v).real, 1.5);
  const MonitorValue nans = monitor_aggregate(MonitorOp::Nans, {integer(2), integer(3)});
  EXPECT_EQ(nans.kind, MonitorValue::Kind::Integer);
  EXPECT_EQ(nans.integer, 5);
  EXPECT_TRUE(std::isnan(monitor_aggregate(MonitorOp::Shape, v).real));
  EXPECT_TRUE(std::isnan(monitor_aggregate(MonitorOp::Id, v).real));
}

TEST(MonitorAggregate, ZeroSharesAreFloat32) {
  const std::vector<MonitorValue> v = {real(0.1f), real(0.2f), real(0.3f)};
  const float expected = (0.1f + 0.2f + 0.3f) / 3.0f;
  EXPECT_EQ(monitor_aggregate(MonitorOp::Zeros, v).real, static_cast<double>(expected));
}

TEST(MonitorAggregate, NanAsPythonsMinAndMaxTreatIt) {
  const double nan = std::nan("");
  // The first value stays when it is nan; a later nan never replaces a number.
  EXPECT_TRUE(std::isnan(monitor_aggregate(MonitorOp::Min, {real(nan), real(1.0)}).real));
  EXPECT_EQ(monitor_aggregate(MonitorOp::Max, {real(1.0), real(nan), real(3.0)}).real, 3.0);
}
