// What a rank knows about its device for the metrics: the accelerator's name (for the MFU peak)
// and its memory.
//
// CUDA facts come from LibTorch's caching allocator and device properties, and only in
// FLAME_WITH_CUDA builds on a CUDA device; CPU ranks read /proc (worker/metrics/process_memory.h).
#pragma once

#include <torch/types.h>

#include <string>

namespace flame::worker {

struct MemorySample {
  double reserved_gib = 0;  // CUDA: peak reserved since the last sample; CPU: resident set
  double active_gib = 0;    // CUDA: peak active since the last sample; CPU: 0
  double peak_gib = 0;      // CUDA: largest reserved of this process; CPU: peak resident set
};

class DeviceMonitor {
 public:
  explicit DeviceMonitor(torch::Device device) : device_(device) {}

  // "NVIDIA H200" on CUDA; "" on CPU (no peak FLOPS: MFU is not defined there).
  std::string AcceleratorName() const;

  // Memory since the previous call (CUDA peaks are reset after each sample, as flame does after
  // each log).
  MemorySample Sample();

 private:
  torch::Device device_;
  double largest_reserved_gib_ = 0;
};

}  // namespace flame::worker
