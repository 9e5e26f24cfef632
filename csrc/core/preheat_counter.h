// free_benchmark's preheat (msprobe 1.1.1's PreheatCounter and PreheatHandler): step 0 counts each
// API's calls; in the next `preheat_step` steps, a sample of each API's calls is also run on the
// CPU in float32, and the API's ratio threshold per dtype is moved toward what separates the
// calls the CPU agreed with from those it did not. Later steps keep the thresholds.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/free_benchmark_rules.h"

namespace msprobe {

class PreheatCounter {
 public:
  PreheatCounter(int64_t preheat_step, int64_t max_sample, PertMode mode)
      : preheat_step_(preheat_step), max_sample_(max_sample), mode_(mode) {}

  // Step 0 only counts: true there (the call is neither run again nor compared).
  bool counting(const std::string& api, int64_t step);
  // The ratio threshold of `api`'s outputs of `dtype` ("torch.float16"): 2.05 until preheat
  // moves it.
  double threshold(const std::string& api, const std::string& dtype) const;
  // After a call of `step` was compared: whether it is one of the step's samples (run on the CPU
  // too, then record()ed).
  bool sampled(const std::string& api, int64_t step);
  // A sample: its largest ratio, and whether its output agreed with the CPU's. `dtype` is its
  // output's first tensor's.
  void record(const std::string& api, const std::string& dtype, double max_ratio, bool cpu_agrees);

  static constexpr double kStartThreshold = 2.05;

 private:
  int64_t sample_count(const std::string& api) const;
  std::set<int64_t> samples_of(const std::string& api, int64_t step) const;
  void adjust(const std::string& api);

  const int64_t preheat_step_, max_sample_;
  const PertMode mode_;
  int64_t step_ = 0;
  std::map<std::string, int64_t> calls_in_step0_;                   // never reset
  std::map<std::string, std::map<std::string, double>> threshold_;  // api -> dtype -> threshold
  std::map<std::string, std::set<std::string>> settled_;            // (api, dtype) no longer moved
  std::map<std::string, std::map<std::string, std::vector<std::pair<double, bool>>>> records_;
  std::map<std::string, int64_t> called_, sampled_;  // this step's
  int64_t sample_step_ = -1;                         // the step called_/sampled_ count
};

}  // namespace msprobe
