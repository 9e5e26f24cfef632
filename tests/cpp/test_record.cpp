#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/record.h"

using namespace msprobe;

TEST(CallNames, BackwardNamesOfApisAndModules) {
  EXPECT_TRUE(is_backward_name("Functional.linear.0.backward"));
  EXPECT_TRUE(is_backward_name("Module.fc1.Linear.backward.0"));
  EXPECT_FALSE(is_backward_name("Functional.linear.0.forward"));
  EXPECT_FALSE(is_backward_name("Module.fc1.Linear.forward.3"));
  // A user's module called "backward" is not a backward call.
  EXPECT_FALSE(is_backward_name("Module.backward.head.Linear.forward.0"));
  EXPECT_FALSE(is_backward_name("backward"));
}

TEST(CallNames, ForwardNameOfBackward) {
  EXPECT_EQ(forward_name_of("Functional.linear.0.backward"), "Functional.linear.0.forward");
  EXPECT_EQ(forward_name_of("Module.fc1.Linear.backward.12"), "Module.fc1.Linear.forward.12");
  EXPECT_EQ(forward_name_of("Tensor.__mul__.3.forward"), "");
}

TEST(CallNames, SeedTorchApiName) {
  EXPECT_EQ(torch_api_name("Tensor.masked_fill_.0.forward"), "tensor.masked_fill_");
  EXPECT_EQ(torch_api_name("Torch.empty.2.forward"), "torch.empty");
  EXPECT_EQ(torch_api_name("Distributed.all_gather.0.backward"), "distributed.all_gather");
  EXPECT_EQ(torch_api_name("single"), "single");
  EXPECT_EQ(torch_api_name("   "), "");
  EXPECT_EQ(torch_api_name(""), "");
}

TEST(Record, BackwardNameOfAForwardCall) {
  EXPECT_EQ(backward_name_of("Functional.linear.0.forward"), "Functional.linear.0.backward");
  EXPECT_EQ(backward_name_of("Module.mlp.Sequential.forward.0"),
            "Module.mlp.Sequential.backward.0");
  EXPECT_EQ(backward_name_of("Module.forward.Linear.forward.3"),
            "Module.forward.Linear.backward.3");
  EXPECT_EQ(backward_name_of("Torch.a.0.backward"), "");
  EXPECT_EQ(forward_name_of(backward_name_of("Module.a.B.forward.7")), "Module.a.B.forward.7");
}

namespace msprobe {
namespace {

TEST(CallNames, ParsedIntoTheirParts) {
  auto c = parse_call_name("Tensor.__mul__.3.forward");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->section, "Tensor");
  EXPECT_EQ(c->api, "__mul__");
  EXPECT_EQ(c->index, 3);
  EXPECT_FALSE(c->backward);
  EXPECT_EQ(c->family(), "Tensor.__mul__");
  c = parse_call_name("Torch.linalg.norm.12.backward");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->api, "linalg.norm");
  EXPECT_EQ(c->index, 12);
  EXPECT_TRUE(c->backward);
  c = parse_call_name("Module.layers.0.fc.Linear.backward.4");  // a module call: counter last
  ASSERT_TRUE(c);
  EXPECT_EQ(c->section, "Module");
  EXPECT_EQ(c->api, "layers.0.fc.Linear");
  EXPECT_EQ(c->index, 4);
  EXPECT_TRUE(c->backward);
  EXPECT_FALSE(parse_call_name("Tensor.add.forward"));                       // three parts
  EXPECT_FALSE(parse_call_name("Tensor.add.x.forward"));                     // no counter
  EXPECT_FALSE(parse_call_name("Tensor.add.0.sideways"));                    // no direction
  EXPECT_FALSE(parse_call_name("Tensor.add.99999999999999999999.forward"));  // out of range
}

