// How the hooks describe tensors for the session's task: with an md5 (CRC-32) field, and/or
// saved to dump_tensor_data/ under a name derived from the call and the argument position.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "core/record.h"

namespace msprobe {

class TensorSaver;
class StatsCache;
class FileNames;
class PendingStats;
class TensorSlices;

struct EntryOptions {
  bool md5 = false;
  TensorSaver* saver = nullptr;     // task tensor; null otherwise
  StatsCache* cache = nullptr;      // the session's, cleared at each step
  FileNames* file_names = nullptr;  // the step's saved files and their folder (with `saver`)
  // Device statistics left on the device until a batch is read back (tasks statistics and
  // overflow_check); null where the bytes are needed on the host anyway (md5, tensor).
  PendingStats* pending = nullptr;
  // > 0: a host tensor of more elements is not read, nor its cached statistics taken; its entry
  // has its layout, null statistics and `view_base`. Set for the tensor a view call takes a view
  // of (a 500-million-element bucket narrowed per parameter), never when saving tensors.
  int64_t read_limit = 0;
  // msprobe 26.x's Mean and Norm: torch.mean and torch.norm of a float tensor in its own dtype
  // (its statistics and tensor dumps); else this tool's, accumulated in double.
  bool dtype_mean_norm = false;
  // msprobe 26.x's summary_mode "xor": the checksum in place of the statistics (the entry's
  // `value`, written as "md5").
  bool xor_checksum = false;
  // msprobe 26.x's slice and request_id: the part of each tensor described and saved.
  const TensorSlices* slices = nullptr;

  // The stems below, or empty when nothing is saved: then no call pays for them.
  std::string stem(const std::string& call, const char* side) const;
  std::string kwarg_stem(const std::string& call, const std::string& key) const;
  std::string item_stem(const std::string& stem, size_t i) const;
  std::string key_stem(const std::string& stem, const std::string& key) const;
};

// Saved tensors' file names without ".pt", as msprobe 1.1.1 builds them (its compare matches
// rows by them): "<call>.input.<i>", "<call>.output.<i>" (backward records too), list items add
// ".<j>", and a keyword argument is "<call>.kwargs.<name>".
std::string file_stem(const std::string& call, const char* side);  // "<call>.input"
std::string kwarg_file_stem(const std::string& call, const std::string& key);
std::string item_file_stem(const std::string& stem, size_t i);
// A mapping's field: "<stem>.<key>" (msprobe joins its key stack with dots).
std::string key_file_stem(const std::string& stem, const std::string& key);
// The file stem of argument `pos` of `call`: the one naming rule above, for a flagged call's
// evidence (flagged_evidence.h) as for task tensor.
std::string arg_file_stem(const std::string& call, const ArgPos& pos);

// Statistics (and md5) of `t`; when saving, also queues the tensor as `<stem>.pt` and records
// that file name as the entry's data_name. Never throws: a tensor whose statistics cannot be
// computed gets null ones, and take_statistics_failure() then tells why.
Entry tensor_entry(const at::Tensor& t, const EntryOptions& options, const std::string& stem);

// Why this thread's first statistics failure since the last take happened, or empty; the hook
// that submits the call takes it, so the warning can name the call.
std::string take_statistics_failure();

}  // namespace msprobe
