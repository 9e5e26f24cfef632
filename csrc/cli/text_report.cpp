#include "cli/text_report.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cli/stop_replays.h"
#include "core/report.h"
#include "core/stack_sources.h"

namespace fs = std::filesystem;

namespace msprobe {

namespace {

// Findings whose source lines are looked up in one read of stack.json.
constexpr size_t kBatch = 20000;

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

// The finding's line after its call: level, call, scene and where.
std::string finding_line(const Finding& f) {
  std::string line =
      std::string("  ") + to_string(f.severity) + "\t" + f.call + "\t" + scene_name(f.scene);
  const std::string where =
      f.scene == Scene::NumericalMutation ? mutation_text(f) : indices_text(f);
  if (!where.empty()) line += "\t" + where;
  return line;
}

// Writes a batch of findings' lines, each followed by its source line. `origin_source` gets the
// source of the call named `origin`.
void write_batch(std::ostream& out, const std::string& dump_file, const std::vector<Finding>& batch,
                 const std::string* origin, std::string& origin_source) {
  // A backward call has no stack of its own (the engine ran it): its forward's line stands in.
  std::unordered_set<std::string> calls;
  for (const Finding& f : batch) {
    calls.insert(f.call);
    if (is_backward_name(f.call)) calls.insert(forward_name_of(f.call));
  }
  const auto sources =
      read_stack_sources((fs::path(dump_file).parent_path() / "stack.json").string(), calls);
  for (const Finding& f : batch) {
    out << finding_line(f) << "\n";
    const std::string source = source_text(sources, f.call);
    if (!source.empty()) out << "    at " << source << "\n";
    if (origin && f.call == *origin) origin_source = source;
  }
}

}  // namespace

namespace {

void write_live_stop(std::ostream& out, const LiveStop& live) {
  out << "  the live stop (overflow_report.json): " << live.call
      << (live.origin.empty() ? "" : ", origin " + live.origin)
      << (live.parameter.empty() ? "" : ", parameter " + live.parameter)
      << (live.absorbed ? ", absorbed: no stop" : "") << "\n";
  if (!live.note.empty()) out << "    " << live.note << "\n";
  for (const std::string& line : live.replay_lines) out << "    " << line << "\n";
}

}  // namespace

void write_text_report(std::ostream& out, const std::string& dump_file, const Findings& findings,
                       const std::optional<LiveStop>& live) {
  if (findings.empty()) {
    // A stop whose NaN/inf no recorded call holds: the parameters an optimizer step wrote,
    // looked at once after it (docs/overflow-detection.md). "no anomaly" would deny the stop.
    if (live && !live->absorbed && !live->held_without_damage) {
      out << dump_file << ": no anomalous record; the live guard stopped training here\n";
      write_live_stop(out, *live);
      return;
    }
    out << dump_file << ": no anomaly\n";
    return;
  }
  out << dump_file << ": " << severity_summary(findings.counts()) << "\n";
  const std::optional<std::string>& critical = findings.first(Severity::Critical);
  const std::optional<std::string>& origin = critical ? critical : findings.first(Severity::High);
  std::string origin_source;
  std::vector<Finding> batch;
  findings.for_each([&](const Finding& f) {
    batch.push_back(f);
    if (batch.size() < kBatch) return;
    write_batch(out, dump_file, batch, origin ? &*origin : nullptr, origin_source);
    batch.clear();
  });
  write_batch(out, dump_file, batch, origin ? &*origin : nullptr, origin_source);
  // The live guard's verdict comes first where the stop left one: it saw what a dump does not
  // record (which tensor is a parameter, which -inf is a mask, what came before the step).
  if (live) write_live_stop(out, *live);
  const char* reading = live ? "  offline reading (this dump's statistics alone): " : "  ";
  if (origin) {
    out << reading << "probable origin: " << *origin << " ("
        << (critical ? "critical" : "high; no call is critical") << ")"
        << (origin_source.empty() ? "" : " at " + origin_source) << "\n";
  } else {
    out << reading
        << "probable origin: none named (medium findings only: anomalies that entered calls "
           "and left them clean)\n";
  }
  if (live && (!origin || *origin != live->call)) {
    out << "    it differs from the live stop's, which stands: the live guard knew what a dump "
           "does not record (which tensors are parameters or buffers, which -inf is a deliberate "
           "mask, what was written before the step)\n";
  }
}

}  // namespace msprobe
