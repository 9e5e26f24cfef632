// How the hooks describe tensors for the session's task: with an md5 (CRC-32) field, and/or
// saved to dump_tensor_data/ under a name derived from the call and the argument position.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "core/record.h"

namespace msprobe {

class TensorSaver;
class StatsCache;

struct DescribeOptions {
  bool md5 = false;
  TensorSaver* saver = nullptr;  // task tensor; null otherwise
  std::string tensor_dir;        // where the saver writes
  StatsCache* cache = nullptr;   // the session's, cleared at each step
};

// Statistics (and md5) of `t`; when saving, also queues the tensor as `<stem>.pt` and records
// that file name as the entry's data_name.
Entry describe_tensor_for(const at::Tensor& t, const DescribeOptions& options,
                          const std::string& stem);

}  // namespace msprobe
