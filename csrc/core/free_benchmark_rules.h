// Task free_benchmark (msprobe 1.1.1, pytorch/free_benchmark): its config section, and the rules
// that decide a call without a baseline: each perturbation's constants, the ratio's tolerance,
// thresholds and chunking, the CSV row, and the calls a second run must not touch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace msprobe {

// The file, directly under dump_path, that msprobe 1.1.1 appends the inconsistent calls to.
inline std::string free_benchmark_csv(const std::string& dump_path) {
  return dump_path + "/free_benchmark.csv";
}

enum class PertMode { ImprovePrecision, AddNoise, BitNoise, ChangeValue, NoChange, ToCpu };
enum class FuzzStage { Forward, Backward };
enum class HandlerType { Check, Fix };

// The "free_benchmark" section (docs/config.md).
struct FreeBenchmarkSection {
  PertMode pert_mode = PertMode::ImprovePrecision;
  bool fuzz_on_cpu = false;  // fuzz_device "cpu" (to_cpu); "npu": where the tensors are
  HandlerType handler = HandlerType::Check;
  FuzzStage stage = FuzzStage::Forward;
  bool preheat = false;  // if_preheat
  int64_t preheat_step = 15;
  int64_t max_sample = 15;         // msprobe 1.1.1's default (it reads the preheat_step default)
  // As msprobe's free_benchmark applies them: a scope name exactly, a list item as a part of the
  // name; both empty: every call. The session's Selection applies them (ScopeForm::Names).
  std::vector<std::string> scope;
  std::vector<std::string> list;
};

const char* to_string(PertMode m);
const char* to_string(FuzzStage s);

// The floating dtypes msprobe has constants for.
enum class FloatKind { Half, BFloat16, Float, Double, Other };

// The value add_noise adds and the magnitude below which it adds nothing (FuzzThreshold);
// nullopt for dtypes msprobe has none for.
std::optional<double> perturbation_value(FloatKind k);
// The ratio's tolerance for the perturbed output's dtype: forward, the square root of the
// dtype's value (1e-8 where it has none); backward, 1e-3.
double ratio_tolerance(FloatKind perturbed, FuzzStage stage);
// The largest ratio (and its inverse the smallest) a consistent output may show, by the
// original output's dtype: 1.002 float16, 1.004 bfloat16, 1.0002 otherwise; 1.0 for no_change.
double ratio_threshold(FloatKind original, PertMode mode);
bool consistent(double ratio, double threshold);
// How many chunks msprobe splits an output of `bytes` into for the ratio: 1 below 32 MiB, then
// doubling with the size up to 128.
int64_t ratio_chunks(int64_t bytes, int64_t ndim);

// Why a call's second run would change the training, or be meaningless: a random op (it would
// draw again), a collective (the other ranks would wait for a call they never make), a call that
// writes into `out=`. "" for every other call.
std::string skip_reason(const std::string& api, bool has_out_argument);
// An attention call with a dropout probability above 0 draws numbers too.
inline constexpr const char* kRandomReason = "a random op: a second run would draw other numbers";

// The positional arguments besides the first that a call writes into: batch norm's and instance
// norm's running statistics (a second run on them would update them twice). Their keyword names
// are running_mean and running_var.
std::vector<size_t> written_statistics(const std::string& api);

// The header and one row of free_benchmark.csv, as msprobe writes them.
struct UnequalRow {
  int64_t rank = 0;
  std::string pert_mode, stage;
  int64_t step = 0;
  std::string api_name;
  std::optional<double> ratio;  // max_rel is ratio - 1; none from the to_cpu comparison
  std::string dtype;            // "torch.float16"; "" when the element is not a tensor
  std::vector<int64_t> shape;
  bool has_shape = false;
  std::optional<int64_t> output_index;  // the element of a tuple output
};
std::string free_benchmark_header();
std::string free_benchmark_row(const UnequalRow& row);

}  // namespace msprobe
