// Task overflow_check: the evidence of a flagged call, its tensors, saved if its step is dumped.
// Their file names are the step's, claimed with the step's lock held (and set as the entries'
// data_name), so two calls never claim one name; the copies are made after the lock, since a
// clone may wait for a device. FileNames guards itself; copies() touches nothing shared.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "core/output_files.h"
#include "core/record.h"
#include "live/capture/live_tensors.h"

namespace msprobe {

using EvidenceNames = std::vector<std::pair<ArgPos, std::string>>;  // argument -> "<stem>.pt"

class FlaggedEvidence {
 public:
  explicit FlaggedEvidence(FileNames& names) : names_(names) {}
  // A file name for each strided tensor argument of `rec` whose tensor is live.
  EvidenceNames claim(CallRecord& rec, const LiveTensors& live);
  // Detached copies of the claimed tensors, with their file names.
  static std::vector<std::pair<at::Tensor, std::string>> copies(const EvidenceNames& names,
                                                                const LiveTensors& live);

 private:
  FileNames& names_;
};

}  // namespace msprobe
