// What a run's files look like, by the msprobe generation its config speaks (docs/formats.md,
// "msprobe 1.1.x and 26.x files"): one declaration, read by the writer, the folders and the
// statistics.
#pragma once

#include <string>

#include "core/config.h"

namespace msprobe {

struct DumpFormat {
  // dump.json's "framework": "pytorch", after "level" (26.x).
  bool framework = false;
  // stack.json as {"0": [[names], [frames]], ...}: the calls of one stack together (26.x); else
  // {name: [frames]} (1.1.x).
  bool grouped_stacks = false;
  // stack.json and construct.json are written (26.x's extra_info; always in 1.1.x).
  bool extra_info = true;
  // Mean and Norm null for every tensor of more than 0 dimensions (26.x's precision "high").
  bool null_mean_norm = false;
  // Mean and Norm null for integer, bool and float64 tensors (26.x).
  bool float_only_mean_norm = false;
  // The rank folder outside torch.distributed is proc<pid> (26.x); else "rank" (1.1.x).
  bool proc_folder = false;
  // A dotted API ("linalg.norm") is recorded under its last part, "Torch.norm", whose counter
  // it shares with torch.norm (26.x); else as "Torch.linalg.norm".
  bool last_part_names = false;
  // Module forward records carry their own parameters' statistics, and each backward through a
  // module leaves a "<module>.parameters_grad.<k>" record of its parameters' gradients (26.x's
  // statistics and tensor tasks at L0 and mix).
  bool module_parameters = false;
  // A module backward record lists only the gradients that exist: no null for an input or
  // output that needs none (26.x).
  bool module_grads_without_nulls = false;
  // construct.json has an "optimizer" node, the parent of the API calls of an optimizer's step
  // (26.x at level mix).
  bool optimizer_node = false;
  // dump.json lists the records; 26.x's task structure writes its header only (the calls are in
  // stack.json and construct.json).
  bool records_in_dump_json = true;
  // The step's records are debug.json's, and there is no stack.json nor construct.json (level
  // debug).
  bool debug_json = false;
  // A torch.dtype or torch.device given positionally (x.to(torch.float16)) is written as {}, as
  // 26.x writes what it does not describe; under a keyword "dtype", "output_dtype" or "device"
  // it keeps its {"type", "value"} (26.x).
  bool positional_objects_untyped = false;
  // An API call's backward is recorded from its first output's autograd node even when its
  // inputs had that node already (x.float() of a float tensor returns x): 26.x hooks it all the
  // same.
  bool backward_from_any_grad_fn = false;
  // construct.json lists the calls in 26.x's order: at each call's end, the API, then the
  // modules begun by then (step_writer.cpp); 1.1.x's order is the records'.
  bool construct_in_start_order = false;
  // The wrap list's file (rules/): msprobe 1.1.1's, or 26.2.0's.
  const char* wrap_list = "support_wrap_ops.yaml";

  static DumpFormat of(const Config& c);
  // The rank folder's name outside torch.distributed, for this process.
  std::string unranked_folder() const;
  // "<prefix>.<api>" as this generation names an API's calls ("Torch", "linalg.norm").
  std::string api_call_name(const std::string& prefix, const std::string& api) const;
};

}  // namespace msprobe
