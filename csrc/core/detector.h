// The overflow detector (docs/overflow-detection.md): the four scenes, tried in order, then the
// ignore filter. The live hooks and `msprobe-cpp check` both judge calls through this class.
#pragma once

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/config.h"
#include "core/record.h"
#include "core/rules.h"

namespace msprobe {

enum class Scene {
  InputNormalOutputAnomaly,   // critical
  InputAnomalyOutputAnomaly,  // high
  InputAnomalyOutputNormal,   // medium
  NumericalMutation,          // high
};

const char* scene_name(Scene s);  // "InputNormalOutputAnomalyScene", ...
Severity scene_severity(Scene s);

struct Finding {
  std::string call;
  Scene scene = Scene::InputNormalOutputAnomaly;
  Severity severity = Severity::Critical;
  std::vector<size_t> input_indices;  // positions in input_args (or backward `input`)
  bool uses_input_key = false;        // the record's inputs are msprobe's `input` (backward)
  std::vector<std::string> kwarg_keys;
  std::vector<size_t> output_indices;
  // NumericalMutation only: the threshold, and the largest input and output Norms it compared.
  double threshold = 0.0;
  double input_norm = 0.0;
  double output_norm = 0.0;

  // Whether the argument at `pos` is one of the anomalous ones listed above.
  bool lists(const ArgPos& pos) const;
};

// msprobe 1.1.1's NumericalMutationScene test: max output Norm / max input Norm > threshold, over
// top-level tensor entries with a non-NaN Norm (kwargs count as inputs); both sides must have one.
// A max input Norm of 0 compares the max output Norm itself with the threshold.
bool numerical_mutation(const CallRecord& rec, double threshold);
// The largest input and output Norms that test compares, if both sides have one.
std::optional<std::pair<double, double>> mutation_norms(const CallRecord& rec);

// Whether forward call `call_name` overwrites its first argument without reading its values, or
// reads only its shape, dtype and device (`zero_`, `uniform_`, `copy_`, `zeros_like`, `new_full`,
// ...). Outside compat mode that argument, like an `out=` keyword, is no input of the call: the
// NaN/inf it held before (uninitialised memory, a skipped step's gradients) is not the call's.
bool ignores_first_arg_values(const std::string& call_name);

// Whether forward call `call_name` returns a view of its first argument (`narrow`, `view`,
// `select`, `as_strided`, `__getitem__`, ...): it reads none of its values, so the statistics of
// that argument may be left unread where it is larger than a view needs (issue 52).
bool makes_view_of_first_arg(const std::string& call_name);

// Whether forward call `call_name` writes into its first argument's memory: a torch or Tensor
// method named with one trailing underscore (`copy_`, `add_`, `zero_`), an augmented assignment
// (`__iadd__`) or `__setitem__`; not the in-place calls that change only metadata (`t_`,
// `requires_grad_`, `resize_`). The uninitialised memory it writes holds values from then on.
bool writes_first_arg(const std::string& call_name);

struct DetectorOptions {
  double mutation_threshold = kDefaultMutationThreshold;
  // msprobe 1.1.1's exact verdicts: non-finite scalar values do not count, and backward calls do
  // not inherit their forward's anomalies.
  bool compat = false;
  // Every call name comes once (a dump file: its records are keys of one object), so a forward's
  // anomalies are needed by one backward record only and can be forgotten there: the set stays
  // as small as the forwards whose backward is still to come. The live guard can see a backward
  // name twice (retain_graph) and leaves this off.
  bool names_unique = false;
};

class Detector {
 public:
  Detector(RuleSet rules, DetectorOptions options) : rules_(std::move(rules)), options_(options) {}

  // Judges one call; calls must arrive in execution order, because a backward call inherits the
  // anomalies of its forward seen earlier. Returns the finding left after the ignore filter;
  // `filtered`, when given, tells whether an ignore rule dropped one.
  std::optional<Finding> judge(const CallRecord& rec, bool* filtered = nullptr);

  // Forgets the forwards seen so far (a new step, a new file).
  void reset() { anomalous_forwards_.clear(); }

  const DetectorOptions& options() const { return options_; }

 private:
  std::optional<Scene> match_scene(const CallRecord& rec, bool input_anomaly,
                                   bool output_anomaly) const;

  RuleSet rules_;
  DetectorOptions options_;
  std::unordered_set<std::string> anomalous_forwards_;
};

}  // namespace msprobe
