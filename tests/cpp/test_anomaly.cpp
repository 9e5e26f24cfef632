#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/anomaly.h"

using namespace msprobe;

namespace {

Entry tensor(double max, double min = 0.0) {
  Entry e;
  e.kind = Entry::Kind::Object;
  e.type = "torch.Tensor";
  e.max = Scalar::of_float(max);
  e.min = Scalar::of_float(min);
  e.mean = Scalar::of_float(0.0);
  e.norm = Scalar::of_float(1.0);
  return e;
}

Entry number(double v) {
  Entry e;
  e.kind = Entry::Kind::Object;
  e.type = "float";
  e.value = Scalar::of_float(v);
  return e;
}

Entry list_of(std::vector<Entry> items) {
  Entry e;
  e.kind = Entry::Kind::List;
  e.items = std::move(items);
  return e;
}

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST(Anomaly, AnyNonFiniteStatisticMakesATensorAnomalous) {
  EXPECT_FALSE(is_anomalous(tensor(1.0), false));
  EXPECT_TRUE(is_anomalous(tensor(kNan), false));
  EXPECT_TRUE(is_anomalous(tensor(1.0, -kInf), true));
  Entry mean_nan = tensor(1.0);
  mean_nan.mean = Scalar::of_float(kNan);
  EXPECT_TRUE(is_anomalous(mean_nan, false));
  Entry norm_inf = tensor(1.0);
  norm_inf.norm = Scalar::of_float(kInf);
  EXPECT_TRUE(is_anomalous(norm_inf, true));
}

// msprobe 1.1.1's check reads tensors only; ours also reads a Python float argument.
TEST(Anomaly, ANonFiniteNumberCountsOnlyOutsideCompatMode) {
  EXPECT_TRUE(is_anomalous(number(kInf), false));
  EXPECT_FALSE(is_anomalous(number(kInf), true));
  EXPECT_FALSE(is_anomalous(number(2.5), false));
}

TEST(Anomaly, UnwrittenBytesAreNeverAnAnomaly) {
  Entry e = tensor(kNan);
  e.marks.unwritten = true;
  EXPECT_FALSE(is_anomalous(e, false));
}

TEST(Anomaly, OnlyObjectsAreJudgedDirectly) {
  Entry null;
  EXPECT_FALSE(is_anomalous(null, false));
  EXPECT_FALSE(is_anomalous(list_of({tensor(kNan)}), false));
}

TEST(Anomaly, HoldsAnomalyLooksThroughNestedItems) {
  EXPECT_FALSE(holds_anomaly(list_of({tensor(1.0), list_of({number(3.0)})}), false));
  EXPECT_TRUE(holds_anomaly(list_of({tensor(1.0), list_of({tensor(kNan)})}), false));
  EXPECT_TRUE(holds_anomaly(list_of({number(kNan)}), false));
  EXPECT_FALSE(holds_anomaly(list_of({number(kNan)}), true));
  EXPECT_TRUE(holds_anomaly(tensor(kInf), true));
  EXPECT_FALSE(holds_anomaly(list_of({}), false));
}
