#include "core/monitor_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/line_chart.h"
#include "core/output_files.h"
#include "core/python_text.h"

namespace fs = std::filesystem;

namespace msprobe {
namespace {

// "grad_reduced_5-9.csv" -> "grad_reduced".
const std::regex kCsvName(R"(^(.+)_\d+-\d+\.csv$)");

double cell_value(const std::string& text) {
  if (text == "nan" || text.empty()) return std::nan("");
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() ? v : std::nan("");
}

using CurveKey = std::pair<std::string, std::string>;  // kind, name

void read_csv(const fs::path& file, const std::string& kind, const std::string& op,
              std::map<CurveKey, MonitorCurve>& curves) {
  std::ifstream in(file);
  std::string line;
  if (!std::getline(in, line)) return;
  const std::vector<std::string> header = parse_csv_line(line);
  const auto column = [&](const char* name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const size_t name_at = column("name"), step_at = column("step"), micro_at = column("micro_step");
  const size_t op_at = column(op.c_str());
  if (name_at >= header.size() || step_at >= header.size()) {
    throw std::runtime_error(file.string() + ": not a training monitor's CSV (no name and step)");
  }
  if (op_at >= header.size()) return;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = parse_csv_line(line);
    if (f.size() != header.size()) {
      throw std::runtime_error(file.string() + ": a row of " + std::to_string(f.size()) +
                               " fields under a header of " + std::to_string(header.size()));
    }
    std::string name = f[name_at];
    if (micro_at < f.size() && f[micro_at] != "0") name += ":" + f[micro_at];
    MonitorCurve& c = curves[{kind, name}];
    c.kind = kind;
    c.name = name;
    c.steps.push_back(std::strtoll(f[step_at].c_str(), nullptr, 10));
    c.values.push_back(cell_value(f[op_at]));
  }
}

// msprobe's internal tags name the file kinds otherwise (module_hook.py).
std::string kind_of_tag(const std::string& tag) {
  if (tag == "acc_grad" || tag == "pre_grad") return "grad_unreduced";
  if (tag == "post_grad") return "grad_reduced";
  return tag;
}

}  // namespace

std::vector<MonitorCurve> read_monitor_curves(const std::string& run_dir, const std::string& op) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), kCsvName))
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::map<CurveKey, MonitorCurve> curves;
  for (const fs::path& file : files) {
    std::smatch m;
    const std::string name = file.filename().string();
    std::regex_match(name, m, kCsvName);
    read_csv(file, m[1].str(), op, curves);
  }
  std::vector<MonitorCurve> out;
  for (auto& [key, curve] : curves) {
    // Files are read in name order ("actv_10-10" before "actv_2-2"): the steps are sorted here.
    std::vector<size_t> order(curve.steps.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return curve.steps[a] < curve.steps[b]; });
    MonitorCurve sorted{curve.kind, curve.name, {}, {}, {}};
    for (size_t i : order) {
      sorted.steps.push_back(curve.steps[i]);
      sorted.values.push_back(curve.values[i]);
    }
    out.push_back(std::move(sorted));
  }
  return out;
}

void mark_monitor_alerts(std::vector<MonitorCurve>& curves, const std::string& anomaly_json) {
  std::ifstream in(anomaly_json);
  if (!in) return;
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  if (!doc.is_object()) return;
  for (const auto& [key, alert] : doc.items()) {
    // "0:fc1.bias/rank0/acc_grad", "0:fc1.output:1/rank0/actv": vpp stage, name, micro step.
    const std::string tag = alert.value("tag_name", "");
    const size_t colon = tag.find(':'), slash = tag.find('/'), last = tag.rfind('/');
    if (colon == std::string::npos || slash == std::string::npos || slash < colon) continue;
    std::string name = tag.substr(colon + 1, slash - colon - 1);
    const bool first_micro_step = name.size() > 2 && name.compare(name.size() - 2, 2, ":0") == 0;
    if (first_micro_step) name.resize(name.size() - 2);
    const std::string kind = kind_of_tag(tag.substr(last + 1));
    const int64_t step = alert.value("step", int64_t{-1});
    for (MonitorCurve& c : curves) {
      if (c.name == name && c.kind == kind) c.alerts.push_back(step);
    }
  }
}

std::vector<std::string> monitor_run_folders(const std::string& path) {
  const auto holds_csv = [](const fs::path& dir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (std::regex_match(e.path().filename().string(), kCsvName)) return true;
    }
    return false;
  };
  if (holds_csv(path)) return {path};
  std::vector<std::string> runs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (e.is_directory() && holds_csv(e.path())) runs.push_back(e.path().string());
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

std::string monitor_alerts_file(const std::string& run_dir) {
  const fs::path dir = fs::absolute(fs::path(run_dir)).lexically_normal();
  const std::string name = (dir.has_filename() ? dir : dir.parent_path()).filename().string();
  std::smatch m;
  static const std::regex kRank(R"(-rank(\d+)-)");
  if (!std::regex_search(name, m, kRank)) return "";
  const fs::path root = (dir.has_filename() ? dir : dir.parent_path()).parent_path();
  return (root / "anomaly_detected" / ("rank" + m[1].str()) / "anomaly.json").string();
}

std::vector<std::string> write_monitor_plots(const std::vector<MonitorCurve>& curves,
                                             const std::string& out_dir, const std::string& op) {
  std::vector<std::string> written;
  for (const MonitorCurve& c : curves) {
    const fs::path file = fs::path(out_dir) / c.kind / (c.name + ".svg");
    fs::create_directories(file.parent_path());
    std::string title = c.kind + " " + c.name + " " + op;
    if (!c.alerts.empty()) title += " (alerts: " + std::to_string(c.alerts.size()) + ")";
    write_file_atomic(file.string(),
                      line_chart_svg(title, "step", op, c.steps, c.values, c.alerts));
    written.push_back(file.string());
  }
  return written;
}

}  // namespace msprobe
