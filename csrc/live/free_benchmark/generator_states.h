// The random number generators as they were before free_benchmark's second run: whatever that
// run draws, the program draws the same numbers after it as it would have without the tool.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <mutex>

namespace msprobe {

class GeneratorStates {
 public:
  GeneratorStates() : cpu_(at::detail::getDefaultCPUGenerator()) {
    {
      std::lock_guard<std::mutex> lock(cpu_.mutex());
      state_ = cpu_.get_state();
    }
    if (at::hasCUDA()) {  // the current device's
      cuda_ = at::globalContext().defaultGenerator(at::Device(
          at::kCUDA, static_cast<c10::DeviceIndex>(at::detail::getCUDAHooks().current_device())));
      std::lock_guard<std::mutex> lock(cuda_.mutex());
      cuda_state_ = cuda_.get_state();
    }
  }
  ~GeneratorStates() {
    {
      std::lock_guard<std::mutex> lock(cpu_.mutex());
      cpu_.set_state(state_);
    }
    if (cuda_.defined()) {
      std::lock_guard<std::mutex> lock(cuda_.mutex());
      cuda_.set_state(cuda_state_);
    }
  }
  GeneratorStates(const GeneratorStates&) = delete;
  GeneratorStates& operator=(const GeneratorStates&) = delete;

 private:
  at::Generator cpu_, cuda_;
  at::Tensor state_, cuda_state_;
};

}  // namespace msprobe
