// How a session's hooks turn tensors into entries: the statistics cache, the statistics still on
// the device, the step's tensor file names and the tensor saver. Each part guards itself, and the
// options are fixed at construction, so hooks on any thread read them without a lock.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/output_files.h"
#include "live/capture/tensor_entry.h"
#include "live/capture/tensor_saver.h"
#include "live/capture/tensor_slices.h"
#include "live/stats/device_stats.h"
#include "live/stats/pending_stats.h"
#include "live/stats/stats_cache.h"

namespace msprobe {

class TensorCapture {
 public:
  // `dump_root`: where the saver may make folders (tasks tensor and overflow_check). `tickets`:
  // the session's step, which the cache and the file names follow by themselves.
  TensorCapture(const Config& config, const std::string& dump_root,
                const StepTickets* tickets = nullptr);
  TensorCapture(const TensorCapture&) = delete;
  TensorCapture& operator=(const TensorCapture&) = delete;

  const EntryOptions& options() const { return options_; }
  // The options for the tensors of call `call`: those that also save them where msprobe 26.x's
  // statistics.tensor_list names the call (a part of its name).
  const EntryOptions& options(const std::string& call) const {
    if (tensor_list_.empty()) return options_;
    for (const std::string& item : tensor_list_) {
      if (call.find(item) != std::string::npos) return saving_options_;
    }
    return options_;
  }
  const StatsCache& stats_cache() const { return cache_; }
  // An in-place collective wrote `t`'s memory without a new version: nothing on it is taken from
  // the statistics cache again this step.
  void written_without_version(const at::Tensor& t) { cache_.written_without_version(t); }
  // Batched statistics: null where the bytes are needed on the host anyway (md5, tensor).
  PendingStats* pending() { return options_.pending; }
  FileNames& file_names() { return file_names_; }
  TensorSaver* saver() { return saver_.get(); }  // null under task statistics
  TensorSlices& slices() { return slices_; }
  // The step ended: its statistics still on the device are let go now (device memory); the cache
  // and the file names clear themselves at their next use in the next step.
  void end_step();
  // Times this session's statistics waited for a device: the process's count since the capture
  // began (the statistics code does not know its session; one session is live at a time).
  int64_t host_syncs() const { return msprobe::host_syncs() - host_syncs_at_start_; }

 private:
  std::unique_ptr<TensorSaver> saver_;
  StatsCache cache_;
  FileNames file_names_;
  PendingStats pending_;
  TensorSlices slices_;
  EntryOptions options_;
  std::vector<std::string> tensor_list_;
  EntryOptions saving_options_;  // options_ with the saver (tensor_list)
  const int64_t host_syncs_at_start_ = msprobe::host_syncs();
};

}  // namespace msprobe
