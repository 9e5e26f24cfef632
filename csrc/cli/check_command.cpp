#include "cli/check_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <unordered_map>
#include <unordered_set>

#include "cli/stop_replays.h"
#include "core/detector.h"
#include "core/dump_reader.h"
#include "core/json_writer.h"
#include "core/report.h"
#include "core/rules.h"
#include "core/spilled_report.h"
#include "core/stack_sources.h"

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
  list(inputs_key(f.uses_input_key), f.input_indices);
  list("input_kwargs", f.kwarg_keys);
  list("output", f.output_indices);
  return s;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// What a NumericalMutation compared: the ratio of the largest Norms, or the output Norm itself
// when the inputs' is 0.
std::string mutation_text(const Finding& f) {
  if (f.input_norm == 0.0) {
    return "output norm " + number_text(f.output_norm) + " from zero input norm (threshold " +
           number_text(f.threshold) + ")";
  }
  return "norm ratio " + number_text(f.output_norm / f.input_norm) + " (threshold " +
         number_text(f.threshold) + ")";
}

// Source lines from the stack.json beside `dump_file`; a backward call has no stack of its own
// (the engine ran it), so its forward's line stands in.
std::unordered_map<std::string, std::string> sources_of(const std::string& dump_file,
                                                        const Report& report) {
  std::unordered_set<std::string> calls;
  for (const Finding& f : report.findings) {
    calls.insert(f.call);
    if (is_backward_name(f.call)) calls.insert(forward_name_of(f.call));
  }
  return read_stack_sources((fs::path(dump_file).parent_path() / "stack.json").string(), calls);
}

std::string source_text(const std::unordered_map<std::string, std::string>& sources,
                        const std::string& call) {
  auto it = sources.find(call);
  if (it != sources.end()) return it->second;
  if (is_backward_name(call)) {
    it = sources.find(forward_name_of(call));
    if (it != sources.end()) return it->second + " (its forward)";
  }
  return "";
}

void write_text(std::ostream& out, const std::string& file, const Report& report) {
  if (report.empty()) {
    out << file << ": no anomaly\n";
    return;
  }
  out << file << ": " << severity_summary(report.findings) << "\n";
  const auto sources = sources_of(file, report);
  const Finding* origin = nullptr;
  for (Severity level : {Severity::Critical, Severity::High}) {
    for (const Finding& f : report.findings) {
      if (!origin && f.severity == level) origin = &f;
    }
  }
  for (const Finding& f : report.findings) {
    out << "  " << to_string(f.severity) << "\t" << f.call << "\t" << scene_name(f.scene);
    const std::string where =
        f.scene == Scene::NumericalMutation ? mutation_text(f) : indices_text(f);
    if (!where.empty()) out << "\t" << where;
    out << "\n";
    const std::string source = source_text(sources, f.call);
    if (!source.empty()) out << "    at " << source << "\n";
  }
  if (origin) {
    const std::string source = source_text(sources, origin->call);
    out << "  probable origin: " << origin->call << " ("
        << (origin->severity == Severity::Critical ? "critical" : "high; no call is critical")
        << ")" << (source.empty() ? "" : " at " + source) << "\n";
  } else {
    out << "  probable origin: none named (medium findings only: anomalies that entered calls "
           "and left them clean)\n";
  }
  const std::vector<std::string> replays = stop_replay_lines(file);
  if (!replays.empty()) out << "  at the stop (overflow_report.json):\n";
  for (const std::string& line : replays) out << "    " << line << "\n";
}

bool fails(const Report& report, Severity fail_on) {
  for (const Finding& f : report.findings) {
    if (static_cast<int>(f.severity) >= static_cast<int>(fail_on)) return true;
  }
  return false;
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
    if (options.text) {
      for (const std::string& file : files) {
        const Report report = check_file(file, detector);
        any = any || fails(report, options.fail_on);
        write_text(out, file, report);
      }
      return any ? 1 : 0;
    }
    // JSON, streamed: each file's findings spilled as they are found (SpilledReport). A folder's
    // document goes through one more temporary file, so that an unreadable file among them leaves
    // stdout empty, as a single file's error does.
    std::optional<SpillFile> document;
    if (!single) document.emplace();
    const std::function<void(const std::string&)> sink = [&](const std::string& text) {
      if (document) {
        document->append(text);
      } else {
        out << text;
      }
    };
    JsonWriter json(1);
    if (!single) json.begin_object();
    for (const std::string& file : files) {
      SpilledReport report(1, single ? 0 : 1);
      detector.reset();
      read_dump_file(file, [&](CallRecord&& rec) {
        if (auto f = detector.judge(rec)) report.add(*f);
      });
      any = any || report.fails(options.fail_on);
      if (!single) json.key(file);
      report.write(json, sink);
    }
    if (!single) json.end_object();
    sink(json.take_chunk() + "\n");
    if (document) document->replay([&](const std::string& text) { out << text; });
    return any ? 1 : 0;
  } catch (const std::exception& e) {
    err << "msprobe-cpp check: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace msprobe
