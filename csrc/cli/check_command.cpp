#include "cli/check_command.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>

#include "cli/stop_replays.h"
#include "cli/text_report.h"
#include "core/detector.h"
#include "core/dump_files_ahead.h"
#include "core/dump_reader.h"
#include "core/json_writer.h"
#include "core/rules.h"
#include "core/spill_file.h"
#include "core/step_folders.h"
#include "core/streamed_report.h"

namespace fs = std::filesystem;

namespace msprobe {

namespace {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The dump.json files under `path`, in step order; a file path is taken as it is.
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
    // A hidden folder is a step still being written (or a killed run's): not a dump yet.
    if (it->is_directory(ec) && it->path().filename().string().rfind('.', 0) == 0) {
      it.disable_recursion_pending();
      continue;
    }
    // Not throwing: a link loop named dump.json is found here and refused by the reader.
    if (it->path().filename() == "dump.json" && !it->is_directory(ec)) {
      files.push_back(it->path().string());
    }
  }
  if (files.empty()) throw InputError(path + ": no dump.json file under this directory");
  std::sort(files.begin(), files.end(), natural_less);  // step8 before step11
  return files;
}

}  // namespace

int run_check(const CheckOptions& options, std::ostream& out, std::ostream& err) {
  try {
    RuleSet rules = RuleSet::shipped();
    for (const std::string& file : options.rule_files) rules.add_file(file);
    Detector detector(std::move(rules),
                      DetectorOptions{options.threshold, options.compat, /*names_unique=*/true});

    std::error_code ec;
    const bool single = !fs::is_directory(options.path, ec);
    const std::vector<std::string> files = dump_files(options.path);
    bool any = false;
    // One set of threads for every file of a folder; small files parsed ahead on them.
    MemberThreads threads(0);
    DumpFilesAhead reader(files, threads);
    size_t next_file = 0;
    // Files are read in order; each record is judged as it is read, and each finding handed to
    // `found` as it is made.
    auto judge_next_file = [&](const std::function<void(const Finding&)>& found) {
      detector.reset();
      reader.read(next_file++, [&](CallRecord&& rec) {
        if (auto f = detector.judge(rec)) found(*f);
      });
    };
    if (options.text) {
      for (const std::string& file : files) {
        // Spilled as they are found (Findings::spilled), then rendered.
        Findings findings = Findings::spilled();
        judge_next_file([&](const Finding& f) { findings.add(f); });
        const std::optional<LiveStop> live = read_live_stop(file);
        any = any || findings.counts().fails(options.fail_on) ||
              live_stop_fails(live, options.fail_on);
        write_text_report(out, file, findings, live);
      }
      return any ? 1 : 0;
    }
    // JSON, streamed into `sink` as it is rendered. A folder's
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
    constexpr int kIndent = 1;
    JsonWriter json(kIndent);
    if (!single) json.begin_object();
    for (const std::string& file : files) {
      // A folder's reports are members of the document's object.
      StreamedReport report(kIndent, single ? 0 : 1);
      judge_next_file([&](const Finding& f) { report.add(f); });
      const std::optional<LiveStop> live = read_live_stop(file);
      any = any || report.counts().fails(options.fail_on) || live_stop_fails(live, options.fail_on);
      std::optional<std::string> live_stop;
      if (live) live_stop = live->json;
      if (!single) json.key(file);
      report.write(json, sink, live_stop);
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
