#include "cli/text_report.h"

#include <cstdio>
#include <filesystem>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
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

}  // namespace

void TextReport::add(const Finding& f) {
  counts_.add(f.severity);
  if (f.severity == Severity::Critical && !first_critical_) first_critical_ = f.call;
  if (f.severity == Severity::High && !first_high_) first_high_ = f.call;
  std::string line =
      f.call + "\t  " + to_string(f.severity) + "\t" + f.call + "\t" + scene_name(f.scene);
  const std::string where =
      f.scene == Scene::NumericalMutation ? mutation_text(f) : indices_text(f);
  if (!where.empty()) line += "\t" + where;
  lines_.append(line + "\n");
}

void TextReport::write_batch(std::ostream& out,
                             const std::vector<std::pair<std::string, std::string>>& batch,
                             const std::string* origin, std::string& origin_source) {
  // A backward call has no stack of its own (the engine ran it): its forward's line stands in.
  std::unordered_set<std::string> calls;
  for (const auto& [call, line] : batch) {
    calls.insert(call);
    if (is_backward_name(call)) calls.insert(forward_name_of(call));
  }
  const auto sources =
      read_stack_sources((fs::path(file_).parent_path() / "stack.json").string(), calls);
  for (const auto& [call, line] : batch) {
    out << line << "\n";
    const std::string source = source_text(sources, call);
    if (!source.empty()) out << "    at " << source << "\n";
    if (origin && call == *origin) origin_source = source;
  }
}

void TextReport::write(std::ostream& out) {
  if (counts_.total() == 0) {
    out << file_ << ": no anomaly\n";
    return;
  }
  out << file_ << ": " << severity_summary(counts_) << "\n";
  const std::optional<std::string>& origin = first_critical_ ? first_critical_ : first_high_;
  std::string origin_source;
  std::vector<std::pair<std::string, std::string>> batch;
  std::string pending;
  lines_.replay([&](const std::string& chunk) {
    pending += chunk;
    size_t start = 0;
    for (size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
      const size_t tab = pending.find('\t', start);
      batch.emplace_back(pending.substr(start, tab - start),
                         pending.substr(tab + 1, end - tab - 1));
      if (batch.size() == kBatch) {
        write_batch(out, batch, origin ? &*origin : nullptr, origin_source);
        batch.clear();
      }
    }
    pending.erase(0, start);
  });
  write_batch(out, batch, origin ? &*origin : nullptr, origin_source);
  if (origin) {
    out << "  probable origin: " << *origin << " ("
        << (first_critical_ ? "critical" : "high; no call is critical") << ")"
        << (origin_source.empty() ? "" : " at " + origin_source) << "\n";
  } else {
    out << "  probable origin: none named (medium findings only: anomalies that entered calls "
           "and left them clean)\n";
  }
  const std::vector<std::string> replays = stop_replay_lines(file_);
  if (!replays.empty()) out << "  at the stop (overflow_report.json):\n";
  for (const std::string& line : replays) out << "    " << line << "\n";
}

}  // namespace msprobe
