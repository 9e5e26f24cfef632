#include "cli/cli.h"

#include <cmath>
#include <cstdlib>
#include <ostream>

#include "cli/check_command.h"
#include "cli/grad_compare_command.h"
#include "cli/monitor_plot_command.h"

#ifndef MSPROBE_VERSION
#error "MSPROBE_VERSION must be defined by the build (CMake's project version)"
#endif

namespace msprobe {

namespace {

static_assert(kDefaultMutationThreshold == 1e5, "the usage text below says 1e5");

const char* kUsage =
    "usage: msprobe-cpp check PATH [--rules FILE]... [--threshold X] [--compat]\n"
    "                          [--format json|text] [--fail-on critical|high|medium]\n"
    "       msprobe-cpp replay DUMP_DIR [--format json|text]   (python -m msprobe_cpp replay)\n"
    "       msprobe-cpp grad-compare RUN1 RUN2 -o OUT [--threshold X]   (grad_probe runs)\n"
    "       msprobe-cpp monitor-plot RUN -o OUT [--op OP]   (training monitor runs)\n"
    "       msprobe-cpp --version\n"
    "\n"
    "  PATH           a dump.json, or a folder searched for dump.json files\n"
    "  --rules FILE   extra ignore rules (YAML, the format of rules/ignore_rules.yaml)\n"
    "  --threshold X  numerical mutation threshold, a number > 0 (default 1e5)\n"
    "  --compat       msprobe 1.1.1's exact verdicts (non-finite scalars ignored,\n"
    "                 no backward inheritance)\n"
    "  --format F     text (the default on a terminal: each finding with its source\n"
    "                 line, then the probable origin) or json (the default elsewhere)\n"
    "  --fail-on L    the lowest level that makes the exit status 1 (default medium)\n"
    "\n"
    "exit status: 0 no anomaly at or above --fail-on, 1 such anomalies found,\n"
    "             2 unreadable input or bad arguments\n";

int usage_error(std::ostream& err, const std::string& what) {
  err << "msprobe-cpp check: " << what << "\n" << kUsage;
  return 2;
}

bool parse_threshold(const std::string& text, double& out) {
  // A plain decimal number: strtod alone would also take " 5", "0x10" and "infinity".
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(out) && out > 0;
}

bool parse_level(const std::string& text, Severity& out) {
  for (Severity s : {Severity::Critical, Severity::High, Severity::Medium}) {
    if (text == to_string(s)) {
      out = s;
      return true;
    }
  }
  return false;
}

int check_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
               bool terminal) {
  CheckOptions options;
  options.text = terminal;
  bool have_path = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const std::string* value = i + 1 < args.size() ? &args[i + 1] : nullptr;
    auto take = [&]() -> const std::string& { return args[++i]; };
    if (arg == "-h" || arg == "--help") {
      out << kUsage;
      return 0;
    } else if (arg == "--compat") {
      options.compat = true;
    } else if (arg == "--rules") {
      if (!value) return usage_error(err, "--rules needs a file");
      options.rule_files.push_back(take());
    } else if (arg == "--threshold") {
      if (!value) return usage_error(err, "--threshold needs a number");
      if (!parse_threshold(take(), options.threshold)) {
        return usage_error(err, "--threshold: expected a number > 0, got \"" + *value + "\"");
      }
    } else if (arg == "--format") {
      if (!value) return usage_error(err, "--format needs json or text");
      const std::string& v = take();
      if (v != "json" && v != "text") {
        return usage_error(err, "--format: expected json or text, got \"" + v + "\"");
      }
      options.text = v == "text";
    } else if (arg == "--fail-on") {
      if (!value) return usage_error(err, "--fail-on needs critical, high or medium");
      if (!parse_level(take(), options.fail_on)) {
        return usage_error(err,
                           "--fail-on: expected critical, high or medium, got \"" + *value + "\"");
      }
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage_error(err, "unknown option " + arg);
    } else if (have_path) {
      return usage_error(err, "one PATH only, got \"" + options.path + "\" and \"" + arg + "\"");
    } else {
      options.path = arg;
      have_path = true;
    }
  }
  if (!have_path) return usage_error(err, "PATH is required");
  return run_check(options, out, err);
}

}  // namespace

const char* version() {
  return MSPROBE_VERSION;
}

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
             bool terminal) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    out << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    out << "msprobe-cpp " << version() << "\n";
    return 0;
  }
  if (args[0] == "check") return check_main({args.begin() + 1, args.end()}, out, err, terminal);
  if (args[0] == "grad-compare") return grad_compare_main({args.begin() + 1, args.end()}, out, err);
  if (args[0] == "monitor-plot") return monitor_plot_main({args.begin() + 1, args.end()}, out, err);
  err << "msprobe-cpp: unknown command \"" << args[0] << "\"\n" << kUsage;
  return 2;
}

}  // namespace msprobe
