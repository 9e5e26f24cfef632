// grad_probe's run comparison (msprobe 1.1.1's GradComparator.compare_distributed): for each rank
// and step both runs summarized, the share of each parameter's gradient elements whose direction
// (grad > 0) agrees, and the share over all parameters ("summary"). Reads msprobe's dumps and this
// product's alike: the same files.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace msprobe {

// A comparison that cannot be made (no common rank or step, a direction file missing or of
// another shape): the message says which files.
class GradCompareError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One parameter's (or the summary's) similarity at each step, and its text in the CSV: msprobe
// writes the int 0 where a step compared no element.
struct SimilarityRow {
  std::string name;
  std::vector<double> values;
  std::vector<std::string> texts;

  void add(int64_t same, int64_t total);
};

// One rank's similarities: a row per parameter, in the order of its grad_summary CSV, then
// "summary".
struct RankSimilarities {
  int64_t rank = 0;
  std::vector<int64_t> steps;
  std::vector<SimilarityRow> rows;

  const std::vector<double>& summary() const { return rows.back().values; }
  // The first step whose summary similarity is below `threshold`, if any.
  std::optional<size_t> first_below(double threshold) const;
};

// The numbers of the `prefix`<N> folders (rank, step) found in both `a` and `b`, ascending.
std::vector<int64_t> matched_indices(const std::string& a, const std::string& b,
                                     const std::string& prefix);

RankSimilarities compare_rank(const std::string& rank_a, const std::string& rank_b, int64_t rank);

// similarities.csv as msprobe writes it: a "step" row, then one row per parameter and summary.
std::string similarities_csv(const RankSimilarities& s);
// Compares every rank found in both runs and writes OUT/rank<R>/similarities.csv and
// OUT/rank<R>/similarities_picture/<name>_similarities.svg.
std::vector<RankSimilarities> compare_runs(const std::string& run_a, const std::string& run_b,
                                           const std::string& out_dir);

}  // namespace msprobe
