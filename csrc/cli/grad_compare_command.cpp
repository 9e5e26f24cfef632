#include "cli/grad_compare_command.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <ostream>

#include "core/grad_compare.h"
#include "core/python_text.h"

namespace msprobe {
namespace {

const char* kGradUsage =
    "usage: msprobe-cpp grad-compare RUN1 RUN2 -o OUT [--threshold X]\n"
    "\n"
    "  RUN1, RUN2     the dump_path of two grad_probe runs (L1 or L2: their rank<N>/step<N>\n"
    "                 direction files), this product's or msprobe's\n"
    "  -o OUT         where rank<N>/similarities.csv and its pictures go\n"
    "  --threshold X  the summary similarity below which the runs part ways, 0 to 1\n"
    "                 (default 0.9)\n"
    "\n"
    "exit status: 0 the runs agree at or above the threshold at every step, 1 they part\n"
    "             ways at some step, 2 bad arguments or runs that cannot be compared\n";

int usage_error(std::ostream& err, const std::string& what) {
  err << "msprobe-cpp grad-compare: " << what << "\n" << kGradUsage;
  return 2;
}

bool parse_fraction(const std::string& text, double& out) {
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && out >= 0 && out <= 1;
}

void report_rank(const RankSimilarities& r, double threshold, std::ostream& out) {
  out << "rank " << r.rank << ": " << r.steps.size() << " step" << (r.steps.size() == 1 ? "" : "s")
      << " compared (" << r.steps.front() << " to " << r.steps.back() << "); ";
  if (auto at = r.first_below(threshold)) {
    out << "the gradients part ways at step " << r.steps[*at] << ": summary similarity "
        << python_float(r.summary()[*at]) << " < " << python_float(threshold) << "\n";
    return;
  }
  size_t lowest = 0;
  for (size_t i = 1; i < r.summary().size(); ++i)
    if (r.summary()[i] < r.summary()[lowest]) lowest = i;
  out << "summary similarity stays at or above " << python_float(threshold) << " (lowest "
      << python_float(r.summary()[lowest]) << ", at step " << r.steps[lowest] << ")\n";
}

}  // namespace

int grad_compare_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> runs;
  std::string out_dir;
  double threshold = kDefaultGradThreshold;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      out << kGradUsage;
      return 0;
    }
    if (arg == "-o" || arg == "--output") {
      if (i + 1 >= args.size()) return usage_error(err, arg + " needs a folder");
      out_dir = args[++i];
    } else if (arg == "--threshold") {
      if (i + 1 >= args.size() || !parse_fraction(args[i + 1], threshold))
        return usage_error(err, "--threshold: expected a number from 0 to 1" +
                                    (i + 1 < args.size() ? ", got \"" + args[i + 1] + "\"" : ""));
      ++i;
    } else if (!arg.empty() && arg[0] == '-') {
      return usage_error(err, "unknown option " + arg);
    } else {
      runs.push_back(arg);
    }
  }
  if (runs.size() != 2)
    return usage_error(err, "two runs are needed, got " + std::to_string(runs.size()));
  if (out_dir.empty()) return usage_error(err, "-o OUT is required");
  try {
    const auto ranks = compare_runs(runs[0], runs[1], out_dir);
    bool parted = false;
    for (const RankSimilarities& r : ranks) {
      report_rank(r, threshold, out);
      parted |= r.first_below(threshold).has_value();
    }
    out << "written: " << (std::filesystem::path(out_dir) / "rank<N>" / "similarities.csv").string()
        << " and similarities_picture/\n";
    return parted ? 1 : 0;
  } catch (const std::exception& e) {
    err << "msprobe-cpp grad-compare: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace msprobe
