#include "cli/monitor_plot_command.h"

#include <filesystem>
#include <ostream>

#include "core/monitor_plot.h"

namespace msprobe {
namespace {

const char* kPlotUsage =
    "usage: msprobe-cpp monitor-plot RUN -o OUT [--op OP]\n"
    "\n"
    "  RUN      a training monitor's run folder (<time>-rank<R>-<id>, its CSVs), or the\n"
    "           folder holding them (MONITOR_OUTPUT_DIR); msprobe's TrainerMon's or ours\n"
    "  -o OUT   where <run>/<kind>/<name>.svg go: each row's OP over the steps, the steps\n"
    "           an alert of anomaly_detected/rank<R>/anomaly.json fired at ringed in red\n"
    "  --op OP  the column drawn (default norm)\n"
    "\n"
    "exit status: 0 pictures written, 2 bad arguments or a run that cannot be read\n";

int usage_error(std::ostream& err, const std::string& what) {
  err << "msprobe-cpp monitor-plot: " << what << "\n" << kPlotUsage;
  return 2;
}

}  // namespace

int monitor_plot_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string run, out_dir, op = "norm";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      out << kPlotUsage;
      return 0;
    }
    if (arg == "-o" || arg == "--output" || arg == "--op") {
      if (i + 1 >= args.size()) return usage_error(err, arg + " needs a value");
      (arg == "--op" ? op : out_dir) = args[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      return usage_error(err, "unknown option " + arg);
    } else if (!run.empty()) {
      return usage_error(err, "one RUN only, got \"" + run + "\" and \"" + arg + "\"");
    } else {
      run = arg;
    }
  }
  if (run.empty()) return usage_error(err, "RUN is required");
  if (out_dir.empty()) return usage_error(err, "-o OUT is required");
  try {
    const std::vector<std::string> runs = monitor_run_folders(run);
    if (runs.empty()) {
      err << "msprobe-cpp monitor-plot: " << run << ": no training monitor CSVs there\n";
      return 2;
    }
    for (const std::string& r : runs) {
      std::vector<MonitorCurve> curves = read_monitor_curves(r, op);
      mark_monitor_alerts(curves, monitor_alerts_file(r));
      const std::string name = std::filesystem::path(r).filename().string();
      const std::string run_out = (std::filesystem::path(out_dir) / name).string();
      const std::vector<std::string> files = write_monitor_plots(curves, run_out, op);
      size_t alerts = 0;
      for (const MonitorCurve& c : curves) alerts += c.alerts.size();
      out << name << ": " << files.size() << " curve" << (files.size() == 1 ? "" : "s") << " of "
          << op << ", " << alerts << " alert" << (alerts == 1 ? "" : "s") << " marked\n";
    }
    out << "written: " << out_dir << "\n";
    return 0;
  } catch (const std::exception& e) {
    err << "msprobe-cpp monitor-plot: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace msprobe
