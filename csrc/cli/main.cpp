// msprobe-cpp: command-line tools of msprobe_cpp.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "cli/check_command.h"

namespace {

const char* kUsage =
    "usage: msprobe-cpp check PATH [--rules FILE]... [--threshold X] [--compat]\n"
    "                          [--format json|text]\n"
    "\n"
    "  PATH           a dump.json, or a folder searched for dump.json files\n"
    "  --rules FILE   extra ignore rules (YAML, the format of rules/ignore_rules.yaml)\n"
    "  --threshold X  numerical mutation threshold, a number > 0 (default 1e5)\n"
    "  --compat       msprobe 1.1.1's exact verdicts (non-finite scalars ignored,\n"
    "                 no backward inheritance)\n"
    "  --format F     json (default) or text\n"
    "\n"
    "exit status: 0 no anomaly, 1 anomalies found, 2 unreadable input or bad arguments\n";

int usage_error(const std::string& what) {
  std::cerr << "msprobe-cpp check: " << what << "\n" << kUsage;
  return 2;
}

bool parse_threshold(const std::string& text, double& out) {
  // A plain decimal number: strtod alone would also take " 5", "0x10" and "infinity".
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() && std::isfinite(out) && out > 0;
}

int check_main(int argc, char** argv) {
  msprobe::CheckOptions options;
  bool have_path = false;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--compat") {
      options.compat = true;
    } else if (arg == "--rules") {
      const char* v = value("--rules");
      if (!v) return usage_error("--rules needs a file");
      options.rule_files.push_back(v);
    } else if (arg == "--threshold") {
      const char* v = value("--threshold");
      if (!v) return usage_error("--threshold needs a number");
      if (!parse_threshold(v, options.threshold)) {
        return usage_error(std::string("--threshold: expected a number > 0, got \"") + v + "\"");
      }
    } else if (arg == "--format") {
      const char* v = value("--format");
      if (!v) return usage_error("--format needs json or text");
      if (std::strcmp(v, "json") == 0) {
        options.text = false;
      } else if (std::strcmp(v, "text") == 0) {
        options.text = true;
      } else {
        return usage_error(std::string("--format: expected json or text, got \"") + v + "\"");
      }
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage_error("unknown option " + arg);
    } else if (have_path) {
      return usage_error("one PATH only, got \"" + options.path + "\" and \"" + arg + "\"");
    } else {
      options.path = arg;
      have_path = true;
    }
  }
  if (!have_path) return usage_error("PATH is required");
  return msprobe::run_check(options, std::cout, std::cerr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "check") == 0) return check_main(argc - 2, argv + 2);
  std::cerr << "msprobe-cpp: unknown command \"" << argv[1] << "\"\n" << kUsage;
  return 2;
}
