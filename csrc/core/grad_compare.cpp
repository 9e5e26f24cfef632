#include "core/grad_compare.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/line_chart.h"
#include "core/npy_file.h"
#include "core/output_files.h"
#include "core/python_text.h"
#include "core/text_file.h"

namespace msprobe {
namespace {

namespace fs = std::filesystem;

std::optional<int64_t> index_after(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() ||
      name.size() > prefix.size() + 18)
    return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

// The parameter order: the param_name column of the first grad_summary CSV both runs have
// (msprobe takes the first its directory listing gives; here the lowest step, so it is fixed).
std::vector<std::string> parameter_order(const std::string& a, const std::string& b) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& entry : fs::directory_iterator(a)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".csv") != 0) continue;
    if (!fs::exists(fs::path(b) / name)) continue;
    auto step = index_after(name.substr(0, name.size() - 4), "grad_summary_");
    found.emplace_back(step.value_or(INT64_MAX), name);
  }
  if (found.empty())
    throw GradCompareError(a + ": no grad_summary CSV that " + b +
                           " also has; dump both runs with the same configuration");
  std::sort(found.begin(), found.end());
  std::string text = read_text_file((fs::path(a) / found.front().second).string());
  if (text.rfind(kUtf8Bom, 0) == 0) text.erase(0, 3);
  std::vector<std::string> names;
  std::istringstream lines(text);
  std::string line;
  bool header = true;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (!header) names.push_back(parse_csv_line(line).front());
    header = false;
  }
  return names;
}

// (elements whose direction agrees, elements) of one parameter's two direction files.
std::pair<int64_t, int64_t> agreement(const std::string& file_a, const std::string& file_b) {
  const BoolArray a = read_npy_bool(file_a), b = read_npy_bool(file_b);
  if (a.shape != b.shape)
    throw GradCompareError("tensor shapes differ: " + file_a + " " + python_int_list(a.shape) +
                           ", " + file_b + " " + python_int_list(b.shape));
  int64_t same = 0;
  for (size_t i = 0; i < a.values.size(); ++i) same += (a.values[i] != 0) == (b.values[i] != 0);
  return {same, static_cast<int64_t>(a.values.size())};
}

}  // namespace

void SimilarityRow::add(int64_t same, int64_t total) {
  if (total == 0) {
    values.push_back(0);
    texts.push_back("0");
    return;
  }
  values.push_back(static_cast<double>(same) / static_cast<double>(total));
  texts.push_back(python_float(values.back()));
}

std::optional<size_t> RankSimilarities::first_below(double threshold) const {
  const auto& s = summary();
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] < threshold) return i;
  return std::nullopt;
}

std::vector<int64_t> matched_indices(const std::string& a, const std::string& b,
                                     const std::string& prefix) {
  if (!fs::is_directory(a)) throw GradCompareError(a + ": not a folder");
  if (!fs::is_directory(b)) throw GradCompareError(b + ": not a folder");
  std::vector<int64_t> out;
  for (const auto& entry : fs::directory_iterator(a)) {
    const std::string name = entry.path().filename().string();
    auto index = index_after(name, prefix);
    if (index && fs::is_directory(fs::path(b) / name)) out.push_back(*index);
  }
  std::sort(out.begin(), out.end());
  return out;
}

RankSimilarities compare_rank(const std::string& rank_a, const std::string& rank_b, int64_t rank) {
  RankSimilarities out;
  out.rank = rank;
  out.steps = matched_indices(rank_a, rank_b, "step");
  if (out.steps.empty())
    throw GradCompareError(rank_a + ": no step folder that " + rank_b +
                           " also has; dump both runs with the same configuration (L1 or L2)");
  const std::vector<std::string> names = parameter_order(rank_a, rank_b);
  for (const std::string& name : names) out.rows.push_back({name, {}, {}});
  out.rows.push_back({"summary", {}, {}});
  for (int64_t step : out.steps) {
    const std::string folder = "step" + std::to_string(step);
    int64_t same_all = 0, total_all = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const fs::path file_a = fs::path(rank_a) / folder / (names[i] + ".npy");
      const fs::path file_b = fs::path(rank_b) / folder / (names[i] + ".npy");
      if (!fs::exists(file_a) || !fs::exists(file_b))
        throw GradCompareError(file_a.string() + " or " + file_b.string() +
                               " is missing; dump both runs with the same configuration");
      const auto [same, total] = agreement(file_a.string(), file_b.string());
      same_all += same;
      total_all += total;
      out.rows[i].add(same, total);
    }
    out.rows.back().add(same_all, total_all);
  }
  return out;
}

std::string similarities_csv(const RankSimilarities& s) {
  std::vector<std::string> header = {"step"};
  for (int64_t step : s.steps) header.push_back(std::to_string(step));
  std::string out = kUtf8Bom + csv_row(header);
  for (const SimilarityRow& r : s.rows) {
    std::vector<std::string> row = {r.name};
    row.insert(row.end(), r.texts.begin(), r.texts.end());
    out += csv_row(row);
  }
  return out;
}

std::vector<RankSimilarities> compare_runs(const std::string& run_a, const std::string& run_b,
                                           const std::string& out_dir) {
  const std::vector<int64_t> ranks = matched_indices(run_a, run_b, "rank");
  if (ranks.empty())
    throw GradCompareError(
        run_a + " and " + run_b +
        ": no rank<N> folder in both; give the dump_path of each grad_probe run");
  std::vector<RankSimilarities> out;
  for (int64_t rank : ranks) {
    const std::string folder = "rank" + std::to_string(rank);
    out.push_back(compare_rank((fs::path(run_a) / folder).string(),
                               (fs::path(run_b) / folder).string(), rank));
    const fs::path dir = fs::path(out_dir) / folder;
    make_dirs((dir / "similarities_picture").string());
    for (const SimilarityRow& r : out.back().rows)
      write_file_atomic((dir / "similarities_picture" / (r.name + "_similarities.svg")).string(),
                        line_chart_svg(r.name + "_similarities", "steps", "similarities",
                                       out.back().steps, r.values));
    write_file_atomic((dir / "similarities.csv").string(), similarities_csv(out.back()));
  }
  return out;
}

}  // namespace msprobe
