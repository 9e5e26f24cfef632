#include <gtest/gtest.h>

#include "core/selection.h"
#include "test_util.h"

using namespace msprobe;

namespace {

CollectSection section(std::vector<std::string> scope, std::vector<std::string> list,
                       DataMode mode = DataMode{}) {
  CollectSection s;
  s.scope = std::move(scope);
  s.list = std::move(list);
  s.data_mode = mode;
  return s;
}

DataMode mode(bool f, bool b, bool i, bool o) {
  DataMode m;
  m.forward = f, m.backward = b, m.input = i, m.output = o;
  return m;
}

// Forward names in order; each is begun and ended like a call without nested calls.
std::vector<std::string> chosen(Selection& sel, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (sel.begin(n, n + "!bwd", false).forward) out.push_back(n);
    sel.end(n);
  }
  return out;
}

}  // namespace

TEST(Selection, NoFiltersTakesEverything) {
  Selection sel(section({}, {}), Level::L1, "statistics");
  const Selected s = sel.begin("Torch.a.0.forward", "Torch.a.0.backward", false);
  EXPECT_TRUE(s.forward && s.backward && s.inputs && s.outputs);
  EXPECT_FALSE(sel.filters());
}

TEST(Selection, ScopeIsAnInclusiveWindowThatResetsEachStep) {
  Selection sel(section({"T.b.0.forward", "T.d.0.forward"}, {}), Level::L1, "statistics");
  const std::vector<std::string> names = {"T.a.0.forward", "T.b.0.forward", "T.c.0.forward",
                                          "T.d.0.forward", "T.e.0.forward", "T.b.0.forward"};
  EXPECT_EQ(chosen(sel, names),
            (std::vector<std::string>{"T.b.0.forward", "T.c.0.forward", "T.d.0.forward"}));
  sel.new_step();
  EXPECT_EQ(chosen(sel, {"T.b.0.forward"}), std::vector<std::string>{"T.b.0.forward"});
}

TEST(Selection, ScopeEndIsTheEndOfTheLastCall) {
  // A module scope: the API calls inside the last module are still in the window.
  Selection sel(section({"Module.a.A.forward.0", "Module.b.B.forward.0"}, {}), Level::Mix, "s");
  EXPECT_TRUE(sel.begin("Module.a.A.forward.0", "", false).forward);
  sel.end("Module.a.A.forward.0");
  EXPECT_TRUE(sel.begin("Module.b.B.forward.0", "", false).forward);
  EXPECT_TRUE(sel.begin("Torch.x.0.forward", "", false).forward);
  sel.end("Torch.x.0.forward");
  sel.end("Module.b.B.forward.0");
  EXPECT_FALSE(sel.begin("Torch.y.0.forward", "", false).forward);
}

TEST(Selection, ScopeNamesMustFitTheLevel) {
  EXPECT_THROW(Selection(section({"Module.a.A.forward.0", "T.b.0.forward"}, {}), Level::L1, "s"),
               ConfigError);
  EXPECT_THROW(Selection(section({"Module.a.A.forward.0", "T.b.0.forward"}, {}), Level::L0, "s"),
               ConfigError);
  EXPECT_NO_THROW(
      Selection(section({"Module.a.A.forward.0", "T.b.0.forward"}, {}), Level::Mix, "s"));
  EXPECT_EQ(msprobe::testing::error_of<ConfigError>([] {
              Selection(section({"T.a.0.forward", "T.b.0.forward"}, {}), Level::L0,
                        "config.json: statistics");
            }),
            "config.json: statistics.scope[0]: expected a module call name (Module....) at "
            "level L0, got \"T.a.0.forward\"");
}

TEST(Selection, ListByFullNameOrFragment) {
  Selection sel(section({}, {"Tensor.permute.1.forward", "relu"}), Level::L1, "s");
  EXPECT_TRUE(sel.listed("Tensor.permute.1.forward"));
  EXPECT_FALSE(sel.listed("Tensor.permute.11.forward"));
  EXPECT_FALSE(sel.listed("Tensor.permute.0.forward"));
  EXPECT_TRUE(sel.listed("Functional.relu.3.backward"));
  EXPECT_FALSE(sel.listed("Functional.gelu.0.forward"));
  // A listed forward brings its backward; a listed backward name alone brings only that.
  Selected s = sel.begin("Tensor.permute.1.forward", "Tensor.permute.1.backward", false);
  EXPECT_TRUE(s.forward && s.backward);
  Selection back(section({}, {"Tensor.permute.1.backward"}), Level::L1, "s");
  s = back.begin("Tensor.permute.1.forward", "Tensor.permute.1.backward", false);
  EXPECT_TRUE(!s.forward && s.backward);
}

TEST(Selection, InsideAListedModuleEverythingIsTaken) {
  Selection sel(section({}, {"Module.fc2"}), Level::Mix, "s");
  EXPECT_TRUE(sel.begin("Functional.linear.0.forward", "", true).forward);
  EXPECT_FALSE(sel.begin("Functional.linear.0.forward", "", false).forward);
}

