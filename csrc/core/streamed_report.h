// check's JSON report of one dump file, rendered as its findings come. Each finding's detail
// object and its call's place in its level's list are formatted when the detector finds it, on
// the thread that judges while others still parse the file, and spilled to temporary files: at
// the file's end, writing the report copies text. Report::write renders the same document from
// the same findings in one pass at the end (tests/cpp/test_streamed_report.cpp compares them);
// that pass was a fifth of check's time on a dump with many anomalous calls, on one core.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/findings.h"
#include "core/json_writer.h"
#include "core/spill_file.h"

namespace msprobe {

class StreamedReport {
 public:
  // `depth`: how many containers the report object sits in (0: it is the document).
  StreamedReport(int indent, size_t depth);

  // Throws std::runtime_error when the temporary file cannot be made or written.
  void add(const Finding& f);
  const SeverityCounts& counts() const { return counts_; }

  // Writes the report object where `w` stands (at the depth given), handing all of `w`'s text to
  // `sink`, with the live stop's verdict when `live_stop` is given. Once.
  void write(JsonWriter& w, const std::function<void(const std::string&)>& sink,
             const std::optional<std::string>& live_stop);

 private:
  // Members of one container, rendered apart: text in `writer` until it is a chunk, then in
  // `spill` (made at the first member: most files have no findings).
  struct Members {
    JsonWriter writer;
    std::unique_ptr<SpillFile> spill;
    bool any = false;
  };
  static void keep(Members& m);
  static void hand_over(Members& m, JsonWriter& w,
                        const std::function<void(const std::string&)>& sink);

  std::array<Members, 3> calls_;  // by Severity: the lists of calls
  Members details_;               // anomaly_details
  SeverityCounts counts_;
};

}  // namespace msprobe
