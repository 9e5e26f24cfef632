// grad_probe's per-step summary (msprobe 1.1.1, grad_probe/grad_stat_csv.py): which columns each
// grad_level writes, their header and one parameter's row, as msprobe writes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace msprobe {

enum class GradLevel { L0, L1, L2 };

// One bound of grad_probe.bounds: its value, and its text as str() of the JSON number gives it in
// Python (what the header shows: "-1", "0.5", "1e-05").
struct GradBound {
  double value = 0;
  std::string text;
};

// The "grad_probe" section (docs/config.md).
struct GradProbeSection {
  GradLevel level = GradLevel::L1;
  std::vector<std::string> param_list;  // empty: every parameter
  std::vector<GradBound> bounds = {{-1, "-1"}, {0, "0"}, {1, "1"}};

  bool watches(const std::string& param_name) const;
};

// The columns after param_name, in file order: one declaration that the header and every row
// read.
enum class GradColumn { Md5, Distribution, Max, Min, Norm, Shape };
const std::vector<GradColumn>& grad_columns(GradLevel level);
// L1 and L2 also write each gradient's direction (grad > 0) as step<N>/<name>.npy.
bool writes_direction(GradLevel level);

// What one gradient's row says. Max, min and norm are float32 values (msprobe writes
// `.float().numpy().tolist()`); intervals[i] counts elements in the i-th interval of the bounds
// ((-inf, b0], (b0, b1], ..., (b_last, inf)), as torch.bucketize places them.
struct GradFacts {
  std::string name;
  std::string md5;  // L0: of the gradient's float32 bytes
  double max = 0, min = 0, norm = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> intervals;  // L2
  int64_t zeros = 0;               // L2
  int64_t numel = 0;
};

std::vector<std::string> grad_summary_header(const GradProbeSection& section);
std::vector<std::string> grad_summary_row(const GradProbeSection& section, const GradFacts& facts);
// The whole grad_summary_<step>.csv: the byte-order mark, the header and the rows.
std::string grad_summary_csv(const GradProbeSection& section, const std::vector<GradFacts>& rows);

}  // namespace msprobe