TEST(CallNames, ASiteIsTheNameWithoutItsIndices) {
  EXPECT_EQ(call_site_name("Torch.nan_to_num.0.forward"), "Torch.nan_to_num.forward");
  EXPECT_EQ(call_site_name("Module.layers.0.fc.Linear.forward.1"),
            "Module.layers.fc.Linear.forward");
}

}  // namespace
}  // namespace msprobe

// Int and Float share their bytes: copies and moves keep each as it was written, with -0.0, NaN
// and the largest int64 bit for bit.
TEST(Scalars, CopiedAndMovedKeepTheirKindAndValue) {
  const std::vector<Scalar> cases = {Scalar::of_int(INT64_MAX),
                                     Scalar::of_int(-3),
                                     Scalar::of_float(-0.0),
                                     Scalar::of_float(NAN),
                                     Scalar::of_bool(true),
                                     Scalar::of_string("x"),
                                     Scalar::null()};
  for (const Scalar& s : cases) {
    Scalar copy = s;
    Scalar assigned;
    assigned = s;
    Scalar moved = Scalar(s);
    Scalar move_assigned;
    move_assigned = Scalar(s);
    for (const Scalar* c : {&copy, &assigned, &moved, &move_assigned}) {
      EXPECT_EQ(c->kind, s.kind);
      EXPECT_EQ(c->boolean, s.boolean);
      EXPECT_EQ(c->text(), s.text());
      if (s.kind == Scalar::Kind::Int) {
        EXPECT_EQ(c->integer, s.integer);
      }
      if (s.kind == Scalar::Kind::Float) {
        EXPECT_EQ(std::signbit(c->number), std::signbit(s.number));
        EXPECT_EQ(std::isnan(c->number), std::isnan(s.number));
      }
    }
  }
  EXPECT_EQ(Scalar::of_int(7).as_double(), 7.0);
  EXPECT_EQ(Scalar::of_float(2.5).as_double(), 2.5);
  EXPECT_EQ(Scalar().as_double(), 0.0);
}

// Past six dimensions a shape's sizes go to the heap: copies are deep, and a moved-from shape is
// empty, not one that points at nothing.
TEST(Shapes, BeyondTheInlineDimensionsCopiesAndMovesHoldEveryDimension) {
  for (size_t rank : {0u, 3u, 6u, 7u, 12u}) {
    Shape s;
    for (size_t i = 0; i < rank; ++i) s.push_back(static_cast<int64_t>(i) + 2);
    Shape copy = s;
    EXPECT_EQ(copy, s);
    Shape assigned{1};
    assigned = s;
    EXPECT_EQ(assigned, s);
    Shape moved = std::move(copy);
    EXPECT_EQ(moved, s);
    EXPECT_TRUE(copy.empty());  // NOLINT: a moved-from shape is defined to be empty
    EXPECT_EQ(copy.begin(), copy.end());
    Shape move_assigned{4, 5};
    move_assigned = std::move(moved);
    EXPECT_EQ(move_assigned, s);
    EXPECT_EQ(move_assigned.to_vector().size(), rank);
    s.push_back(99);  // the copy does not share the original's dimensions
    EXPECT_EQ(assigned.size(), rank);
  }
}

namespace msprobe {
namespace {

TEST(CallRecordTest, DropEntriesEmptiesEveryListAndKeepsItsStorage) {
  CallRecord rec;
  rec.name = "Torch.add.0.forward";
  rec.inputs.resize(3);
  rec.kwargs.resize(2);
  rec.outputs.resize(1);
  rec.parameters.resize(1);
  const size_t inputs_capacity = rec.inputs.capacity();
  drop_entries(rec);
  EXPECT_TRUE(rec.inputs.empty() && rec.kwargs.empty() && rec.outputs.empty() &&
              rec.parameters.empty());
  EXPECT_EQ(rec.inputs.capacity(), inputs_capacity);
  EXPECT_EQ(rec.name, "Torch.add.0.forward");
}

}  // namespace
}  // namespace msprobe
