#include "live/capture/tensor_capture.h"

namespace msprobe {

TensorCapture::TensorCapture(const Config& config, const std::string& dump_root) {
  if (config.task != Task::Statistics) saver_ = std::make_unique<TensorSaver>(dump_root);
  options_.md5 =
      config.task == Task::Statistics && config.statistics.summary_mode == SummaryMode::Md5;
  options_.cache = &cache_;
  options_.file_names = &file_names_;
  // Task overflow_check saves only the tensors of calls with findings, when its step is written.
  if (config.task == Task::Tensor) options_.saver = saver_.get();
  // md5 and tensor need the bytes on the host anyway; their statistics come back at once.
  if (!options_.md5 && config.task != Task::Tensor) options_.pending = &pending_;
}

void TensorCapture::new_step() {
  pending_.clear();
  cache_.clear();
  file_names_.clear();
}

}  // namespace msprobe
