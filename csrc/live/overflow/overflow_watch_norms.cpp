// OverflowWatch's running-statistics check (docs/overflow-detection.md, "Running statistics are
// state"): a norm call's running_mean / running_var, looked at after it.
#include <string>

#include "core/anomaly.h"
#include "live/overflow/overflow_watch.h"
#include "live/overflow/running_stats.h"

namespace msprobe {

std::optional<OverflowWatch::RunningStatWrite> OverflowWatch::running_stats_written(
    const CallRecord& rec, const LiveTensors& live) const {
  auto written = [&](const std::string& name, const at::Tensor& t,
                     bool loaded) -> std::optional<RunningStatWrite> {
    auto k = nonfinite_now(t);
    if (!k) return std::nullopt;
    RunningStatWrite w;
    w.buffer = name;
    w.loaded = loaded;
    w.text = running_stat_text(name) + (loaded ? " holds " : " became ") + kinds_text(*k) + " (" +
             std::to_string(k->n[0]) + " NaN, " + std::to_string(k->n[1]) + " +inf, " +
             std::to_string(k->n[2]) + " -inf of " + std::to_string(t.numel()) + ")" +
             (loaded ? ": a checkpoint's, or written before this step" : "");
    return w;
  };
  if (auto positions = running_stat_positions(rec.name)) {
    for (size_t i : {positions->first, positions->second}) {
      if (i >= rec.inputs.size() || i >= live.inputs.size()) continue;
      const at::Tensor& t = live.inputs[i].tensor;
      // What it held before the call is the record's: NaN/inf it already held came in with it.
      if (!t.defined() || is_anomalous(rec.inputs[i], detector_.options().compat)) continue;
      auto p = models_.find(t);
      const std::string name =
          p ? p->name : (i == positions->first ? "running_mean" : "running_var");
      if (auto w = written(name, t, false)) return w;
    }
    return std::nullopt;
  }
  // At L0 no call inside a norm module is recorded: its running statistics are looked at after
  // it, and were written by it when it is in train mode (num_batches_tracked moved).
  if (level_ != Level::L0 || !is_module_name(rec.name)) return std::nullopt;
  const ModelTensors::RunningStats stats = models_.running_stats_of(module_qualname(rec.name));
  for (const ModelTensors::RunningStat& stat : stats.stats) {
    // In train mode the norm wrote it; NaN/inf it held before its call came in with it (a
    // checkpoint's) and is said so, as at L1 where the call's record shows it.
    if (auto w = written(stat.name, stat.tensor, !stats.trained_this_step || stat.came_in_bad)) {
      return w;
    }
  }
  return std::nullopt;
}

// NaN/inf a norm call wrote into its running statistics from clean inputs (origin op: lr 1e6
// makes a batch variance overflow), or that a norm module in eval mode was loaded with (origin
// parameter, at L0 where its call is not recorded): a stop, with the buffer named.
Verdict OverflowWatch::judge_running_stat_write(const CallRecord& rec, const LiveTensors& live,
                                                Verdict v, const RunningStatWrite& w) {
  if (!v.finding) {
    Finding f;
    f.call = rec.name;
    f.uses_input_key = rec.uses_input_key;
    if (w.loaded) {
      f.scene = Scene::InputAnomalyOutputNormal;
      f.severity = Severity::Medium;
    }
    v.finding = std::move(f);
  }
  v.origin = w.loaded ? Origin::Parameter : Origin::Op;
  if (w.loaded) v.parameter = w.buffer;
  v.note = w.text;
  v.flagged = true;
  v.judgement = Judgement::Flagged;
  if (options_.action == Action::Raise) v.stop = options_.stops_on(*v.origin);
  remember_outputs(rec, live, false);
  unexplained_forwards_.insert(rec.name);
  findings_.push_back(*v.finding);
  judgements_.push_back(Judgement::Flagged);
  step_flagged_ = true;
  return v;
}

}  // namespace msprobe