TEST(Selection, ModuleBackwardFollowsItsForwards) {
  Selection sel(section({}, {"fc2"}), Level::L0, "s");
  EXPECT_FALSE(sel.module_backward("Module.fc1.Linear.backward.0", "Module.fc1.Linear").backward);
  sel.begin("Module.fc3.Linear.forward.0", "", false);  // not listed
  EXPECT_FALSE(sel.module_backward("Module.fc3.Linear.backward.0", "Module.fc3.Linear").backward);
  Selection scoped(section({"Module.fc3.Linear.forward.0", "Module.fc3.Linear.forward.0"}, {}),
                   Level::L0, "s");
  scoped.begin("Module.fc3.Linear.forward.0", "", false);
  EXPECT_TRUE(scoped.module_backward("Module.fc3.Linear.backward.0", "Module.fc3.Linear").backward);
  scoped.new_step();
  EXPECT_FALSE(
      scoped.module_backward("Module.fc3.Linear.backward.0", "Module.fc3.Linear").backward);
}

TEST(Selection, DataModeWordsOfOneKindLeaveTheOtherKindWhole) {
  struct Case {
    DataMode m;
    bool f, b, i, o;
  } cases[] = {
      {mode(true, true, true, true), true, true, true, true},      // all
      {mode(true, false, false, false), true, false, true, true},  // forward
      {mode(false, true, false, false), false, true, true, true},  // backward
      {mode(false, false, true, false), true, true, true, false},  // input
      {mode(false, false, false, true), true, true, false, true},  // output
      {mode(true, false, false, true), true, false, false, true},  // forward + output
  };
  for (const Case& c : cases) {
    Selection sel(section({}, {}, c.m), Level::L1, "s");
    const Selected s = sel.begin("T.a.0.forward", "T.a.0.backward", false);
    EXPECT_EQ(s.forward, c.f);
    EXPECT_EQ(s.backward, c.b);
    EXPECT_EQ(s.inputs, c.i);
    EXPECT_EQ(s.outputs, c.o);
    EXPECT_EQ(sel.module_backward("Module.m.M.backward.0", "Module.m.M").backward, c.b);
  }
}

TEST(Selection, UnmatchedEntriesAreNamedPerStep) {
  Selection sel(section({"Torch.a.0", "Torch.b.0.forward"}, {"relu", "nothing"}), Level::L1,
                "statistics");
  chosen(sel, {"Torch.a.0.forward", "Functional.relu.0.forward", "Torch.b.0.forward"});
  // The scope's start lacks ".forward": only it is named (its end is never looked for).
  EXPECT_EQ(sel.unmatched(),
            (std::vector<std::string>{R"(scope[0] "Torch.a.0")", R"(list[1] "nothing")"}));

  Selection good(section({"Torch.a.0.forward", "Torch.b.0.forward"}, {"relu"}), Level::L1,
                 "statistics");
  chosen(good, {"Torch.a.0.forward", "Torch.b.0.forward"});
  EXPECT_EQ(good.unmatched(), (std::vector<std::string>{R"(list[0] "relu")"}));
  chosen(good, {"Functional.relu.0.forward"});
  EXPECT_TRUE(good.unmatched().empty());
  good.new_step();  // each step is judged on its own
  EXPECT_EQ(good.unmatched(),
            (std::vector<std::string>{R"(scope[0] "Torch.a.0.forward")", R"(list[0] "relu")"}));
  chosen(good, {"Torch.a.0.forward", "Torch.x.0.forward"});
  EXPECT_EQ(good.unmatched(),
            (std::vector<std::string>{R"(scope[1] "Torch.b.0.forward")", R"(list[0] "relu")"}));
}

// free_benchmark's scope names the calls checked, one by one; its list as the dump's.
TEST(Selection, ScopeOfNamesTakesEachNamedCallOnly) {
  Selection all(section({}, {}), Level::L1, "free_benchmark", RiskLevel::All, false,
                ScopeForm::Names);
  EXPECT_TRUE(all.begin("Torch.add.0.forward", "", false).forward);
  Selection listed(section({}, {"add"}), Level::L1, "free_benchmark", RiskLevel::All, false,
                   ScopeForm::Names);
  EXPECT_TRUE(listed.begin("Torch.addmm.0.forward", "", false).forward);
  EXPECT_TRUE(listed.begin("Tensor.__add__.3.forward", "", false).forward);
  EXPECT_FALSE(listed.begin("Torch.mul.0.forward", "", false).forward);
  Selection named(section({"Torch.add.0.forward", "Torch.mul.2.forward"}, {}), Level::L1,
                  "free_benchmark", RiskLevel::All, false, ScopeForm::Names);
  EXPECT_TRUE(named.begin("Torch.add.0.forward", "", false).forward);
  EXPECT_FALSE(named.begin("Torch.add.1.forward", "", false).forward);
  EXPECT_FALSE(named.begin("Torch.relu.0.forward", "", false).forward);  // no window opened
  named.end("Torch.add.0.forward");
  EXPECT_TRUE(named.begin("Torch.mul.2.forward", "", false).forward);
  EXPECT_TRUE(named.unmatched().empty());  // names, not a window: none is left open
}
