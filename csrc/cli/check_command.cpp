#include "cli/check_command.h"

#include <algorithm>
#include <filesystem>
#include <ostream>

#include "core/detector.h"
#include "core/dump_reader.h"
#include "core/json_writer.h"
#include "core/report.h"
#include "core/rules.h"

namespace fs = std::filesystem;

namespace msprobe {

namespace {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The dump.json files under `path`, sorted; a file path is taken as it is.
std::vector<std::string> dump_files(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw InputError(path + ": " + ec.message());
  if (ec || !fs::exists(st)) throw InputError(path + ": no such file or directory");
  if (!fs::is_directory(st)) return {path};
  std::vector<std::string> files;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
  if (ec) throw InputError(path + ": cannot list directory: " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw InputError(path + ": cannot list directory: " + ec.message());
    // Not throwing: a link loop named dump.json is found here and refused by the reader.
    if (it->path().filename() == "dump.json" && !it->is_directory(ec)) {
      files.push_back(it->path().string());
    }
  }
  if (files.empty()) throw InputError(path + ": no dump.json file under this directory");
  std::sort(files.begin(), files.end());
  return files;
}

Report check_file(const std::string& file, Detector& detector) {
  detector.reset();
  Report report;
  read_dump_file(file, [&](CallRecord&& rec) {
    if (auto f = detector.judge(rec)) report.findings.push_back(std::move(*f));
  });
  return report;
}

std::string indices_text(const Finding& f) {
  std::string s;
  auto list = [&s](const char* label, const auto& items) {
    if (items.empty()) return;
    s += std::string(s.empty() ? "" : ", ") + label + " [";
    bool first = true;
    for (const auto& i : items) {
      if (!first) s += ", ";
      if constexpr (std::is_same_v<std::decay_t<decltype(i)>, std::string>) {
        s += i;
      } else {
        s += std::to_string(i);
      }
      first = false;
    }
    s += "]";
  };
  // Backward records keep their incoming gradients under msprobe's key `input`.
  list(is_backward_name(f.call) ? "input" : "input_args", f.input_indices);
  list("input_kwargs", f.kwarg_keys);
  list("output", f.output_indices);
  return s.empty() ? "-" : s;
}

void write_text(std::ostream& out, const std::string& file, const Report& report) {
  size_t counts[3] = {0, 0, 0};
  for (const Finding& f : report.findings) ++counts[static_cast<int>(f.severity)];
  if (report.empty()) {
    out << file << ": no anomaly\n";
    return;
  }
  out << file << ": " << report.findings.size() << " anomalous call"
      << (report.findings.size() == 1 ? "" : "s") << " (" << counts[2] << " critical, " << counts[1]
      << " high, " << counts[0] << " medium)\n";
  for (const Finding& f : report.findings) {
    out << "  " << to_string(f.severity) << "\t" << f.call << "\t" << scene_name(f.scene) << "\t"
        << indices_text(f) << "\n";
  }
}

}  // namespace

int run_check(const CheckOptions& options, std::ostream& out, std::ostream& err) {
  try {
    RuleSet rules = RuleSet::shipped();
    for (const std::string& file : options.rule_files) rules.add_file(file);
    Detector detector(std::move(rules), DetectorOptions{options.threshold, options.compat});

    std::error_code ec;
    const bool single = !fs::is_directory(options.path, ec);
    const std::vector<std::string> files = dump_files(options.path);
    bool any = false;
    JsonWriter json(1);
    if (!single) json.begin_object();
    for (const std::string& file : files) {
      const Report report = check_file(file, detector);
      any = any || !report.empty();
      if (options.text) {
        write_text(out, file, report);
      } else {
        if (!single) json.key(file);
        report.write(json);
      }
    }
    if (!options.text) {
      if (!single) json.end_object();
      out << json.str() << "\n";
    }
    return any ? 1 : 0;
  } catch (const std::exception& e) {
    err << "msprobe-cpp check: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace msprobe
