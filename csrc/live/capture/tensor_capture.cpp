#include "live/capture/tensor_capture.h"

#include "core/dump_format.h"

namespace msprobe {

TensorCapture::TensorCapture(const Config& config, const std::string& dump_root,
                             const StepTickets* tickets)
    : cache_(tickets),
      file_names_(tickets),
      slices_(config.task == Task::Statistics || config.task == Task::Tensor
                  ? config.collect().msprobe26.slice
                  : std::vector<SliceItem>{}) {
  if (config.task == Task::Statistics) tensor_list_ = config.statistics.tensor_list;
  if ((config.task != Task::Statistics || !tensor_list_.empty()) && config.task != Task::Structure)
    saver_ = std::make_unique<TensorSaver>(dump_root);
  options_.md5 =
      config.task == Task::Statistics && config.statistics.summary_mode == SummaryMode::Md5;
  options_.xor_checksum = config.collect().summary_mode == SummaryMode::Xor &&
                          (config.task == Task::Statistics || config.task == Task::Tensor);
  options_.cache = &cache_;
  options_.file_names = &file_names_;
  // Task overflow_check saves only the tensors of calls with findings, when its step is written.
  if (config.task == Task::Tensor) options_.saver = saver_.get();
  // A 26.x statistics or tensor dump takes Mean and Norm as 26.2.0 does (dump_format.h).
  options_.dtype_mean_norm = DumpFormat::of(config).float_only_mean_norm &&
                             (config.task == Task::Statistics || config.task == Task::Tensor);
  // md5 and tensor need the bytes on the host anyway, and a 26.x dump reads torch.mean's result:
  // their statistics come back at once.
  if (!options_.md5 && config.task != Task::Tensor && !options_.dtype_mean_norm &&
      !options_.xor_checksum && tensor_list_.empty())
    options_.pending = &pending_;
  // 26.x slices statistics and tensor dumps (its request_id's rows too).
  if ((config.task == Task::Statistics || config.task == Task::Tensor) &&
      config.level != Level::Debug)
    options_.slices = &slices_;
  saving_options_ = options_;
  saving_options_.saver = saver_.get();
}

void TensorCapture::end_step() {
  pending_.clear();
}

}  // namespace msprobe
