#include <gtest/gtest.h>

#include "core/detector.h"
#include "core/explained_kinds.h"
#include "test_util.h"

using namespace msprobe;
using namespace msprobe::testing;

namespace {

// A float32 tensor entry of `shape` holding `nan`, `pos` and `neg` non-finite elements (counted,
// as the live statistics count them).
Entry tensor(std::vector<int64_t> shape, int64_t nan, int64_t pos, int64_t neg) {
  Entry e;
  e.kind = Entry::Kind::Object;
  e.type = "torch.Tensor";
  e.dtype = "torch.float32";
  e.has_shape = true;
  e.shape = std::move(shape);
  const double inf = std::numeric_limits<double>::infinity();
  const double max = nan ? std::nan("") : pos ? inf : 1.0;
  const double min = nan ? std::nan("") : neg ? -inf : 0.0;
  e.max = Scalar::of_float(max);
  e.min = Scalar::of_float(min);
  e.mean = Scalar::of_float(nan || pos || neg ? std::nan("") : 0.5);
  e.norm = Scalar::of_float(nan || pos || neg ? inf : 1.0);
  e.nonfinite = NonFiniteCounts{nan, pos, neg};
  return e;
}

Entry scalar(double v) {
  return Entry::scalar("float", Scalar::of_float(v));
}

CallRecord call(const std::string& name, std::vector<Entry> outputs) {
  CallRecord r;
  r.name = name;
  r.outputs = std::move(outputs);
  return r;
}

std::vector<size_t> all(const CallRecord& r) {
  std::vector<size_t> v;
  for (size_t i = 0; i < r.outputs.size(); ++i) v.push_back(i);
  return v;
}

const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST(KindsOf, CountsWhereTakenElseTheStatisticsSay) {
  EXPECT_EQ(kinds_of(tensor({4}, 1, 2, 3)).n, (std::array<int64_t, 3>{1, 2, 3}));
  EXPECT_TRUE(kinds_of(tensor({4}, 1, 2, 3)).counted);
  // Read back from a dump: no counts, kinds from Max/Min.
  const KindCounts read = kinds_of(record(fwd("Torch.x.0.forward", clean(), inf_t())).outputs[0]);
  EXPECT_FALSE(read.counted);
  EXPECT_EQ(read.n, (std::array<int64_t, 3>{0, 1, 0}));
  EXPECT_EQ(kinds_of(scalar(-kInf)).n, (std::array<int64_t, 3>{0, 0, 1}));
  EXPECT_FALSE(kinds_of(scalar(1.0)).any());
}

TEST(ExplainedKinds, AConstantExplainsItsKindInAnyNumber) {
  ExplainedKinds k;
  k.add_constant(scalar(-kInf));  // masked_fill(mask, -inf)
  const CallRecord r = call("Tensor.masked_fill.0.forward", {tensor({8, 8}, 0, 0, 28)});
  EXPECT_EQ(k.unexplained_in(r, all(r)), "");
}

TEST(ExplainedKinds, ASecondMaskOnTopOfTheFirstIsExplained) {
  ExplainedKinds k;
  k.add_tensor(tensor({8, 8}, 0, 0, 28));
  k.add_constant(scalar(-kInf));
  const CallRecord r = call("Tensor.masked_fill.1.forward", {tensor({8, 8}, 0, 0, 40)});
  EXPECT_EQ(k.unexplained_in(r, all(r)), "");
}

TEST(ExplainedKinds, ANewKindIsTheCallsOwnWithTheFullyMaskedHint) {
  ExplainedKinds k;
  k.add_tensor(tensor({2, 4, 4}, 0, 0, 10));
  const CallRecord r = call("Tensor.softmax.0.forward", {tensor({2, 4, 4}, 4, 0, 0)});
  EXPECT_EQ(k.unexplained_in(r, all(r)),
            "NaN: 4 new; the explained inputs held -inf only; a row where every element is -inf "
            "(fully masked) gives NaN");
  // Not a softmax: no hint.
  const CallRecord m = call("Tensor.__mul__.0.forward", {tensor({2, 4, 4}, 4, 0, 0)});
  EXPECT_EQ(k.unexplained_in(m, all(m)), "NaN: 4 new; the explained inputs held -inf only");
}

TEST(ExplainedKinds, MoreOfAKindInAnOutputTheSizeOfAnInputIsNew) {
  ExplainedKinds k;
  k.add_tensor(tensor({4, 8}, 0, 0, 10));
  const CallRecord same = call("Tensor.half.0.forward", {tensor({4, 8}, 0, 0, 10)});
  EXPECT_EQ(k.unexplained_in(same, all(same)), "");
  const CallRecord more = call("Tensor.half.0.forward", {tensor({4, 8}, 0, 3, 14)});
  EXPECT_EQ(k.unexplained_in(more, all(more)),
            "+inf: 3 new; -inf: 4 more than the explained inputs held (10); the explained inputs "
            "held -inf only");
}

TEST(ExplainedKinds, ABroadcastInputCountsOncePerRepetition) {
  ExplainedKinds k;
  k.add_tensor(tensor({4, 8, 8}, 0, 0, 48));  // key padding, per sequence
  k.add_tensor(tensor({8, 8}, 0, 0, 28));     // causal, broadcast over 4 sequences
  const CallRecord ok = call("Tensor.__add__.1.forward", {tensor({4, 8, 8}, 0, 0, 122)});
  EXPECT_EQ(k.unexplained_in(ok, all(ok)), "");
  const CallRecord over = call("Tensor.__add__.1.forward", {tensor({4, 8, 8}, 0, 0, 161)});
  EXPECT_EQ(k.unexplained_in(over, all(over)),
            "-inf: 1 more than the explained inputs held (160); the explained inputs held -inf");
}

TEST(ExplainedKinds, OutputsOfAnotherSizeAreJudgedByKindAlone) {
  ExplainedKinds k;
  k.add_tensor(tensor({4, 8}, 0, 0, 10));
  k.add_tensor(tensor({4, 8}, 0, 0, 10));
  // torch.cat of the two: 20 -inf in 64 elements, no input that large.
  const CallRecord cat = call("Torch.cat.0.forward", {tensor({8, 8}, 0, 0, 20)});
  EXPECT_EQ(k.unexplained_in(cat, all(cat)), "");
  // A cat-like output holds its inputs side by side, not one per repetition: with no input as
  // large as it, the repetition bound (here 2 x 10 + 2 x 10) means nothing, and the count is not
  // checked at all, however many -inf the output holds.
  const CallRecord more = call("Torch.cat.1.forward", {tensor({8, 8}, 0, 0, 48)});
  EXPECT_EQ(k.unexplained_in(more, all(more)), "");
}

// An input whose size does not divide the output's is not broadcast over it: how many times it
// repeats is unknown, so no count bound applies, even beside a same-size input.
TEST(ExplainedKinds, AnInputThatDoesNotDivideTheOutputLeavesTheCountUnchecked) {
  ExplainedKinds k;
  k.add_tensor(tensor({4, 8}, 0, 0, 10));
  k.add_tensor(tensor({3}, 0, 0, 1));
  const CallRecord r = call("Tensor.__add__.0.forward", {tensor({4, 8}, 0, 0, 25)});
  EXPECT_EQ(k.unexplained_in(r, all(r)), "");
  // The same output beside dividing inputs alone is judged by count.
  ExplainedKinds dividing;
  dividing.add_tensor(tensor({4, 8}, 0, 0, 10));
  dividing.add_tensor(tensor({8}, 0, 0, 1));
  EXPECT_EQ(dividing.unexplained_in(r, all(r)),
            "-inf: 11 more than the explained inputs held (14); the explained inputs held -inf");
}

// The fully-masked hint explains NaN by rows of -inf: without a -inf input it would mislead.
TEST(ExplainedKinds, NoFullyMaskedHintWithoutAMinusInfInput) {
  ExplainedKinds k;
  k.add_tensor(tensor({2, 4, 4}, 0, 10, 0));
  const CallRecord r = call("Tensor.softmax.0.forward", {tensor({2, 4, 4}, 4, 0, 0)});
  EXPECT_EQ(k.unexplained_in(r, all(r)), "NaN: 4 new; the explained inputs held +inf only");
}

TEST(ExplainedKinds, UncountedOutputsSayNewWithoutANumber) {
  ExplainedKinds k;
  k.add_tensor(tensor({4}, 0, 0, 1));
  const CallRecord r = record(fwd("Torch.exp.0.forward", clean(), nan_t()));
  EXPECT_EQ(k.unexplained_in(r, all(r)), "NaN: new; the explained inputs held -inf only");
}

TEST(ExplainedKinds, OnlyTheNamedOutputsAreLookedAt) {
  ExplainedKinds k;
  k.add_constant(scalar(-kInf));
  const CallRecord r = call("Torch.x.0.forward", {tensor({2}, 1, 0, 0), tensor({2}, 0, 0, 1)});
  EXPECT_EQ(k.unexplained_in(r, {1}), "");
  EXPECT_NE(k.unexplained_in(r, {0}), "");
}

TEST(ExplainedKinds, TensorsInsideAnOutputListAreChecked) {
  ExplainedKinds k;
  k.add_constant(scalar(-kInf));
  const CallRecord r =
      call("Torch.split.0.forward", {Entry::list({tensor({2}, 0, 0, 1), tensor({2}, 0, 1, 0)})});
  EXPECT_EQ(k.unexplained_in(r, all(r)), "+inf: 1 new; the explained inputs held -inf only");
}

// --- writers and template creators do not read their first argument ---

TEST(FirstArgValues, WritersAndTemplatesIgnoreThem) {
  for (const char* name : {"Tensor.zero_.0.forward", "Tensor.uniform_.3.forward",
                           "Tensor.copy_.0.forward", "Torch.zeros_like.0.forward",
                           "Tensor.new_full.1.forward", "Torch._foreach_zero_.0.forward"}) {
    EXPECT_TRUE(ignores_first_arg_values(name)) << name;
  }
  for (const char* name : {"Tensor.add_.0.forward", "Tensor.masked_fill_.0.forward",
                           "Tensor.zero_.0.backward", "Torch.where.0.forward"}) {
    EXPECT_FALSE(ignores_first_arg_values(name)) << name;
  }
}

TEST(FirstArgValues, ViewCallsAreKnownByTheirApi) {
  for (const char* name : {"Tensor.narrow.0.forward", "Torch.narrow.2.forward",
                           "Tensor.view.1.forward", "Tensor.__getitem__.0.forward",
                           "Tensor.as_strided.0.forward", "Torch.select.0.forward",
                           "Tensor.chunk.4.forward", "Tensor.transpose.0.forward"}) {
    EXPECT_TRUE(makes_view_of_first_arg(name)) << name;
  }
  for (const char* name : {"Tensor.narrow.0.backward", "Tensor.reshape.0.forward",
                           "Tensor.contiguous.0.forward", "Torch.cat.0.forward",
                           "Tensor.narrow_copy.0.forward", "Functional.linear.0.forward"}) {
    EXPECT_FALSE(makes_view_of_first_arg(name)) << name;
  }
}

TEST(FirstArgValues, WritersOfTheFirstArgumentAreKnownByTheirApi) {
  for (const char* name : {"Tensor.copy_.0.forward", "Torch.relu_.1.forward",
                           "Tensor.add_.3.forward", "Tensor.__iadd__.0.forward",
                           "Tensor.__setitem__.2.forward", "Torch._foreach_zero_.0.forward",
                           "Tensor.masked_fill_.0.forward"}) {
    EXPECT_TRUE(writes_first_arg(name)) << name;
  }
  for (const char* name : {"Tensor.copy_.0.backward", "Tensor.add.0.forward",
                           "Tensor.__add__.0.forward", "Tensor.__index__.0.forward",
                           "Tensor.__int__.0.forward", "Tensor.requires_grad_.0.forward",
                           "Tensor.t_.0.forward", "Tensor.resize_.0.forward",
                           "Functional.relu.0.forward", "Distributed.all_reduce.0.forward"}) {
    EXPECT_FALSE(writes_first_arg(name)) << name;
  }
}

TEST(FirstArgValues, ZeroingAStaleGradientIsNoFinding) {
  Detector d(RuleSet::shipped(), DetectorOptions{kDefaultMutationThreshold, false});
  EXPECT_FALSE(d.judge(record(fwd("Tensor.zero_.0.forward", inf_t(), clean()))));
  // What it does read still counts: copy_ from a NaN source.
  auto f = d.judge(record(fwd("Tensor.copy_.0.forward", inf_t() + ", " + nan_t(), nan_t())));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->input_indices, std::vector<size_t>{1});
  // An out= buffer is written, not read.
  EXPECT_FALSE(d.judge(record(
      fwd("Torch.add.0.forward", clean() + ", " + clean(), clean(), R"("out": )" + nan_t()))));
}

TEST(FirstArgValues, CompatModeKeepsMsprobesVerdict) {
  Detector d(RuleSet::shipped(), DetectorOptions{kDefaultMutationThreshold, true});
  auto f = d.judge(record(fwd("Tensor.zero_.0.forward", inf_t(), clean())));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::InputAnomalyOutputNormal);
}
