#include <gtest/gtest.h>

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
