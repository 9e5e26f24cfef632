// cc_distribution (issue 55): msprobe 26.2.0's statistics of torch.distributed's collectives
// (monitor/distributed/wrap_distributed.py). Each collective msprobe wraps is replaced by a
// wrapper made here (python/msprobe_cpp/monitor.py installs it in torch.distributed and
// distributed_c10d, and restores the originals). Each call's tensor arguments, after the call
// (before it too with cc_pre_hook; at Work.wait() for an asynchronous one), get the monitor's
// ops; a written step takes them all, aggregated since the last written step as msprobe
// aggregates them (min of minima, max of maxima, sums of norms and nan counts, means of means
// and zero shares), as rows of its `other` file: msprobe's rows, in which the first value of
// each collective takes the name column and the step the third. With cc_log_only, only where
// each collective is called from is kept, said at the second step.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/monitor_config.h"
#include "core/monitor_csv.h"
#include "live/monitor/monitor_stats.h"

namespace msprobe {

class MonitorCollectives : public std::enable_shared_from_this<MonitorCollectives> {
 public:
  MonitorCollectives(const MonitorCollectivesConfig& config, MonitorMetrics metrics);

  // The torch.distributed functions msprobe wraps (its distributed_ops.yaml).
  static const std::vector<std::string>& wrapped_names();
  // The wrapper of collective `name`, calling `original`. GIL required.
  pybind11::object wrapper(const std::string& name, pybind11::object original);
  // The wrapper of Work.wait, a method of `work_class`: an asynchronous call's tensors are
  // looked at once it is waited for. GIL required.
  pybind11::object wait_wrapper(pybind11::object original, pybind11::handle work_class);

  // A written step's collectives since the last one, in the order they were first called; then
  // nothing is kept. GIL required (the pending calls' tensors are Python's).
  struct Rows {
    std::vector<std::vector<MonitorValue>> cells;  // [name, first value, step, the others...]
    std::vector<MonitorCallSlot> slots;            // each slot's values, for the alert rules
    bool empty() const { return cells.empty(); }
  };
  Rows take_rows(int64_t step);
  // cc_log_only: the collectives called and their call stacks, as msprobe prints them.
  std::string logged_stacks() const;
  bool log_only() const { return config_.log_only; }

 private:
  // One collective's values since the last written step: per tag ("post_0", in the order
  // first seen), per op, every call's value.
  struct Calls {
    std::string name;
    std::vector<std::string> tags;
    std::map<std::string, std::vector<std::vector<MonitorValue>>> values;  // [op][call]
  };
  pybind11::object call(const std::string& name, const pybind11::object& original,
                        const pybind11::args& args, const pybind11::kwargs& kwargs);
  void record(const std::string& name, const pybind11::tuple& arguments, const char* prefix);
  void waited(pybind11::handle work);
  bool wanted_here(std::string* stack) const;
  Calls& calls_of(const std::string& name);

  const MonitorCollectivesConfig config_;
  const MonitorMetrics metrics_;
  std::vector<std::regex> codeline_;
  std::vector<Calls> calls_;
  // Asynchronous calls not yet waited for: their Work, then what to look at when it is.
  struct Pending {
    pybind11::object work;
    std::string name;
    pybind11::tuple arguments;
  };
  std::vector<Pending> pending_;
  pybind11::object work_class_;  // torch.distributed.Work, once wait_wrapper() is made
  std::map<std::string, std::set<std::string>> logged_;  // cc_log_only: stacks by collective
};

}  // namespace msprobe
