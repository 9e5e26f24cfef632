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

  // Stems of saved tensors' file names (SPEC §3): "<call>.input", "<call>.output" (items add
  // ".<i>") and "<call>.<kwarg>.0". Empty when nothing is saved: then no call pays for them.
  std::string stem(const std::string& call, const char* side) const {
    return saver ? call + "." + side : std::string();
  }
  std::string kwarg_stem(const std::string& call, const std::string& key) const {
    return saver ? call + "." + key + ".0" : std::string();
  }
  std::string item_stem(const std::string& stem, size_t i) const {
    return saver ? stem + "." + std::to_string(i) : std::string();
  }
};

// Statistics (and md5) of `t`; when saving, also queues the tensor as `<stem>.pt` and records
// that file name as the entry's data_name.
Entry describe_tensor_for(const at::Tensor& t, const DescribeOptions& options,
                          const std::string& stem);

}  // namespace msprobe
