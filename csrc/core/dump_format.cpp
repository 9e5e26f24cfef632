#include "core/dump_format.h"

#include <unistd.h>

namespace msprobe {

DumpFormat DumpFormat::of(const Config& c) {
  DumpFormat f;
  f.debug_json = c.level == Level::Debug;
  if (c.generation != Generation::V26) return f;
  f.framework = true;
  f.grouped_stacks = true;
  f.extra_info = c.msprobe26.extra_info;
  f.null_mean_norm = c.msprobe26.precision == Precision::High;
  f.float_only_mean_norm = true;
  f.proc_folder = true;
  f.last_part_names = true;
  f.wrap_list = "support_wrap_ops_26.yaml";
  f.module_parameters = (c.task == Task::Statistics || c.task == Task::Tensor) &&
                        (c.level == Level::L0 || c.level == Level::Mix);
  f.module_grads_without_nulls = true;
  f.positional_objects_untyped = true;
  f.construct_in_start_order = true;
  f.backward_from_any_grad_fn = true;
  f.optimizer_node = c.level == Level::Mix;
  f.records_in_dump_json = c.task != Task::Structure;
  return f;
}

std::string DumpFormat::unranked_folder() const {
  // 26.x names it by the process at its service's creation; a process is one run here.
  return proc_folder ? "proc" + std::to_string(getpid()) : "rank";
}

std::string DumpFormat::api_call_name(const std::string& prefix, const std::string& api) const {
  const size_t dot = api.rfind('.');
  return prefix + "." + (last_part_names && dot != std::string::npos ? api.substr(dot + 1) : api);
}

}  // namespace msprobe
